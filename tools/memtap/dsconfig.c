/* memtap plan --deepspeed: the setup a DeepSpeed config file describes, read with
 * jansson. Keys that change memory and that memtap models are applied; every other key
 * is named in one note; "auto" (filled in by the Hugging Face Trainer) leaves the
 * setting to the command line. Nothing here exits or prints: a bad config is EINVAL and
 * one line, so the fuzz target (tests/fuzz/fuzz_dsconfig.c) runs exactly what memtap runs. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/plan.h"
#include "cli.h"
#include "core/text.h"

/* Counts in a config (batch sizes, steps) above this are damage; products of two stay
 * far from overflowing. */
#define MAX_COUNT 1000000000ull

struct ds {
	const char *path;
	struct ds_config *out;
};

static int bad(struct ds *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct ds *d, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(d->out->err, sizeof d->out->err, "%s: ", d->path);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof d->out->err)
		vsnprintf(d->out->err + n, sizeof d->out->err - (size_t)n, fmt, ap);
	va_end(ap);
	return EINVAL;
}

static void add_name(char *list, size_t size, const char *prefix, const char *key)
{
	size_t n = strlen(list);

	if (n + 2 >= size)
		return;
	snprintf(list + n, size - n, "%s%s%s", n ? ", " : "", prefix, key);
}

static bool is_auto(const json_t *v)
{
	return json_is_string(v) && !strcmp(json_string_value(v), "auto");
}

