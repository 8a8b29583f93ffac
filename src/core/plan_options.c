/* The planner's options (plan_options.def), set from their text: one reading for the
 * command's --options, a memtap.plan{} table's fields and the calibrating run's. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "core/units.h"

const struct mt_plan_option mt_plan_options[] = {
#define PLAN_OPT(name, kind, help) {#name, MT_PLAN_OPT_##kind, offsetof(struct mt_plan_config, name), help},
#include "core/plan_options.def"
#undef PLAN_OPT
    {NULL, 0, 0, NULL}};

const struct mt_plan_option *mt_plan_option(const char *name)
{
	for (const struct mt_plan_option *o = mt_plan_options; o->name; o++) {
		size_t i = 0;
		while (o->name[i] && (name[i] == o->name[i] || (name[i] == '-' && o->name[i] == '_')))
			i++;
		if (!o->name[i] && !name[i])
			return o;
	}
	return NULL;
}

bool mt_plan_parse_count(const char *text, uint64_t *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	switch (*end) {
	case 'k':
	case 'K':
		v *= 1e3;
		end++;
		break;
	case 'M':
		v *= 1e6;
		end++;
		break;
	case 'B':
	case 'G':
		v *= 1e9;
		end++;
		break;
	case 'T':
		v *= 1e12;
		end++;
		break;
	}
	if (errno || end == text || *end || !(v >= 0) || v > 1e18 || v != floor(v))
		return false;
	*out = (uint64_t)v;
	return true;
}

static int pick(const char *text, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(text, names[i]))
			return i;
	return -1;
}

/* A set of LoRA targets: "qv", "qkvo", "q,v,mlp", "all". */
static bool lora_targets(const char *text, unsigned *out)
{
	unsigned set = 0;

	for (const char *p = text; *p;) {
		size_t n = strcspn(p, ",");
		if (n == 3 && !strncmp(p, "all", 3))
			set |= MT_LORA_Q | MT_LORA_K | MT_LORA_V | MT_LORA_O | MT_LORA_MLP;
		else if (n == 3 && !strncmp(p, "mlp", 3))
			set |= MT_LORA_MLP;
		else if (n == 4 && !strncmp(p, "head", 4))
			set |= MT_LORA_HEAD;
		else
			for (size_t i = 0; i < n; i++) {
				const char *at = strchr("qkvo", p[i]);
				if (!at || !p[i])
					return false;
				set |= 1u << (at - "qkvo");
			}
		p += n;
		if (*p == ',' && *++p == '\0')
			return false;
	}
	*out = set;
	return set != 0;
}

/* A release "MAJOR.MINOR[.PATCH]" as major * 100 + minor ("1.10.2": 110) */
static bool release(const char *text, uint64_t *out)
{
	unsigned major, minor, patch;
	int end = 0;

	if (!strcmp(text, "current")) {
		*out = 0;
		return true;
	}
	if (!strchr("0123456789", *text) || !*text)
		return false;
	if ((sscanf(text, "%u.%u%n", &major, &minor, &end) != 2 || text[end]) &&
	    (sscanf(text, "%u.%u.%u%n", &major, &minor, &patch, &end) != 3 || text[end]))
		return false;
	if (major < 1 || major > 99 || minor > 99)
		return false;
	*out = major * 100 + minor;
	return true;
}

static double real(const char *text, bool *ok)
{
	char *end;
	double v = strtod(text, &end);

	*ok = end != text && !*end && v >= 0 && v <= 1e6;
	return v;
}

