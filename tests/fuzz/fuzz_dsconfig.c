/* Fuzz target for the DeepSpeed config reader behind memtap plan --deepspeed
 * (src/plan/dsconfig.c, through jansson): any bytes give a setup or one line saying
 * what is wrong, and a setup goes through the planner's own checks and formulas without
 * a division by zero or an overflow (UBSan watches). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "plan/config.h"
#include "core/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a model of memtap plan's examples, so the formulas run with what the config sets */
	struct mt_plan_config c = {.precision = MT_MIXED16,
				   .optimizer = MT_ADAM,
				   .nodes = 1,
				   .gpus_per_node = 1,
				   .layers = 24,
				   .hidden = 2048,
				   .heads = 16,
				   .vocab = 50257,
				   .seq = 2048};
	struct ds_config ds;
	struct mt_plan p;
	double table[4][3];
	char describe[512], note[512], err[512];
	uint64_t world = 0;

	if (ds_config_parse("fuzz.json", (const char *)data, size, NULL, &c, &ds)) {
		if (!ds.err[0] || strchr(ds.err, '\n'))
			__builtin_trap(); /* a refusal is one line, never none */
		return 0;
	}
	if (ds_config_batch("fuzz.json", &ds, &world, &c.micro_batch, &c.micro_batches, note, sizeof note, err,
			    sizeof err)) {
		if (!err[0] || strchr(err, '\n'))
			__builtin_trap();
		return 0;
	}
	c.gpus_per_node = world ? world : 1;
	if (!c.micro_batch)
		c.seq = 0; /* "auto" not filled: model states only */
	if (!mt_plan_check(&c)) {
		mt_plan_compute(&c, NULL, &p);
		mt_plan_table(&c, NULL, table);
		mt_plan_describe(&c, describe, sizeof describe);
	}
	return 0;
}