/* A whole number from min to MAX_COUNT into *out, left alone when absent or "auto". */
static int number(struct ds *d, const json_t *obj, const char *key, const char *where, uint64_t min, uint64_t *out)
{
	const json_t *v = json_object_get(obj, key);

	if (!v || is_auto(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
	    json_integer_value(v) > (json_int_t)MAX_COUNT)
		return bad(d, "%s%s must be a whole number from %llu to %llu", where, key, (unsigned long long)min,
			   MAX_COUNT);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* "enabled" of a {"enabled": ...} section into *out: 1, 0, or -1 when absent or "auto". */
static int enabled(struct ds *d, const json_t *section, const char *name, int *out)
{
	const json_t *v = json_object_get(section, "enabled");

	*out = -1;
	if (!section || !v || is_auto(v))
		return 0;
	if (!json_is_boolean(v))
		return bad(d, "%s.enabled must be true or false", name);
	*out = json_is_true(v);
	return 0;
}

static int offload_device(struct ds *d, const json_t *zero, const char *key, enum mt_offload *out)
{
	const json_t *section = json_object_get(zero, key), *dev = json_object_get(section, "device");
	const char *name, *k;
	char prefix[64];
	json_t *v;

	*out = MT_OFFLOAD_NONE;
	if (!section || json_is_null(section))
		return 0;
	if (!json_is_object(section))
		return bad(d, "zero_optimization.%s must be an object", key);
	snprintf(prefix, sizeof prefix, "zero_optimization.%s.", key);
	json_object_foreach((json_t *)section, k, v) if (strcmp(k, "device"))
	    add_name(d->out->unmodelled, sizeof d->out->unmodelled, prefix, k);
	if (!dev || json_is_null(dev))
		return 0;
	name = json_string_value(dev);
	if (name && !strcmp(name, "cpu"))
		*out = MT_OFFLOAD_CPU;
	else if (name && !strcmp(name, "nvme"))
		*out = MT_OFFLOAD_NVME;
	else if (!name || strcmp(name, "none"))
		return bad(d, "zero_optimization.%s.device must be \"cpu\", \"nvme\" or \"none\"", key);
	return 0;
}

static int zero_section(struct ds *d, const json_t *zero, struct mt_plan_config *c)
{
	static const char *const applied[] = {"stage",	     "offload_optimizer",  "offload_param",
					      "cpu_offload", "cpu_offload_params", NULL};
	const char *k;
	json_t *v;
	uint64_t stage = (uint64_t)c->zero;
	int r;

	if (!json_is_object(zero))
		return bad(d, "zero_optimization must be an object");
	if ((r = number(d, zero, "stage", "zero_optimization.", 0, &stage)))
		return r;
	if (stage > 3)
		return bad(d, "zero_optimization.stage must be 0 to 3, not %llu", (unsigned long long)stage);
	c->zero = (int)stage;
	if ((r = offload_device(d, zero, "offload_optimizer", &c->offload_optimizer)) ||
	    (r = offload_device(d, zero, "offload_param", &c->offload_params)))
		return r;
	/* the names of DeepSpeed before 0.3.16 */
	if (json_is_true(json_object_get(zero, "cpu_offload")))
		c->offload_optimizer = MT_OFFLOAD_CPU;
	if (json_is_true(json_object_get(zero, "cpu_offload_params")))
		c->offload_params = MT_OFFLOAD_CPU;
	json_object_foreach((json_t *)zero, k, v)
	{
		int known = 0;
		for (int i = 0; applied[i]; i++)
			known |= !strcmp(k, applied[i]);
		if (!known)
			add_name(d->out->unmodelled, sizeof d->out->unmodelled, "zero_optimization.", k);
	}
	return 0;
}

static int optimizer_section(struct ds *d, const json_t *opt, struct mt_plan_config *c)
{
	static const char *const adam_like[] = {
	    "adam", "adamw",	 "fusedadam",  "cpuadam", "deepspeedcpuadam", "onebitadam", "zerooneadam",
	    "lamb", "fusedlamb", "onebitlamb", NULL};
	const char *type = json_string_value(json_object_get(opt, "type"));

	if (!type)
		return bad(d, "optimizer.type must be a string such as \"AdamW\"");
	for (int i = 0; adam_like[i]; i++)
		if (!strcasecmp(type, adam_like[i])) {
			c->optimizer = MT_ADAM;
			return 0;
		}
	if (!strcasecmp(type, "sgd") || !strcasecmp(type, "adagrad"))
		c->optimizer = MT_SGD_MOMENTUM; /* one fp32 state per parameter */
	else
		add_name(d->out->unmodelled, sizeof d->out->unmodelled, "optimizer.type ", type);
	return 0;
}

/* Sections apply in a fixed order, whatever the file's key order. */
static int apply(struct ds *d, json_t *root, struct mt_plan_config *c)
{
	uint64_t batch = 0, micro = 0, steps = 0;
	int bf16, fp16, amp, r;
	const char *k;
	json_t *v;

	if (!json_is_object(root))
		return bad(d, "a DeepSpeed config is a JSON object");
	json_object_foreach(root, k, v)
	{
		if (!strcmp(k, "zero_optimization"))
			r = zero_section(d, v, c);
		else if (!strcmp(k, "optimizer"))
			r = optimizer_section(d, v, c);
		else if (!strcmp(k, "activation_checkpointing")) {
			/* the model decides what it checkpoints; this section is there when it does */
			c->recompute = MT_RECOMPUTE_FULL;
			if (json_is_true(json_object_get(v, "partition_activations")))
				add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
					 "activation_checkpointing.partition_activations");
			if (json_is_true(json_object_get(v, "cpu_checkpointing")))
				add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
					 "activation_checkpointing.cpu_checkpointing");
			r = 0;
		} else {
			if (strcmp(k, "bf16") && strcmp(k, "fp16") && strcmp(k, "amp") &&
			    strcmp(k, "train_batch_size") && strcmp(k, "train_micro_batch_size_per_gpu") &&
			    strcmp(k, "gradient_accumulation_steps"))
				add_name(d->out->ignored, sizeof d->out->ignored, "", k);
			r = 0;
		}
		if (r)
			return r;
	}
	if ((r = enabled(d, json_object_get(root, "bf16"), "bf16", &bf16)) ||
	    (r = enabled(d, json_object_get(root, "fp16"), "fp16", &fp16)) ||
	    (r = enabled(d, json_object_get(root, "amp"), "amp", &amp)))
		return r;
	if (bf16 == 1 || fp16 == 1 || amp == 1)
		c->precision = MT_MIXED16;
	else if (bf16 == 0 || fp16 == 0)
		c->precision = MT_FP32;
	if ((r = number(d, root, "train_micro_batch_size_per_gpu", "", 1, &micro)) ||
	    (r = number(d, root, "gradient_accumulation_steps", "", 1, &steps)) ||
	    (r = number(d, root, "train_batch_size", "", 1, &batch)))
		return r;
	if (micro)
		c->micro_batch = micro;
	if (steps)
		c->micro_batches = steps;
	/* DeepSpeed requires train_batch_size = micro-batch x accumulation steps x dp */
	if (batch && micro && steps) {
		if (batch % (micro * steps))
			return bad(d,
				   "train_batch_size %llu is not a multiple of train_micro_batch_size_per_gpu x "
				   "gradient_accumulation_steps (%llu)",
				   (unsigned long long)batch, (unsigned long long)(micro * steps));
		d->out->dp = batch / (micro * steps);
	}
	return 0;
}

int ds_config_parse(const char *path, const char *text, size_t len, struct mt_plan_config *c, struct ds_config *out)
{
	json_error_t err;
	json_t *root;
	struct ds d = {.path = path, .out = out};
	int r;

	memset(out, 0, sizeof *out);
	if (!(root = json_loadb(text, len, 0, &err))) {
		mt_text_line(err.text); /* jansson quotes the input near the error, newlines and all */
		if (err.line > 0)
			snprintf(out->err, sizeof out->err, "%s:%d:%d: not valid JSON: %s", path, err.line, err.column,
				 err.text);
		else
			snprintf(out->err, sizeof out->err, "%s: not valid JSON: %s", path, err.text);
		return EINVAL;
	}
	r = apply(&d, root, c);
	json_decref(root);
	mt_text_line(out->err); /* keys and values quoted from the file: one line each */
	mt_text_line(out->ignored);
	mt_text_line(out->unmodelled);
	return r;
}
