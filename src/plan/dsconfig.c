/* memtap plan --deepspeed: the setup a DeepSpeed config file describes, read as
 * DeepSpeed reads it (v0.19.6, commit in docs/PLAN.md): hjson syntax, duplicate keys
 * refused; zero_optimization, its offload sections, fp16, bf16 (or the old bfloat16)
 * and tensor_parallel validated field by field as its pydantic models do (unknown keys,
 * types, ranges, deprecated spellings, "auto" dropped), then its own checks. "auto" in
 * the keys the Hugging Face Trainer fills is resolved from the command line or the model
 * as the Trainer would, with a note saying which. Nothing here exits or prints: a bad
 * config is EINVAL and one line, so the fuzz target runs exactly what memtap runs. */
#include "plan/config.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/text.h"
#include "plan/hjson.h"

/* Counts in a config (batch sizes, steps) above this are damage; products of two stay
 * far from overflowing. */
#define MAX_COUNT 1000000000ull

struct ds {
	const char *path;
	const struct ds_context *ctx;
	struct ds_config *out;
	int dtype; /* the model's, as engine.py get_data_types has it: 0 fp32, 1 bf16, 2 fp16 */
	bool amp;  /* apex amp enabled */
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

static void add(char *list, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add(char *list, size_t size, const char *fmt, ...)
{
	size_t n = strlen(list);
	va_list ap;

	if (n + 8 >= size)
		return;
	if (n)
		n += (size_t)snprintf(list + n, size - n, "; ");
	va_start(ap, fmt);
	vsnprintf(list + n, size - n, fmt, ap);
	va_end(ap);
}

#define NOTE(d, ...) add((d)->out->notes, sizeof(d)->out->notes, __VA_ARGS__)

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

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "dict";
	case JSON_ARRAY:
		return "list";
	case JSON_STRING:
		return "str";
	case JSON_INTEGER:
		return "int";
	case JSON_REAL:
		return "float";
	case JSON_TRUE:
	case JSON_FALSE:
		return "bool";
	default:
		return "NoneType";
	}
}

/* ---- pydantic's lax coercions, as DeepSpeed's config models (pydantic v2) apply them ---- */

static int to_bool(const json_t *v, bool *out)
{
	static const char *const yes[] = {"1", "on", "t", "true", "y", "yes", NULL};
	static const char *const no[] = {"0", "off", "f", "false", "n", "no", NULL};

	if (json_is_boolean(v)) {
		*out = json_is_true(v);
		return 0;
	}
	if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
		*out = json_integer_value(v) == 1;
		return 0;
	}
	if (json_is_real(v) && (json_real_value(v) == 0 || json_real_value(v) == 1)) {
		*out = json_real_value(v) == 1;
		return 0;
	}
	if (json_is_string(v))
		for (int i = 0; yes[i]; i++) {
			if (!strcasecmp(json_string_value(v), yes[i]) &&
			    strlen(json_string_value(v)) == json_string_length(v))
				return *out = true, 0;
			if (!strcasecmp(json_string_value(v), no[i]) &&
			    strlen(json_string_value(v)) == json_string_length(v))
				return *out = false, 0;
		}
	return -1;
}

/* An integer from an int, a bool, a float without fraction or a string holding one */
static int to_int(const json_t *v, long long *out, const char **why)
{
	*why = "Input should be a valid integer";
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (json_is_boolean(v)) {
		*out = json_is_true(v);
		return 0;
	}
	if (json_is_real(v)) {
		double r = json_real_value(v);
		if (!isfinite(r))
			return *why = "Input should be a finite number", -1;
		if (r != floor(r))
			return *why = "Input should be a valid integer, got a number with a fractional part", -1;
		if (fabs(r) >= 9.2e18)
			return *why = "Unable to parse input string as an integer, exceeded maximum size", -1;
		*out = (long long)r;
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char digits[64], *end;
		size_t k = 0;
		while (isspace((unsigned char)*s))
			s++;
		for (; *s && k < sizeof digits - 1; s++)
			if (*s != '_')
				digits[k++] = *s;
		while (k && isspace((unsigned char)digits[k - 1]))
			k--;
		digits[k] = '\0';
		errno = 0;
		*out = strtoll(digits, &end, 10);
		if (k && !errno && (!*end || (end[0] == '.' && strspn(end + 1, "0") == strlen(end + 1))))
			return 0;
		*why = "Input should be a valid integer, unable to parse string as an integer";
	}
	return -1;
}

static int to_float(const json_t *v, double *out)
{
	char *end;

	if (json_is_number(v)) {
		*out = json_number_value(v);
		return 0;
	}
	if (json_is_boolean(v)) {
		*out = json_is_true(v);
		return 0;
	}
	if (json_is_string(v)) {
		*out = strtod(json_string_value(v), &end);
		while (isspace((unsigned char)*end))
			end++;
		if (end != json_string_value(v) && !*end)
			return 0;
	}
	return -1;
}

/* ---- the models: every field, its alias and type, as DeepSpeed declares them ---- */

enum ftype {
	F_BOOL,
	F_OPT_BOOL,
	F_INT,
	F_INT_GE0,
	F_OPT_INT,
	F_FLOAT,
	F_FLOAT01,
	F_STAGE,
	F_DEVICE,
	F_STR,
	F_OPT_STR,
	F_STR_OR_INT,
	F_OPT_PATH,
	F_OPT_DICT,
	F_LIST_STR,
	F_MODEL,
	F_OPT_MODEL,
	F_ANY,
	F_DTYPE,
	F_LOSS_SCALE,
	F_SCALE_INT
};

struct model;
struct field {
	const char *name, *alias;
	enum ftype type;
	const struct model *sub;
};
struct model {
	const char *name;
	const struct field *fields;
};

static const struct field offload_param_fields[] = {{"device", NULL, F_DEVICE, NULL},
						    {"nvme_path", NULL, F_OPT_PATH, NULL},
						    {"buffer_count", NULL, F_INT_GE0, NULL},
						    {"buffer_size", NULL, F_INT_GE0, NULL},
						    {"max_in_cpu", NULL, F_INT_GE0, NULL},
						    {"pin_memory", NULL, F_BOOL, NULL},
						    {NULL, NULL, 0, NULL}};
static const struct field offload_optimizer_fields[] = {{"device", NULL, F_DEVICE, NULL},
							{"nvme_path", NULL, F_OPT_PATH, NULL},
							{"buffer_count", NULL, F_INT_GE0, NULL},
							{"pin_memory", NULL, F_BOOL, NULL},
							{"pipeline_read", NULL, F_BOOL, NULL},
							{"pipeline_write", NULL, F_BOOL, NULL},
							{"fast_init", NULL, F_BOOL, NULL},
							{"ratio", NULL, F_FLOAT01, NULL},
							{"super_offload", NULL, F_BOOL, NULL},
							{"cpuadam_cores_perc", NULL, F_FLOAT01, NULL},
							{NULL, NULL, 0, NULL}};
