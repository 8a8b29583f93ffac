/* Capacity planning arithmetic (plan.h). Bytes throughout, as doubles: counts reach
 * 1e12 parameters and the estimators' own arithmetic is floating point. */
#include "analyze/plan.h"

#include <math.h>
#include <stddef.h>

static double max2(double a, double b)
{
	return a > b ? a : b;
}

/* Parameters of one transformer layer: two LayerNorms, QKV with biases (K and V over
 * the query groups), the output projection and a two-layer MLP, all with biases. */
static double layer_params(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, f = (double)c->ffn, kv = h * (double)c->query_groups / (double)c->heads;

	return 2 * h + (h + 2 * kv) * (h + 1) + h * h + h + 2 * h + f * h + f + h * f + h;
}

const char *mt_plan_check(struct mt_plan_config *c)
{
	uint64_t gpus = c->nodes * c->gpus_per_node;

	if (!c->tp)
		c->tp = 1;
	if (!c->pp)
		c->pp = 1;
	if (!c->nodes || !c->gpus_per_node)
		return "there must be at least one node and one GPU per node";
	if (c->zero < 0 || c->zero > 3)
		return "--zero takes a stage from 0 to 3";
	if (gpus % (c->tp * c->pp))
		return "the GPUs must divide into tensor-parallel x pipeline-parallel groups (GPUs % (tp*pp) != 0)";
	if (c->offload_params && c->zero != 3)
		return "parameter offload needs ZeRO stage 3";
	if (c->sp && c->tp < 2)
		return "sequence parallelism needs a tensor-parallel size above 1";
	if (c->layers) {
		if (!c->hidden || !c->heads || !c->vocab || !c->seq || !c->micro_batch)
			return "an architecture needs --hidden, --heads, --vocab, --seq and --micro-batch besides --layers";
		if (!c->ffn)
			c->ffn = 4 * c->hidden;
		if (!c->query_groups)
			c->query_groups = c->heads;
		if (c->hidden % c->heads)
			return "the heads must divide the hidden size";
		if (c->heads % c->query_groups)
			return "the query groups must divide the heads";
		if (c->heads % c->tp)
			return "the tensor-parallel size must divide the heads";
		/* fewer query groups than tp ranks are replicated; more must split evenly */
		if (c->query_groups % c->tp && c->query_groups >= c->tp)
			return "the tensor-parallel size must divide the query groups";
		if (c->layers % c->pp)
			return "the pipeline-parallel size must divide the layers";
		if (c->sp && c->seq % c->tp)
			return "with sequence parallelism the tensor-parallel size must divide the sequence";
		if (!c->params) {
			double h = (double)c->hidden, v = (double)c->vocab;
			c->params = (uint64_t)((double)c->layers * layer_params(c) + v * h * (c->untied ? 2 : 1) +
					       (double)c->seq * h + 2 * h);
		}
		if (!c->largest_layer)
			c->largest_layer = (uint64_t)max2((double)c->vocab * (double)c->hidden, layer_params(c));
	} else if (c->recompute != MT_RECOMPUTE_NONE || c->micro_batch) {
		return "activations need the architecture (--layers, --hidden, --heads, --vocab, --seq, --micro-batch)";
	}
	if (!c->params)
		return "give the model: --params N, or its architecture (--layers ...)";
	if (c->largest_layer > c->params)
		return "the largest layer cannot hold more parameters than the model";
	return NULL;
}

/* bytes one element of a value takes */
static double value_bytes(const struct mt_plan_config *c)
{
	return c->precision == MT_FP32 ? 4 : 2;
}

/* optimizer state bytes per parameter: moments, and the fp32 master copy under mixed precision */
static double optimizer_bytes(const struct mt_plan_config *c)
{
	double master = c->precision == MT_MIXED16 ? 4 : 0;

	switch (c->optimizer) {
	case MT_ADAM:
		return 8 + master;
	case MT_ADAM8BIT:
		return 2 + master;
	case MT_SGD_MOMENTUM:
		return 4 + master;
	default:
		return 0;
	}
}

