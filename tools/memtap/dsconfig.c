/* memtap plan --deepspeed: the setup a DeepSpeed config file describes, read with
 * jansson. Keys that change memory and that memtap models are applied; every other key
 * is named in one note; "auto" (filled in by the Hugging Face Trainer) leaves the
 * setting to the command line. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "plan/plan.h"
#include "memtap.h"

struct ds {
	const char *path;
	char ignored[1024], unmodelled[1024];
};

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

/* A whole number at least min, or 0 when absent or "auto". */
static uint64_t number(struct ds *d, const json_t *obj, const char *key, const char *where, uint64_t min)
{
	const json_t *v = json_object_get(obj, key);

	if (!v || is_auto(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min)
		die(EXIT_USAGE, "%s: %s%s must be a whole number of at least %llu", d->path, where, key,
		    (unsigned long long)min);
	return (uint64_t)json_integer_value(v);
}

/* "enabled" of a {"enabled": ...} section: 1, 0, or -1 when absent or "auto". */
static int enabled(struct ds *d, const json_t *section, const char *name)
{
	const json_t *v = json_object_get(section, "enabled");

	if (!section || !v || is_auto(v))
		return -1;
	if (!json_is_boolean(v))
		die(EXIT_USAGE, "%s: %s.enabled must be true or false", d->path, name);
	return json_is_true(v);
}

static enum mt_offload offload_device(struct ds *d, const json_t *zero, const char *key)
{
	const json_t *section = json_object_get(zero, key), *dev = json_object_get(section, "device");
	const char *name, *k;
	char prefix[64];
	json_t *v;

	if (!section || json_is_null(section))
		return MT_OFFLOAD_NONE;
	if (!json_is_object(section))
		die(EXIT_USAGE, "%s: zero_optimization.%s must be an object", d->path, key);
	snprintf(prefix, sizeof prefix, "zero_optimization.%s.", key);
	json_object_foreach((json_t *)section, k, v)
		if (strcmp(k, "device"))
			add_name(d->unmodelled, sizeof d->unmodelled, prefix, k);
	if (!dev || json_is_null(dev))
		return MT_OFFLOAD_NONE;
	name = json_string_value(dev);
	if (name && !strcmp(name, "cpu"))
		return MT_OFFLOAD_CPU;
	if (name && !strcmp(name, "nvme"))
		return MT_OFFLOAD_NVME;
	if (name && !strcmp(name, "none"))
		return MT_OFFLOAD_NONE;
	die(EXIT_USAGE, "%s: zero_optimization.%s.device must be \"cpu\", \"nvme\" or \"none\"", d->path, key);
}

static void zero_section(struct ds *d, const json_t *zero, struct mt_plan_config *c)
{
	static const char *const applied[] = {"stage", "offload_optimizer", "offload_param", "cpu_offload",
					      "cpu_offload_params", NULL};
	const char *k;
	json_t *v;
	uint64_t stage;

	if (!json_is_object(zero))
		die(EXIT_USAGE, "%s: zero_optimization must be an object", d->path);
	if (json_object_get(zero, "stage")) {
		stage = number(d, zero, "stage", "zero_optimization.", 0);
		if (stage > 3)
			die(EXIT_USAGE, "%s: zero_optimization.stage must be 0 to 3, not %llu", d->path,
			    (unsigned long long)stage);
		c->zero = (int)stage;
	}
	c->offload_optimizer = offload_device(d, zero, "offload_optimizer");
	c->offload_params = offload_device(d, zero, "offload_param");
	/* the names of DeepSpeed before 0.3.16 */
	if (json_is_true(json_object_get(zero, "cpu_offload")))
		c->offload_optimizer = MT_OFFLOAD_CPU;
	if (json_is_true(json_object_get(zero, "cpu_offload_params")))
		c->offload_params = MT_OFFLOAD_CPU;
	json_object_foreach((json_t *)zero, k, v) {
		int known = 0;
		for (int i = 0; applied[i]; i++)
			known |= !strcmp(k, applied[i]);
		if (!known)
			add_name(d->unmodelled, sizeof d->unmodelled, "zero_optimization.", k);
	}
}

static void optimizer_section(struct ds *d, const json_t *opt, struct mt_plan_config *c)
{
	static const char *const adam_like[] = {"adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam",
						"onebitadam", "zerooneadam", "lamb", "fusedlamb", "onebitlamb", NULL};
	const char *type = json_string_value(json_object_get(opt, "type"));

	if (!type)
		die(EXIT_USAGE, "%s: optimizer.type must be a string such as \"AdamW\"", d->path);
	for (int i = 0; adam_like[i]; i++)
		if (!strcasecmp(type, adam_like[i])) {
			c->optimizer = MT_ADAM;
			return;
		}
	if (!strcasecmp(type, "sgd") || !strcasecmp(type, "adagrad")) {
		c->optimizer = MT_SGD_MOMENTUM; /* one fp32 state per parameter */
		return;
	}
	add_name(d->unmodelled, sizeof d->unmodelled, "optimizer.type ", type);
}

void ds_config_read(const char *path, struct mt_plan_config *c, uint64_t *dp)
{
	json_error_t err;
	json_t *root = json_load_file(path, 0, &err), *v;
	struct ds d = {.path = path};
	uint64_t batch, micro, steps;
	int bf16, fp16;
	const char *k;

	if (!root && err.line > 0)
		die(EXIT_USAGE, "%s:%d:%d: not valid JSON: %s", path, err.line, err.column, err.text);
	if (!root)
		die(EXIT_USAGE, "%s", err.text);
	if (!json_is_object(root))
		die(EXIT_USAGE, "%s: a DeepSpeed config is a JSON object", path);
	json_object_foreach(root, k, v) {
		if (!strcmp(k, "zero_optimization"))
			zero_section(&d, v, c);
		else if (!strcmp(k, "optimizer"))
			optimizer_section(&d, v, c);
		else if (!strcmp(k, "activation_checkpointing")) {
			/* the model decides what it checkpoints; this section is there when it does */
			c->recompute = MT_RECOMPUTE_FULL;
			if (json_is_true(json_object_get(v, "partition_activations")))
				add_name(d.unmodelled, sizeof d.unmodelled, "", "activation_checkpointing.partition_activations");
			if (json_is_true(json_object_get(v, "cpu_checkpointing")))
				add_name(d.unmodelled, sizeof d.unmodelled, "", "activation_checkpointing.cpu_checkpointing");
		} else if (strcmp(k, "bf16") && strcmp(k, "fp16") && strcmp(k, "amp") && strcmp(k, "train_batch_size") &&
			   strcmp(k, "train_micro_batch_size_per_gpu") && strcmp(k, "gradient_accumulation_steps"))
			add_name(d.ignored, sizeof d.ignored, "", k);
	}
	bf16 = enabled(&d, json_object_get(root, "bf16"), "bf16");
	fp16 = enabled(&d, json_object_get(root, "fp16"), "fp16");
	if (bf16 == 1 || fp16 == 1 || enabled(&d, json_object_get(root, "amp"), "amp") == 1)
		c->precision = MT_MIXED16;
	else if (bf16 == 0 || fp16 == 0)
		c->precision = MT_FP32;
	micro = number(&d, root, "train_micro_batch_size_per_gpu", "", 1);
	steps = number(&d, root, "gradient_accumulation_steps", "", 1);
	batch = number(&d, root, "train_batch_size", "", 1);
	if (micro)
		c->micro_batch = micro;
	if (steps)
		c->micro_batches = steps;
	/* DeepSpeed requires train_batch_size = micro-batch x accumulation steps x dp */
	*dp = 0;
	if (batch && micro && steps) {
		if (batch % (micro * steps))
			die(EXIT_USAGE, "%s: train_batch_size %llu is not a multiple of train_micro_batch_size_per_gpu x "
			    "gradient_accumulation_steps (%llu)", path, (unsigned long long)batch,
			    (unsigned long long)(micro * steps));
		*dp = batch / (micro * steps);
	}
	if (d.ignored[0])
		fprintf(stderr, "memtap: %s: ignoring keys that do not change the plan: %s\n", path, d.ignored);
	if (d.unmodelled[0])
		fprintf(stderr, "memtap: %s: not modelled (memory counted without them): %s\n", path, d.unmodelled);
	json_decref(root);
}