static const struct field zenflow_fields[] = {{"topk_ratio", NULL, F_FLOAT01, NULL},
					      {"select_strategy", NULL, F_STR, NULL},
					      {"select_interval", NULL, F_STR_OR_INT, NULL},
					      {"update_interval", NULL, F_STR_OR_INT, NULL},
					      {"overlap_step", NULL, F_BOOL, NULL},
					      {"offload", NULL, F_BOOL, NULL},
					      {"auto_ratio", NULL, F_FLOAT01, NULL},
					      {"full_warm_up_rounds", NULL, F_INT, NULL},
					      {"pt_reserved_cores_perc", NULL, F_FLOAT01, NULL},
					      {"steps_per_epoch", NULL, F_OPT_INT, NULL},
					      {NULL, NULL, 0, NULL}};
static const struct field leaf_module_fields[] = {{"classes", NULL, F_LIST_STR, NULL},
						  {"names", NULL, F_LIST_STR, NULL},
						  {"name_suffixes", NULL, F_LIST_STR, NULL},
						  {NULL, NULL, 0, NULL}};
static const struct model offload_param = {"offload_param", offload_param_fields};
static const struct model offload_optimizer = {"offload_optimizer", offload_optimizer_fields};
static const struct model zenflow = {"zenflow", zenflow_fields};
static const struct model leaf_module = {"leaf_module", leaf_module_fields};
static const struct field zero_fields[] = {
    {"stage", NULL, F_STAGE, NULL},
    {"contiguous_gradients", NULL, F_BOOL, NULL},
    {"reduce_scatter", NULL, F_BOOL, NULL},
    {"reduce_bucket_size", NULL, F_INT_GE0, NULL},
    {"use_multi_rank_bucket_allreduce", NULL, F_BOOL, NULL},
    {"allgather_partitions", NULL, F_BOOL, NULL},
    {"allgather_bucket_size", NULL, F_INT_GE0, NULL},
    {"overlap_comm", NULL, F_OPT_BOOL, NULL},
    {"load_from_fp32_weights", NULL, F_BOOL, NULL},
    {"elastic_checkpoint", NULL, F_BOOL, NULL},
    {"offload_param", NULL, F_OPT_MODEL, &offload_param},
    {"offload_optimizer", NULL, F_OPT_MODEL, &offload_optimizer},
    {"zenflow", NULL, F_OPT_MODEL, &zenflow},
    {"sub_group_size", NULL, F_INT_GE0, NULL},
    {"cpu_offload_param", NULL, F_OPT_BOOL, NULL},
    {"cpu_offload_use_pin_memory", NULL, F_OPT_BOOL, NULL},
    {"cpu_offload", NULL, F_OPT_BOOL, NULL},
    {"prefetch_bucket_size", "stage3_prefetch_bucket_size", F_INT_GE0, NULL},
    {"param_persistence_threshold", "stage3_param_persistence_threshold", F_INT_GE0, NULL},
    {"model_persistence_threshold", "stage3_model_persistence_threshold", F_INT_GE0, NULL},
    {"max_live_parameters", "stage3_max_live_parameters", F_INT_GE0, NULL},
    {"max_reuse_distance", "stage3_max_reuse_distance", F_INT_GE0, NULL},
    {"gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", F_BOOL, NULL},
    {"module_granularity_threshold", "stage3_module_granularity_threshold", F_INT, NULL},
    {"use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params", F_BOOL, NULL},
    {"allgather_sequential", "stage3_allgather_sequential", F_BOOL, NULL},
    {"stage3_gather_fp16_weights_on_model_save", NULL, F_BOOL, NULL},
    {"ignore_unused_parameters", NULL, F_BOOL, NULL},
    {"legacy_stage1", NULL, F_BOOL, NULL},
    {"round_robin_gradients", NULL, F_BOOL, NULL},
    {"zero_hpz_partition_size", NULL, F_INT_GE0, NULL},
    {"zero_quantized_weights", NULL, F_BOOL, NULL},
    {"zero_quantized_nontrainable_weights", NULL, F_BOOL, NULL},
    {"zero_quantized_gradients", NULL, F_BOOL, NULL},
    {"zeropp_loco_param", NULL, F_OPT_DICT, NULL},
    {"mics_shard_size", NULL, F_INT, NULL},
    {"mics_hierarchical_params_gather", NULL, F_BOOL, NULL},
    {"memory_efficient_linear", NULL, F_BOOL, NULL},
    {"pipeline_loading_checkpoint", NULL, F_BOOL, NULL},
    {"override_module_apply", NULL, F_BOOL, NULL},
    {"log_trace_cache_warnings", NULL, F_BOOL, NULL},
    {"enable_sanity_checks", NULL, F_BOOL, NULL},
    {"save_muon_momentum_buffer_in_memory", NULL, F_BOOL, NULL},
    {"leaf_module", NULL, F_MODEL, &leaf_module},
    {NULL, NULL, 0, NULL}};
static const struct field bf16_fields[] = {{"enabled", NULL, F_BOOL, NULL},
					   {"immediate_grad_update", NULL, F_BOOL, NULL},
					   {"check_grad_overflow", NULL, F_BOOL, NULL},
					   {"bf16_master_weights_and_grads", NULL, F_BOOL, NULL},
					   {"bf16_optimizer_states", NULL, F_BOOL, NULL},
					   {NULL, NULL, 0, NULL}};
static const struct field fp16_fields[] = {{"enabled", NULL, F_BOOL, NULL},
					   {"auto_cast", NULL, F_BOOL, NULL},
					   {"loss_scale", NULL, F_LOSS_SCALE, NULL},
					   {"initial_scale_power", NULL, F_INT, NULL},
					   {"loss_scale_window", NULL, F_SCALE_INT, NULL},
					   {"hysteresis", NULL, F_INT, NULL},
					   {"consecutive_hysteresis", NULL, F_BOOL, NULL},
					   {"min_loss_scale", NULL, F_SCALE_INT, NULL},
					   {"fp16_master_weights_and_grads", NULL, F_BOOL, NULL},
					   {NULL, NULL, 0, NULL}};
static const struct field tp_fields[] = {{"tp_size", NULL, F_INT, NULL},
					 {"tp_grain_size", NULL, F_INT, NULL},
					 {"mpu", NULL, F_ANY, NULL},
					 {"tp_group", NULL, F_ANY, NULL},
					 {NULL, NULL, 0, NULL}};
static const struct model tp_model = {"tp", tp_fields};
static const struct field tensor_parallel_fields[] = {{"dtype", NULL, F_DTYPE, NULL},
						      {"autotp_size", NULL, F_INT, NULL},
						      {"tp_overlap_comm", NULL, F_BOOL, NULL},
						      {"tensor_parallel", "tp", F_MODEL, &tp_model},
						      {"injection_policy_tuple", NULL, F_ANY, NULL},
						      {"partition_config", NULL, F_OPT_DICT, NULL},
						      {"preset_model", NULL, F_OPT_STR, NULL},
						      {"keep_module_on_host", NULL, F_BOOL, NULL},
						      {"replace_with_kernel_inject", "kernel_inject", F_BOOL, NULL},
						      {NULL, NULL, 0, NULL}};
static const struct model zero_model = {"zero_optimization", zero_fields};
static const struct model bf16_model = {"bf16", bf16_fields};
static const struct model fp16_model = {"fp16", fp16_fields};
static const struct model tensor_parallel_model = {"tensor_parallel", tensor_parallel_fields};

/* A validated section: its object with "auto" dropped and each field's coerced value */
struct section {
	const json_t *obj;
	bool set[64];
	json_t *val[64]; /* borrowed */
	long long i[64];
	double f[64];
	bool b[64];
};