double mt_plan_layer_activations(const struct mt_plan_config *c)
{
	double e = value_bytes(c), s = (double)c->seq, b = (double)c->micro_batch, h = (double)c->hidden;
	double f = (double)c->ffn, a = (double)c->heads, t = (double)c->tp, spdiv = c->sp ? t : 1;
	double kv = h * (double)c->query_groups / a;

	if (c->recompute == MT_RECOMPUTE_FULL)
		return e * s * b * h / spdiv; /* the layer's input only */
	/* replicated across tensor-parallel ranks (split by sequence parallelism): both
	 * LayerNorm inputs, the attention and MLP inputs (values) and two dropout masks (bytes);
	 * split by tensor parallelism: Q, K, V, the projection's input, the MLP's two inner
	 * tensors; then the attention scores: softmax output, its dropout mask and output */
	double kept = s * b * (e * 4 * h / spdiv + 2 * h / spdiv + e * (2 * h + 2 * kv + 2 * f) / t);
	if (c->recompute == MT_RECOMPUTE_NONE)
		kept += b * a * s * s * (2 * e + 1) / t;
	return kept;
}

static double shard(double n, uint64_t parts)
{
	return parts > 1 ? ceil(n / (double)parts) : n;
}

void mt_plan_compute(const struct mt_plan_config *c, struct mt_plan *out)
{
	uint64_t gpus = c->nodes * c->gpus_per_node, mp = c->tp * c->pp, dp = gpus / mp;
	double e = value_bytes(c), p = (double)c->params, t = (double)c->tp;
	double h = (double)c->hidden, v = (double)c->vocab, sb = (double)c->seq * (double)c->micro_batch;
	double mine = p / (double)mp; /* this GPU's parameters before ZeRO (the most loaded stage) */
	double params = e * shard(mine, c->zero >= 3 ? dp : 1);
	double grads = e * shard(mine, c->zero >= 2 ? dp : 1);
	double optim = optimizer_bytes(c) * shard(mine, c->zero >= 1 ? dp : 1);
	double acts = 0, temps_bwd = 0, grads_bwd = 0, update = 0;
	double acts_layer = 0, grads_layer = 0, temps_layer = 0, acts_first = 0, grads_first = 0;
	double at_bwd, at_layer = 0, at_first = 0, at_opt, cpu = 0;

	if (c->offload_optimizer) {
		cpu += optim * (double)c->gpus_per_node;
		optim = 0;
	}
	if (c->offload_params) {
		cpu += params * (double)c->gpus_per_node;
		params = e * (double)c->largest_layer / t; /* one layer gathered at a time */
	}
	if (c->layers) {
		struct mt_plan_config none = *c;
		double emb = e * sb * h / (c->sp ? t : 1), lp = layer_params(c) / t;

		none.recompute = MT_RECOMPUTE_NONE;
		/* the first pipeline stage keeps pp micro-batches of layers/pp layers: all layers'
		 * worth, and the embedding output of each micro-batch in flight */
		acts = acts_layer = (double)c->layers * mt_plan_layer_activations(c) + (double)c->pp * emb;
		if (c->pp == 1) {
			/* final LayerNorm and output layer inputs, fp32 logits */
			acts += 2 * emb + 4 * sb * v / t;
			/* backward begins with the logits' fp32 gradient and the output layer's
			 * gradient (a full-size bucket under ZeRO-2/3 before it is reduced) */
			temps_bwd = 4 * sb * v / t + (c->zero >= 2 && dp > 1 ? e * v * h / t : 0);
			grads_bwd = e * (shard(v * h / t, c->zero >= 2 ? dp : 1) + shard(2 * h, c->zero >= 2 ? dp : 1));
		}
		/* the backward of the last layer: the head's activations are gone; its own are
		 * made again where they were not kept; its input and MLP gradients; its weights
		 * gathered (ZeRO-3) and its gradient in a full-size bucket (ZeRO-2/3) */
		grads_layer = grads_bwd + e * shard(lp, c->zero >= 2 ? dp : 1);
		temps_layer = mt_plan_layer_activations(&none) - mt_plan_layer_activations(c) + emb +
			      e * sb * (double)c->ffn / t + (c->zero >= 3 && dp > 1 ? e * lp : 0) +
			      (c->zero >= 2 && dp > 1 ? e * lp : 0);
		at_layer = params + optim + acts_layer + grads_layer + temps_layer;
		/* the same in the backward of the first layer: every other gradient made, only
		 * that layer's activations and the embedding output left */
		acts_first = mt_plan_layer_activations(c) + (double)c->pp * emb;
		grads_first = grads - e * shard((double)c->seq * h / t, c->zero >= 2 ? dp : 1);
		at_first = params + optim + acts_first + grads_first + temps_layer;
		if (c->optimizer != MT_NO_OPTIMIZER && !c->offload_optimizer)
			update = 4 * shard((double)c->largest_layer / t, c->zero >= 1 ? dp : 1); /* fp32 update */
	}
	/* the peak is where backward begins (every activation alive), in the backward of the
	 * last or the first layer (recomputation), or in the optimizer step (every gradient
	 * alive) */
	at_bwd = params + optim + acts + temps_bwd + grads_bwd;
	at_opt = params + grads + optim + update;
	*out = (struct mt_plan){dp, params, grads, optim, 0, update, at_opt, cpu, "optimizer step"};
	if (c->layers && at_bwd > out->total)
		*out = (struct mt_plan){dp, params, grads_bwd, optim, acts, temps_bwd, at_bwd, cpu, "backward start"};
	if (c->layers && at_layer > out->total)
		*out = (struct mt_plan){dp, params, grads_layer, optim, acts_layer, temps_layer, at_layer, cpu,
					"backward of the last layer"};
	if (c->layers && at_first > out->total)
		*out = (struct mt_plan){dp, params, grads_first, optim, acts_first, temps_layer, at_first, cpu,
					"backward of the first layer"};
}

