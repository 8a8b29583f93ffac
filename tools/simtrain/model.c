/* Model arithmetic for simtrain: presets, parameter tensors, per-element sizes. */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *const precision_names[] = {"fp32", "bf16", "fp16"};
const char *const optimizer_names[] = {"adam", "adamw", "sgd", "none"};
const char *const recompute_names[] = {"none", "selective", "full"};

static const struct preset {
	const char *name;
	uint64_t layers, hidden, heads, ffn, vocab, seq, batch;
} presets[] = {
#define PRESET(n, l, h, a, f, v, s, b) {n, l, h, a, f, v, s, b},
#include "presets.def"
#undef PRESET
};

int model_preset(struct model *m, const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		const struct preset *p = &presets[i];
		if (strcmp(p->name, name) == 0) {
			m->preset = p->name;
			m->layers = p->layers;
			m->hidden = p->hidden;
			m->heads = p->heads;
			m->ffn = p->ffn;
			m->vocab = p->vocab;
			m->seq = p->seq;
			m->batch = p->batch;
			return 0;
		}
	}
	return ENOENT;
}

void model_list_presets(void)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		printf("%s\n", presets[i].name);
}

/* Per layer, in module order: LayerNorm, fused QKV, output projection, LayerNorm, MLP. */
enum { PER_LAYER = 12 };

bool model_param(const struct model *m, uint64_t i, uint64_t *numel, const char **name)
{
	uint64_t h = m->hidden, f = m->ffn;
	uint64_t body = m->layers * PER_LAYER;

	if (i < 2) {
		static const char *const n[] = {"wte", "wpe"};
		*numel = i == 0 ? m->vocab * h : m->seq * h;
		*name = n[i];
		return true;
	}
	i -= 2;
	if (i < body) {
		static const char *const n[PER_LAYER] = {"ln1.weight",	"ln1.bias",  "qkv.weight", "qkv.bias",
							 "proj.weight", "proj.bias", "ln2.weight", "ln2.bias",
							 "fc1.weight",	"fc1.bias",  "fc2.weight", "fc2.bias"};
		const uint64_t sizes[PER_LAYER] = {h, h, 3 * h * h, 3 * h, h * h, h, h, h, f * h, f, h * f, h};
		*numel = sizes[i % PER_LAYER];
		*name = n[i % PER_LAYER];
		return true;
	}
	i -= body;
	if (i < 2) {
		*numel = h;
		*name = i == 0 ? "lnf.weight" : "lnf.bias";
		return true;
	}
	if (i == 2 && m->untied) {
		*numel = m->vocab * h;
		*name = "lm_head";
		return true;
	}
	return false;
}

uint64_t model_param_count(const struct model *m)
{
	uint64_t total = 0, n;
	const char *name;

	for (uint64_t i = 0; model_param(m, i, &n, &name); i++)
		total += n;
	return total;
}

uint64_t param_elem(const struct model *m)
{
	return m->precision == PREC_FP32 ? 4 : 2;
}

uint64_t opt_state_elems(const struct model *m)
{
	/* mixed precision keeps an fp32 master copy beside the moments */
	uint64_t master = m->precision == PREC_FP32 || m->optimizer == OPT_NONE ? 0 : 1;

	switch (m->optimizer) {
	case OPT_ADAM:
	case OPT_ADAMW:
		return 2 + master;
	case OPT_SGD:
		return 1 + master;
	default:
		return 0;
	}
}

uint64_t shard(const struct model *m, uint64_t numel, int from_stage)
{
	if (m->zero < from_stage || m->dp <= 1)
		return numel;
	return (numel + m->dp - 1) / m->dp;
}