static int field_index(const struct model *m, const char *key)
{
	for (int k = 0; m->fields[k].name; k++)
		if (!strcmp(key, m->fields[k].name) || (m->fields[k].alias && !strcmp(key, m->fields[k].alias)))
			return k;
	return -1;
}

/* Validates obj as model m (at where, "zero_optimization."), as pydantic with
 * extra="forbid" and DeepSpeed's dropping of "auto" does: the first error in one line. */
static int validate(struct ds *d, const struct model *m, const json_t *obj, const char *where, struct section *s)
{
	const char *k, *why;
	json_t *v;
	char sub[128];

	memset(s, 0, sizeof *s);
	s->obj = obj;
	json_object_foreach((json_t *)obj, k, v)
	{
		int i = field_index(m, k);
		const struct field *f;
		if (is_auto(v)) /* DeepSpeedConfigModel drops "auto" values: the field's default */
			continue;
		if (i < 0)
			return bad(
			    d, "%s%s: Extra inputs are not permitted (DeepSpeed refuses keys its config does not know)",
			    where, k);
		f = &m->fields[i];
		if (s->set[i])
			return bad(d,
				   "%s%s: given twice (as %s and %s); DeepSpeed takes one and refuses the other as "
				   "an extra input",
				   where, k, f->name, f->alias);
		s->set[i] = true;
		s->val[i] = v;
		switch (f->type) {
		case F_BOOL:
		case F_OPT_BOOL:
			if (f->type == F_OPT_BOOL && json_is_null(v))
				s->set[i] = false;
			else if (to_bool(v, &s->b[i]))
				return bad(d, "%s%s: Input should be a valid boolean%s", where, k,
					   json_is_number(v) || json_is_string(v) ? ", unable to interpret input" : "");
			break;
		case F_INT:
		case F_INT_GE0:
		case F_OPT_INT:
		case F_SCALE_INT:
			if (f->type == F_OPT_INT && json_is_null(v)) {
				s->set[i] = false;
				break;
			}
			if (f->type == F_SCALE_INT && json_is_boolean(v))
				return bad(d, "%s%s: Value error, %s.%s must be an integer, not bool", where, k,
					   m->name, k);
			if (to_int(v, &s->i[i], &why))
				return bad(d, "%s%s: %s", where, k, why);
			if (f->type == F_INT_GE0 && s->i[i] < 0)
				return bad(d, "%s%s: Input should be greater than or equal to 0", where, k);
			break;
		case F_FLOAT:
		case F_FLOAT01:
			if (to_float(v, &s->f[i]))
				return bad(d, "%s%s: Input should be a valid number", where, k);
			if (f->type == F_FLOAT01 && !(s->f[i] >= 0))
				return bad(d, "%s%s: Input should be greater than or equal to 0", where, k);
			if (f->type == F_FLOAT01 && s->f[i] > 1)
				return bad(d, "%s%s: Input should be less than or equal to 1", where, k);
			break;
		case F_LOSS_SCALE:
			if (json_is_boolean(v))
				return bad(d, "%s%s: Value error, fp16.loss_scale must be a number, not bool", where,
					   k);
			if (to_float(v, &s->f[i]))
				return bad(d, "%s%s: Value error, fp16.loss_scale must be a number", where, k);
			if (!isfinite(s->f[i]))
				return bad(
				    d, "%s%s: Value error, fp16.loss_scale must be a finite number (not inf/-inf/nan)",
				    where, k);
			if (s->f[i] < 0)
				return bad(
				    d,
				    "%s%s: Value error, fp16.loss_scale must be >= 0 (0 enables dynamic loss scaling)",
				    where, k);
			break;
		case F_STAGE:
			if (to_int(v, &s->i[i], &why) || s->i[i] < 0 || s->i[i] > 3 ||
			    (json_is_real(v) && json_real_value(v) != floor(json_real_value(v))))
				return bad(d, "%s%s: Input should be 0, 1, 2, 3 or 3", where, k);
			break;
		case F_DEVICE:
			if (!json_is_string(v) ||
			    (strcmp(json_string_value(v), "none") && strcmp(json_string_value(v), "cpu") &&
			     strcmp(json_string_value(v), "nvme")))
				return bad(d, "%s%s: Input should be 'none', 'cpu' or 'nvme'", where, k);
			break;
		case F_STR:
		case F_OPT_STR:
		case F_OPT_PATH:
			if (!json_is_string(v) && !(f->type != F_STR && json_is_null(v)))
				return bad(d, "%s%s: Input should be a valid %s", where, k,
					   f->type == F_OPT_PATH ? "path" : "string");
			break;
		case F_STR_OR_INT:
			if (!json_is_string(v) && !json_is_integer(v))
				return bad(d, "%s%s: Input should be a valid string or integer", where, k);
			break;
		case F_OPT_DICT:
			if (!json_is_object(v) && !json_is_null(v))
				return bad(d, "%s%s: Input should be a valid dictionary", where, k);
			break;
		case F_LIST_STR:
			if (!json_is_array(v))
				return bad(d, "%s%s: Input should be a valid list", where, k);
			for (size_t j = 0; j < json_array_size(v); j++)
				if (!json_is_string(json_array_get(v, j)))
					return bad(d, "%s%s.%zu: Input should be a valid string", where, k, j);
			break;
		case F_DTYPE: /* torch.dtype: a config file cannot give one */
			return bad(d, "%s%s: Input should be an instance of dtype", where, k);
		case F_MODEL:
		case F_OPT_MODEL:
			if (f->type == F_OPT_MODEL && json_is_null(v)) {
				s->set[i] = false;
				break;
			}
			if (!json_is_object(v))
				return bad(d, "%s%s: Input should be a valid dictionary or instance of %s", where, k,
					   f->sub->name);
			{
				struct section inner;
				int r;
				snprintf(sub, sizeof sub, "%s%s.", where, k);
				if ((r = validate(d, f->sub, v, sub, &inner)))
					return r;
			}
			break;
		case F_ANY:
			break;
		}
	}
	return 0;
}

/* ---- the sections memtap reads ---- */

/* Python's truth of a JSON value, as DeepSpeed's dict.get(...) tests read it */
static bool truthy(const json_t *v)
{
	return v && !json_is_false(v) && !json_is_null(v) && !(json_is_integer(v) && !json_integer_value(v)) &&
	       !(json_is_real(v) && json_real_value(v) == 0) && !(json_is_string(v) && !json_string_length(v)) &&
	       !(json_is_object(v) && !json_object_size(v)) && !(json_is_array(v) && !json_array_size(v));
}

/* The optimizers a config can name, as DeepSpeed takes them: its own (runtime/config.py
 * DEEPSPEED_OPTIMIZERS, any case, lowercased), else a torch.optim class by its exact name
 * (engine.py _is_supported_optimizer: getattr(torch.optim, name)). zero: 0 when the class
 * it builds is in zero/utils.py ZERO_SUPPORTED_OPTIMIZERS, 1 when ZeRO needs
 * zero_allow_untested_optimizer, 2 when engine.py _configure_basic_optimizer refuses ZeRO
 * with it (the reason). SGD-like ones keep a momentum buffer only with params.momentum > 0. */