void mt_plan_deepspeed_zero2(double params, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     double buffer_factor, double *cpu, double *gpu)
{
	double total_gpus = (double)(nodes * gpus_per_node);

	if (cpu_offload) {
		*gpu = 2 * params;
		*cpu = params * max2(4 * total_gpus, 16) * buffer_factor;
	} else {
		*gpu = 2 * params + floor(18 * params / total_gpus);
		*cpu = params * 4 * (double)gpus_per_node * buffer_factor;
	}
	*cpu = floor(*cpu);
	*gpu = floor(*gpu);
}

void mt_plan_deepspeed_zero3(double params, double largest, uint64_t gpus_per_node, uint64_t nodes,
			     bool cpu_offload, bool cpu_offload_params, bool zero_init, double buffer_factor,
			     double *cpu, double *gpu)
{
	double total_gpus = (double)(nodes * gpus_per_node), gpus_factor = 1 / (double)nodes;
	double largest_memory = 4 * largest;

	if (cpu_offload && cpu_offload_params) {
		*gpu = largest_memory;
		*cpu = params * (zero_init ? 18 * gpus_factor : max2(4 * (double)gpus_per_node, 18 * gpus_factor)) *
		       buffer_factor;
	} else if (cpu_offload) {
		*gpu = largest_memory + floor(2 * params / total_gpus);
		*cpu = params * (zero_init ? 16 * gpus_factor : max2(4 * (double)gpus_per_node, 16 * gpus_factor)) *
		       buffer_factor;
	} else {
		*gpu = largest_memory + floor(18 * params / total_gpus);
		*cpu = (zero_init ? largest : params) * 4 * (double)gpus_per_node * buffer_factor;
	}
	*cpu = floor(*cpu);
	*gpu = floor(*gpu);
}
