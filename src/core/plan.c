/* Capacity planning arithmetic (plan.h). Bytes throughout, as doubles: counts reach
 * 1e12 parameters and the estimators' own arithmetic is floating point. */
#include "core/plan.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static double max2(double a, double b)
{
	return a > b ? a : b;
}

const char *const mt_plan_recompute_names[4] = {"none", "selective", "full", NULL};
const char *const mt_plan_offload_names[4] = {"none", "cpu", "nvme", NULL};
const char *const mt_plan_precision_names[4] = {"fp32", "bf16", "fp16", NULL};
const char *const mt_plan_optimizer_names[6] = {"adam", "adamw", "adam8bit", "sgd", "none", NULL};
const enum mt_optimizer mt_plan_optimizer_values[5] = {MT_ADAM, MT_ADAM, MT_ADAM8BIT, MT_SGD_MOMENTUM, MT_NO_OPTIMIZER};
const char *const mt_plan_component_names[MT_PLAN_COMPONENTS] = {"params", "grads", "optimizer", "activations",
								 "temporaries"};

/* Parameters of one transformer layer: two norms, QKV with biases (K and V over the
 * query groups), the output projection and the MLP (gated: its first matrix twice as
 * wide), all with biases. */
static double layer_params(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, f = (double)c->ffn, kv = h * (double)c->query_groups / (double)c->heads;
	double norm = c->rmsnorm ? h : 2 * h, up = c->swiglu ? 2 * f : f;

	return 2 * norm + (h + 2 * kv) * (h + 1) + h * h + h + up * (h + 1) + f * h + h;
}

