/* The readers of a training setup's configs, for the planner (core/plan.h): a Hugging
 * Face config.json (hfconfig.c) and a DeepSpeed config as DeepSpeed reads it (dsconfig.c,
 * hjson.c). Offline: the command, `memtap report --plan` and `memtap lua`'s memtap.plan
 * read configs through here and nowhere else. Nothing here exits or prints. */
#ifndef MT_PLAN_CONFIG_H
#define MT_PLAN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/plan.h"

/* What the command line and the model give, for the "auto" values of a DeepSpeed config
 * (the Hugging Face Trainer fills them from its arguments and the model). */
struct ds_context {
	bool precision_given, micro_batch_given, micro_batches_given, recompute_given, zero_given;
	int precision;		    /* 0 fp32, 1 bf16, 2 fp16 */
	const char *precision_text; /* --precision's value as given ("amp-bf16") */
	int zero;		    /* --zero's stage */
	const char *model_dtype;    /* the model's torch_dtype when it names one ("bfloat16"), else NULL */
	uint64_t micro_batch, micro_batches, hidden;
};
/* A DeepSpeed config's text (dsconfig.c) applied onto c: 0, or EINVAL with err saying in
 * one line what is wrong. batch: its train_batch_size (0: none, or "auto" not filled);
 * micro_auto: no micro-batch where train_micro_batch_size_per_gpu or train_batch_size is
 * "auto" (the Hugging Face Trainer fills them: nothing to derive without --micro-batch);
 * ignored and unmodelled: the keys it names without using them; notes: how "auto",
 * deprecated spellings and ineffective sections were read; "" when none. ctx may be NULL. */
struct ds_config {
	uint64_t batch, micro, steps; /* the batch keys as read ("auto" filled), 0 where absent */
	bool micro_auto;
	char ignored[1024], unmodelled[1024], notes[2048];
	char err[512];
};
int ds_config_parse(const char *path, const char *text, size_t len, const struct ds_context *ctx,
		    struct mt_plan_config *c, struct ds_config *out);
/* DeepSpeed's batch sizes (runtime/config.py: _set_batch_related_parameters, then
 * _batch_assertion) from ds's keys over world data-parallel GPUs (0: not given: what the
 * config's three keys imply, else 1): the micro-batch and accumulation steps (0 and 0
 * where the micro-batch is an "auto" not filled) and *world. note says what was derived
 * ("" when nothing). 0, or EINVAL with err (DeepSpeed's reason, one line). */
int ds_config_batch(const char *path, const struct ds_config *ds, uint64_t *world, uint64_t *micro, uint64_t *steps,
		    char *note, size_t note_size, char *err, size_t err_size);
/* A Hugging Face config.json (hfconfig.c) onto c's model fields: 0, or EINVAL with err in
 * one line naming the field memtap does not model. note: what it assumed; dtype: the
 * torch_dtype it names, "" when none. */
struct hf_config {
	char err[512], note[1024], model_type[64], dtype[32];
	char file[4096]; /* mt_plan_read_model: the file it read */
};
int hf_config_parse(const char *path, const char *text, size_t len, struct mt_plan_config *c, struct hf_config *out);
/* A config.json, or a folder holding one, read and applied onto c's model: 0, or an errno
 * with hf->err in one line (a file that cannot be read, or a field memtap does not model). */
int mt_plan_read_model(const char *path, struct mt_plan_config *c, struct hf_config *hf);
/* A DeepSpeed config file read and applied onto c (ds_config_parse): 0, or an errno with
 * ds->err in one line. */
int mt_plan_read_deepspeed(const char *path, const struct ds_context *ctx, struct mt_plan_config *c,
			   struct ds_config *ds);
/* The model's torch_dtype ("bfloat16"; "" none) as x's precision for DeepSpeed's "auto",
 * where no precision was given. */
void mt_plan_ds_context_model(struct ds_context *x, const char *dtype);
/* What the user gave over a DeepSpeed config (the command line, a Lua table's fields). */
struct mt_plan_given {
	bool gpus, tp, micro_batch, micro_batches, recompute;
};
/* A DeepSpeed config's batch keys applied onto c as DeepSpeed derives them
 * (ds_config_batch) over the data-parallel GPUs c gives (when given): the micro-batch and
 * accumulation steps where not given, the GPUs train_batch_size implies where not given;
 * a model without layers (or without a sequence) keeps no micro-batch. 0, or EINVAL with
 * err. *needs_micro: c has a sequence and the config leaves the micro-batch "auto";
 * *dropped: the micro-batch dropped for want of a sequence (0: none). note: what was
 * derived. */
int mt_plan_deepspeed_batch(const char *path, const struct ds_config *ds, const struct mt_plan_given *given,
			    struct mt_plan_config *c, bool *needs_micro, uint64_t *dropped, char *note,
			    size_t note_size, char *err, size_t err_size);

#endif
