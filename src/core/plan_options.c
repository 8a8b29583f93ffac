/* The planner's options (plan_options.def), set from their text: one reading for the
 * command's --options, a memtap.plan{} table's fields and the calibrating run's. */
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

/* A whole count; k, M, B (or G) and T multiply by powers of 1000. */
static bool count(const char *text, uint64_t *out)
{
	char *end;
	double v = strtod(text, &end);

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
	if (end == text || *end || !(v >= 0) || v > 1e18 || v != floor(v))
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

const char *mt_plan_set(struct mt_plan_config *c, const struct mt_plan_option *o, const char *text, const char *shown,
			char *why, size_t n)
{
	void *field = (char *)c + o->offset;
	uint64_t v;
	int i;

	switch (o->kind) {
	case MT_PLAN_OPT_COUNT:
		if (!count(text, &v))
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
	case MT_PLAN_OPT_ZERO:
		if (!count(text, &v) || v > 3)
			goto bad;
		*(int *)field = (int)v;
		return NULL;
	case MT_PLAN_OPT_PRECISION:
		if ((i = pick(text, mt_plan_precision_names)) < 0)
			goto bad;
		*(enum mt_precision *)field = i ? MT_MIXED16 : MT_FP32;
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
	}
bad:
	snprintf(why, n, "%s takes %s, not '%s'", shown, mt_plan_kind_what(o->kind), text);
	return why;
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
	case MT_PLAN_OPT_ZERO:
		return "a stage from 0 to 3";
	case MT_PLAN_OPT_PRECISION:
		return "fp32, bf16 or fp16";
	case MT_PLAN_OPT_OPTIMIZER:
		return "adam, adamw, adam8bit, sgd or none";
	case MT_PLAN_OPT_RECOMPUTE:
		return "none, selective or full";
	case MT_PLAN_OPT_OFFLOAD:
		return "none, cpu or nvme";
	}
	return "?";
}