static const struct {
	const char *name;
	bool torch; /* a torch.optim class: matched exactly */
	enum mt_optimizer opt;
	int zero;
	const char *why, *unmodelled;
} optimizers[] = {
    {"adagrad", false, MT_SGD_MOMENTUM, 0, NULL, NULL}, /* its state "sum": one fp32 value */
    {"adam", false, MT_ADAM, 0, NULL, NULL},
    {"adamw", false, MT_ADAM, 0, NULL, NULL},
    {"lamb", false, MT_ADAM, 1, NULL, NULL}, /* FusedLamb */
    {"onebitadam", false, MT_ADAM, 2, "1bit-Adam is not compatible with ZeRO", NULL},
    {"onebitlamb", false, MT_ADAM, 2, "1bit-Lamb is not compatible with ZeRO", NULL},
    {"zerooneadam", false, MT_ADAM, 2, "0/1 Adam is not compatible with ZeRO", NULL},
    {"muadam", false, MT_ADAM, 1, NULL, NULL},
    {"muadamw", false, MT_ADAM, 1, NULL, NULL},
    {"musgd", false, MT_SGD, 1, NULL, NULL},
    {"lion", false, MT_LION, 0, NULL, NULL},
    {"muon", false, MT_ADAM, 0, NULL, "optimizer.type muon (Muon's one momentum on its matrices; planned as Adam)"},
    {"SGD", true, MT_SGD, 1, NULL, NULL},
    {"Adadelta", true, MT_ADAM, 1, NULL, NULL}, /* square_avg, acc_delta */
    {"Adafactor", true, MT_ADAFACTOR, 1, NULL, NULL},
    {"Adamax", true, MT_ADAM, 1, NULL, NULL},	    /* exp_avg, exp_inf */
    {"ASGD", true, MT_SGD_MOMENTUM, 1, NULL, NULL}, /* ax */
    {"LBFGS", true, MT_ADAM, 1, NULL, "optimizer.type LBFGS (its history; planned as Adam)"},
    {"NAdam", true, MT_ADAM, 1, NULL, NULL},
    {"RAdam", true, MT_ADAM, 1, NULL, NULL},
    {"RMSprop", true, MT_SGD_MOMENTUM, 1, NULL, NULL}, /* square_avg (more with momentum, centered) */
    {"Rprop", true, MT_ADAM, 1, NULL, NULL},	       /* prev, step_size */
    {"SparseAdam", true, MT_ADAM, 1, NULL, NULL},
    {NULL, false, MT_ADAM, 0, NULL, NULL}};

static int optimizer_section(struct ds *d, const json_t *root, const json_t *opt, struct mt_plan_config *c)
{
	const json_t *type = json_object_get(opt, "type"), *params;
	const char *name;
	double momentum = 0;
	int i;

	if (!json_is_object(opt))
		return bad(d, "optimizer must be an object with a \"type\"");
	if (!type || json_is_null(type)) /* DeepSpeed: no optimizer name; the client's optimizer */
		return 0;
	if (!json_is_string(type))
		return bad(d, "optimizer.type must be a string such as \"AdamW\"");
	name = json_string_value(type);
	for (i = 0; optimizers[i].name; i++)
		if (optimizers[i].torch ? !strcmp(name, optimizers[i].name) : !strcasecmp(name, optimizers[i].name))
			break;
	if (!optimizers[i].name)
		return bad(
		    d,
		    "optimizer.type: %s is not a supported DeepSpeed Optimizer (engine.py: DeepSpeed's own names "
		    "in any case, or a torch.optim class by its exact name such as \"SGD\")",
		    name);
	if (c->zero && optimizers[i].zero == 2)
		return bad(d, "optimizer.type %s: %s", name, optimizers[i].why);
	if (c->zero && optimizers[i].zero == 1 && !truthy(json_object_get(root, "zero_allow_untested_optimizer")))
		return bad(d,
			   "optimizer.type %s: You are using an untested ZeRO Optimizer. Please add "
			   "<\"zero_allow_untested_optimizer\": true> in the configuration file to use it.",
			   name);
	params = json_object_get(opt, "params");
	if (json_is_object(params) && to_float(json_object_get(params, "momentum"), &momentum))
		momentum = 0;
	c->optimizer = optimizers[i].opt;
	if (c->optimizer == MT_SGD && momentum > 0)
		c->optimizer = MT_SGD_MOMENTUM;
	if (optimizers[i].unmodelled)
		add_name(d->out->unmodelled, sizeof d->out->unmodelled, "", optimizers[i].unmodelled);
	if (!strcmp(optimizers[i].name, "RMSprop") &&
	    (momentum > 0 || (json_is_object(params) && truthy(json_object_get(params, "centered")))))
		add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
			 "optimizer.params momentum/centered of RMSprop (a state each)");
	return 0;
}

/* A batch key read as DeepSpeed's get_scalar_param reads it: a whole number from min
 * to MAX_COUNT; "auto" (the Hugging Face Trainer's) resolved from the command line. */
static int batch_key(struct ds *d, const json_t *root, const char *key, bool given, uint64_t from_cli, uint64_t *out,
		     bool *present)
{
	const json_t *v = json_object_get(root, key);

	*out = 0;
	*present = v != NULL;
	if (!v)
		return 0;
	if (is_auto(v)) {
		if (given) {
			*out = from_cli;
			NOTE(d, "%s \"auto\" is %llu, from the command line, as the Hugging Face Trainer fills it", key,
			     (unsigned long long)from_cli);
		} else {
			NOTE(d, "%s \"auto\": the Hugging Face Trainer fills it from its arguments; none given here",
			     key);
		}
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (json_int_t)MAX_COUNT)
		return bad(d, "%s must be a whole number from 1 to %llu (DeepSpeed: it has to be greater than 0)", key,
			   MAX_COUNT);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* The precision a section's "enabled" asks for: 1, 0; "auto" resolved as the Hugging Face
 * Trainer fills it from the run's precision (the command line's, else the model's; bf16
 * where the config turns fp16 off: no 16-bit type left but bf16) */
static int enabled_flag(struct ds *d, const json_t *section, const char *name, struct section *s, int want,
			bool fp16_off, int *out)
{
	const json_t *v = json_object_get(section, "enabled");
	const struct ds_context *x = d->ctx;

	*out = s->set[0] ? s->b[0] : 0;
	if (!is_auto(v))
		return 0;
	if (want == 1 && fp16_off && !x->precision_given) {
		bool other = x->model_dtype && x->precision != 1;
		*out = 1;
		NOTE(d,
		     "bf16.enabled \"auto\" is true: fp16 is off, so the 16-bit run the Hugging Face Trainer fills it "
		     "for is bf16 (its --bf16)%s%s%s; give --precision fp32 if it runs without --bf16",
		     other ? ", though " : "", other ? x->model_dtype : "", other ? " says otherwise" : "");
		return 0;
	}
	if (x->precision_given || x->model_dtype) {
		*out = x->precision == want;
		if (*out && x->precision_given && x->precision_text && !strncmp(x->precision_text, "amp-", 4))
			NOTE(d,
			     "%s.enabled \"auto\" is %s, as the Hugging Face Trainer fills it from its --bf16/--fp16, "
			     "but planned as --precision %s says: PyTorch autocast, not DeepSpeed's %s",
			     name, *out ? "true" : "false", x->precision_text, name);
		else if (x->precision_given)
			NOTE(d,
			     "%s.enabled \"auto\" is %s, from --precision, as the Hugging Face Trainer fills it from "
			     "its --bf16/--fp16",
			     name, *out ? "true" : "false");
		else
			NOTE(d,
			     "%s.enabled \"auto\" is %s, from %s (the Hugging Face Trainer fills it from its "
			     "--bf16/--fp16: give --precision to say which)",
			     name, *out ? "true" : "false", x->model_dtype);
	} else {
		*out = want == 1; /* memtap's default: bf16 */
		NOTE(d,
		     "%s.enabled \"auto\" is %s: memtap's default precision, bf16 (give --precision or --model to "
		     "resolve it as the Hugging Face Trainer would)",
		     name, *out ? "true" : "false");
	}
	return 0;
}