const char *mt_plan_check(struct mt_plan_config *c)
{
	uint64_t gpus, mp, stages;

	if (!c->tp)
		c->tp = 1;
	if (!c->pp)
		c->pp = 1;
	if (!c->vpp)
		c->vpp = 1;
	if (!c->nodes || !c->gpus_per_node)
		return "there must be at least one node and one GPU per node";
	/* counts come from command lines and config files: products past 64 bits are refused, not wrapped */
	if (__builtin_mul_overflow(c->nodes, c->gpus_per_node, &gpus) || __builtin_mul_overflow(c->tp, c->pp, &mp) ||
	    __builtin_mul_overflow(c->pp, c->vpp, &stages))
		return "the GPU counts are too large";
	if (c->zero < 0 || c->zero > 3)
		return "--zero takes a stage from 0 to 3";
	if (gpus % mp)
		return "the GPUs must divide into tensor-parallel x pipeline-parallel groups (GPUs % (tp*pp) != 0)";
	if (c->offload_params && c->zero != 3)
		return "parameter offload needs ZeRO stage 3";
	if (c->sp && c->tp < 2)
		return "sequence parallelism needs a tensor-parallel size above 1";
	if (c->vpp > 1 && c->pp < 2)
		return "virtual pipeline stages need a pipeline-parallel size above 1";
	if (!(c->overhead >= 0))
		return "the framework overhead cannot be negative";
	if (c->layers) {
		if (!c->hidden || !c->heads || !c->vocab || !c->seq || !c->micro_batch)
			return "an architecture needs --hidden, --heads, --vocab, --seq and --micro-batch besides "
			       "--layers";
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
		if (c->layers % stages)
			return "the pipeline stages (pp x vpp) must divide the layers";
		if (c->sp && c->seq % c->tp)
			return "with sequence parallelism the tensor-parallel size must divide the sequence";
		if (!c->params) {
			double h = (double)c->hidden, v = (double)c->vocab;
			c->params = (uint64_t)((double)c->layers * layer_params(c) + v * h * (c->untied ? 2 : 1) +
					       (double)c->seq * h + (c->rmsnorm ? h : 2 * h));
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
	double kv = h * (double)c->query_groups / a, mlp = c->swiglu ? 3 * f : 2 * f;

	if (c->recompute == MT_RECOMPUTE_FULL)
		return e * s * b * h / spdiv; /* the layer's input only */
	/* replicated across tensor-parallel ranks (split by sequence parallelism): both norm
	 * inputs, the attention and MLP inputs (values) and two dropout masks (bytes); split
	 * by tensor parallelism: Q, K, V, the projection's input, the MLP's inner tensors (two,
	 * or the gate and up outputs and their product when gated); then the attention
	 * scores: softmax output, its dropout mask and output */
	double kept = s * b * (e * 4 * h / spdiv + 2 * h / spdiv + e * (2 * h + 2 * kv + mlp) / t);
	if (c->recompute == MT_RECOMPUTE_NONE)
		kept += b * a * s * s * (2 * e + 1) / t;
	return kept;
}

/* The largest weight: the embedding, the MLP's first matrix or QKV; the largest layer
 * when only counts are known. */
static double largest_tensor(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, kv = h * (double)c->query_groups / (double)c->heads;

	if (!c->layers)
		return (double)c->largest_layer;
	return max2((double)c->vocab * h, max2(h * (double)c->ffn * (c->swiglu ? 2 : 1), h * (h + 2 * kv)));
}

static double shard(double n, uint64_t parts)
{
	return parts > 1 ? ceil(n / (double)parts) : n;
}

/* Micro-batches' worth of all layers the first pipeline stage holds: pp in flight over
 * layers/pp layers each, fewer when a step has fewer micro-batches, more with the
 * interleaved schedule (Narayanan et al.; Megatron's factor 1 + (pp-1)/(pp*vpp)). */
static double in_flight(const struct mt_plan_config *c)
{
	double pp = (double)c->pp;

	if (c->vpp > 1)
		return 1 + (pp - 1) / (pp * (double)c->vpp);
	if (c->micro_batches && (double)c->micro_batches < pp)
		return (double)c->micro_batches / pp;
	return 1;
}

enum { AT_BACKWARD, AT_LAST_LAYER, AT_FIRST_LAYER, AT_OPTIMIZER, MOMENTS };
static const char *const moment_names[MOMENTS] = {"backward start", "backward of the last layer",
						  "backward of the first layer", "optimizer step"};

/* Each moment's components, unscaled. */
static void moments(const struct mt_plan_config *c, double m[MOMENTS][MT_PLAN_COMPONENTS], double *cpu, double *nvme)
{
	uint64_t gpus = c->nodes * c->gpus_per_node, mp = c->tp * c->pp, dp = gpus / mp;
	double e = value_bytes(c), p = (double)c->params, t = (double)c->tp;
	double h = (double)c->hidden, v = (double)c->vocab, sb = (double)c->seq * (double)c->micro_batch;
	double mine = p / (double)mp; /* this GPU's parameters before ZeRO (the most loaded stage) */
	double params = e * shard(mine, c->zero >= 3 ? dp : 1);
	double grads = e * shard(mine, c->zero >= 2 ? dp : 1);
	double optim = optimizer_bytes(c) * shard(mine, c->zero >= 1 ? dp : 1);
	double *to;

	*cpu = *nvme = 0;
	if (c->offload_optimizer) {
		to = c->offload_optimizer == MT_OFFLOAD_NVME ? nvme : cpu;
		*to += optim * (double)c->gpus_per_node;
		optim = 0;
	}
	if (c->offload_params) {
		to = c->offload_params == MT_OFFLOAD_NVME ? nvme : cpu;
		*to += params * (double)c->gpus_per_node;
		params = e * (double)c->largest_layer / t; /* one layer gathered at a time */
	}
	for (int i = 0; i < MOMENTS; i++)
		m[i][MT_PLAN_PARAMS] = params, m[i][MT_PLAN_OPTIMIZER] = optim;
	m[AT_OPTIMIZER][MT_PLAN_GRADS] = grads;
	if (c->optimizer != MT_NO_OPTIMIZER && !c->offload_optimizer) /* an fp32 update, one tensor at a time */
		m[AT_OPTIMIZER][MT_PLAN_TEMPORARIES] = 4 * shard(largest_tensor(c) / t, c->zero >= 1 ? dp : 1);
	if (!c->layers)
		return;

	struct mt_plan_config none = *c;
	double emb = e * sb * h / (c->sp ? t : 1), lp = layer_params(c) / t, flight = in_flight(c);
	double acts, temps_bwd = 0, grads_bwd = 0, temps_layer;

	none.recompute = MT_RECOMPUTE_NONE;
	/* the first pipeline stage keeps its micro-batches in flight of layers/pp layers: all
	 * layers' worth, and the embedding output of each micro-batch */
	acts = m[AT_LAST_LAYER][MT_PLAN_ACTIVATIONS] =
	    flight * ((double)c->layers * mt_plan_layer_activations(c) + (double)c->pp * emb);
	if (c->pp == 1) {
		/* final norm and output layer inputs, fp32 logits */
		acts += 2 * emb + 4 * sb * v / t;
		/* backward begins with the logits' fp32 gradient and the output layer's
		 * gradient (a full-size bucket under ZeRO-2/3 before it is reduced) */
		temps_bwd = 4 * sb * v / t + (c->zero >= 2 && dp > 1 ? e * v * h / t : 0);
		grads_bwd = e * (shard(v * h / t, c->zero >= 2 ? dp : 1) + shard(2 * h, c->zero >= 2 ? dp : 1));
	}
	m[AT_BACKWARD][MT_PLAN_ACTIVATIONS] = acts;
	m[AT_BACKWARD][MT_PLAN_GRADS] = grads_bwd;
	m[AT_BACKWARD][MT_PLAN_TEMPORARIES] = temps_bwd;
	/* the backward of the last layer: the head's activations are gone; its own are
	 * made again where they were not kept; its input and MLP gradients; its weights
	 * gathered (ZeRO-3) and its gradient in a full-size bucket (ZeRO-2/3) */
	temps_layer = mt_plan_layer_activations(&none) - mt_plan_layer_activations(c) + emb +
		      e * sb * (double)c->ffn / t + (c->zero >= 3 && dp > 1 ? e * lp : 0) +
		      (c->zero >= 2 && dp > 1 ? e * lp : 0);
	m[AT_LAST_LAYER][MT_PLAN_GRADS] = grads_bwd + e * shard(lp, c->zero >= 2 ? dp : 1);
	m[AT_LAST_LAYER][MT_PLAN_TEMPORARIES] = temps_layer;
	/* the same in the backward of the first layer: every other gradient made, only
	 * that layer's activations and the embedding output left */
	m[AT_FIRST_LAYER][MT_PLAN_ACTIVATIONS] = mt_plan_layer_activations(c) + (double)c->pp * emb;
	m[AT_FIRST_LAYER][MT_PLAN_GRADS] = grads - e * shard((double)c->seq * h / t, c->zero >= 2 ? dp : 1);
	m[AT_FIRST_LAYER][MT_PLAN_TEMPORARIES] = temps_layer;
}

void mt_plan_compute(const struct mt_plan_config *c, const struct mt_plan_scale *s, struct mt_plan *out)
{
	double m[MOMENTS][MT_PLAN_COMPONENTS] = {{0}};
	int last = c->layers ? MOMENTS : AT_OPTIMIZER + 1, first = c->layers ? 0 : AT_OPTIMIZER;

	*out = (struct mt_plan){.dp = c->nodes * c->gpus_per_node / (c->tp * c->pp),
				.total = -1,
				.framework = c->overhead + (s ? s->other : 0)};
	moments(c, m, &out->cpu, &out->nvme);
	/* the peak is where backward begins (every activation alive), in the backward of the
	 * last or the first layer (recomputation), or in the optimizer step (every gradient
	 * alive) */
	for (int i = first; i < last; i++) {
		double total = out->framework;
		for (int j = 0; j < MT_PLAN_COMPONENTS; j++) {
			if (s)
				m[i][j] = m[i][j] * s->k[j] + s->carry[j];
			total += m[i][j];
		}
		if (total > out->total) {
			memcpy(out->bytes, m[i], sizeof(out->bytes));
			out->total = total;
			out->moment = moment_names[i];
		}
	}
}

void mt_plan_calibrate(const struct mt_plan_config *run, const double measured[MT_PLAN_COMPONENTS], double other,
		       struct mt_plan_scale *s)
{
	struct mt_plan est;

	mt_plan_compute(run, NULL, &est);
	*s = (struct mt_plan_scale){.other = other};
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++) {
		s->k[j] = 1;
		if (est.bytes[j] > 0 && measured[j] > 0)
			s->k[j] = measured[j] / est.bytes[j];
		else if (est.bytes[j] <= 0)
			s->carry[j] = measured[j];
	}
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

void mt_plan_deepspeed_zero3(double params, double largest, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     bool cpu_offload_params, bool zero_init, double buffer_factor, double *cpu, double *gpu)
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

void mt_plan_table(const struct mt_plan_config *c, const struct mt_plan_scale *s, double table[4][3])
{
	for (int z = 0; z <= 3; z++)
		for (int r = 0; r < 3; r++) {
			struct mt_plan_config x = *c;
			struct mt_plan p;

			x.zero = z;
			x.recompute = (enum mt_recompute)r;
			table[z][r] = INFINITY;
			if (!mt_plan_check(&x)) {
				mt_plan_compute(&x, s, &p);
				table[z][r] = p.total;
			}
		}
}

double mt_plan_params_on_gpu(const struct mt_plan_config *c, enum mt_component j)
{
	uint64_t mp = c->tp * c->pp, dp = c->nodes * c->gpus_per_node / mp;
	int stage = j == MT_PLAN_PARAMS ? 3 : j == MT_PLAN_GRADS ? 2 : 1;

	return shard((double)c->params / (double)mp, c->zero >= stage ? dp : 1);
}

void mt_plan_describe(const struct mt_plan_config *c, char *buf, size_t len)
{
	static const char *const optimizers[] = {"Adam/AdamW", "8-bit Adam", "SGD with momentum", "no optimizer"};
	uint64_t gpus = c->nodes * c->gpus_per_node;

	char batch[64] = "";

	if (c->layers)
		snprintf(batch, sizeof batch, ", micro-batch %llu, recompute %s", (unsigned long long)c->micro_batch,
			 mt_plan_recompute_names[c->recompute]);
	snprintf(buf, len, "%s, %s, ZeRO-%d, %llu GPUs (dp %llu x tp %llu x pp %llu%s)%s%s%s",
		 c->precision == MT_FP32 ? "fp32" : "16-bit with fp32 master weights", optimizers[c->optimizer],
		 c->zero, (unsigned long long)gpus, (unsigned long long)(gpus / (c->tp * c->pp)),
		 (unsigned long long)c->tp, (unsigned long long)c->pp, c->sp ? ", sp" : "", batch,
		 c->offload_optimizer ? ", optimizer offloaded" : "", c->offload_params ? ", params offloaded" : "");
}

/* Megatron's sums, in its order of operations so the rounding is the same. */
void mt_plan_megatron(const struct mt_plan_config *c, uint64_t *padded_vocab, double *weights, double *activations)
{
	uint64_t multiple = 128 * c->tp; /* --make-vocab-size-divisible-by 128, times tp */
	double h = (double)c->hidden, f = (double)c->ffn, a = (double)c->heads, g = (double)c->query_groups;
	double L = (double)c->layers, s = (double)c->seq, b = (double)c->micro_batch;
	double tp = (double)c->tp, pp = (double)c->pp, dp = (double)(c->nodes * c->gpus_per_node / (c->tp * c->pp));
	double norm = c->rmsnorm ? 1 : 2, gated = c->swiglu ? 3.0 / 2 : 1, v, shard, act;

	*padded_vocab = (c->vocab + multiple - 1) / multiple * multiple;
	v = (double)*padded_vocab;
	/* weights and optimizer: 18 bytes per parameter (bf16 values, fp32 main gradients,
	 * main weights and Adam moments), 6 + 12/dp with the distributed optimizer, on the
	 * most loaded shard: 1/pp of the layers and the embedding, over tp */
	double attention = 2 * h * h * ((1 + (g / a)) * 1.0);
	double layer = 2 * h * ((f * gated) + norm) + attention;
	double block = layer * L + norm * h, embedding = h * v;
	shard = ((block / pp) + 0 + embedding) / tp;
	if (c->untied && c->pp == 1)
		shard += embedding / tp;
	*weights = shard * (c->zero >= 1 ? 6 + (12 / dp) : 18);
	/* activations: Korthikanti's selective-recomputation rows (no attention scores) */
	if (c->sp && c->recompute == MT_RECOMPUTE_SELECTIVE) {
		act = (s * b * h) * (18 + (4 * (f / h)));
		act *= L;
	} else {
		act = s * b * h * (10 + (24 / tp));
		act = act * L;
	}
	act += 8 * s * b * pp; /* input ids */
	act += s * b * h * pp; /* embedding dropout mask */
	if (c->vpp > 1)
		act *= 1 + ((pp - 1) / (pp * (double)c->vpp));
	else if (c->pp > 1 && c->micro_batches)
		act *= fmin(1, (double)c->micro_batches / pp);
	if (c->sp && c->recompute == MT_RECOMPUTE_SELECTIVE) {
		if (c->pp == 1)
			act += s * b * h * 4 * (1 + (v / h));
		act /= tp;
	} else {
		if (c->pp == 1)
			act += ((s * b * v) / tp + s * b * h) * 2;
		act *= 1.05;
	}
	*activations = act;
}