const char *mt_plan_set(struct mt_plan_config *c, const struct mt_plan_option *o, const char *text, const char *shown,
			char *why, size_t n)
{
	void *field = (char *)c + o->offset;
	uint64_t v;
	bool ok;
	double r;
	int i;

	switch (o->kind) {
	case MT_PLAN_OPT_COUNT:
		if (!mt_plan_parse_count(text, &v))
			goto bad;
		*(uint64_t *)field = v;
		return NULL;
	case MT_PLAN_OPT_FLAG:
		if ((i = pick(text, (const char *const[]){"false", "0", "true", "1", NULL})) < 0)
			goto bad;
		*(bool *)field = i >= 2;
		return NULL;
	case MT_PLAN_OPT_SIZE:
		if (mt_parse_size(text, &v))
			goto bad;
		*(double *)field = (double)v;
		return NULL;
	case MT_PLAN_OPT_REAL:
		r = real(text, &ok);
		if (!ok)
			goto bad;
		*(double *)field = r;
		return NULL;
	case MT_PLAN_OPT_ZERO:
		if (!mt_plan_parse_count(text, &v) || v > 3)
			goto bad;
		*(int *)field = (int)v;
		return NULL;
	case MT_PLAN_OPT_PRECISION:
		if ((i = pick(text, mt_plan_precision_names)) < 0)
			goto bad;
		*(enum mt_precision *)field = mt_plan_precision_values[i];
		return NULL;
	case MT_PLAN_OPT_OPTIMIZER:
		if ((i = pick(text, mt_plan_optimizer_names)) < 0)
			goto bad;
		*(enum mt_optimizer *)field = mt_plan_optimizer_values[i];
		return NULL;
	case MT_PLAN_OPT_RECOMPUTE:
		if ((i = pick(text, mt_plan_recompute_names)) < 0)
			goto bad;
		*(enum mt_recompute *)field = (enum mt_recompute)i;
		return NULL;
	case MT_PLAN_OPT_OFFLOAD:
		if ((i = pick(text, mt_plan_offload_names)) < 0)
			goto bad;
		*(enum mt_offload *)field = (enum mt_offload)i;
		return NULL;
	case MT_PLAN_OPT_BIAS:
		if ((i = pick(text, mt_plan_bias_names)) < 0)
			goto bad;
		*(enum mt_bias *)field = (enum mt_bias)i;
		return NULL;
	case MT_PLAN_OPT_ATTENTION:
		if ((i = pick(text, mt_plan_attention_names)) < 0)
			goto bad;
		*(enum mt_attention *)field = (enum mt_attention)i;
		return NULL;
	case MT_PLAN_OPT_IMPL:
		if ((i = pick(text, mt_plan_impl_names)) < 0)
			goto bad;
		*(enum mt_impl *)field = (enum mt_impl)i;
		return NULL;
	case MT_PLAN_OPT_QUANT:
		if ((i = pick(text, mt_plan_quant_names)) < 0)
			goto bad;
		*(enum mt_quant *)field = (enum mt_quant)i;
		return NULL;
	case MT_PLAN_OPT_STEP:
		if ((i = pick(text, mt_plan_step_names)) < 0)
			goto bad;
		*(enum mt_step *)field = (enum mt_step)i;
		return NULL;
	case MT_PLAN_OPT_LORA:
		if (!lora_targets(text, (unsigned *)field))
			goto bad;
		return NULL;
	case MT_PLAN_OPT_VERSION:
		if (!release(text, (uint64_t *)field))
			goto bad;
		return NULL;
	}
bad:
	snprintf(why, n, "%s takes %s, not '%s'", shown, mt_plan_kind_what(o->kind), text);
	return why;
}

/* The name of value v of a name table indexed by value */
static const char *name_of(const char *const *names, int v)
{
	for (int i = 0; names[i]; i++)
		if (i == v)
			return names[i];
	return "?";
}