static int zero_section(struct ds *d, const json_t *root, struct mt_plan_config *c, bool *zero_on)
{
	const json_t *zero = json_object_get(root, "zero_optimization");
	struct section s;
	int r, stage = 0, i_stage = field_index(&zero_model, "stage");
	enum mt_offload opt = MT_OFFLOAD_NONE, par = MT_OFFLOAD_NONE;
	const char *k;
	json_t *v;

	*zero_on = false;
	if (!zero)
		return 0;
	if (json_is_boolean(zero)) { /* the legacy form: true is stage 1 */
		c->zero = json_is_true(zero);
		*zero_on = c->zero > 0;
		NOTE(d, "zero_optimization: %s is DeepSpeed's deprecated form of stage %d",
		     json_is_true(zero) ? "true" : "false", c->zero);
		return 0;
	}
	if (!json_is_object(zero))
		return bad(d,
			   "zero_optimization must be an object (DeepSpeedZeroConfig() argument after ** must be a "
			   "mapping, not %s)",
			   type_name(zero));
	if ((r = validate(d, &zero_model, zero, "zero_optimization.", &s)))
		return r;
	if (s.set[i_stage])
		stage = (int)s.i[i_stage];
	else if (is_auto(json_object_get(zero, "stage")) && d->ctx->zero_given) {
		stage = d->ctx->zero;
		NOTE(d,
		     "zero_optimization.stage \"auto\" is %d, from --zero (DeepSpeed would drop \"auto\" and take its "
		     "default, 0; the Hugging Face Trainer does not fill it)",
		     stage);
	} else if (is_auto(json_object_get(zero, "stage"))) {
		NOTE(d,
		     "zero_optimization.stage \"auto\" is 0: DeepSpeed drops \"auto\" and takes its default, and the "
		     "Hugging Face Trainer does not fill it");
	}
	/* the offload sections, and the deprecated booleans DeepSpeed turns into them */
	for (int which = 0; which < 2; which++) {
		const char *name = which ? "offload_param" : "offload_optimizer";
		const char *old = which ? "cpu_offload_param" : "cpu_offload";
		int i_new = field_index(&zero_model, name), i_old = field_index(&zero_model, old);
		enum mt_offload *dev = which ? &par : &opt;
		if (s.set[i_new]) {
			const char *device = json_string_value(json_object_get(s.val[i_new], "device"));
			*dev = device && !strcmp(device, "cpu")	   ? MT_OFFLOAD_CPU
			       : device && !strcmp(device, "nvme") ? MT_OFFLOAD_NVME
								   : MT_OFFLOAD_NONE;
			json_object_foreach(s.val[i_new], k, v) if (strcmp(k, "device")) add_name(
			    d->out->unmodelled, sizeof d->out->unmodelled,
			    which ? "zero_optimization.offload_param." : "zero_optimization.offload_optimizer.", k);
		}
		if (s.set[i_old] || (json_object_get(zero, old) && json_is_null(json_object_get(zero, old)))) {
			if (json_object_get(zero, name))
				return bad(d,
					   "zero_optimization: Cannot provide deprecated parameter '%s' and replacing "
					   "parameter '%s' together",
					   old, name);
			if (s.set[i_old] && s.b[i_old])
				*dev = MT_OFFLOAD_CPU;
			NOTE(d, "zero_optimization.%s is DeepSpeed's deprecated spelling of %s.device \"cpu\"", old,
			     name);
		}
	}
	if (s.set[field_index(&zero_model, "stage3_gather_fp16_weights_on_model_save")] &&
	    s.set[field_index(&zero_model, "gather_16bit_weights_on_model_save")])
		return bad(d, "zero_optimization: Cannot provide deprecated parameter "
			      "'stage3_gather_fp16_weights_on_model_save' and replacing parameter "
			      "'gather_16bit_weights_on_model_save' together");
	if (s.val[field_index(&zero_model, "offload_optimizer")]) {
		int i_ratio = field_index(&offload_optimizer, "ratio");
		struct section o;
		validate(d, &offload_optimizer, s.val[field_index(&zero_model, "offload_optimizer")], "", &o);
		if (o.set[i_ratio] && o.f[i_ratio] < 1.0 && stage != 3)
			return bad(
			    d,
			    "zero_optimization: Assertion failed, Partial offloading only supported for ZeRO Stage 3.");
		if (o.set[i_ratio] && o.f[i_ratio] < 1.0)
			add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
				 "offload_optimizer.ratio (partial offload)");
	}
	c->zero = stage;
	*zero_on = stage > 0;
	/* what DeepSpeed does with offload sections its stage does not use */
	if (par && stage != 3) {
		NOTE(d,
		     "zero_optimization.offload_param has no effect at stage %d (DeepSpeed passes it to stage 3 only)",
		     stage);
		par = MT_OFFLOAD_NONE;
	}
	if (opt && stage == 0) {
		NOTE(d, "zero_optimization.offload_optimizer at stage 0 is not ZeRO-Offload (DeepSpeed creates its CPU "
			"Adam without the ZeRO optimizer that moves states and gradients): planned without offload");
		opt = MT_OFFLOAD_NONE;
	}
	c->offload_optimizer = opt;
	c->offload_params = par;
	/* the GPU's gradient buffer (ZeRO-Offload's, or contiguous_gradients'):
	 * reduce_bucket_size, twice with overlap_comm at stages 1 and 2 (stage_1_and_2.py's
	 * double IPG buffer; stage3.py keeps one) */
	{
		int i_rb = field_index(&zero_model, "reduce_bucket_size"),
		    i_ov = field_index(&zero_model, "overlap_comm");
		int i_cg = field_index(&zero_model, "contiguous_gradients");
		const json_t *rb = json_object_get(zero, "reduce_bucket_size");
		long long bucket = s.set[i_rb] ? s.i[i_rb] : 500000000;
		bool overlap = s.set[i_ov] ? s.b[i_ov] : stage == 3, contiguous = s.set[i_cg] ? s.b[i_cg] : true;
		if (is_auto(rb)) {
			if (d->ctx->hidden) {
				bucket = (long long)(d->ctx->hidden * d->ctx->hidden);
				NOTE(d,
				     "zero_optimization.reduce_bucket_size \"auto\" is %lld, hidden x hidden from the "
				     "model, "
				     "as the Hugging Face Trainer fills it",
				     bucket);
			} else {
				NOTE(d, "zero_optimization.reduce_bucket_size \"auto\": the Hugging Face Trainer fills "
					"it with "
					"hidden x hidden; planned with DeepSpeed's default 5e8");
			}
		}
		if (bucket > 0)
			c->reduce_bucket = (uint64_t)bucket * (overlap && contiguous && stage < 3 ? 2 : 1);
		c->contiguous_gradients = stage >= 1 && contiguous;
	}
	json_object_foreach((json_t *)zero, k, v)
	{
		if (strcmp(k, "stage") && strcmp(k, "offload_optimizer") && strcmp(k, "offload_param") &&
		    strcmp(k, "cpu_offload") && strcmp(k, "cpu_offload_param") && strcmp(k, "reduce_bucket_size") &&
		    strcmp(k, "overlap_comm") && strcmp(k, "contiguous_gradients"))
			add_name(d->out->unmodelled, sizeof d->out->unmodelled, "zero_optimization.", k);
	}
	return 0;
}

