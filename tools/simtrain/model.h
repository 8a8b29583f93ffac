/* simtrain's model description: architecture, precision, optimizer, recomputation and
 * ZeRO emulation, and the sizes that follow from them. Everything here is arithmetic
 * on the description; simtrain.c turns it into allocations. */
#ifndef SIMTRAIN_MODEL_H
#define SIMTRAIN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

enum precision { PREC_FP32, PREC_BF16, PREC_FP16 };
enum optimizer { OPT_ADAM, OPT_ADAMW, OPT_SGD, OPT_NONE };
enum recompute { RC_NONE, RC_SELECTIVE, RC_FULL };

struct model {
	const char *preset;
	uint64_t layers, hidden, heads, ffn, vocab, seq, batch;
	bool untied; /* separate output head instead of tied embeddings */
	enum precision precision;
	enum optimizer optimizer;
	enum recompute recompute;
	int zero;    /* ZeRO stage 0-3 */
	uint64_t dp; /* data-parallel size whose one rank is emulated */
};

extern const char *const precision_names[];
extern const char *const optimizer_names[];
extern const char *const recompute_names[];

/* 0 on success, ENOENT for an unknown preset name. */
int model_preset(struct model *m, const char *name);
/* Prints the preset names, one line each. */
void model_list_presets(void);

/* Parameter tensors in allocation order: call with i = 0, 1, ... until it returns false. */
bool model_param(const struct model *m, uint64_t i, uint64_t *numel, const char **name);
uint64_t model_param_count(const struct model *m);

/* Bytes of one element. */
uint64_t param_elem(const struct model *m);	 /* 4 fp32, 2 bf16/fp16 */
uint64_t opt_state_elems(const struct model *m); /* fp32 values kept per parameter */

/* Elements of one tensor held by the emulated rank: all of it, or its ZeRO share. */
uint64_t shard(const struct model *m, uint64_t numel, int from_stage);

#endif
