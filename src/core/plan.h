/* Capacity planning: the device memory one GPU of a training job needs, from a model
 * description, by component, in bytes. The formulas and their sources are in
 * docs/PLAN.md: ZeRO (Rajbhandari et al.) for model states, Korthikanti et al. for
 * activations, DeepSpeed's and Megatron's own estimators reproduced exactly. A measured
 * run calibrates the model (mt_plan_calibrate) so its projections start from what the
 * job really used. */
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mt_precision { MT_FP32, MT_MIXED16 }; /* MT_MIXED16: bf16/fp16 values, fp32 master weights */
enum mt_optimizer { MT_ADAM, MT_ADAM8BIT, MT_SGD_MOMENTUM, MT_NO_OPTIMIZER };
enum mt_recompute { MT_RECOMPUTE_NONE, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_FULL };
enum mt_offload { MT_OFFLOAD_NONE, MT_OFFLOAD_CPU, MT_OFFLOAD_NVME };
enum mt_component {
	MT_PLAN_PARAMS,
	MT_PLAN_GRADS,
	MT_PLAN_OPTIMIZER,
	MT_PLAN_ACTIVATIONS,
	MT_PLAN_TEMPORARIES,
	MT_PLAN_COMPONENTS
};
extern const char *const mt_plan_component_names[MT_PLAN_COMPONENTS];
/* The names options take, NULL-terminated: recompute and offload names are their enums'
 * values; precision "fp32" is MT_FP32, the others MT_MIXED16; optimizer names map
 * through mt_plan_optimizer_values ("adam" and "adamw" are both MT_ADAM). */
extern const char *const mt_plan_recompute_names[4];
extern const char *const mt_plan_offload_names[4];
extern const char *const mt_plan_precision_names[4];
extern const char *const mt_plan_optimizer_names[6];
extern const enum mt_optimizer mt_plan_optimizer_values[5];

struct mt_plan_config {
	/* the model: an architecture (layers > 0), or parameter counts alone */
	uint64_t layers, hidden, heads, query_groups, ffn, vocab, seq, micro_batch;
	bool untied;			/* a separate output layer instead of the tied embedding */
	bool swiglu, rmsnorm;		/* gated MLP (three h x ffn matrices); RMSNorm (no bias) */
	uint64_t params, largest_layer; /* 0: from the architecture */
	/* the training setup */
	enum mt_precision precision;
	enum mt_optimizer optimizer;
	enum mt_recompute recompute;
	int zero; /* ZeRO stage 0-3 */
	uint64_t nodes, gpus_per_node;
	uint64_t tp, pp, vpp;	/* tensor-, pipeline-parallel sizes, virtual stages */
	uint64_t micro_batches; /* per step (gradient accumulation); 0: enough to fill the pipeline */
	bool sp;		/* sequence parallelism (with tp) */
	enum mt_offload offload_optimizer, offload_params;
	double overhead; /* framework bytes per GPU: CUDA context, library workspaces */
};

/* What a measured run teaches the model: each component's measured bytes over the
 * estimate at the run's own setting (k), measured bytes where the model expects none
 * (carry), and bytes of no component (other), carried as framework overhead. */
struct mt_plan_scale {
	double k[MT_PLAN_COMPONENTS], carry[MT_PLAN_COMPONENTS], other;
};

/* Bytes on one GPU at the moment of its peak, by component; offloaded bytes per node. */
struct mt_plan {
	uint64_t dp;
	double bytes[MT_PLAN_COMPONENTS];
	double framework, total, cpu, nvme;
	const char *moment; /* "backward start", "backward of the last/first layer", "optimizer step" */
};

/* The options that describe a model and a setup (plan_options.def), each setting the
 * struct mt_plan_config field of its name. */
enum mt_plan_kind {
	MT_PLAN_OPT_COUNT,
	MT_PLAN_OPT_FLAG,
	MT_PLAN_OPT_SIZE,
	MT_PLAN_OPT_ZERO,
	MT_PLAN_OPT_PRECISION,
	MT_PLAN_OPT_OPTIMIZER,
	MT_PLAN_OPT_RECOMPUTE,
	MT_PLAN_OPT_OFFLOAD
};
struct mt_plan_option {
	const char *name; /* the field's name: --name with '-' for '_' on the command line */
	enum mt_plan_kind kind;
	size_t offset;
	const char *help;
};
extern const struct mt_plan_option mt_plan_options[]; /* ends with a NULL name */
/* By name, '-' or '_' alike; NULL when there is none. */
const struct mt_plan_option *mt_plan_option(const char *name);
/* Sets o's field from its text ("4096", "2851M", "bf16", "true"); NULL, or a line saying
 * why not (in why), naming the option as `shown`. */
const char *mt_plan_set(struct mt_plan_config *c, const struct mt_plan_option *o, const char *text, const char *shown,
			char *why, size_t n);
const char *mt_plan_kind_what(enum mt_plan_kind kind); /* "a whole non-negative count", ... */

/* Fills what the architecture implies (params, largest layer, query groups, ffn).
 * Returns NULL, or one line saying why the configuration is impossible. */
const char *mt_plan_check(struct mt_plan_config *c);
/* c must have passed mt_plan_check; s may be NULL (the formulas alone). */
void mt_plan_compute(const struct mt_plan_config *c, const struct mt_plan_scale *s, struct mt_plan *out);
/* The scale that makes mt_plan_compute(run) reproduce measured[] and other bytes. */
void mt_plan_calibrate(const struct mt_plan_config *run, const double measured[MT_PLAN_COMPONENTS], double other,
		       struct mt_plan_scale *s);
/* The total over ZeRO stages 0-3 x recomputation none/selective/full, INFINITY where
 * that setting is impossible. */
void mt_plan_table(const struct mt_plan_config *c, const struct mt_plan_scale *s, double table[4][3]);
/* Parameters whose params, grads or optimizer state one GPU holds (after tp, pp, ZeRO). */
double mt_plan_params_on_gpu(const struct mt_plan_config *c, enum mt_component j);
/* The setup in words: precision, optimizer, ZeRO, GPUs, micro-batch, recomputation. */
void mt_plan_describe(const struct mt_plan_config *c, char *buf, size_t len);
/* Activation bytes one transformer layer keeps for backward (Korthikanti et al. Table 2,
 * generalised to any ffn and to fp32 values). */
double mt_plan_layer_activations(const struct mt_plan_config *c);

/* DeepSpeed's estimate_zero2/zero3_model_states_mem_needs (cpu and gpu bytes), exactly. */
void mt_plan_deepspeed_zero2(double params, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     double buffer_factor, double *cpu, double *gpu);
void mt_plan_deepspeed_zero3(double params, double largest, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     bool cpu_offload_params, bool zero_init, double buffer_factor, double *cpu, double *gpu);
/* Megatron-LM's theoretical_memory_usage.py (dense GPT, no MoE/MTP/MLA): weight and
 * optimizer bytes and activation bytes, with its padded vocabulary; ZeRO >= 1 stands for
 * its distributed optimizer. */
void mt_plan_megatron(const struct mt_plan_config *c, uint64_t *padded_vocab, double *weights, double *activations);

#endif