/* Precision: fp16, bf16 (else the old bfloat16), amp (apex), torch_autocast; none of
 * them: fp32, as DeepSpeed's engine decides */
static int precision_sections(struct ds *d, const json_t *root, struct mt_plan_config *c, bool zero_on, int stage)
{
	const json_t *fp16 = json_object_get(root, "fp16"), *bf16 = json_object_get(root, "bf16");
	const char *bf16_name = "bf16";
	struct section s16, sb;
	int f16 = 0, b16 = 0, r;
	bool amp = false, autocast = false;

	if (fp16 && !json_is_object(fp16))
		return bad(d,
			   "fp16 must be an object (DeepSpeedFP16Config() argument after ** must be a mapping, not %s)",
			   type_name(fp16));
	if (!bf16 || json_is_null(bf16)) { /* DeepSpeed reads bfloat16 only when bf16 is absent */
		bf16 = json_object_get(root, "bfloat16");
		bf16_name = "bfloat16";
		if (bf16 && !json_is_object(bf16))
			return bad(d,
				   "bfloat16 must be an object (DeepSpeedBF16Config() argument after ** must be a "
				   "mapping, not %s)",
				   type_name(bf16));
		if (bf16)
			NOTE(d, "bfloat16 is DeepSpeed's old name for bf16");
	} else if (!json_is_object(bf16)) {
		return bad(d,
			   "bf16 must be an object (DeepSpeedBF16Config() argument after ** must be a mapping, not %s)",
			   type_name(bf16));
	} else if (json_object_get(root, "bfloat16")) {
		NOTE(d, "bfloat16 is ignored: DeepSpeed reads bf16 when both are given");
	}
	memset(&s16, 0, sizeof s16);
	memset(&sb, 0, sizeof sb);
	if ((fp16 && (r = validate(d, &fp16_model, fp16, "fp16.", &s16))) ||
	    (bf16 && (r = validate(d, &bf16_model, bf16, !strcmp(bf16_name, "bf16") ? "bf16." : "bfloat16.", &sb))))
		return r;
	if (fp16 && (r = enabled_flag(d, fp16, "fp16", &s16, 2, false, &f16)))
		return r;
	if (bf16 && (r = enabled_flag(d, bf16, bf16_name, &sb, 1, fp16 && s16.set[0] && !s16.b[0], &b16)))
		return r;
	if (f16) { /* dynamic loss scaling needs a window and a floor */
		int i_ls = field_index(&fp16_model, "loss_scale"), i_w = field_index(&fp16_model, "loss_scale_window");
		int i_min = field_index(&fp16_model, "min_loss_scale");
		if (!s16.set[i_ls] || s16.f[i_ls] == 0) {
			if (s16.set[i_w] && s16.i[i_w] <= 0)
				return bad(
				    d,
				    "fp16: Value error, fp16.loss_scale_window must be > 0 when dynamic loss scaling "
				    "is enabled (loss_scale=0)");
			if (s16.set[i_min] && s16.i[i_min] <= 0)
				return bad(
				    d,
				    "fp16: Value error, fp16.min_loss_scale must be > 0 when dynamic loss scaling is "
				    "enabled (loss_scale=0)");
		}
	}
	if (f16 && b16)
		return bad(d, "bfloat16 and fp16 modes cannot be simultaneously enabled (DeepSpeed's assertion)");
	if (s16.set[field_index(&fp16_model, "fp16_master_weights_and_grads")] &&
	    s16.b[field_index(&fp16_model, "fp16_master_weights_and_grads")] && !stage)
		return bad(d, "Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.");
	{
		int i_m = field_index(&bf16_model, "bf16_master_weights_and_grads");
		int i_o = field_index(&bf16_model, "bf16_optimizer_states");
		bool master = sb.set[i_m] && sb.b[i_m], states = sb.set[i_o] && sb.b[i_o];
		if (master && !stage)
			return bad(d, "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.");
		if (states && !stage)
			return bad(d, "bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3.");
		if (states && !master)
			return bad(d, "bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled.");
		if (b16 && master)
			add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
				 "bf16.bf16_master_weights_and_grads");
	}
	/* apex amp: get_amp_enabled reads the raw value; get_amp_params pops "enabled" */
	const json_t *a = json_object_get(root, "amp");
	if (a) {
		const json_t *en = json_object_get(a, "enabled");
		if (!json_is_object(a))
			return bad(d, "amp must be an object (DeepSpeed reads amp.enabled from it)");
		if (!en)
			return bad(d,
				   "amp has no \"enabled\" (DeepSpeed's get_amp_params pops it: KeyError 'enabled')");
		if (is_auto(en)) {
			NOTE(d, "amp.enabled \"auto\" is false: the Hugging Face Trainer enables apex only for "
				"--fp16_backend apex");
		} else {
			amp = !(json_is_false(en) || json_is_null(en) ||
				(json_is_integer(en) && !json_integer_value(en)) ||
				(json_is_string(en) && !json_string_length(en)));
		}
	}
	if (amp && zero_on)
		return bad(d, "Amp and ZeRO are not currently compatible, please use (legacy) fp16 mode which performs "
			      "similar to amp opt_mode=O2");
	if (amp && (f16 || b16)) /* engine.py _do_optimizer_sanity_check */
		return bad(d, "Cannot enable both amp with (legacy) fp16 or bfloat16 mode");
	const json_t *ta = json_object_get(root, "torch_autocast");
	if (ta) {
		const json_t *en = json_object_get(ta, "enabled");
		if (!json_is_object(ta))
			return bad(d, "torch_autocast must be an object");
		autocast = en && !(json_is_false(en) || json_is_null(en));
	}
	d->dtype = f16 ? 2 : b16 ? 1 : 0;
	d->amp = amp;
	if (f16 || b16)
		c->precision = MT_MIXED16;
	else if (amp || autocast)
		c->precision = MT_AMP16;
	else
		c->precision = MT_FP32;
	if (!fp16 && !bf16 && !amp && !autocast)
		NOTE(d, "no fp16 or bf16 section: DeepSpeed trains in fp32");
	return 0;
}

