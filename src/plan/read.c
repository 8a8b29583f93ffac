/* The configs' files read and applied (config.h): through reader/file.c, which opens
 * every path the offline tools read (a regular file, up to a bound). */
#include "plan/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/path.h"
#include "reader/file.h"

int mt_plan_read_model(const char *path, struct mt_plan_config *c, struct hf_config *hf)
{
	char file[sizeof hf->file], *text;
	struct stat st;
	size_t len;
	int err;

	snprintf(file, sizeof file, "%s", path);
	if (!stat(path, &st) && S_ISDIR(st.st_mode))
		mt_path_join(file, sizeof file, path, "config.json");
	if ((err = mt_file_read_config(file, &text, &len, hf->err, sizeof hf->err)))
		return err;
	err = hf_config_parse(file, text, len, c, hf);
	snprintf(hf->file, sizeof hf->file, "%s", file);
	free(text);
	return err;
}

int mt_plan_read_deepspeed(const char *path, const struct ds_context *ctx, struct mt_plan_config *c,
			   struct ds_config *ds)
{
	char *text;
	size_t len;
	int err;

	*ds = (struct ds_config){0};
	if ((err = mt_file_read_config(path, &text, &len, ds->err, sizeof ds->err)))
		return err;
	err = ds_config_parse(path, text, len, ctx, c, ds);
	free(text);
	return err;
}

void mt_plan_ds_context_model(struct ds_context *x, const char *dtype)
{
	if (!dtype[0] || x->precision_given)
		return;
	x->model_dtype = !strcmp(dtype, "bfloat16")  ? "the model's torch_dtype bfloat16"
			 : !strcmp(dtype, "float16") ? "the model's torch_dtype float16"
			 : !strcmp(dtype, "float32") ? "the model's torch_dtype float32"
						     : NULL;
	x->precision = !strcmp(dtype, "bfloat16") ? 1 : !strcmp(dtype, "float16") ? 2 : 0;
}

int mt_plan_deepspeed_batch(const char *path, const struct ds_config *ds, const struct mt_plan_given *given,
			    struct mt_plan_config *c, bool *needs_micro, uint64_t *dropped, char *note,
			    size_t note_size, char *err, size_t err_size)
{
	/* DeepSpeedConfig's world_size (runtime/config.py): a model-parallel unit's data-parallel
	 * size (Megatron's --tp, a pipeline's stages), else every rank over sequence_parallel_size:
	 * AutoTP's ranks (tensor_parallel.autotp_size) count, its groups being made later */
	uint64_t world = 0, gpus, div, micro, steps;
	bool wraps = __builtin_mul_overflow(given->tp && c->tp ? c->tp : 1, c->pp ? c->pp : 1, &div) ||
		     __builtin_mul_overflow(div, c->cp ? c->cp : 1, &div) || !div; /* refused by mt_plan_check */

	*needs_micro = false, *dropped = 0;
	if (given->gpus && !wraps && !__builtin_mul_overflow(c->nodes, c->gpus_per_node, &gpus) && gpus >= div)
		world = gpus / div;
	if (ds_config_batch(path, ds, &world, &micro, &steps, note, note_size, err, err_size))
		return EINVAL;
	if (micro && !given->micro_batch) /* the user's, given, override the config's */
		c->micro_batch = micro;
	if (steps && !given->micro_batches)
		c->micro_batches = steps;
	*needs_micro = c->layers && c->seq && !c->micro_batch && !given->micro_batch;
	if (!given->gpus && world > 1 && !wraps && !__builtin_mul_overflow(world, div, &gpus)) {
		/* the GPUs that train_batch_size implies */
		c->nodes = 1;
		c->gpus_per_node = gpus;
	}
	if (!c->layers) { /* parameters alone: a config's micro-batch has no activations to size */
		if (!given->micro_batch)
			c->micro_batch = 0;
		if (!given->recompute)
			c->recompute = MT_RECOMPUTE_NONE;
	} else if (!c->seq && c->micro_batch && !given->micro_batch) {
		*dropped = c->micro_batch;
		c->micro_batch = 0;
		if (!given->recompute)
			c->recompute = MT_RECOMPUTE_NONE;
	}
	return 0;
}
