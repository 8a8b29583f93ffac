/* Capacity planning: the device memory one GPU of a training job needs, from a model
 * description, by component, in bytes. The formulas and their sources are in
 * docs/PLAN.md: ZeRO (Rajbhandari et al.) for model states, Korthikanti et al. for
 * activations, and DeepSpeed's own estimators reproduced exactly. */
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

enum mt_precision { MT_FP32, MT_MIXED16 }; /* MT_MIXED16: bf16/fp16 values, fp32 master weights */
enum mt_optimizer { MT_ADAM, MT_ADAM8BIT, MT_SGD_MOMENTUM, MT_NO_OPTIMIZER };
enum mt_recompute { MT_RECOMPUTE_NONE, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_FULL };

struct mt_plan_config {
	/* the model: an architecture (layers > 0), or parameter counts alone */
	uint64_t layers, hidden, heads, query_groups, ffn, vocab, seq, micro_batch;
	bool untied;                  /* a separate output layer instead of the tied embedding */
	uint64_t params, largest_layer; /* 0: from the architecture */
	/* the training setup */
	enum mt_precision precision;
	enum mt_optimizer optimizer;
	enum mt_recompute recompute;
	int zero;                     /* ZeRO stage 0-3 */
	uint64_t nodes, gpus_per_node;
	uint64_t tp, pp;              /* tensor- and pipeline-parallel sizes */
	bool sp;                      /* sequence parallelism (with tp) */
	bool offload_optimizer, offload_params;
};

/* Bytes on one GPU at the moment of its peak, by component; cpu: bytes per node in host
 * memory for what is offloaded. */
struct mt_plan {
	uint64_t dp;
	double params, grads, optimizer, activations, temporaries, total, cpu;
	const char *moment; /* "backward start", "backward of the last/first layer", "optimizer step" */
};

/* Fills what the architecture implies (params, largest layer, query groups, ffn).
 * Returns NULL, or one line saying why the configuration is impossible. */
const char *mt_plan_check(struct mt_plan_config *c);
/* c must have passed mt_plan_check. */
void mt_plan_compute(const struct mt_plan_config *c, struct mt_plan *out);
/* Activation bytes one transformer layer keeps for backward (Korthikanti et al. Table 2,
 * generalised to any ffn and to fp32 values). */
double mt_plan_layer_activations(const struct mt_plan_config *c);

/* DeepSpeed's estimate_zero2/zero3_model_states_mem_needs (cpu and gpu bytes), exactly. */
void mt_plan_deepspeed_zero2(double params, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     double buffer_factor, double *cpu, double *gpu);
void mt_plan_deepspeed_zero3(double params, double largest, uint64_t gpus_per_node, uint64_t nodes,
			     bool cpu_offload, bool cpu_offload_params, bool zero_init, double buffer_factor,
			     double *cpu, double *gpu);

#endif