static int tensor_parallel_section(struct ds *d, const json_t *root, struct mt_plan_config *c)
{
	const json_t *tp = json_object_get(root, "tensor_parallel");
	struct section s;
	int r, i_size = field_index(&tensor_parallel_model, "autotp_size");

	if (!tp)
		return 0;
	if (!json_is_object(tp))
		return bad(d,
			   "tensor_parallel must be an object (TPTrainingConfig() argument after ** must be a mapping, "
			   "not %s)",
			   type_name(tp));
	if ((r = validate(d, &tensor_parallel_model, tp, "tensor_parallel.", &s)))
		return r;
	if (s.set[i_size] && s.i[i_size] > 1) {
		if (s.i[i_size] > (long long)MAX_COUNT)
			return bad(d, "tensor_parallel.autotp_size must be at most %llu", MAX_COUNT);
		c->tp = (uint64_t)s.i[i_size];
		NOTE(d, "tensor_parallel.autotp_size %lld: AutoTP splits the layers over %lld GPUs (--tp %lld)",
		     s.i[i_size], s.i[i_size], s.i[i_size]);
	} else if (is_auto(json_object_get(tp, "autotp_size"))) {
		NOTE(d, "tensor_parallel.autotp_size \"auto\" is 0 (no AutoTP): DeepSpeed drops \"auto\" and takes its "
			"default");
	}
	return 0;
}

/* data_types.grad_accum_dtype as runtime/config.py's DtypeEnum reads it, then
 * engine.py _do_optimizer_sanity_check: under ZeRO any mix runs (bf16 with fp32 at stage
 * 1 is its BF16_Optimizer); without, apex amp needs one type and fp32 values, and
 * otherwise the model's type and the accumulation's must be the same. */
static int data_types(struct ds *d, const json_t *root, struct mt_plan_config *c)
{
	static const struct {
		const char *name;
		int dtype; /* 0 fp32, 1 bf16, 2 fp16, 3 int8 */
	} names[] = {{"torch.float16", 2},  {"fp16", 2},    {"float16", 2},  {"half", 2},	{"torch.float32", 0},
		     {"fp32", 0},	    {"float32", 0}, {"float", 0},    {"torch.int8", 3}, {"int8", 3},
		     {"torch.bfloat16", 1}, {"bf16", 1},    {"bfloat16", 1}, {NULL, 0}};
	static const char *const torch_name[] = {"torch.float32", "torch.bfloat16", "torch.float16", "torch.int8"};
	const json_t *v = json_object_get(root, "data_types"), *g;
	int grad = -1;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return bad(d, "data_types must be an object (DeepSpeed reads grad_accum_dtype from it)");
	g = json_object_get(v, "grad_accum_dtype");
	if (!g || json_is_null(g))
		grad = d->dtype; /* None: the model's */
	else
		for (int i = 0; names[i].name && grad < 0; i++)
			if (json_is_string(g) && !strcmp(json_string_value(g), names[i].name))
				grad = names[i].dtype;
	if (grad < 0)
		return bad(d,
			   "data_types.grad_accum_dtype: %s%s%s is not a valid DtypeEnum (runtime/config.py: fp32, "
			   "float32, float, fp16, float16, half, bf16, bfloat16, int8, or torch.float32 ...)",
			   json_is_string(g) ? "'" : "", json_is_string(g) ? json_string_value(g) : type_name(g),
			   json_is_string(g) ? "'" : "");
	if (c->zero) {
		c->grad_fp32 = grad == 0 && d->dtype != 0;
		return 0;
	}
	if (d->amp && grad != d->dtype)
		return bad(d, "Model data type and gradient accumulation data type must be equal to use Amp "
			      "(engine.py _do_optimizer_sanity_check)");
	if (!d->amp && grad != d->dtype)
		return bad(d,
			   "unsupported mix of model_dtype=%s and grad_accum_dtype=%s (engine.py "
			   "_do_optimizer_sanity_check: without ZeRO the gradients accumulate in the model's type)",
			   torch_name[d->dtype], torch_name[grad]);
	return 0;
}

/* Sections apply in a fixed order, whatever the file's key order. */
static int apply(struct ds *d, json_t *root, struct mt_plan_config *c)
{
	static const char *const read_here[] = {"zero_optimization",
						"optimizer",
						"activation_checkpointing",
						"bf16",
						"bfloat16",
						"fp16",
						"amp",
						"torch_autocast",
						"tensor_parallel",
						"data_types",
						"sequence_parallel_size",
						"train_batch_size",
						"train_micro_batch_size_per_gpu",
						"gradient_accumulation_steps",
						NULL};
	/* what each turns on, and how DeepSpeed reads that it is on (NULL: the section's presence;
	 * model: a pydantic model's field, where "auto" is its default, off) */
	static const struct {
		const char *key, *flag, *what;
		bool model;
	} changing[] = {
	    {"sparse_attention", NULL,
	     "sparse_attention (block-sparse attention layers, config.py get_sparse_attention)", false},
	    {"hybrid_engine", "enabled", "hybrid_engine (inference containers and their cache beside training)", true},
	    {"data_efficiency", "enabled", "data_efficiency (random-LTD drops tokens from layers, data routing)",
	     false},
	    {"compile", "deepcompile", "compile.deepcompile (DeepCompile's own ZeRO schedule and buffers)", true},
	    {"elasticity", "enabled", "elasticity (DeepSpeed picks the batch sizes: compute_elastic_config)", false},
	    {NULL, NULL, NULL, false}};
	const struct ds_context *x = d->ctx;
	uint64_t batch, micro, steps;
	bool zero_on, has_batch, has_micro, has_steps;
	const char *k;
	json_t *v;
	int r;

	if (!json_is_object(root))
		return bad(d, "a DeepSpeed config is an object (DeepSpeed reads keys from it), not a %s",
			   type_name(root));
	if ((r = zero_section(d, root, c, &zero_on)) || (r = precision_sections(d, root, c, zero_on, c->zero)) ||
	    (r = tensor_parallel_section(d, root, c)))
		return r;
	if ((v = json_object_get(root, "optimizer")) && (r = optimizer_section(d, root, v, c)))
		return r;
	if ((v = json_object_get(root, "activation_checkpointing"))) {
		/* the model decides what it checkpoints; this section is there when it does */
		c->recompute = MT_RECOMPUTE_FULL;
		if (json_is_true(json_object_get(v, "partition_activations")))
			add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
				 "activation_checkpointing.partition_activations");
		if (json_is_true(json_object_get(v, "cpu_checkpointing")))
			add_name(d->out->unmodelled, sizeof d->out->unmodelled, "",
				 "activation_checkpointing.cpu_checkpointing");
	}
	if ((r = data_types(d, root, c)))
		return r;
	if ((v = json_object_get(root, "sequence_parallel_size"))) { /* DeepSpeed-Ulysses splits the sequence */
		if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (json_int_t)MAX_COUNT)
			return bad(d, "sequence_parallel_size must be a whole number from 1 to %llu", MAX_COUNT);
		c->cp = (uint64_t)json_integer_value(v);
	}
	/* runtime/config.py DeepSpeedConfig.__init__: elastic training picks the batch sizes itself
	 * (elasticity.py compute_elastic_config) and refuses the config's unless told to ignore them */
	if ((v = json_object_get(root, "elasticity")) && json_is_object(v) && truthy(json_object_get(v, "enabled"))) {
		if (!truthy(json_object_get(v, "ignore_non_elastic_batch_info")) &&
		    (json_object_get(root, "train_batch_size") ||
		     json_object_get(root, "train_micro_batch_size_per_gpu") ||
		     json_object_get(root, "gradient_accumulation_steps")))
			return bad(d, "ElasticityConfigError: One or more batch related parameters were found in your "
				      "ds_config (train_batch_size, train_micro_batch_size_per_gpu, and/or "
				      "gradient_accumulation_steps). These parameters *will not be used* since elastic "
				      "training is enabled, which takes control of these parameters. If you want to "
				      "suppress this error (the parameters will be silently ignored) please set "
				      "ignore_non_elastic_batch_info':true in your elasticity config.");
	}
	if ((r = batch_key(d, root, "train_micro_batch_size_per_gpu", x->micro_batch_given, x->micro_batch, &micro,
			   &has_micro)) ||
	    (r = batch_key(d, root, "gradient_accumulation_steps", x->micro_batches_given, x->micro_batches, &steps,
			   &has_steps)) ||
	    (r = batch_key(d, root, "train_batch_size", false, 0, &batch, &has_batch)))
		return r;
	/* DeepSpeed refuses it; --micro-batch stands in for the key, as a launcher's "auto" would */
	if (!has_batch && !has_micro && !x->micro_batch_given)
		return bad(d,
			   "neither train_batch_size nor train_micro_batch_size_per_gpu: DeepSpeed refuses the "
			   "config ('Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided'); "
			   "give --micro-batch to plan it");
	if (!has_batch && !has_micro)
		NOTE(d, "neither train_batch_size nor train_micro_batch_size_per_gpu, which DeepSpeed refuses: planned "
			"with --micro-batch");
	/* the missing ones are derived with the world size, once it is known (ds_config_batch) */
	if (!has_batch && !has_micro)
		micro = x->micro_batch;
	if (micro)
		c->micro_batch = micro;
	if (steps)
		c->micro_batches = steps;
	d->out->batch = batch;
	d->out->micro = micro;
	d->out->steps = steps;
	d->out->micro_auto = !micro && (is_auto(json_object_get(root, "train_micro_batch_size_per_gpu")) ||
					is_auto(json_object_get(root, "train_batch_size")));
	json_object_foreach(root, k, v)
	{
		bool known = false;
		for (int i = 0; read_here[i]; i++)
			known |= !strcmp(k, read_here[i]);
		for (int i = 0; changing[i].key && !known; i++) /* sections that change memory when on */
			if (!strcmp(k, changing[i].key) && json_is_object(v) &&
			    (!changing[i].flag ||
			     (truthy(json_object_get(v, changing[i].flag)) &&
			      !(changing[i].model && is_auto(json_object_get(v, changing[i].flag)))))) {
				add_name(d->out->unmodelled, sizeof d->out->unmodelled, "", changing[i].what);
				known = true;
			}
		if (!known)
			add_name(d->out->ignored, sizeof d->out->ignored, "", k);
	}
	return 0;
}