void mt_plan_get(const struct mt_plan_config *c, const struct mt_plan_option *o, char *buf, size_t n)
{
	const void *field = (const char *)c + o->offset;
	const char *name = NULL;
	unsigned set;

	switch (o->kind) {
	case MT_PLAN_OPT_COUNT:
		snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)field);
		return;
	case MT_PLAN_OPT_FLAG:
		name = *(const bool *)field ? "true" : "false";
		break;
	case MT_PLAN_OPT_SIZE:
	case MT_PLAN_OPT_REAL:
		snprintf(buf, n, "%.17g", *(const double *)field);
		return;
	case MT_PLAN_OPT_ZERO:
		snprintf(buf, n, "%d", *(const int *)field);
		return;
	case MT_PLAN_OPT_PRECISION:
		for (int i = 0; mt_plan_precision_names[i] && !name; i++)
			if (mt_plan_precision_values[i] == *(const enum mt_precision *)field)
				name = mt_plan_precision_names[i];
		break;
	case MT_PLAN_OPT_OPTIMIZER:
		for (int i = 0; mt_plan_optimizer_names[i] && !name; i++)
			if (mt_plan_optimizer_values[i] == *(const enum mt_optimizer *)field)
				name = mt_plan_optimizer_names[i];
		break;
	case MT_PLAN_OPT_RECOMPUTE:
		name = name_of(mt_plan_recompute_names, (int)*(const enum mt_recompute *)field);
		break;
	case MT_PLAN_OPT_OFFLOAD:
		name = name_of(mt_plan_offload_names, (int)*(const enum mt_offload *)field);
		break;
	case MT_PLAN_OPT_BIAS:
		name = name_of(mt_plan_bias_names, (int)*(const enum mt_bias *)field);
		break;
	case MT_PLAN_OPT_ATTENTION:
		name = name_of(mt_plan_attention_names, (int)*(const enum mt_attention *)field);
		break;
	case MT_PLAN_OPT_IMPL:
		name = name_of(mt_plan_impl_names, (int)*(const enum mt_impl *)field);
		break;
	case MT_PLAN_OPT_QUANT:
		name = name_of(mt_plan_quant_names, (int)*(const enum mt_quant *)field);
		break;
	case MT_PLAN_OPT_STEP:
		name = name_of(mt_plan_step_names, (int)*(const enum mt_step *)field);
		break;
	case MT_PLAN_OPT_LORA:
		set = *(const unsigned *)field;
		buf[0] = '\0';
		for (int i = 0; i < 4; i++)
			if (set & (1u << i))
				snprintf(buf + strlen(buf), n - strlen(buf), "%c", "qkvo"[i]);
		if (set & MT_LORA_MLP)
			snprintf(buf + strlen(buf), n - strlen(buf), "%smlp", set & 15 ? "," : "");
		if (set & MT_LORA_HEAD)
			snprintf(buf + strlen(buf), n - strlen(buf), "%shead", set & 31 ? "," : "");
		return;
	case MT_PLAN_OPT_VERSION:
		if (*(const uint64_t *)field)
			snprintf(buf, n, "%llu.%llu", (unsigned long long)(*(const uint64_t *)field / 100),
				 (unsigned long long)(*(const uint64_t *)field % 100));
		else
			snprintf(buf, n, "current");
		return;
	}
	snprintf(buf, n, "%s", name);
}

const char *mt_plan_kind_what(enum mt_plan_kind kind)
{
	switch (kind) {
	case MT_PLAN_OPT_COUNT:
		return "a whole non-negative count";
	case MT_PLAN_OPT_FLAG:
		return "true or false";
	case MT_PLAN_OPT_SIZE:
		return "a size such as 1GiB";
	case MT_PLAN_OPT_REAL:
		return "a number from 0 to 1e6";
	case MT_PLAN_OPT_ZERO:
		return "a stage from 0 to 3";
	case MT_PLAN_OPT_PRECISION:
		return "fp32, bf16, fp16, amp-bf16, amp-fp16, bf16-pure or fp16-pure";
	case MT_PLAN_OPT_OPTIMIZER:
		return "adam, adamw, adam8bit, sgd, adafactor, lion or none";
	case MT_PLAN_OPT_RECOMPUTE:
		return "none, selective, full or op";
	case MT_PLAN_OPT_OFFLOAD:
		return "none, cpu or nvme";
	case MT_PLAN_OPT_BIAS:
		return "all, qkv, mlp or none";
	case MT_PLAN_OPT_ATTENTION:
		return "eager or flash";
	case MT_PLAN_OPT_IMPL:
		return "megatron or pytorch";
	case MT_PLAN_OPT_QUANT:
		return "none, int8, nf4 or nf4-dq";
	case MT_PLAN_OPT_STEP:
		return "auto, foreach, fused or for-loop";
	case MT_PLAN_OPT_LORA:
		return "a set of q, k, v, o, mlp and head such as qv, qkvo, all or all,head";
	case MT_PLAN_OPT_VERSION:
		return "a release such as 1.10 or 2.5.1";
	}
	return "?";
}