int ds_config_parse(const char *path, const char *text, size_t len, const struct ds_context *ctx,
		    struct mt_plan_config *c, struct ds_config *out)
{
	struct hjson_error err;
	static const struct ds_context none;
	json_t *root;
	struct ds d = {.path = path, .ctx = ctx ? ctx : &none, .out = out};
	int r;

	memset(out, 0, sizeof *out);
	if (!(root = hjson_load(text, len, true, &err))) {
		mt_text_line(err.text); /* quoted input: one line */
		if (err.line > 0)
			snprintf(out->err, sizeof out->err,
				 "%s:%d:%d: not valid JSON or hjson (DeepSpeed's syntax): %s", path, err.line,
				 err.column, err.text);
		else
			snprintf(out->err, sizeof out->err, "%s: not valid JSON or hjson (DeepSpeed's syntax): %s",
				 path, err.text);
		return EINVAL;
	}
	r = apply(&d, root, c);
	json_decref(root);
	mt_text_line(out->err); /* keys and values quoted from the file: one line each */
	mt_text_line(out->ignored);
	mt_text_line(out->unmodelled);
	mt_text_line(out->notes);
	return r;
}

/* DeepSpeed's runtime/config.py: _set_batch_related_parameters derives what is missing
 * (floor divisions), then _batch_assertion refuses what does not multiply out. */
int ds_config_batch(const char *path, const struct ds_config *ds, uint64_t *world, uint64_t *micro_out,
		    uint64_t *steps_out, char *note, size_t note_size, char *err, size_t err_size)
{
	uint64_t batch = ds->batch, micro = ds->micro, steps = ds->steps, w = *world, product;
	const char *derived = NULL;

	note[0] = err[0] = '\0';
	*micro_out = *steps_out = 0;
	if (ds->micro_auto && !micro) /* the Trainer fills all three together: nothing to derive */
		return 0;
	if (!w && batch && micro && steps) { /* no GPU count given: the one the three keys imply */
		if (batch % (micro * steps)) {
			snprintf(
			    err, err_size,
			    "%s: train_batch_size %llu is not a multiple of train_micro_batch_size_per_gpu x "
			    "gradient_accumulation_steps (%llu x %llu): DeepSpeed's _batch_assertion fails for any "
			    "number of GPUs",
			    path, (unsigned long long)batch, (unsigned long long)micro, (unsigned long long)steps);
			return EINVAL;
		}
		w = batch / (micro * steps);
	}
	if (!w)
		w = 1; /* memtap's default: one GPU */
	if (batch && micro && steps) {
	} else if (batch && micro) {
		steps = batch / micro / w;
		derived = "gradient_accumulation_steps";
	} else if (batch && steps) {
		micro = batch / w / steps;
		derived = "train_micro_batch_size_per_gpu";
	} else if (micro && steps) {
		batch = micro * steps * w;
	} else if (batch) {
		steps = 1;
		micro = batch / w;
		derived = "train_micro_batch_size_per_gpu";
	} else if (micro) {
		batch = micro * w;
		steps = 1;
	} else {
		snprintf(err, err_size,
			 "%s: neither train_batch_size nor train_micro_batch_size_per_gpu: DeepSpeed refuses the "
			 "config ('Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided')",
			 path);
		return EINVAL;
	}
	if (!micro || !steps) {
		snprintf(err, err_size,
			 "%s: %s: %llu has to be greater than 0 (DeepSpeed's _batch_assertion: "
			 "train_batch_size %llu over world_size %llu%s)",
			 path, !micro ? "Micro batch size per gpu" : "Gradient accumulation steps",
			 (unsigned long long)(!micro ? micro : steps), (unsigned long long)batch, (unsigned long long)w,
			 !micro ? "" : " and the micro-batch");
		return EINVAL;
	}
	if (__builtin_mul_overflow(micro, steps, &product) || __builtin_mul_overflow(product, w, &product) ||
	    product != batch) {
		snprintf(err, err_size,
			 "%s: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
			 "gradient_acc_step * world_size %llu != %llu * %llu * %llu (DeepSpeed's _batch_assertion; "
			 "world_size: the GPUs over --tp, pp and sequence_parallel_size)",
			 path, (unsigned long long)batch, (unsigned long long)micro, (unsigned long long)steps,
			 (unsigned long long)w);
		return EINVAL;
	}
	if (derived)
		snprintf(note, note_size,
			 "%s is %llu: train_batch_size %llu over world_size %llu%s, as DeepSpeed derives it "
			 "(runtime/config.py _set_batch_related_parameters)",
			 derived, (unsigned long long)(derived[0] == 'g' ? steps : micro), (unsigned long long)batch,
			 (unsigned long long)w,
			 derived[0] == 'g' ? " and the micro-batch"
			 : steps > 1	   ? " and the accumulation steps"
					   : "");
	*micro_out = micro;
	*steps_out = steps;
	*world = w;
	return 0;
}
