/* Capacity planning arithmetic (plan.h). Bytes throughout, as doubles: counts reach
 * 1e12 parameters and the estimators' own arithmetic is floating point. The default
 * model (a GPT decoder with Megatron's kernels, as tools/simtrain issues it) keeps its
 * formulas exactly; every other feature adds terms that are zero when it is off. */
#include "core/plan.h"

#include "core/alloc.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static double max2(double a, double b)
{
	return a > b ? a : b;
}

const char *const mt_plan_recompute_names[5] = {"none", "selective", "full", "op", NULL};
const char *const mt_plan_offload_names[4] = {"none", "cpu", "nvme", NULL};
const char *const mt_plan_precision_names[8] = {"fp32",	    "bf16",	 "fp16",      "amp-bf16",
						"amp-fp16", "bf16-pure", "fp16-pure", NULL};
const enum mt_precision mt_plan_precision_values[7] = {MT_FP32,	 MT_MIXED16, MT_MIXED16, MT_AMP16,
						       MT_AMP16, MT_PURE16,  MT_PURE16};
const char *const mt_plan_optimizer_names[9] = {"adam",	     "adamw", "adam8bit",	"sgd", "none",
						"adafactor", "lion",  "sgd-nomomentum", NULL};
const enum mt_optimizer mt_plan_optimizer_values[8] = {MT_ADAM,		MT_ADAM,      MT_ADAM8BIT, MT_SGD_MOMENTUM,
						       MT_NO_OPTIMIZER, MT_ADAFACTOR, MT_LION,	   MT_SGD};
const char *const mt_plan_bias_names[5] = {"all", "qkv", "none", "mlp", NULL};
const char *const mt_plan_attention_names[3] = {"eager", "flash", NULL};
const char *const mt_plan_impl_names[4] = {"megatron", "pytorch", "litgpt", NULL};
const char *const mt_plan_quant_names[5] = {"none", "int8", "nf4", "nf4-dq", NULL};
const char *const mt_plan_step_names[5] = {"auto", "foreach", "fused", "for-loop", NULL};
const char *const mt_plan_component_names[MT_PLAN_COMPONENTS] = {"params", "grads", "optimizer", "activations",
								 "temporaries"};

/* ---- the model's shape ---- */

/* One attention block's widths: queries, keys, values, the output projection's input. */
struct widths {
	double q, k, v, o, latent;
};

static bool is_mla(const struct mt_plan_config *c)
{
	return c->kv_lora_rank > 0;
}

/* PyTorch's autograd keeps what the layers save: Hugging Face's modules or LitGPT's */
static bool torch_modules(const struct mt_plan_config *c)
{
	return c->impl != MT_IMPL_MEGATRON;
}

/* One matrix makes q, k and v (GPT-2's c_attn, GPT-NeoX's query_key_value): where biases
 * are on every linear layer, unless the model says three do (BERT, OPT); or where it
 * says one does (Phi-3's qkv_proj); in every LitGPT model (its attention's `attn`) */
static bool fused_qkv(const struct mt_plan_config *c)
{
	return !is_mla(c) &&
	       (c->fused_proj || c->impl == MT_IMPL_LITGPT || (c->bias == MT_BIAS_ALL && !c->separate_qkv));
}

/* One matrix makes a gated MLP's gate and up (Phi-3's gate_up_proj) */
static bool fused_gate_up(const struct mt_plan_config *c)
{
	return c->fused_proj && c->swiglu;
}

static struct widths widths(const struct mt_plan_config *c)
{
	double a = (double)c->heads, d = (double)c->head_dim;

	if (is_mla(c)) {
		double r = (double)c->rope_head_dim, dv = (double)c->v_head_dim;
		return (struct widths){a * (d + r), a * (d + r), a * dv, a * dv,
				       (double)c->kv_lora_rank + (double)c->q_lora_rank};
	}
	return (struct widths){a * d, (double)c->query_groups * d, (double)c->query_groups * d, a * d, 0};
}

/* The layers LoRA's adapters train (MT_LORA_*): q and v unless said */
static unsigned lora_targets(const struct mt_plan_config *c)
{
	return c->lora_modules ? c->lora_modules : MT_LORA_Q | MT_LORA_V;
}

/* LitGPT's one adapter on its fused q, k, v: A makes r values for each of the matrices it
 * adapts, and unless it adapts all three, zero_pad's index_copy keeps B's output (their
 * widths) for backward */
static void litgpt_qkv(const struct mt_plan_config *c, double *a_out, double *padded)
{
	unsigned m = lora_targets(c);
	struct widths w = widths(c);
	int n = !!(m & MT_LORA_Q) + !!(m & MT_LORA_K) + !!(m & MT_LORA_V);

	*a_out = (double)c->lora_rank * (double)n;
	*padded = n < 3 ? (m & MT_LORA_Q ? w.q : 0) + (m & MT_LORA_K ? w.k : 0) + (m & MT_LORA_V ? w.v : 0) : 0;
}

/* learned position-embedding rows */
static double positions(const struct mt_plan_config *c)
{
	return c->rope ? 0 : (double)(c->positions ? c->positions : c->seq);
}

/* A norm's parameters per value: LayerNorm's weight and bias, RMSNorm's weight */
static double norm_size(const struct mt_plan_config *c)
{
	return c->fixed_norms ? 0 : c->rmsnorm || c->norm_no_bias ? 1 : 2;
}

static double layer_norms(const struct mt_plan_config *c)
{
	return c->norms ? (double)c->norms : 2;
}

static bool mlp_bias(const struct mt_plan_config *c)
{
	return c->bias == MT_BIAS_ALL || c->bias == MT_BIAS_MLP;
}

static bool qkv_bias(const struct mt_plan_config *c)
{
	return c->bias == MT_BIAS_ALL || c->bias == MT_BIAS_QKV;
}

/* The token embedding's (and a tied output layer's) width: the hidden size, or OPT-350m's
 * narrower word_embed_proj_dim, projected in and out of the hidden size */
static double vocab_width(const struct mt_plan_config *c)
{
	return (double)(c->embed_dim ? c->embed_dim : c->hidden);
}

/* The embedding tables, the output layer with them where untied, and the projections a
 * narrower embedding needs (two matrices, no bias) */
static double tables(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, w = vocab_width(c);

	return (double)c->vocab * w * (c->untied ? 2 : 1) + (w != h ? 2 * w * h : 0);
}

/* An MLP of width f: two or three matrices, with biases when all linear layers have them */
static double mlp_params(const struct mt_plan_config *c, double f)
{
	double h = (double)c->hidden, gated = c->swiglu ? 3 : 2;

	return gated * h * f + (mlp_bias(c) ? (c->swiglu ? 2 : 1) * f + h : 0);
}

static double attention_params(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, a = (double)c->heads, ns = norm_size(c);
	struct widths w = widths(c);

	if (is_mla(c)) {
		double d = (double)c->head_dim, r = (double)c->rope_head_dim, dv = (double)c->v_head_dim;
		double ql = (double)c->q_lora_rank, kvl = (double)c->kv_lora_rank;
		double q = ql > 0 ? ql * (h + a * (d + r) + ns) : h * a * (d + r);
		return q + kvl * (h + a * (d + dv) + ns) + h * r + a * dv * h;
	}
	return h * w.q + 2 * h * w.k + w.o * h + (qkv_bias(c) ? w.q + 2 * w.k : 0) + (c->bias == MT_BIAS_ALL ? h : 0) +
	       (c->qk_norm ? (c->qk_norm_heads ? w.q + w.k : 2 * (double)c->head_dim) : 0);
}

void mt_plan_count(const struct mt_plan_config *c, struct mt_plan_count *n)
{
	double h = (double)c->hidden, v = (double)c->vocab, e = (double)c->experts;
	double attn = attention_params(c), norms = layer_norms(c) * norm_size(c) * h;
	double layers = (double)c->layers, moe = c->experts ? layers - (double)c->dense_layers : 0;
	double routed = e * mlp_params(c, (double)c->moe_ffn),
	       active = (double)c->topk * mlp_params(c, (double)c->moe_ffn);
	double other = (c->shared_ffn ? mlp_params(c, (double)c->shared_ffn) : 0) + (c->experts ? h * e : 0) +
		       (c->experts && c->bias == MT_BIAS_ALL ? e : 0) + (c->shared_gate ? h : 0);
	double mtp = (double)c->mtp_layers;

	*n = (struct mt_plan_count){0};
	n->dense_layer = attn + norms + mlp_params(c, (double)c->ffn);
	n->moe_layer = attn + norms + routed + other;
	n->moe_layer_active = attn + norms + active + other;
	/* a classifier has a bias under an encoder's pooler (BERT's, RoBERTa's heads), none on
	 * a decoder (transformers' score layer for Llama, GPT-2, OPT, GPT-NeoX) */
	n->embedding = tables(c) + positions(c) * h +
		       norm_size(c) * h * ((c->embed_norm ? 1 : 0) + (c->post_norm ? 0 : 1)) +
		       (c->pooler ? h * h + h : 0) + (double)c->classifier * (h + (c->pooler ? 1 : 0)) +
		       (c->head_bias && !c->classifier ? v : 0);
	/* a multi-token prediction layer is a MoE layer when the last layer is (Megatron) */
	n->total = (layers - moe) * n->dense_layer + moe * n->moe_layer + n->embedding +
		   mtp * (moe > 0 ? n->moe_layer : n->dense_layer);
	n->active = (layers - moe) * n->dense_layer + moe * n->moe_layer_active + n->embedding +
		    mtp * (moe > 0 ? n->moe_layer_active : n->dense_layer);
	n->expert = routed * (moe + (moe > 0 ? mtp : 0));
}

/* The largest single module, as DeepSpeed's _all_live finds it (a module's own
 * parameters): the embedding or output layer, a learned position table, the fused QKV
 * or one projection, the MLP's widest matrix, one expert's, the pooler. */
static double largest_module(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, biased = mlp_bias(c) ? 1 : 0;
	struct widths w = widths(c);
	double m = (double)c->vocab * vocab_width(c);

	m = max2(m, positions(c) * h);
	if (fused_qkv(c))
		m = max2(m, h * (w.q + 2 * w.k) + w.q + 2 * w.k);
	else
		m = max2(m, h * w.q + (qkv_bias(c) ? w.q : 0));
	m = max2(m, w.o * h + (c->bias == MT_BIAS_ALL ? h : 0));
	if (is_mla(c))
		m = max2(m, (double)c->kv_lora_rank * (double)c->heads * ((double)c->head_dim + (double)c->v_head_dim));
	m = max2(m, (fused_gate_up(c) ? 2 : 1) * (h * (double)c->ffn + biased * (double)c->ffn));
	if (c->experts)
		m = max2(m, h * (double)c->moe_ffn + biased * (double)c->moe_ffn);
	if (c->shared_ffn)
		m = max2(m, h * (double)c->shared_ffn + biased * (double)c->shared_ffn);
	if (c->pooler)
		m = max2(m, h * h + h);
	return m;
}

/* The one adapter on a fused q, k, v (its A's and B's values): PEFT's on the whole matrix,
 * LitGPT's LoRAQKVLinear (litgpt_qkv); false where there is none */
static bool qkv_adapter(const struct mt_plan_config *c, double *a, double *b)
{
	double r = (double)c->lora_rank, h = (double)c->hidden, a_out, padded;
	struct widths w = widths(c);

	if (!fused_qkv(c) || !(lora_targets(c) & (MT_LORA_Q | MT_LORA_K | MT_LORA_V)))
		return false;
	litgpt_qkv(c, &a_out, &padded);
	*a = (c->impl == MT_IMPL_LITGPT ? a_out : r) * h;
	*b = r * (c->impl == MT_IMPL_LITGPT && padded ? padded : w.q + w.k + w.v);
	return true;
}

/* The adapters of a MoE layer's MLPs: PEFT wraps every expert's matrices (Mixtral's w1,
 * w2, w3, Qwen-MoE's and DeepSeek's gate/up/down_proj) and the shared experts', not the
 * router */
static double lora_moe_mlp(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, r = (double)c->lora_rank, mats = c->swiglu ? 3 : 2;

	return (double)c->experts * mats * r * (h + (double)c->moe_ffn) +
	       (c->shared_ffn ? mats * r * (h + (double)c->shared_ffn) : 0);
}

/* LoRA adapters: rank x (in + out) per adapted matrix, per layer */
static double lora_params(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, r = (double)c->lora_rank, f = (double)c->ffn, per = 0, mlp = 0, a, b;
	double layers = (double)c->layers, dense = c->experts ? (double)c->dense_layers : layers;
	unsigned m = lora_targets(c);
	struct widths w = widths(c);

	if (!c->lora_rank)
		return 0;
	if (qkv_adapter(c, &a, &b)) /* one module: one adapter */
		per += a + b;
	if (!fused_qkv(c) && m & MT_LORA_Q)
		per += r * (h + w.q);
	if (!fused_qkv(c) && m & MT_LORA_K)
		per += r * (h + w.k);
	if (!fused_qkv(c) && m & MT_LORA_V)
		per += r * (h + w.v);
	if (m & MT_LORA_O)
		per += r * (w.o + h);
	if (m & MT_LORA_MLP && fused_gate_up(c))
		mlp = dense * r * (h + 2 * f + f + h) + (layers - dense) * lora_moe_mlp(c);
	else if (m & MT_LORA_MLP)
		mlp = dense * (c->swiglu ? 3 : 2) * r * (h + f) + (layers - dense) * lora_moe_mlp(c);
	/* the output layer's adapter (PEFT's target_modules "lm_head"): one, not per layer */
	return per * layers + mlp + (m & MT_LORA_HEAD && !c->classifier ? r * (h + (double)c->vocab) : 0);
}

const char *mt_plan_check(struct mt_plan_config *c)
{
	uint64_t gpus, mp, stages, groups, experts_group;

	/* LitGPT's modules have no dropout (model.py: sdpa's dropout_p=0.0), only LoRA's */
	if (c->impl == MT_IMPL_LITGPT)
		c->no_dropout = c->no_attention_dropout = true;
	if (!c->tp)
		c->tp = 1;
	if (!c->pp)
		c->pp = 1;
	if (!c->vpp)
		c->vpp = 1;
	if (!c->cp)
		c->cp = 1;
	if (!c->ep)
		c->ep = 1;
	if (!c->etp)
		c->etp = c->tp;
	if (!c->reduce_bucket)
		c->reduce_bucket = 500000000;
	if (!(c->buffer_factor > 0))
		c->buffer_factor = 1.5;
	if (!c->nodes || !c->gpus_per_node)
		return "there must be at least one node and one GPU per node";
	/* counts come from command lines and config files: products past 64 bits are refused, not wrapped */
	if (__builtin_mul_overflow(c->nodes, c->gpus_per_node, &gpus) || __builtin_mul_overflow(c->tp, c->pp, &mp) ||
	    __builtin_mul_overflow(c->pp, c->vpp, &stages) || __builtin_mul_overflow(mp, c->cp, &groups) ||
	    __builtin_mul_overflow(c->etp, c->ep, &experts_group) ||
	    __builtin_mul_overflow(experts_group, c->pp, &experts_group))
		return "the GPU counts are too large";
	if (c->zero < 0 || c->zero > 3)
		return "--zero takes a stage from 0 to 3";
	if (gpus % groups)
		return "the GPUs must divide into tensor-parallel x pipeline-parallel x context-parallel groups "
		       "(GPUs % (tp*pp*cp) != 0)";
	if (gpus % experts_group)
		return "the GPUs must divide into expert groups (GPUs % (etp*ep*pp) != 0)";
	if (c->ep > 1 && !c->experts)
		return "expert parallelism needs experts (--experts)";
	if (c->offload_params && c->zero != 3 && !c->fsdp)
		return "parameter offload needs ZeRO stage 3, or FSDP";
	if (c->fsdp && (c->offload_params == MT_OFFLOAD_NVME || c->offload_optimizer == MT_OFFLOAD_NVME))
		return "FSDP offloads to the CPU, not to NVMe";
	if (c->fsdp && c->offload_params) /* FSDP's CPU offload: the optimizer steps there */
		c->offload_optimizer = MT_OFFLOAD_CPU;
	/* DeepSpeed's engine.py builds its ZeRO optimizer (what moves states and gradients to
	 * the host) at stages 1-3 only; at stage 0 its CPU Adam would keep them on the GPU */
	if (c->offload_optimizer && !c->zero && !c->fsdp)
		return "optimizer offload needs ZeRO stage 1, 2 or 3 (DeepSpeed does not offload at stage 0)";
	if (c->fsdp && c->zero)
		return "FSDP and ZeRO are two ways of sharding: give one (--fsdp, or --zero)";
	if (c->router_fp32 && (!c->experts || c->impl != MT_IMPL_MEGATRON))
		return "--router-fp32 is Megatron's MoE router: it needs --experts and --impl megatron";
	if (c->fsdp1 && !c->fsdp)
		return "--fsdp1 says which FSDP: it needs --fsdp";
	if (c->orig_params && (!c->fsdp1 || !c->lora_rank || c->quantize))
		return "--orig-params is FSDP1's use_orig_params with LoRA's adapters inside the blocks' units: it "
		       "needs --fsdp1 and --lora-rank, on a base that is not quantized";
	if (c->no_sync && (!c->fsdp || c->micro_batches < 2))
		return "--no-sync is FSDP's gradient accumulation: it needs --fsdp and --micro-batches of 2 or more";
	if (c->paged && ((c->optimizer != MT_ADAM && c->optimizer != MT_ADAM8BIT && c->optimizer != MT_LION) ||
			 c->offload_optimizer))
		return "a paged optimizer (--paged) is bitsandbytes' Adam, AdamW, 8-bit Adam or Lion, on the GPU "
		       "(no --offload-optimizer)";
	if (c->sp && c->tp < 2)
		return "sequence parallelism needs a tensor-parallel size above 1";
	if (c->vpp > 1 && c->pp < 2)
		return "virtual pipeline stages need a pipeline-parallel size above 1";
	if (!(c->overhead >= 0))
		return "the framework overhead cannot be negative";
	if (c->quantize && !c->lora_rank)
		return "a quantized base is frozen: it needs LoRA adapters (--lora-rank)";
	if (!(c->lora_dropout >= 0 && c->lora_dropout < 1) || (c->lora_dropout > 0 && !c->lora_rank))
		return "--lora-dropout is a probability from 0 to below 1, for LoRA's adapters (--lora-rank)";
	if (c->lora_fp32 && !c->lora_rank)
		return "--lora-fp32 is for LoRA's adapters (--lora-rank)";
	if (c->torchao && c->quantize != MT_QUANT_NF4 && c->quantize != MT_QUANT_NF4_DQ)
		return "--torchao is torchao's NF4: it needs --quantize nf4-dq (or nf4)";
	if (c->layers) {
		if (!c->hidden || !c->heads || !c->vocab || !c->seq != !c->micro_batch)
			return "an architecture needs --hidden, --heads and --vocab besides --layers, and --seq with "
			       "--micro-batch (neither: model states only)";
		if (c->rope && c->positions)
			return "rotary positions (--rope) have no learned position embeddings (--positions)";
		if (c->classifier && c->untied)
			return "a classification head (--classifier) has no output layer to untie (--untied)";
		if (c->loss_chunk && (c->classifier || !torch_modules(c)))
			return "a chunked loss (--loss-chunk) is LitGPT's: PyTorch modules (--impl pytorch or "
			       "litgpt) with an output layer (no --classifier)";
		if (c->reentrant && c->recompute != MT_RECOMPUTE_FULL)
			return "--reentrant is a form of full recomputation: give --recompute full";
		if (c->rmsnorm_16bit && !torch_modules(c))
			return "--rmsnorm-16bit describes PyTorch modules' RMSNorm (--impl pytorch or litgpt)";
		if (c->transformers && (c->transformers < 446 || c->impl != MT_IMPL_PYTORCH))
			return "--transformers is Hugging Face's release, from 4.46 (each model made its own loss "
			       "before), for its modules (--impl pytorch)";
		if (!c->head_dim) {
			if (c->hidden % c->heads)
				return "the heads must divide the hidden size (or give --head-dim)";
			c->head_dim = c->hidden / c->heads;
		}
		if (!c->ffn) /* Megatron's default: 4h, or 8h/3 rounded down to 64 when gated */
			c->ffn = c->swiglu ? (uint64_t)((double)(4 * c->hidden * 2) / 3 / 64) * 64 : 4 * c->hidden;
		if (!c->ffn)
			return "the MLP is empty (--ffn 0)";
		if (!c->query_groups)
			c->query_groups = c->heads;
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
		if (c->cp > 1 && c->seq % (2 * c->cp))
			return "with context parallelism the sequence must be a multiple of 2 x cp";
		if (c->fused_proj && (is_mla(c) || c->separate_qkv || c->bias != MT_BIAS_NONE))
			return "fused projections (--fused-proj, Phi-3's) come without biases, separate q, k, v or "
			       "multi-latent attention";
		if (is_mla(c) && c->query_groups != c->heads)
			return "multi-latent attention has no query groups (--query-groups)";
		if (!is_mla(c) && (c->q_lora_rank || c->rope_head_dim || c->v_head_dim))
			return "--q-lora-rank, --rope-head-dim and --v-head-dim describe multi-latent attention: give "
			       "--kv-lora-rank";
		if (is_mla(c) && !c->v_head_dim)
			c->v_head_dim = c->head_dim;
		if (c->experts) {
			if (!c->topk)
				c->topk = 2;
			if (!c->moe_ffn)
				c->moe_ffn = c->ffn;
			if (c->topk > c->experts)
				return "each token cannot go to more experts than there are (--topk > --experts)";
			if (c->experts % c->ep)
				return "the expert-parallel size must divide the experts";
			if (c->dense_layers >= c->layers)
				return "with experts, the dense layers (--dense-layers) must be fewer than the layers";
		} else if (c->topk || c->moe_ffn || c->shared_ffn || c->dense_layers || c->shared_gate) {
			return "--topk, --moe-ffn, --shared-ffn, --shared-gate and --dense-layers describe experts: "
			       "give "
			       "--experts";
		}
		struct mt_plan_count n;
		mt_plan_count(c, &n);
		if (!c->params)
			c->params = (uint64_t)n.total;
		c->expert_params = (uint64_t)n.expert;
		c->layer_params = (uint64_t)(n.moe_layer > 0 && c->experts ? n.moe_layer : n.dense_layer);
		if (!c->largest_layer)
			c->largest_layer = (uint64_t)largest_module(c);
	} else if (c->recompute != MT_RECOMPUTE_NONE || c->micro_batch) {
		return "activations need the architecture (--layers, --hidden, --heads, --vocab, --seq, --micro-batch)";
	} else if (c->lora_rank || c->experts) {
		return "LoRA adapters and experts need the architecture (--layers ...)";
	}
	if (!c->params)
		return "give the model: --params N, or its architecture (--layers ...)";
	if (c->largest_layer > c->params)
		return "the largest layer cannot hold more parameters than the model";
	c->trainable = c->lora_rank ? (uint64_t)lora_params(c) : c->params;
	return NULL;
}

/* ---- bytes per parameter ---- */

/* activation and compute-copy element bytes */
static double value_bytes(const struct mt_plan_config *c)
{
	return c->precision == MT_FP32 ? 4 : 2;
}

/* a trainable parameter as stored: FSDP and autocast keep the original fp32, as PEFT
 * keeps its adapters (--lora-fp32) */
static double stored_bytes(const struct mt_plan_config *c)
{
	if (c->precision == MT_FP32 || c->precision == MT_AMP16 || (c->fsdp && c->precision == MT_MIXED16) ||
	    c->lora_fp32)
		return 4;
	return 2;
}

static double grad_bytes(const struct mt_plan_config *c)
{
	if (c->precision == MT_FP32 || c->precision == MT_AMP16 || c->grad_fp32 ||
	    (c->fsdp && c->precision == MT_MIXED16) || c->lora_fp32)
		return 4;
	return 2;
}

/* Adafactor's factored second moment per parameter: rows + columns of each matrix, the
 * whole of each vector (norms, biases); from the architecture, or about none without one */
static double adafactor_per_param(const struct mt_plan_config *c)
{
	double h = (double)c->hidden, f = (double)c->ffn, L = (double)c->layers, v = (double)c->vocab;
	double n_mlp = c->swiglu ? 3 : 2, tables = c->untied ? 2 : 1, pos = positions(c);
	struct widths w = widths(c);

	if (!c->layers)
		return 0;
	double elems = h * (w.q + w.k + w.v) + w.o * h + n_mlp * h * f;
	double cells = (h + w.q) + (h + w.k) + (h + w.v) + (w.o + h) + n_mlp * (h + f);
	double matrices = L * elems + tables * v * h + pos * h;
	double vectors = max2(0, (double)c->params - matrices);
	return (L * cells + tables * (v + h) + (pos ? pos + h : 0) + vectors) / (double)c->params;
}

/* optimizer state bytes per trainable parameter: moments, and an fp32 master copy when
 * the values are 16-bit and the optimizer keeps its own (DeepSpeed, Megatron) */
/* One value of an optimizer state: fp32, or 16-bit in pure 16-bit training */
static double state_bytes(const struct mt_plan_config *c)
{
	return c->precision == MT_PURE16 && !c->lora_fp32 ? 2 : 4;
}

static double optimizer_bytes(const struct mt_plan_config *c)
{
	double master = c->precision == MT_MIXED16 && !c->fsdp && c->optimizer != MT_NO_OPTIMIZER ? 4 : 0;
	double state = state_bytes(c);

	switch (c->optimizer) {
	case MT_ADAM:
		return 2 * state + master;
	case MT_ADAM8BIT: /* bitsandbytes: one byte per moment and an fp32 absmax per 256-value block */
		return 2 * (1 + 4.0 / 256) + master;
	case MT_SGD_MOMENTUM:
	case MT_LION:
		return state + master;
	case MT_ADAFACTOR:
		return 4 * adafactor_per_param(c) + master;
	case MT_SGD: /* torch.optim.SGD with momentum 0 keeps no momentum_buffer */
		return master;
	default:
		return 0;
	}
}

/* A frozen value not quantized (a LoRA base's, or its tables under quantization) */
static double unquantized_bytes(const struct mt_plan_config *c)
{
	return c->precision == MT_FP32 || c->precision == MT_AMP16 ? 4 : 2;
}

/* a frozen base parameter (LoRA): linear weights quantized, the rest at the value's bytes */
static double frozen_bytes(const struct mt_plan_config *c)
{
	switch (c->quantize) {
	case MT_QUANT_INT8:
		return 1;
	case MT_QUANT_NF4: /* 4 bits and an fp32 absmax per 64 values */
		return 0.5 + 4.0 / 64;
	case MT_QUANT_NF4_DQ: /* the absmax quantized to 8 bits per 64, with an fp32 scale per 256 blocks */
		return 0.5 + 1.0 / 64 + 4.0 / (64 * 256);
	default:
		return unquantized_bytes(c);
	}
}

/* ---- activations ---- */

/* Bytes one layer keeps per token for backward under recomputation rc, split into what
 * tensor parallelism divides (tp_part), what only sequence parallelism divides (rep),
 * and the attention scores (per token, over the sequence). */
struct kept {
	double rep, tp_part, scores, experts;
	double routed; /* the experts' input, gathered over the expert tensor-parallel ranks */
};

/* Copies of a layer's two inputs its linear layers keep, the attention's and the MLP's:
 * one each, but autocast casts an fp32 input again for every matrix that reads it: q, k
 * and v (unless one matrix makes them), a gated MLP's gate and up, in PyTorch's modules */
/* One norm feeds attention and MLP in parallel: the MLP's input is the attention's */
static bool shared_input(const struct mt_plan_config *c)
{
	return c->parallel && layer_norms(c) < 2;
}

static void input_copies(const struct mt_plan_config *c, double *attn, double *mlp)
{
	bool cast = c->precision == MT_AMP16 && torch_modules(c);

	*attn = cast && !fused_qkv(c) ? (is_mla(c) ? 2 : 3) : 1;
	*mlp = cast && c->swiglu && !c->experts && !fused_gate_up(c) ? 2 : 1;
}

/* A layer's linear layers by their input: the attention's (q, k, v), the output
 * projection's, the MLP's first matrices' and its last one's; and what LoRA's adapters
 * keep of their own */
enum { IN_ATTN, IN_O, IN_MLP, IN_DOWN, IN_ADAPTERS };

/* LoRA's adapters on an input: one per adapted matrix, one for a fused q, k and v */
static int adapters_on(const struct mt_plan_config *c, int in)
{
	unsigned m = lora_targets(c);
	int qkv = !!(m & MT_LORA_Q) + !!(m & MT_LORA_K) + !!(m & MT_LORA_V);
	bool mlp = m & MT_LORA_MLP && !c->experts;

	if (!c->lora_rank)
		return 0;
	if (in == IN_ATTN)
		return fused_qkv(c) ? qkv > 0 : qkv;
	if (in == IN_O)
		return !!(m & MT_LORA_O);
	if (in == IN_MLP)
		return !mlp ? 0 : c->swiglu && !fused_gate_up(c) ? 2 : 1;
	return in == IN_DOWN && mlp;
}

/* What a layer's linear layers keep of their inputs for backward, tensor by tensor (bytes
 * per token, before tp and sp). A trained weight's matmul keeps its input (autocast's copy
 * for each matrix reading it: input_copies). PyTorch's with a frozen weight keeps none: mm
 * saves its input only for the weight's gradient. bitsandbytes' quantized one keeps it
 * (MatMul4Bit's ctx.tensors = (A, B), to release 0.43.1); torchao's (LinearNF4) keeps
 * only its 4-bit weight. A LoRA adapter, lora_B(lora_A(dropout(x))) in PEFT and in
 * LitGPT, keeps x, one tensor for all its readers, or with dropout (or autocast's cast)
 * its own copy of x and the mask; and A's r values for B. Megatron's modules have no LoRA: their frozen layers are
 * planned keeping their inputs, as trained ones. */
static size_t linear_inputs(const struct mt_plan_config *c, int in, double *n, size_t max)
{
	double e = value_bytes(c), h = (double)c->hidden, r = (double)c->lora_rank, attn_in, mlp_in;
	struct widths w = widths(c);
	double width = in == IN_ATTN || in == IN_MLP ? h : in == IN_O ? w.o : (double)c->ffn;
	bool trained = !c->lora_rank || !torch_modules(c), keeps = trained || (c->quantize && !c->torchao);
	/* each adapter's own copy of x: dropped, cast by autocast or to the adapters' fp32 */
	bool own = c->lora_dropout > 0 || c->precision == MT_AMP16 || c->lora_fp32;
	double ea = c->lora_fp32 ? 4 : e; /* an adapter's values */
	int adapters = adapters_on(c, in), copies;
	size_t k = 0;

	if (in == IN_ADAPTERS) {
		double a_out, padded;
		litgpt_qkv(c, &a_out, &padded);
		for (int i = IN_ATTN; i <= IN_DOWN; i++)
			for (int j = 0; j < adapters_on(c, i) && k < max; j++)
				n[k++] = ea * (i == IN_ATTN && c->impl == MT_IMPL_LITGPT ? a_out : r);
		if (c->impl == MT_IMPL_LITGPT && adapters_on(c, IN_ATTN) && padded > 0 && k < max)
			n[k++] = e * padded;
		return k;
	}
	if (in == IN_DOWN && c->experts)
		return 0; /* the experts' (layer_kept) */
	input_copies(c, &attn_in, &mlp_in);
	keeps = keeps || (adapters && !own);
	if (in == IN_ATTN && shared_input(c))
		keeps = keeps || (adapters_on(c, IN_MLP) && !own);
	if (in == IN_MLP && shared_input(c))
		keeps = false; /* the attention's input serves */
	if (in == IN_O && c->attention == MT_ATTN_FLASH && torch_modules(c))
		keeps = false; /* sdpa's output, which the kernel keeps (layer_kept) */
	copies = !keeps ? 0 : !trained ? 1 : in == IN_ATTN ? (int)attn_in : in == IN_MLP ? (int)mlp_in : 1;
	for (int i = 0; i < copies && k < max; i++)
		n[k++] = (c->fp8 && in != IN_DOWN ? 1 : e) * width;
	for (int i = 0; own && i < adapters && k + 1 < max; i++) {
		n[k++] = ea * width;
		if (c->lora_dropout > 0)
			n[k++] = width; /* the mask */
	}
	return k;
}

static double input_bytes(const struct mt_plan_config *c, int in)
{
	double n[16], sum = 0;
	size_t k = linear_inputs(c, in, n, 16);

	for (size_t i = 0; i < k; i++)
		sum += n[i];
	return sum;
}

/* What a norm keeps of its input per value: the residual stream's type (fp32 under
 * autocast), and fp32 where an RMSNorm casts its input up (x.float(): Hugging Face's,
 * torchtitan's, LitGPT's since lit_gpt#606; its normed output, cast back, is the next
 * linear layer's input) */
static double norm_kept(const struct mt_plan_config *c)
{
	double erep = c->precision == MT_AMP16 ? 4 : value_bytes(c);

	return torch_modules(c) && c->rmsnorm && !c->rmsnorm_16bit ? max2(4, erep) : erep;
}

/* PyTorch 1.13 to 2.1 keep a mean's input for backward (mean.dim's derivative reads
 * self.sym_numel(), which autograd's codegen then saved as self: pytorch/pytorch#109876):
 * an RMSNorm's mean of squares keeps the squares, per value, in the type it computes in */
static double norm_squares(const struct mt_plan_config *c)
{
	if (!torch_modules(c) || !c->rmsnorm || !c->torch || c->torch < 113 || c->torch >= 202)
		return 0;
	return norm_kept(c);
}

/* The keys and values fused attention keeps per token: PyTorch's modules repeat those of
 * query groups (copies); where one matrix makes q, k and v and nothing copies v, sdpa
 * keeps v as a view of that matrix's output, so the whole output stays (GPT-NeoX,
 * Phi-3-mini) */
static void kept_kv(const struct mt_plan_config *c, double *kv, double *vv)
{
	struct widths w = widths(c);

	*kv = w.k, *vv = w.v;
	if (!torch_modules(c) || c->attention != MT_ATTN_FLASH || is_mla(c))
		return;
	*kv = *vv = w.q;
	if (fused_qkv(c) && c->query_groups == c->heads)
		*vv = w.q + w.k + w.v;
}

/* PyTorch before 1.11 keeps a softmax's input for backward too (its derivative named
 * `self`; pytorch/pytorch#65242 dropped it) */
static bool softmax_keeps_input(const struct mt_plan_config *c)
{
	return torch_modules(c) && c->torch && c->torch < 111;
}

/* What eager attention keeps per head and key of a token, in bytes, in the order it makes
 * them: before PyTorch 1.11 the softmax's input; the softmax's output (fp32 under
 * autocast or an upcast); the dropout's mask; the copy the product with V keeps
 * (autocast's or the upcast's 16-bit cast, or the dropout's output). Korthikanti's 5as/h
 * is 0 + 2 + 1 + 2. */
enum { SCORE_PARTS = 4 };
static double score_bytes(const struct mt_plan_config *c, double part[SCORE_PARTS])
{
	double e = value_bytes(c);
	bool amp = c->precision == MT_AMP16, up = c->upcast_softmax && e < 4;
	bool drop = !c->no_dropout && !c->no_attention_dropout;

	part[0] = softmax_keeps_input(c) ? (amp ? 4 : e) : 0;
	part[1] = amp || up ? 4 : e;
	part[2] = drop ? 1 : 0;
	part[3] = amp ? 2 : up || drop ? e : 0;
	return part[0] + part[1] + part[2] + part[3];
}

static struct kept layer_kept(const struct mt_plan_config *c, enum mt_recompute rc)
{
	double e = value_bytes(c), h = (double)c->hidden, f = (double)c->ffn, a = (double)c->heads;
	double s = (double)c->seq; /* the attention's keys: the whole sequence, also under cp */
	bool pt = torch_modules(c), drop = !c->no_dropout;
	struct widths w = widths(c);
	struct kept k = {0};
	bool moe = c->experts > 0;
	double mlp = c->swiglu ? (pt ? 4 : 3) : 2, kv, vv;

	if (rc == MT_RECOMPUTE_FULL) {
		k.rep = e * h; /* the layer's input only */
		return k;
	}
	if (rc == MT_RECOMPUTE_OP) {
		/* torchtitan's policy: the block's input, every odd matrix multiply's output (q, v or
		 * the fused qkv, the MLP's first, its last), the attention's output and log-sum-exp */
		double mm[7], n = 0, saved = 0;
		if (fused_qkv(c))
			mm[(int)n++] = w.q + 2 * w.k;
		else
			mm[(int)n++] = w.q, mm[(int)n++] = w.k, mm[(int)n++] = w.v;
		mm[(int)n++] = h;
		if (fused_gate_up(c))
			mm[(int)n++] = 2 * f;
		else
			mm[(int)n++] = f;
		if (c->swiglu && !fused_gate_up(c))
			mm[(int)n++] = f;
		mm[(int)n++] = h;
		for (int i = 0; i < (int)n; i += 2)
			saved += mm[i];
		k.rep = e * h;
		k.tp_part = e * (saved + w.o) + 4 * a;
		return k;
	}
	/* replicated across tensor-parallel ranks: the norms' inputs, the attention's and the
	 * MLP's inputs (linear_inputs), two dropout masks (Korthikanti et al.'s 10 sbh) */
	k.rep = layer_norms(c) * (norm_kept(c) + norm_squares(c)) * h + input_bytes(c, IN_ATTN) +
		input_bytes(c, IN_MLP) + (drop ? 2 * h : 0) + e * w.latent;
	/* split by tensor parallelism: Q and K, V (kept_kv), the projection's input: under
	 * PyTorch's sdpa the kernel's output, which its flash and memory-efficient kernels
	 * write as (batch, sequence, heads, head) and return transposed, so the
	 * .transpose(1, 2).contiguous() before the projection copies nothing; the MLP's values
	 * between its matrices, and its last one's input */
	kept_kv(c, &kv, &vv);
	k.tp_part = e * (w.q + kv + vv) + input_bytes(c, IN_O) + input_bytes(c, IN_ADAPTERS);
	if (c->attention == MT_ATTN_FLASH)
		k.tp_part += 4 * a + (pt ? e * w.o : 0); /* log-sum-exp in fp32 */
	if (!moe)
		k.tp_part += e * (mlp - 1) * f + input_bytes(c, IN_DOWN);
	if (c->attention == MT_ATTN_EAGER && rc == MT_RECOMPUTE_NONE) {
		double part[SCORE_PARTS];
		k.scores = a * s * score_bytes(c, part);
	}
	if (moe) {
		/* the routed tokens' copies, the experts' input, and their experts' MLPs (top-k
		 * of them), the shared experts, the router's fp32 probabilities. Megatron's
		 * dispatchers (moe/token_dispatcher.py) gather the tokens over the expert
		 * tensor-parallel ranks before the experts, which split their MLPs: each rank
		 * keeps every gathered token's copy (kept_bytes) */
		double topk = (double)c->topk, fe = (double)c->moe_ffn;
		k.experts = e * topk * mlp * fe;
		k.routed = e * topk * h;
		k.tp_part += e * mlp * (double)c->shared_ffn;
		k.rep += 4 * (double)c->experts;
	}
	return k;
}

/* tokens one GPU holds in a micro-batch: the sequence split over context-parallel ranks */
static double tokens(const struct mt_plan_config *c)
{
	return (double)c->seq / (double)c->cp * (double)c->micro_batch;
}

/* LitGPT's chunked loss (lit_gpt/model.py's lm_head_chunk_size, utils.py's
 * chunked_cross_entropy): the output layer makes the logits loss_chunk positions of
 * each sequence at a time, in the model's type; Lightning Fabric's wrapper hands the
 * model's outputs back in the default type (wrappers.py's forward: precision.
 * convert_output; HalfPrecision's converts them to torch.get_default_dtype(), fp32), so
 * the script's list holds each chunk in fp32 and each chunk's cross-entropy keeps its own
 * fp32 log-softmax. The part of a micro-batch's logits the largest chunk holds (1: the
 * whole, unchunked). */
static double loss_chunk_part(const struct mt_plan_config *c)
{
	return c->loss_chunk ? fmin(1, (double)c->loss_chunk * (double)c->cp / (double)c->seq) : 1;
}

static double kept_bytes(const struct mt_plan_config *c, enum mt_recompute rc)
{
	struct kept k = layer_kept(c, rc);
	double t = (double)c->tp, r = c->sp ? t : 1, etp = (double)c->etp;

	return tokens(c) * (k.rep / r + k.tp_part / t + k.scores / t + k.experts / etp + k.routed * etp / r);
}

double mt_plan_layer_activations(const struct mt_plan_config *c)
{
	return kept_bytes(c, c->recompute);
}

/* The largest weight: the embedding, the MLP's first matrix or QKV; the largest layer
 * when only counts are known. */
static double largest_tensor(const struct mt_plan_config *c)
{
	double h = (double)c->hidden;
	struct widths w = widths(c);

	if (!c->layers)
		return (double)c->largest_layer;
	return max2((double)c->vocab * vocab_width(c),
		    max2(h * (double)c->ffn * (c->swiglu ? 2 : 1), h * (w.q + w.k + w.v)));
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

enum { AT_LOSS, AT_BACKWARD, AT_LAST_LAYER, AT_FIRST_LAYER, AT_OPTIMIZER, AT_NEXT_FORWARD, AT_LOADING, MOMENTS };
static const char *const moment_names[MOMENTS] = {
    "the loss being made: the fp32 logits shifted into a copy beside the 16-bit ones",
    "backward start",
    "backward of the last layer",
    "backward of the first layer",
    "optimizer step",
    "the next micro-batch's forward ending, the last one's outputs still held",
    "loading the model: a weight's 16-bit copy as it is quantized"};

/* transformers 4.46 to 4.48's ForCausalLMLoss (loss/loss_utils.py) upcasts the logits
 * (logits.float()) and shifts them into a contiguous copy (logits[..., :-1, :]
 * .contiguous()) while the model's forward still holds its own: the log-softmax is made
 * beside three copies. 4.49 shifts the labels instead (transformers#35646). */
static bool shifts_logits(const struct mt_plan_config *c)
{
	return c->transformers >= 446 && c->transformers < 449 && !c->classifier && !c->loss_chunk && c->pp == 1;
}

/* Whether the setup has the moment: the next forward's only with --outputs-kept, the
 * loss's only where it shifts the logits */
static bool moment_on(const struct mt_plan_config *c, int at)
{
	return (at != AT_NEXT_FORWARD || c->outputs_kept) && (at != AT_LOSS || shifts_logits(c));
}

/* The moment's name: loading under FSDP1 is its wrap (fsdp1_unit) */
static const char *moment_name(const struct mt_plan_config *c, int at)
{
	if (at == AT_LOADING && c->fsdp1)
		return "wrapping the model in FSDP1: a unit moved to the GPU whole and flattened";
	return moment_names[at];
}

/* Loading a quantized base is a moment of its own: bitsandbytes' Params4bit._quantize
 * (and Int8Params') takes each weight to the GPU in 16 bits (self.data.contiguous().to
 * (device)) and quantizes it there, the copy freed to the cache after. Planned where each
 * GPU loads the whole base (not sharded by ZeRO-3 or FSDP, whose loading differs). */
static bool loads_quantized(const struct mt_plan_config *c)
{
	return c->quantize && c->layers && !c->fsdp && c->zero < 3;
}

/* The largest matrix bitsandbytes quantizes: q (or the fused q, k, v), or an MLP's
 * matrix (an expert's; the fused gate and up) */
static double largest_quantized(const struct mt_plan_config *c)
{
	struct widths w = widths(c);
	double f = (double)(c->experts ? c->moe_ffn : c->ffn) * (fused_gate_up(c) ? 2 : 1);

	return (double)c->hidden * max2(f, fused_qkv(c) ? w.q + w.k + w.v : max2(w.q, w.o));
}

/* This GPU's share of the model's state: the dense parameters over tp x pp, the
 * experts' over etp x ep x pp, each then sharded over its data-parallel group when
 * ZeRO/FSDP shards that state. */
struct share {
	uint64_t dp, edp; /* data-parallel groups: dense (with cp), experts */
	double dense, expert, trainable;
};

static struct share share(const struct mt_plan_config *c)
{
	uint64_t gpus = c->nodes * c->gpus_per_node;
	double exp = (double)c->expert_params, dense = (double)c->params - exp;
	struct share s = {.dp = gpus / (c->tp * c->pp), .edp = gpus / (c->etp * c->ep * c->pp)};

	s.dense = dense / (double)(c->tp * c->pp);
	s.expert = exp / (double)(c->etp * c->ep * c->pp);
	s.trainable = (double)c->trainable / (double)(c->tp * c->pp);
	return s;
}

/* FSDP1 under reentrant checkpointing (torch.utils.checkpoint's CheckpointFunction): each
 * layer's first forward runs without grad, so no pre-backward hook marks the unit before
 * for BACKWARD_PRE's prefetch (_get_handle_to_prefetch needs _needs_pre_backward_unshard):
 * one unit is gathered at a time */
static bool fsdp1_reentrant(const struct mt_plan_config *c, const struct share *sh)
{
	return c->fsdp1 && sh->dp > 1 && c->reentrant;
}

/* ... and a frozen unit's recomputing forward registers its reshard hook on the layer's
 * detached input (_register_post_backward_reshard_only_hook, register_multi_grad_hook):
 * the hook's closure holds the input's AccumulateGrad node, which holds the input, whose
 * hooks hold the closure, a cycle through C++ that Python's collector does not break, so
 * the input (the checkpoint's storage) and its .grad stay until backward's final callback
 * removes the hooks (_finalize_params). LoRA's blocks are frozen units unless their
 * adapters share the block's flat parameter (--orig-params) */
static bool holds_checkpoints(const struct mt_plan_config *c, const struct share *sh)
{
	return fsdp1_reentrant(c, sh) && c->lora_rank && !c->orig_params;
}

/* Parameters of one state this GPU holds: stage is the ZeRO stage that shards it (1
 * optimizer, 2 gradients, 3 parameters); FSDP shards all three. */
static double held(const struct mt_plan_config *c, const struct share *s, int stage, bool trainable)
{
	bool sharded = c->fsdp || c->zero >= stage;

	if (trainable && c->lora_rank)
		return shard(s->trainable, sharded ? s->dp : 1);
	return shard(s->dense, sharded ? s->dp : 1) + shard(s->expert, sharded ? s->edp : 1);
}

/* FSDP1's use_orig_params=True with LoRA's adapters inside the blocks' units: each block's
 * flat gradient covers its frozen values too (PyTorch's FSDP docs: "the gradient memory
 * usage will be higher than expected (namely, equivalent to not freezing those
 * parameters)"). The frozen values this GPU then holds gradients of. */
static double graded_frozen(const struct mt_plan_config *c, const struct share *s)
{
	if (!c->orig_params)
		return 0;
	return shard((double)c->layers * (double)c->layer_params / (double)(c->tp * c->pp), s->dp);
}

/* ZeRO-Offload reduces gradients bucket by bucket into the optimizer's memory: the GPU
 * keeps its gradient buffer, the host (or NVMe) an fp32 partition (DeepSpeed
 * stage_1_and_2.py, stage3.py) */
static bool offloads_grads(const struct mt_plan_config *c)
{
	return (c->fsdp ? c->offload_params : c->offload_optimizer) && c->optimizer != MT_NO_OPTIMIZER;
}

/* DeepSpeed's ZeRO steps PyTorch modules (Hugging Face's under DeepSpeed) its own way:
 * stage_1_and_2.py's step() flattens the partition's gradients (self.flatten, a new
 * tensor) and takes them to fp32 (.to: a second one, the first freed) as the fp32
 * master partition's .grad, and its FusedAdam steps in place; stage3.py's
 * _prepare_fp32_grad_for_sub_group does the same a sub-group at a time (sub_group_size,
 * 1e9 values by default). The elements of that flat gradient, 0 where this is not it. */
static double deepspeed_step(const struct mt_plan_config *c, const struct share *sh)
{
	double part = held(c, sh, 1, true);

	if (!torch_modules(c) || c->zero < 1 || c->fsdp || c->offload_optimizer || c->optimizer == MT_NO_OPTIMIZER)
		return 0;
	return c->zero >= 3 ? fmin(part, 1e9) : part;
}

/* Under DeepSpeed, torch.optim's Adam in its FusedAdam's place (torch_adam, or an
 * implementation named): it steps one flat tensor, a copy of its state at a time. */
static bool torch_step(const struct mt_plan_config *c)
{
	return c->optimizer_impl == MT_STEP_FOREACH || c->optimizer_impl == MT_STEP_LOOP;
}

static enum mt_step step_impl(const struct mt_plan_config *c)
{
	if (c->optimizer_impl != MT_STEP_AUTO)
		return c->optimizer_impl;
	if (c->paged) /* bitsandbytes' kernels update in place */
		return MT_STEP_FUSED;
	if (!torch_modules(c) || (c->zero >= 1 && !c->fsdp) || c->optimizer == MT_ADAM8BIT)
		return MT_STEP_LOOP;
	return c->torch && c->torch < 200 ? MT_STEP_LOOP : MT_STEP_FOREACH;
}

/* What torch.optim's step makes beside its state, tensor by tensor: foreach's copy of each
 * tensor's state (Adam's second moments, Lion's moments), all made before any goes; a
 * loop's fp32 update of one tensor at a time; nothing (fused, foreach's SGD). */
enum step_made { STEP_NOTHING, STEP_COPIES, STEP_UPDATES };

static enum step_made step_made(const struct mt_plan_config *c)
{
	switch (step_impl(c)) {
	case MT_STEP_FUSED:
		return STEP_NOTHING;
	case MT_STEP_FOREACH:
		if (c->optimizer == MT_ADAM || c->optimizer == MT_LION)
			return STEP_COPIES;
		if (c->optimizer == MT_SGD_MOMENTUM || c->optimizer == MT_SGD)
			return STEP_NOTHING;
		return STEP_UPDATES;
	default:
		return STEP_UPDATES;
	}
}

/* What the optimizer's step makes beside its state. A tensor at a time: an fp32 update
 * of the largest tensor (_single_tensor_adam's denom, exp_avg_sq.sqrt() / ...). foreach:
 * _multi_tensor_adam(w)'s exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs), a
 * copy of every second moment of the device's group at once, and Lion's update,
 * torch._foreach_mul(exp_avgs, beta1), one of every moment; SGD's momentum steps in place
 * (torch._foreach_mul_, _foreach_add_). fused: one kernel in place. */
static double step_temporaries(const struct mt_plan_config *c, const struct share *sh)
{
	double state = state_bytes(c), flat = deepspeed_step(c, sh);

	if (flat > 0) /* the fp32 flat gradient, beside first the flat gradient in the model's type
		       * (none in fp32), then what a torch.optim optimizer in FusedAdam's place copies
		       * of the flat state (foreach's sqrt, a loop's update of its one tensor) */
		return flat * (4 + fmax(value_bytes(c) == 4 ? 0 : value_bytes(c), torch_step(c) ? state : 0));
	switch (step_made(c)) {
	case STEP_NOTHING:
		return 0;
	case STEP_COPIES:
		return state * held(c, sh, 1, true);
	default:
		break;
	}
	return 4 * shard(largest_tensor(c) / (double)c->tp, c->zero >= 1 || c->fsdp ? sh->dp : 1);
}

/* PyTorch DDP (PyTorch modules over data-parallel GPUs without ZeRO or FSDP) keeps its
 * gradient buckets from the moment it wraps the model: the Reducer's flat buffers
 * (reducer.cpp's initialize_buckets), one value of the gradients' type for each
 * trainable parameter, a second copy of the gradients unless gradient_as_bucket_view
 * makes the gradients views of them. */
static double ddp_buckets(const struct mt_plan_config *c, const struct share *sh)
{
	if (!torch_modules(c) || sh->dp < 2 || c->zero || c->fsdp || c->bucket_view || c->optimizer == MT_NO_OPTIMIZER)
		return 0;
	return grad_bytes(c) * held(c, sh, 2, true);
}

/* DeepSpeed's contiguous gradient bucket: reduce_bucket values of the model's type (twice
 * with overlap_comm: reduce_bucket says so), made as backward begins and released after
 * it at stages 1 and 2 (stage_1_and_2.py's setup_buckets), made once and kept at stage 3
 * (stage3.py). Under ZeRO-Offload it is the gradient buffer moments() plans already. */
static double ipg_bucket(const struct mt_plan_config *c)
{
	if (!c->contiguous_gradients || c->zero < 1 || c->fsdp || offloads_grads(c))
		return 0;
	return value_bytes(c) * (double)c->reduce_bucket;
}

static size_t trainable_tensors(const struct mt_plan_config *c, double *n, size_t max);

/* bitsandbytes' paged optimizers (optim/optimizer.py, get_state_buffer) put a tensor's
 * state in managed memory (functional.py's get_paged: cudaMallocManaged) when it holds 1e5
 * values or more, in GPU memory otherwise; under ZeRO and FSDP every shard is one flat
 * tensor, large. Whether the state of a tensor of n values is paged: */
static bool paged_tensor(const struct mt_plan_config *c, double n)
{
	return c->paged && (n >= 1e5 || c->zero || c->fsdp);
}

/* The optimizer state's part paged: the trainable tensors that large (a layer's matrices,
 * LoRA's adapters of a large rank, the tables), all of it without an architecture */
static double paged_part(const struct mt_plan_config *c)
{
	enum { MAXT = 32 };
	double n[MAXT], large = 0, outside = c->lora_rank ? 0 : tables(c) + positions(c) * (double)c->hidden;
	size_t k;

	if (!c->paged || !c->layers)
		return c->paged;
	k = trainable_tensors(c, n, MAXT);
	for (size_t i = 0; i < k; i++)
		large += paged_tensor(c, n[i]) ? n[i] : 0;
	large = large * (double)c->layers + (paged_tensor(c, outside) ? outside : 0);
	return fmin(1, large / (double)c->trainable);
}

/* Megatron's default all-gather token dispatcher (moe/token_dispatcher.py,
 * MoEAllGatherTokenDispatcher) gathers every layer's tokens over the tensor- and
 * expert-parallel ranks into one buffer it keeps for all layers (tensor_parallel/
 * mappings.py: get_global_memory_buffer().get_tensor): this rank's tokens x etp x ep
 * values of the hidden size, in the model's type. */
static double dispatch_buffer(const struct mt_plan_config *c)
{
	double r = c->sp ? (double)c->tp : 1;

	if (!c->experts || !c->layers || c->impl != MT_IMPL_MEGATRON || c->alltoall)
		return 0;
	return value_bytes(c) * tokens(c) / r * (double)(c->etp * c->ep) * (double)c->hidden;
}

/* Megatron's router in fp32 (--moe-router-dtype fp32; moe_utils.py's
 * RouterGatingLinearFunction): its backward makes the input's gradient in fp32 and then
 * an fp32 copy of its input for the weight's gradient, both of this rank's tokens (its
 * part of the sequence under sp), alive together: temporaries of a MoE layer's backward. */
static double router_copies(const struct mt_plan_config *c)
{
	if (!c->router_fp32)
		return 0;
	return 2 * 4 * tokens(c) / (c->sp ? (double)c->tp : 1) * (double)c->hidden;
}

/* FSDP1 wraps the model a unit at a time, the blocks (and the adapters, their own units)
 * before the root (_init_utils.py, _init_param_handle_from_module): it moves the unit's
 * parameters to the GPU (from the host, or to_empty from the meta device), flattens them
 * into one new tensor (flat_param.py's flatten_tensors_into_flat_param: torch.cat), and
 * shards that, freeing the whole: the largest unit's bytes twice, left in the cache. The
 * largest unit's bytes: a block's, or the root's tables. */
static double fsdp1_unit(const struct mt_plan_config *c)
{
	double t = (double)c->tp, stored = stored_bytes(c), lp = (double)c->layer_params / t;
	double root =
	    (c->lora_rank ? unquantized_bytes(c) : stored) * (tables(c) / t + (double)positions(c) * (double)c->hidden);
	double block = (c->lora_rank ? frozen_bytes(c) : stored) * lp +
		       (c->orig_params ? stored * (double)c->trainable / (double)c->layers / t : 0);

	return max2(root, block);
}

/* FSDP1's CPU offload: a unit's pre-unshard copies its shard to the GPU (flat_param.py's
 * pre_unshard: flat_param_to(device), "a new tensor"), the all-gather's input, until it
 * reshards back to the host's _local_shard. The bytes of one. */
static double fsdp1_local(const struct mt_plan_config *c, const struct share *sh)
{
	if (!c->fsdp1 || c->offload_params != MT_OFFLOAD_CPU)
		return 0;
	return value_bytes(c) * shard((double)c->layer_params / (double)c->tp, sh->dp);
}

/* LitGPT quantizes through Lightning's BitsandbytesPrecision (fabric/plugins/precision/
 * bitsandbytes.py): its module_init_context makes every torch.nn.Linear 4-bit, the output
 * layer's too, and it quantizes from fp16 (quantize: .to(dtype=torch.half)), so a weight
 * dequantizes to fp16 and then to the model's type (MatMul4Bit: dequantize_4bit(B,
 * state).to(A.dtype)), two copies. */
static bool lightning_4bit(const struct mt_plan_config *c)
{
	return c->impl == MT_IMPL_LITGPT && c->quantize && !c->torchao;
}

/* A quantized weight of n values dequantized for a product: 16 bits (the copy in the
 * model's type: bitsandbytes' MatMul4Bit: F.dequantize_4bit(B, ...).to(A.dtype);
 * MatMul8bitLt's CB.to(dtype_A); torchao's linear_nf4: weight.to(dtype)), and Lightning's
 * fp16 before it; freed after the product, in forward and for backward's input gradient. */
static double dequant_bytes(const struct mt_plan_config *c, double n)
{
	return (value_bytes(c) + (lightning_4bit(c) ? 2 : 0)) * n;
}

/* The largest dequantized weight of a layer, a temporary of each layer's backward */
static double dequantized(const struct mt_plan_config *c)
{
	return c->quantize && c->layers ? dequant_bytes(c, largest_quantized(c) / (double)c->tp) : 0;
}

/* Lightning's 4-bit output layer (lightning_4bit; a separate one, untied): its values */
static double quantized_head(const struct mt_plan_config *c)
{
	return lightning_4bit(c) && c->untied ? (double)c->vocab * vocab_width(c) / (double)c->tp : 0;
}

/* --outputs-kept: what the last micro-batch's graph holds into the next forward beyond
 * its logits: bitsandbytes' 4-bit layers keep their inputs as ctx.tensors (autograd/
 * _functions.py, MatMul4Bit; until 0.43.2), an attribute backward does not release, so
 * each quantized matmul's input lives as long as the graph: the attention's and the MLP's
 * input (one, where the two share a norm), the output projection's and the down
 * projection's, and the 4-bit output layer's. Bytes. */
static double graph_held(const struct mt_plan_config *c)
{
	struct widths w = widths(c);
	double h = (double)c->hidden, t = (double)c->tp;

	if (!c->outputs_kept || !c->quantize || c->torchao || !c->layers || c->experts)
		return 0;
	return value_bytes(c) * tokens(c) *
	       ((double)c->layers * ((shared_input(c) ? 1 : 2) * h / (c->sp ? t : 1) + (w.o + (double)c->ffn) / t) +
		(quantized_head(c) > 0 ? h : 0));
}

/* A unit's backward under FSDP: its unsharded gradient in the compute type, and what the
 * reduce-scatter reads or writes. FSDP2 (torchtitan's reduce_dtype fp32) reduces an fp32
 * copy; FSDP1 reduces the gradient itself (flat_param.py: a param_dtype without a
 * reduce_dtype reduces in it, as Accelerate and Lightning set) into a new shard. */
static double fsdp_reduced(const struct mt_plan_config *c, const struct share *sh, double values)
{
	double e = value_bytes(c);

	return c->fsdp1 ? e * (values + shard(values, sh->dp)) : (e + 4) * values;
}

/* Each moment's components, unscaled. */
static void moments(const struct mt_plan_config *c, double m[MOMENTS][MT_PLAN_COMPONENTS], double *cpu, double *nvme)
{
	struct share sh = share(c);
	double e = value_bytes(c), t = (double)c->tp, gb = grad_bytes(c);
	double h = (double)c->hidden, v = (double)c->vocab, sb = tokens(c);
	bool sharded2 = c->fsdp || c->zero >= 2, offload_grads = offloads_grads(c);
	double params = stored_bytes(c) * held(c, &sh, 3, true);
	double grads = gb * (held(c, &sh, 2, true) + graded_frozen(c, &sh));
	double optim = optimizer_bytes(c) * held(c, &sh, 1, true) * (1 - paged_part(c));
	double keep = 0, *to;

	if (c->lora_rank) { /* the frozen base, never sharded by ZeRO-1/2 */
		double base = held(c, &sh, 3, false), rest = 0;
		/* bitsandbytes quantizes the blocks' linear layers: the embeddings and the output
		 * layer stay 16-bit (transformers skips lm_head, torchtune quantizes LoRA's
		 * linears) */
		if (c->quantize && c->layers) /* sharded as the base is, by ZeRO-3 and FSDP */
			rest = fmin(base, shard((tables(c) + (double)positions(c) * h) / t - quantized_head(c),
						c->fsdp || c->zero >= 3 ? sh.dp : 1));
		params += frozen_bytes(c) * (base - rest) + unquantized_bytes(c) * rest;
	}
	if (c->fp8 && c->layers) /* fp8 copies of the blocks' linear weights, cached for the step */
		params += held(c, &sh, 3, false) * (1 - tables(c) / (double)c->params);
	*cpu = *nvme = 0;
	if (c->offload_optimizer) {
		to = c->offload_optimizer == MT_OFFLOAD_NVME ? nvme : cpu;
		*to += optim * (double)c->gpus_per_node;
		optim = 0;
		if (offload_grads)
			*to += 4 * (held(c, &sh, 2, true) + graded_frozen(c, &sh)) * (double)c->gpus_per_node;
	}
	if (c->offload_params) {
		to = c->offload_params == MT_OFFLOAD_NVME ? nvme : cpu;
		*to += params * (double)c->gpus_per_node;
		/* one layer gathered (FSDP's two and its root are its temporaries) */
		params = c->fsdp ? 0 : e * (double)(c->layers ? c->layer_params : c->largest_layer) / t;
	}
	for (int i = 0; i < AT_LOADING; i++)
		m[i][MT_PLAN_PARAMS] = params, m[i][MT_PLAN_OPTIMIZER] = optim;
	m[AT_LOADING][MT_PLAN_PARAMS] = params; /* its adapters come after it, and are small */
	m[AT_LOADING][MT_PLAN_TEMPORARIES] = c->fsdp1 ? 2 * fsdp1_unit(c) : 2 * largest_quantized(c) / t;
	if (offload_grads) /* DeepSpeed's bucket, never more than the gradients it holds; FSDP
			    * moves each block's reduced shard to the host (its unsharded
			    * gradient is a temporary of the block's backward) */
		grads = c->fsdp ? 0 : e * fmin((double)c->reduce_bucket, held(c, &sh, 2, true));
	m[AT_OPTIMIZER][MT_PLAN_GRADS] = grads;
	if (deepspeed_step(c, &sh) > 0) /* its step frees the gradients outside the partition first */
		m[AT_OPTIMIZER][MT_PLAN_GRADS] = fmin(grads, gb * held(c, &sh, 1, true));
	/* gradients accumulated over micro-batches (or zeroed, not freed) live through the step */
	if (c->keep_grads || c->micro_batches > 1 || (c->pp > 1 && c->micro_batches != 1))
		keep = grads;
	/* FSDP's no_sync() (FSDP1's _runtime_utils.py: no reduce-scatter, the unsharded
	 * gradient accumulated in the flat parameter's .grad): the whole gradient of every
	 * unit that has one, in the model's type, from the first micro-batch's backward to the
	 * last's; a LoRA block's frozen values' too under --orig-params (graded_frozen), while
	 * a unit of frozen values only (the root's tables) has none */
	if (c->no_sync)
		keep = e *
		       ((double)(c->lora_rank ? c->trainable : c->params) +
			(c->orig_params ? (double)c->layers * (double)c->layer_params : 0)) /
		       (double)(c->tp * c->pp);
	if (c->optimizer != MT_NO_OPTIMIZER && !c->offload_optimizer)
		m[AT_OPTIMIZER][MT_PLAN_TEMPORARIES] = step_temporaries(c, &sh);
	if (!c->layers) {
		for (int i = 0; i < AT_OPTIMIZER; i++)
			m[i][MT_PLAN_GRADS] = keep;
		return;
	}

	struct mt_plan_config none = *c;
	bool pt = torch_modules(c);
	double emb = e * sb * h / (c->sp ? t : 1), lp = (double)c->layer_params / t, flight = in_flight(c);
	double gathered = 0, cache = 0, root = 0;
	double acts, temps_bwd = 0, grads_bwd = 0, temps_layer, layer = kept_bytes(c, c->recompute);
	double trainable_layer = c->lora_rank ? (double)c->trainable / (double)c->layers / t : lp;
	double graded_layer = trainable_layer + (c->orig_params ? lp : 0); /* values with a gradient */
	double out_grad = c->lora_rank || c->classifier ? 0 : v * vocab_width(c) / t;

	none.recompute = MT_RECOMPUTE_NONE;
	/* ZeRO-3 gathers a layer's weights as it runs; FSDP2 one unit and the next prefetched,
	 * and its root unit (embedding, output layer) for the whole backward, with the output
	 * layer's unsharded gradient */
	if (c->zero >= 3 && sh.dp > 1)
		gathered = e * lp;
	if (c->fsdp && sh.dp > 1) {
		gathered = (fsdp1_reentrant(c, &sh) ? 1 : 2) * (e * lp + fsdp1_local(c, &sh));
		root = e * tables(c) / t + e * out_grad;
	}
	/* autocast keeps the 16-bit copy of every weight a matrix multiply used until that
	 * layer's backward: made in forward and freed in backward, an activation by its
	 * lifetime, as the report reads it */
	if (c->precision == MT_AMP16)
		cache = 2 * ((double)c->layers * lp + (c->classifier ? 0 : v * vocab_width(c) / t));
	/* the first pipeline stage keeps its micro-batches in flight of layers/pp layers: all
	 * layers' worth, and the embedding output of each micro-batch */
	acts = m[AT_LAST_LAYER][MT_PLAN_ACTIVATIONS] = flight * ((double)c->layers * layer + (double)c->pp * emb);
	if (c->pp == 1 && !c->classifier) {
		double lv = sb * v / t; /* the logits' values */
		/* final norm and output layer inputs, fp32 logits */
		acts += 2 * emb + 4 * lv;
		/* backward begins with the logits' fp32 gradient (PyTorch's log-softmax backward
		 * holds its output, its gradient and the input's) and the output layer's gradient
		 * (a full-size bucket under ZeRO-2/3 before it is reduced) */
		temps_bwd = (pt ? 8 : 4) * lv;
		if (c->loss_chunk) { /* the chunks' fp32 logits (the script's list holds them
				      * through backward) and log-softmaxes; a chunk's two fp32
				      * gradients at a time (loss_chunk_part) */
			acts += 4 * lv;
			temps_bwd = 2 * 4 * lv * loss_chunk_part(c);
		}
		/* and a 4-bit output layer dequantized for the input's gradient */
		temps_bwd += (c->zero >= 2 && sh.dp > 1 ? e * out_grad : 0) + dequant_bytes(c, quantized_head(c));
		grads_bwd = gb * (shard(out_grad, sharded2 ? sh.dp : 1) +
				  shard(c->lora_rank ? 0 : 2 * h, sharded2 ? sh.dp : 1));
		if (offload_grads)
			grads_bwd = fmin(grads_bwd, grads);
	}
	m[AT_BACKWARD][MT_PLAN_ACTIVATIONS] = acts;
	m[AT_BACKWARD][MT_PLAN_GRADS] = max2(grads_bwd, keep);
	m[AT_BACKWARD][MT_PLAN_TEMPORARIES] = temps_bwd + root;
	m[AT_BACKWARD][MT_PLAN_ACTIVATIONS] += cache;
	/* the loss made beside the model's logits, their fp32 copy and its shifted copy
	 * (shifts_logits), the log-softmax's output counted in acts: the root unit gathered,
	 * no gradient made yet */
	if (shifts_logits(c)) {
		double lv = sb * v / t;
		m[AT_LOSS][MT_PLAN_ACTIVATIONS] = acts + cache;
		m[AT_LOSS][MT_PLAN_TEMPORARIES] =
		    (e + (e < 4 ? 4 : 0) + 4) * lv + (c->fsdp && sh.dp > 1 ? e * tables(c) / t : 0);
		m[AT_LOSS][MT_PLAN_GRADS] = keep;
	}
	/* --outputs-kept: the next micro-batch's forward ending beside the last one's fp32
	 * logits and graph_held, no log-softmax or gradient made yet: its 16-bit chunks made
	 * (the last with the 4-bit output layer dequantized), then their fp32 copies as Fabric
	 * converts them */
	if (c->outputs_kept && c->pp == 1 && !c->classifier) {
		double lv = sb * v / t, loss = (c->loss_chunk ? 8 : 4) * lv; /* the logits and log-softmaxes held */
		double chunks = c->loss_chunk ? e * lv : 0;
		m[AT_NEXT_FORWARD][MT_PLAN_ACTIVATIONS] = acts - loss + cache + 4 * lv + graph_held(c) + chunks +
							  max2(4 * lv, dequant_bytes(c, quantized_head(c)));
	}
	m[AT_NEXT_FORWARD][MT_PLAN_GRADS] = keep;
	/* the backward of the last layer: the head's activations are gone; its own are
	 * made again where they were not kept; its input and MLP gradients; its weights
	 * gathered (ZeRO-3) and its gradient in a full-size bucket (ZeRO-2/3) */
	temps_layer = kept_bytes(&none, MT_RECOMPUTE_NONE) - layer + emb + e * sb * (double)c->ffn / t + gathered +
		      root + (c->zero >= 2 && sh.dp > 1 ? e * trainable_layer : 0) +
		      (c->fsdp && sh.dp > 1 ? fsdp_reduced(c, &sh, graded_layer) : 0) + dequantized(c) +
		      router_copies(c);
	m[AT_LAST_LAYER][MT_PLAN_GRADS] = max2(grads_bwd + gb * shard(graded_layer, sharded2 ? sh.dp : 1), keep);
	if (offload_grads)
		m[AT_LAST_LAYER][MT_PLAN_GRADS] = grads;
	m[AT_LAST_LAYER][MT_PLAN_TEMPORARIES] = temps_layer;
	m[AT_LAST_LAYER][MT_PLAN_ACTIVATIONS] += cache;
	/* the same in the backward of the first layer: every other gradient made, only
	 * that layer's activations and the embedding output left */
	m[AT_FIRST_LAYER][MT_PLAN_ACTIVATIONS] = layer + (double)c->pp * emb;
	m[AT_FIRST_LAYER][MT_PLAN_GRADS] =
	    offload_grads ? grads : max2(grads - gb * shard(positions(c) * h / t, sharded2 ? sh.dp : 1), keep);
	m[AT_FIRST_LAYER][MT_PLAN_TEMPORARIES] = temps_layer - (c->dense_layers ? router_copies(c) : 0);
	if (holds_checkpoints(c, &sh)) { /* every other layer's checkpointed input and its gradient */
		m[AT_FIRST_LAYER][MT_PLAN_ACTIVATIONS] += ((double)c->layers - 1) * layer;
		m[AT_FIRST_LAYER][MT_PLAN_TEMPORARIES] += ((double)c->layers - 1) * emb;
	}
	m[AT_FIRST_LAYER][MT_PLAN_ACTIVATIONS] += cache > 0 ? 2 * lp + cache - 2 * (double)c->layers * lp : 0;
}

/* ---- what a process holds besides its training step (docs/PLAN.md, "The framework") ---- */

/* PyTorch's cuBLAS workspaces (aten/src/ATen/cuda/CublasHandlePool.cpp, from 2.0): one
 * for each cuBLAS handle and stream, from the caching allocator and kept (memory_allocated
 * counts them): the main thread's for forward, the autograd engine's device thread's for
 * backward; 4096 KiB x 2 + 16 KiB x 8 each, 32 MiB on Hopper (sm_90). From 2.8
 * (pytorch/pytorch#156495) cuBLASLt's 1 MiB is kept too, for each handle and stream that
 * ran a cuBLASLt matmul: forward's addmm; counted with --torch 2.8 or later (the published
 * measurements without --torch are older). PyTorch 2.11 on an H200 cleared 65 MiB. */
static double cublas_workspaces(const struct mt_plan_config *c)
{
	if (!torch_modules(c) || !c->layers || (c->torch && c->torch < 200))
		return 0;
	return 2.0 * (c->gpu_arch == 90 ? 32 << 20 : (4096 * 2 + 16 * 8) << 10) + (c->torch >= 208 ? 1 << 20 : 0);
}

/* The CUDA context, which NVML counts and no allocator does. With lazy module loading
 * (CUDA 11.7 on, PyTorch's default from 1.13) it starts at 287 to 426 MiB in the
 * published measurements and grows as kernels load: 512 MiB. Before 1.13 every kernel
 * loads at once: 1343 MiB measured with PyTorch 1.10 on a V100. */
static double cuda_context(const struct mt_plan_config *c)
{
	return (double)((c->torch && c->torch < 113 ? 1343 : 512) << 20);
}

/* NCCL's buffers, its own cuMem allocations outside PyTorch's allocator: about 688 MiB a
 * communicator of more than two GPUs and 544 MiB of two (4 A100s under PyTorch,
 * NVIDIA/nccl#964), one for each kind of parallelism over more than one GPU; on Hopper
 * over 4 or more GPUs of a node, NVLink SHARP's 256 MiB too (NCCL 2.22 on: 16 channels x
 * 2 x 1 MiB x 8 heads). */
static double nccl_buffers(const struct mt_plan_config *c)
{
	uint64_t groups[] = {c->nodes * c->gpus_per_node / (c->tp * c->pp * c->cp), c->tp, c->pp, c->cp, c->ep};
	double mib = 0;

	for (size_t i = 0; i < sizeof groups / sizeof *groups; i++)
		mib += groups[i] > 2 ? 688 : groups[i] == 2 ? 544 : 0;
	if (mib > 0 && c->gpu_arch == 90 && c->gpus_per_node >= 4)
		mib += 256;
	return mib * 1048576;
}

/* Every moment's components, unscaled, and the moments the setup has ([*first, *last)). */
static void table(const struct mt_plan_config *c, double m[MOMENTS][MT_PLAN_COMPONENTS], double *cpu, double *nvme,
		  int *first, int *last)
{
	*last = !c->layers ? AT_OPTIMIZER + 1 : loads_quantized(c) || c->fsdp1 ? MOMENTS : AT_LOADING;
	*first = c->layers ? 0 : AT_OPTIMIZER;
	memset(m, 0, sizeof(double) * MOMENTS * MT_PLAN_COMPONENTS);
	struct share sh = share(c);

	moments(c, m, cpu, nvme);
	for (int i = *first; i < *last && i != AT_LOADING; i++) {
		if (i != AT_OPTIMIZER || c->zero >= 3)
			m[i][MT_PLAN_TEMPORARIES] += ipg_bucket(c);
		m[i][MT_PLAN_TEMPORARIES] += dispatch_buffer(c);
		m[i][MT_PLAN_GRADS] += ddp_buckets(c, &sh);
	}
}

void mt_plan_compute(const struct mt_plan_config *c, const struct mt_plan_scale *s, struct mt_plan *out)
{
	double m[MOMENTS][MT_PLAN_COMPONENTS];
	int first, last;

	*out = (struct mt_plan){.dp = c->nodes * c->gpus_per_node / (c->tp * c->pp * c->cp),
				.total = -1,
				.framework = c->overhead + (s ? s->other : 0)};
	struct share sh = share(c);
	out->paged = optimizer_bytes(c) * held(c, &sh, 1, true) * paged_part(c);
	if (!s) { /* a measured run's framework holds them already */
		out->cublas = cublas_workspaces(c);
		out->context = c->nvml ? cuda_context(c) : 0;
		out->nccl = c->nvml ? nccl_buffers(c) : 0;
		out->framework += out->cublas + out->context + out->nccl;
	}
	table(c, m, &out->cpu, &out->nvme, &first, &last);
	/* the peak is where backward begins (every activation alive), in the backward of the
	 * last or the first layer (recomputation), or in the optimizer step (every gradient
	 * alive) */
	for (int i = first; i < last; i++) {
		double total = out->framework;
		if (!moment_on(c, i))
			continue;
		for (int j = 0; j < MT_PLAN_COMPONENTS; j++) {
			if (s)
				m[i][j] = m[i][j] * s->k[j] + s->carry[j];
			total += m[i][j];
		}
		if (total > out->total) {
			memcpy(out->bytes, m[i], sizeof(out->bytes));
			out->total = total;
			out->moment = moment_name(c, i);
		}
	}
}

/* The measurement is compared with the model at the moment it resembles most (the least
 * bytes apart, component by component): a run whose peak was its optimizer step holds
 * every gradient and few activations, and compared with the model's backward start it
 * would scale gradients up and activations down by the moments' difference. */
void mt_plan_calibrate(const struct mt_plan_config *run, const double measured[MT_PLAN_COMPONENTS], double other,
		       struct mt_plan_scale *s)
{
	double m[MOMENTS][MT_PLAN_COMPONENTS], cpu, nvme, best = INFINITY, total = 0;
	int first, last, at = 0;

	table(run, m, &cpu, &nvme, &first, &last);
	for (int i = first; i < last; i++) {
		double apart = 0;
		if (!moment_on(run, i))
			continue;
		for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
			apart += fabs(measured[j] - m[i][j]);
		if (apart < best)
			best = apart, at = i;
	}
	*s = (struct mt_plan_scale){.other = other, .moment = moment_name(run, at)};
	memcpy(s->at, m[at], sizeof s->at);
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++)
		total += measured[j];
	/* a component the model holds little of then (under 5% of what was measured) gives no
	 * ratio to trust (one layer's activations against a kept loss): what the measurement
	 * holds beyond it is carried instead */
	for (int j = 0; j < MT_PLAN_COMPONENTS; j++) {
		s->k[j] = 1;
		if (m[at][j] >= 0.05 * total && measured[j] > 0)
			s->k[j] = measured[j] / m[at][j];
		else if (measured[j] > m[at][j])
			s->carry[j] = measured[j] - m[at][j];
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
			x.fsdp = false;
			if (!z) /* no offload without a ZeRO optimizer */
				x.offload_optimizer = MT_OFFLOAD_NONE;
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
	struct share sh = share(c);
	int stage = j == MT_PLAN_PARAMS ? 3 : j == MT_PLAN_GRADS ? 2 : 1;

	return held(c, &sh, stage, true);
}

void mt_plan_describe(const struct mt_plan_config *c, char *buf, size_t len)
{
	static const char *const optimizers[] = {"Adam/AdamW", "8-bit Adam", "SGD with momentum",   "no optimizer",
						 "Adafactor",  "Lion",	     "SGD without momentum"};
	static const char *const precisions[] = {"fp32", "16-bit with fp32 master weights",
						 "autocast (fp32 weights, 16-bit compute)", "pure 16-bit"};
	uint64_t gpus = c->nodes * c->gpus_per_node;
	char batch[64] = "", par[96] = "", extra[192] = "", torch[48] = "";

	if (c->layers && c->seq)
		snprintf(batch, sizeof batch, ", micro-batch %llu, recompute %s", (unsigned long long)c->micro_batch,
			 mt_plan_recompute_names[c->recompute]);
	else if (c->layers)
		snprintf(batch, sizeof batch, ", model states only (no --seq, --micro-batch)");
	if (c->cp > 1 || c->ep > 1)
		snprintf(par, sizeof par, " x cp %llu, ep %llu", (unsigned long long)c->cp, (unsigned long long)c->ep);
	if (softmax_keeps_input(c))
		snprintf(torch, sizeof torch, ", PyTorch %llu.%llu (softmax keeps its input)",
			 (unsigned long long)(c->torch / 100), (unsigned long long)(c->torch % 100));
	snprintf(extra, sizeof extra, "%s%s%s%s%s%s%s",
		 c->fsdp1  ? ", FSDP1"
		 : c->fsdp ? ", FSDP"
			   : "",
		 c->fp8 ? ", fp8" : "", c->lora_rank ? ", LoRA" : "", c->quantize ? " on a quantized base" : "",
		 c->offload_optimizer ? ", optimizer offloaded" : "", c->offload_params ? ", params offloaded" : "",
		 torch);
	snprintf(buf, len, "%s, %s, ZeRO-%d, %llu GPU%s (dp %llu x tp %llu x pp %llu%s%s)%s%s",
		 precisions[c->precision], optimizers[c->optimizer], c->zero, (unsigned long long)gpus,
		 gpus == 1 ? "" : "s", (unsigned long long)(gpus / (c->tp * c->pp * c->cp)), (unsigned long long)c->tp,
		 (unsigned long long)c->pp, par, c->sp ? ", sp" : "", batch, extra);
}

size_t mt_plan_approximations(const struct mt_plan_config *c, const char **out, size_t max)
{
	const struct {
		bool when;
		const char *what;
	} all[] = {
	    {c->lora_rank && c->layers && !torch_modules(c),
	     "Megatron's modules have no LoRA: its frozen layers keep their inputs here as trained ones do: errs high"},
	    {c->lora_rank && c->quantize && !c->torchao && c->layers && torch_modules(c),
	     "bitsandbytes keeps each quantized layer's input for backward here, as releases before 0.43.2 do (later "
	     "ones keep none: errs high there)"},
	    {c->lora_rank && c->layers && c->impl == MT_IMPL_PYTORCH && c->precision == MT_PURE16 && !c->lora_fp32,
	     "PEFT from 0.12 keeps the adapters in fp32 on a 16-bit base (autocast_adapter_dtype), each with an fp32 "
	     "copy of its input: --lora-fp32 plans that"},
	    {c->fsdp && !c->fsdp1 && c->layers,
	     "FSDP is planned as FSDP2 (fully_shard): --fsdp1 plans FSDP1's FullyShardedDataParallel (one unit "
	     "gathered in forward, gradients reduced in 16 bits)"},
	    {c->quantize && c->layers && (c->fsdp || c->zero >= 3),
	     "the quantized base is gathered here as if 16-bit: FSDP-QLoRA gathers its packed 4 bits, but Answer.AI's "
	     "published runs held more than that predicts, for what is not identified"},
	    {c->quantize && c->layers && !c->fsdp1 && (c->fsdp || c->zero >= 3),
	     "a quantized base's loading under ZeRO-3 or FSDP2 is not planned (--fsdp1 plans FSDP1's wrap): may be "
	     "low"},
	    {c->experts && c->layers,
	     "the token dispatch keeps each routed token's copy here, gathered over the expert tensor-parallel "
	     "ranks, and Megatron's all-gather dispatcher its buffer of every rank's tokens; the dispatchers' "
	     "temporary copies are not planned: may be low"},
	    {c->nvml, "the CUDA context and NCCL's buffers are published figures, not this machine's: a measured run "
		      "(memtap plan TRACE) replaces them with what it held"},
	};
	size_t n = 0;

	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		if (all[i].when && n < max)
			out[n++] = all[i].what;
	return n;
}

/* ---- Megatron-LM's theoretical_memory_usage.py ---- */

/* Its sums, in its order of operations so the rounding is the same. */
void mt_plan_megatron(const struct mt_plan_config *c, struct mt_megatron *out)
{
	uint64_t multiple = 128 * c->tp; /* --make-vocab-size-divisible-by 128, times tp */
	uint64_t world = c->nodes * c->gpus_per_node, L = c->layers;
	double h = (double)c->hidden, a = (double)c->heads, g = (double)c->query_groups;
	double s = (double)c->seq, b = (double)c->micro_batch, tp = (double)c->tp, pp = (double)c->pp;
	double dp = (double)(world / (c->tp * c->pp * c->cp));
	double edp = (double)(world / (c->etp * c->ep * c->pp)), etp = (double)c->etp, ep = (double)c->ep;
	double gated = c->swiglu ? 3.0 / 2 : 1, norm = c->rmsnorm ? 1 : 2, v, f = (double)c->ffn, act;
	double E = c->experts ? (double)c->experts : 1, fe = c->experts ? (double)c->moe_ffn : 0;
	double fs = (double)c->shared_ffn, k = (double)(c->topk ? c->topk : 2);
	double moe_layers = c->experts ? (double)(L - c->dense_layers) : 0, dense_layers = (double)L - moe_layers;
	/* the multi-token prediction layers follow the last layer's kind */
	double mtp_moe = moe_layers > 0 ? (double)c->mtp_layers : 0, mtp_dense = (double)c->mtp_layers - mtp_moe;
	double attention;

	out->padded_vocab = (c->vocab + multiple - 1) / multiple * multiple;
	out->ffn = c->ffn;
	v = (double)out->padded_vocab;
	if (is_mla(c)) {
		double qk = (double)c->head_dim, pos = (double)c->rope_head_dim, dv = (double)c->v_head_dim;
		double ql = (double)c->q_lora_rank, kvl = (double)c->kv_lora_rank;
		double q_term = ql == 0 ? h * a * (qk + pos) : ql * (h + a * (qk + pos) + norm);
		attention = q_term + kvl * (h + a * (qk + dv) + norm) + h * pos + (a * dv) * h;
	} else {
		double ratio = ((double)c->head_dim * a) / h;
		attention = 2 * h * h * ((1 + (g / a)) * ratio);
	}
	double embedding = h * v, final_norm = norm * h;
	double embedding_layers = c->untied ? 2 * embedding : embedding;
	double dense_mlp = 2 * h * f * gated, shared = 2 * h * fs * gated;
	double routed = 2 * h * fe * E * gated;
	double active_routed = c->experts ? 2 * h * fe * k * gated : 0;
	double norms = 2 * h * norm;
	double router = c->experts ? (h * E) + (c->bias == MT_BIAS_ALL ? E : 0) : 0;
	double gate = fs > 0 && c->shared_gate ? h : 0;
	double dense_layer = attention + dense_mlp + norms;
	double moe_layer = attention + shared + routed + norms + router + gate;
	double moe_active = attention + shared + active_routed + norms + router + gate;
	double block = dense_layer * dense_layers + moe_layer * moe_layers + final_norm;
	double active_block = dense_layer * dense_layers + moe_active * moe_layers + final_norm;
	double mtp = dense_layer * mtp_dense + moe_layer * mtp_moe;
	out->total_params = block + mtp + embedding_layers;
	out->active_params = active_block + mtp + embedding_layers;
	/* the most loaded shard (the first stage): tensor-parallel parts over tp, norms and
	 * routers replicated, routed experts over etp x ep */
	double tp_block = (attention + dense_mlp) * dense_layers + (attention + shared) * moe_layers;
	double rep_block = norms * dense_layers + (norms + router + gate) * moe_layers + final_norm;
	double exp_block = routed * moe_layers;
	double tp_mtp = (attention + dense_mlp) * mtp_dense + (attention + shared) * mtp_moe;
	double rep_mtp = norms * mtp_dense + (norms + router + gate) * mtp_moe;
	double exp_mtp = routed * mtp_moe;
	double tp_part = ((tp_block / pp) + tp_mtp + embedding) / tp;
	double rep_part = (rep_block / pp) + rep_mtp;
	double exp_part = ((exp_block / pp) + exp_mtp) / (etp * ep);
	out->most_loaded = tp_part + rep_part + exp_part;
	if (c->untied && c->pp == 1) {
		tp_part += embedding / tp;
		out->most_loaded += embedding / tp;
	}
	/* 18 bytes per parameter (bf16 values, fp32 main gradients, main weights and Adam
	 * moments), 6 + 12/dp with the distributed optimizer; experts over their own dp */
	out->weights = (tp_part + rep_part) * (c->zero >= 1 ? 6 + (12 / dp) : 18) +
		       exp_part * (c->zero >= 1 ? 6 + (12 / edp) : 18);
	/* activations: Korthikanti's selective-recomputation rows (no attention scores) */
	if (c->sp && c->recompute == MT_RECOMPUTE_SELECTIVE) {
		act = (s * b * h) * (18 + (4 * (f / h)));
		act *= (double)L;
	} else {
		act = s * b * h * (10 + (24 / tp));
		act = act * (double)L;
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
	out->activations = act;
}

/* ---- one step's allocations, tensor by tensor ---- */

/* The caching allocator's reserved memory depends on the order and sizes of the
 * tensors, not only on their sum: mt_plan_steps issues the same terms the moments above
 * add up, one tensor each, in the order a training step makes and frees them. */

struct seq {
	const struct mt_plan_config *c;
	const struct mt_plan_sink *sink;
	uint32_t next;
	bool too_big; /* a tensor past what the simulated device addresses */
};

static uint32_t seq_alloc(struct seq *q, double bytes, uint64_t stream)
{
	uint32_t id;

	if (!(bytes >= 1))
		return 0;
	if (bytes > 0x1p50) {
		q->too_big = true;
		return 0;
	}
	id = ++q->next;
	q->sink->alloc(q->sink->ctx, id, (uint64_t)ceil(bytes), stream);
	return id;
}

static void seq_free(struct seq *q, uint32_t *id)
{
	if (*id)
		q->sink->free(q->sink->ctx, *id);
	*id = 0;
}

/* A layer's weight matrices and vectors in module order (elements, before tp): the norms,
 * q, k, v (fused under biases everywhere), the output projection, the MLP's matrices,
 * the biases; what the count has beyond these (experts, routers, latent attention) as
 * one more tensor. */
static size_t layer_tensors(const struct mt_plan_config *c, double *n, size_t max)
{
	double h = (double)c->hidden, f = (double)c->ffn, sum = 0, layer = (double)c->layer_params;
	struct widths w = widths(c);
	size_t k = 0;

	for (int i = 0; i < (int)norm_size(c); i++) /* the first norm */
		n[k++] = h;
	if (fused_qkv(c)) {
		n[k++] = h * (w.q + 2 * w.k);
		n[k++] = w.q + 2 * w.k;
	} else {
		n[k++] = h * w.q, n[k++] = h * w.k, n[k++] = h * w.v;
	}
	n[k++] = w.o * h;
	for (int i = 0; i < (int)((layer_norms(c) - 1) * norm_size(c)); i++) /* the others */
		n[k++] = h;
	if (!c->experts && fused_gate_up(c))
		n[k++] = 2 * h * f, n[k++] = h * f;
	else if (!c->experts) {
		for (int i = 0; i < (c->swiglu ? 3 : 2); i++)
			n[k++] = h * f;
	}
	if (c->experts) { /* the routed experts, over etp x ep rather than tp (scaled to be divided by tp) */
		double routed = (double)c->experts * mlp_params(c, (double)c->moe_ffn);
		n[k++] = routed * (double)c->tp / (double)(c->etp * c->ep);
		layer -= routed - n[k - 1];
	}
	for (size_t i = 0; i < k; i++)
		sum += n[i];
	if (layer - sum >= 1 && k < max)
		n[k++] = layer - sum; /* biases, routers, shared experts, latent projections */
	return k;
}

/* The step's trainable tensors per layer (LoRA: each adapter's two matrices) */
static size_t trainable_tensors(const struct mt_plan_config *c, double *n, size_t max)
{
	double r = (double)c->lora_rank, h = (double)c->hidden, f = (double)c->ffn, a, b;
	unsigned m = lora_targets(c);
	struct widths w = widths(c);
	size_t k = 0;

	if (!c->lora_rank)
		return layer_tensors(c, n, max);
	if (qkv_adapter(c, &a, &b))
		n[k++] = a, n[k++] = b;
	if (!fused_qkv(c) && m & MT_LORA_Q)
		n[k++] = r * h, n[k++] = r * w.q;
	if (!fused_qkv(c) && m & MT_LORA_K)
		n[k++] = r * h, n[k++] = r * w.k;
	if (!fused_qkv(c) && m & MT_LORA_V)
		n[k++] = r * h, n[k++] = r * w.v;
	if (m & MT_LORA_O)
		n[k++] = r * w.o, n[k++] = r * h;
	if (m & MT_LORA_MLP && !c->experts && fused_gate_up(c))
		n[k++] = r * h, n[k++] = 2 * r * f, n[k++] = r * f, n[k++] = r * h;
	for (int i = 0; m & MT_LORA_MLP && !c->experts && !fused_gate_up(c) && i < (c->swiglu ? 3 : 2); i++)
		n[k++] = r * h, n[k++] = r * f;
	if (m & MT_LORA_MLP && c->experts && k < max) /* the experts' adapters as one */
		n[k++] = lora_moe_mlp(c);
	return k;
}

/* linear_inputs' tensors, each divided by `parts` */
static size_t scaled_inputs(const struct mt_plan_config *c, int in, double parts, double *n, size_t max)
{
	size_t k = linear_inputs(c, in, n, max);

	for (size_t i = 0; i < k; i++)
		n[i] /= parts;
	return k;
}

/* What one layer keeps for backward, tensor by tensor (bytes per token, before tp and
 * sp): the terms layer_kept adds, with what they do not split into tensors as one. */
static size_t kept_tensors(const struct mt_plan_config *c, enum mt_recompute rc, double *n, size_t max, size_t *softmax)
{
	struct kept k = layer_kept(c, rc);
	double t = (double)c->tp, r = c->sp ? t : 1, h = (double)c->hidden, e = value_bytes(c);
	double total = k.rep / r + k.tp_part / t + k.scores / t + k.experts / (double)c->etp +
		       k.routed * (double)c->etp / r,
	       sum = 0;
	double a = (double)c->heads, s = (double)c->seq, f = (double)c->ffn;
	bool drop = !c->no_dropout;
	size_t j = 0;

	*softmax = SIZE_MAX;
	if (rc == MT_RECOMPUTE_NONE || rc == MT_RECOMPUTE_SELECTIVE) {
		struct widths w = widths(c);
		bool pt = torch_modules(c);
		double norm_in = norm_kept(c) * h / r, squares = norm_squares(c) * h / r, kv, vv;
		kept_kv(c, &kv, &vv);
		n[j++] = norm_in;
		if (squares > 0)
			n[j++] = squares;
		j += scaled_inputs(c, IN_ATTN, r, n + j, max - j);
		n[j++] = e * w.q / t;
		n[j++] = e * kv / t;
		n[j++] = e * vv / t;
		if (k.scores > 0) { /* (softmax input,) softmax output, dropout mask, V's operand */
			double part[SCORE_PARTS];
			score_bytes(c, part);
			*softmax = j;
			for (int i = 0; i < SCORE_PARTS; i++)
				if (part[i] > 0)
					n[j++] = a * s * part[i] / t;
		}
		j += scaled_inputs(c, IN_O, t, n + j, max - j);
		j += scaled_inputs(c, IN_ADAPTERS, t, n + j, max - j);
		if (c->attention == MT_ATTN_FLASH && pt)
			n[j++] = e * w.o / t;
		if (drop)
			n[j++] = h / r;
		for (int i = 1; i < (int)layer_norms(c); i++) {
			n[j++] = norm_in;
			if (squares > 0)
				n[j++] = squares;
		}
		j += scaled_inputs(c, IN_MLP, r, n + j, max - j);
		if (!c->experts)
			for (int i = 0; i < (c->swiglu ? (pt ? 4 : 3) : 2) - 1; i++)
				n[j++] = e * f / t;
		j += scaled_inputs(c, IN_DOWN, t, n + j, max - j);
		if (drop)
			n[j++] = h / r;
	}
	for (size_t i = 0; i < j; i++)
		sum += n[i];
	/* log-sum-exp, latent attention, experts: the rest */
	if (total - sum > 0 && j < max)
		n[j++] = total - sum;
	return j;
}

/* The logits' values of loss chunk k (the last may be shorter), before tp */
static double chunk_values(const struct mt_plan_config *c, uint64_t k, double per_seq)
{
	double n = fmin((double)c->loss_chunk, per_seq - (double)k * (double)c->loss_chunk);

	return n * (double)c->micro_batch * (double)c->vocab / (double)c->tp;
}

/* FSDP1's wrap of a unit of n tensors of these bytes (fsdp1_unit): moved to the GPU whole,
 * flattened into one tensor, sharded; with CPU offload the shard then goes to the host */
static void fsdp1_wrap(struct seq *q, const double *bytes, size_t n, uint64_t dp, bool host)
{
	enum { ALLOC = 0, MAXW = 128 };
	uint32_t id[MAXW] = {0}, flat, sharded;
	double whole = 0;

	for (size_t i = 0; i < n && i < MAXW; i++) {
		id[i] = seq_alloc(q, bytes[i], ALLOC);
		whole += bytes[i];
	}
	flat = seq_alloc(q, whole, ALLOC);
	for (size_t i = 0; i < n && i < MAXW; i++)
		seq_free(q, &id[i]);
	sharded = seq_alloc(q, shard(whole, dp), ALLOC);
	seq_free(q, &flat);
	if (host)
		seq_free(q, &sharded);
}

/* A unit gathered ([0]) under ZeRO-3 or FSDP, with the copy of its shard the all-gather
 * reads ([1], fsdp1_local), unless gathered already; and both freed as it reshards */
static void gather_unit(struct seq *q, uint32_t unit[2], double bytes, double local)
{
	enum { GATHER = 1 };

	if (unit[0])
		return;
	unit[1] = seq_alloc(q, local, GATHER);
	unit[0] = seq_alloc(q, bytes, GATHER);
}

static void reshard_unit(struct seq *q, uint32_t unit[2])
{
	seq_free(q, &unit[0]);
	seq_free(q, &unit[1]);
}

/* A layer's quantized matmuls, each weight dequantized to 16 bits for its product and
 * freed after it (dequantized) */
static void dequantize(struct seq *q, const double *lt, size_t nl)
{
	enum { ALLOC = 0 };
	double h = (double)q->c->hidden, t = (double)q->c->tp;

	for (size_t i = 0; q->c->quantize && i < nl; i++)
		if (lt[i] >= 64 * h) { /* a matrix, not a norm or a bias */
			uint32_t w = seq_alloc(q, dequant_bytes(q->c, lt[i] / t), ALLOC);
			seq_free(q, &w);
		}
}

/* Eager attention's scores beside those kept, each a new tensor freed by the next:
 * forward makes q·kᵀ, scales it and adds the mask before the softmax output (`kept`,
 * Hugging Face's BertSelfAttention, GPT-2's _attn); backward makes the gradients of the
 * dropout's output, of the softmax's and of the scores in turn. With `kept_in`, the
 * masked scores are the softmax's input kept (ids[0]) before its output (ids[1]). */
static void scores(struct seq *q, double bytes, const double *kept, bool kept_in, uint32_t *ids)
{
	enum { ALLOC = 0 };
	uint32_t a = seq_alloc(q, bytes, ALLOC), b = seq_alloc(q, bytes, ALLOC), x;

	seq_free(q, &a);
	x = seq_alloc(q, kept_in ? kept[0] : bytes, ALLOC);
	seq_free(q, &b);
	if (kept_in)
		ids[0] = x, x = 0;
	if (ids)
		ids[kept_in] = seq_alloc(q, kept[kept_in], ALLOC);
	seq_free(q, &x);
}

const char *mt_plan_steps(const struct mt_plan_config *c, int steps, const struct mt_plan_sink *sink)
{
	enum { MAXT = 48, ALLOC = 0, GATHER = 1, REDUCE = 2 }; /* streams: compute, FSDP's all-gather, reduce-scatter */
	struct seq q = {c, sink, 0};
	struct share sh = share(c);
	double e = value_bytes(c), gb = grad_bytes(c), t = (double)c->tp, sb = tokens(c);
	double h = (double)c->hidden, v = (double)c->vocab;
	double lt[MAXT], tt[MAXT], kt[MAXT], rt[MAXT];
	size_t nl, nt, nk, nr, softmax, none_softmax;
	bool pt = torch_modules(c), fsdp = c->fsdp && sh.dp > 1, kept_in = softmax_keeps_input(c);
	/* FSDP's CPU offload: the shards, their gradients and the optimizer live on the host;
	 * the GPU holds what each unit gathers while it runs */
	bool on_host = c->fsdp && c->offload_params == MT_OFFLOAD_CPU;
	uint64_t dp1 = c->zero >= 1 || c->fsdp ? sh.dp : 1, dp3 = c->zero >= 3 || c->fsdp ? sh.dp : 1;
	uint64_t dp2 = c->zero >= 2 || c->fsdp ? sh.dp : 1, m = c->micro_batches ? c->micro_batches : 1;
	/* micro-batches after the second repeat its allocations: a few stand for any number */
	if (m > 4)
		m = 4;
	double emb = e * sb * h / (c->sp ? t : 1), head = tables(c);
	double trainable_layer = 0, graded_layer, lp = (double)c->layer_params / t, dropped = 0, scores_tok = 0;
	double local = fsdp1_local(c, &sh);
	uint64_t layers = c->layers;

	if (!c->layers || !c->seq)
		return "the replay needs the architecture and a micro-batch (--layers ..., --seq, --micro-batch)";
	if (c->pp > 1 || ((c->offload_optimizer || c->offload_params) && !on_host))
		return "the replay does not model pipeline parallelism, or offload other than FSDP's to the CPU";
	if (c->no_sync)
		return "the replay does not model FSDP's no_sync accumulation";
	if (c->layers > 4096)
		return "the replay takes at most 4096 layers";
	double per_seq = (double)c->seq / (double)c->cp;
	uint64_t nchunks = c->loss_chunk ? (uint64_t)ceil(per_seq / (double)c->loss_chunk) : 1;
	if (nchunks > 4096)
		return "the replay takes at most 4096 chunks of the loss";
	nl = layer_tensors(c, lt, MAXT);
	nt = trainable_tensors(c, tt, MAXT);
	if (c->fsdp1 && !c->lora_rank) /* FSDP1's flat parameter: a block's values in one tensor */
		for (; nt > 1; nt--)
			tt[0] += tt[nt - 1];
	nk = kept_tensors(c, c->recompute, kt, MAXT, &softmax);
	for (size_t i = 0; i < nt; i++)
		trainable_layer += tt[i] / t;
	graded_layer = trainable_layer + (c->orig_params ? lp : 0);
	if (c->attention == MT_ATTN_EAGER)
		scores_tok = (double)c->heads * (double)c->seq * e / t;
	/* what recomputation makes again: the layer's tensors, in forward order, up to what
	 * the recomputation does not keep */
	dropped = (kept_bytes(c, MT_RECOMPUTE_NONE) - kept_bytes(c, c->recompute)) / sb; /* per token */
	nr = kept_tensors(c, MT_RECOMPUTE_NONE, rt, MAXT, &none_softmax);
	for (size_t i = 0; i < nr; i++) {
		if (dropped <= 0) {
			nr = i;
			break;
		}
		rt[i] = fmin(rt[i], dropped);
		dropped -= rt[i];
	}

	uint32_t *ids = mt_calloc(layers * 3 * MAXT, sizeof *ids);
	if (!ids)
		return "out of memory";
	uint32_t *grads = ids, *states = ids + layers * MAXT, *copies = ids + 2 * layers * MAXT, *acts, *cast;
	uint32_t other[2] = {0}, head_copy = 0, ipg = 0;
	uint32_t *acts_all = mt_calloc(layers * (MAXT * 2 + 1), sizeof *acts_all), *held_dx;
	if (!acts_all) {
		mt_free(ids);
		return "out of memory";
	}
	acts = acts_all, cast = acts_all + layers * MAXT, held_dx = acts_all + 2 * layers * MAXT;
	uint32_t *chunks = mt_calloc(2 * nchunks, sizeof *chunks); /* their logits, then their log-softmaxes */
	if (!chunks) {
		mt_free(acts_all);
		mt_free(ids);
		return "out of memory";
	}

	/* the model: the embedding (and output layer), then each layer's tensors */
	double stored = stored_bytes(c), base = c->lora_rank ? frozen_bytes(c) : stored;
	double emb_stored = c->lora_rank ? unquantized_bytes(c) : stored;
	for (uint64_t l = 0; l < layers && c->fsdp1; l++) { /* FSDP1's wrap, the root's last */
		double unit[2 * MAXT];
		size_t n = 0;
		for (size_t i = 0; i < nl; i++)
			unit[n++] = base * lt[i] / t;
		for (size_t i = 0; c->lora_rank && i < nt; i++) /* in the block's unit, or their own */
			if (c->orig_params)
				unit[n++] = stored * tt[i] / t;
			else
				fsdp1_wrap(&q, (double[]){stored * tt[i] / t}, 1, dp3, on_host);
		fsdp1_wrap(&q, unit, n, dp3, on_host);
	}
	if (c->fsdp1) {
		double table = emb_stored * (double)c->vocab * vocab_width(c) / t;
		double root[] = {table, c->untied ? table : 0,
				 emb_stored * (head / t + positions(c) * h) - table * (c->untied ? 2 : 1)};
		fsdp1_wrap(&q, root, 3, dp3, on_host);
	} else if (!on_host) {
		double qh = quantized_head(c);
		seq_alloc(&q, shard(emb_stored * (head / t + positions(c) * h - qh) + base * qh, dp3), ALLOC);
	}
	for (uint64_t l = 0; l < layers && !on_host && !c->fsdp1;
	     l++) { /* a frozen base too is sharded by ZeRO-3 and FSDP */
		for (size_t i = 0; i < nl; i++) {
			/* a weight quantized as it loads (not a vector: a norm, the biases) */
			bool quantized = loads_quantized(c) && lt[i] >= 64 * h;
			uint32_t copy = quantized ? seq_alloc(&q, 2 * lt[i] / t, ALLOC) : 0;
			seq_alloc(&q, base * shard(lt[i] / t, dp3), ALLOC);
			seq_free(&q, &copy);
		}
		for (size_t i = 0; c->lora_rank && i < nt; i++)
			seq_alloc(&q, stored * shard(tt[i] / t, dp3), ALLOC);
	}
	if (c->fp8) /* the blocks' weights in fp8, cached for the step */
		seq_alloc(&q, held(c, &sh, 3, false) * (1 - head / (double)c->params), ALLOC);
	if (c->zero >= 3) /* DeepSpeed's gradient bucket, kept */
		ipg = seq_alloc(&q, ipg_bucket(c), ALLOC);
	seq_alloc(&q, dispatch_buffer(c), ALLOC); /* Megatron's all-gather dispatcher's, kept */
	/* PyTorch DDP's buckets, kept: the first of 1 MiB, the others of 25 MiB (bucket_cap_mb) */
	for (double left = ddp_buckets(c, &sh), cap = 1 << 20; left >= 1; left -= cap, cap = 25 << 20)
		seq_alloc(&q, fmin(left, cap), ALLOC);

	for (int step = 0; step < steps; step++) {
		for (uint64_t mb = 0; mb < m; mb++) {
			uint32_t emb_out, root = 0, root_grad = 0, gather[2][2] = {{0}}, head_in[3] = {0}, last = 0;
			/* forward */
			emb_out = seq_alloc(&q, emb, ALLOC);
			if ((step || mb) && c->outputs_kept && !c->classifier) /* the last one's logits, graph_held */
				last = seq_alloc(&q, 4 * sb * v / t + graph_held(c), ALLOC);
			if (fsdp) /* the root unit: embedding and output layer, gathered through the backward */
				root = seq_alloc(&q, e * head / t, GATHER);
			for (uint64_t l = 0; l < layers; l++) {
				uint32_t *a = acts + l * MAXT, *cc = cast + l * MAXT, tmp[MAXT] = {0};
				if (fsdp) { /* this block gathered, the next prefetched */
					gather_unit(&q, gather[l % 2], e * lp, local);
					if (l + 1 < layers && !c->fsdp1) /* FSDP1: no forward_prefetch */
						gather_unit(&q, gather[(l + 1) % 2], e * lp, local);
				} else if (c->zero >= 3 && sh.dp > 1) {
					gather_unit(&q, gather[l % 2], e * lp, 0);
				}
				if (c->precision == MT_AMP16) /* autocast's 16-bit copy of each weight */
					for (size_t i = 0; i < nl; i++)
						cc[i] = lt[i] >= h * h ? seq_alloc(&q, 2 * lt[i] / t, ALLOC) : 0;
				for (size_t i = 0; i < nk; i++)
					if (i == softmax) {
						double in_out[2] = {sb * kt[i], kept_in ? sb * kt[i + 1] : 0};
						scores(&q, sb * scores_tok, in_out, kept_in, &a[i]);
						i += kept_in;
					} else {
						a[i] = seq_alloc(&q, sb * kt[i], ALLOC);
					}
				dequantize(&q, lt, nl);
				for (size_t i = 0; i < nr; i++) /* what recomputation does not keep */
					tmp[i] = seq_alloc(&q, sb * rt[i], ALLOC);
				for (size_t i = 0; i < nr; i++)
					seq_free(&q, &tmp[i]);
				reshard_unit(&q, gather[l % 2]);
			}
			if (!c->classifier) { /* final norm and output layer inputs, fp32 logits */
				/* PyTorch's models upcast 16-bit logits for the loss (torchtitan's
				 * cross_entropy(pred.float()), transformers' logits.float()): the output
				 * layer's logits and their fp32 copy live until the log-softmax is made */
				uint32_t lg16 = 0, lg32 = 0, shifted = 0;
				head_in[0] = seq_alloc(&q, emb, ALLOC);
				head_in[1] = seq_alloc(&q, emb, ALLOC);
				for (uint64_t k = 0; c->loss_chunk && k < nchunks; k++) { /* 16-bit, then fp32 */
					uint32_t w = seq_alloc(&q, dequant_bytes(c, quantized_head(c)), ALLOC);
					chunks[nchunks + k] = seq_alloc(&q, e * chunk_values(c, k, per_seq), ALLOC);
					seq_free(&q, &w);
				}
				for (uint64_t k = 0; c->loss_chunk && k < nchunks; k++)
					chunks[k] = seq_alloc(&q, 4 * chunk_values(c, k, per_seq), ALLOC);
				for (uint64_t k = 0; c->loss_chunk && k < nchunks; k++)
					seq_free(&q, &chunks[nchunks + k]);
				if (pt && e < 4 && !c->loss_chunk) {
					lg16 = seq_alloc(&q, e * sb * v / t, ALLOC);
					lg32 = seq_alloc(&q, 4 * sb * v / t, ALLOC);
				}
				if (shifts_logits(c))
					shifted = seq_alloc(&q, 4 * sb * v / t, ALLOC);
				seq_free(&q, &last); /* the loop's logits = model(...) lets the last go */
				for (uint64_t k = 0; c->loss_chunk && k < nchunks; k++) /* their log-softmaxes */
					chunks[nchunks + k] = seq_alloc(&q, 4 * chunk_values(c, k, per_seq), ALLOC);
				if (!c->loss_chunk)
					head_in[2] = seq_alloc(&q, 4 * sb * v / t, ALLOC);
				seq_free(&q, &shifted);
				seq_free(&q, &lg32);
				seq_free(&q, &lg16);
			}
			/* backward: the logits' fp32 gradient (PyTorch's log-softmax backward also
			 * holds its input's), the output layer's gradient */
			uint32_t d1 = 0, d2 = 0, bucket = 0;
			if (!c->classifier && !c->loss_chunk) {
				d1 = seq_alloc(&q, 4 * sb * v / t, ALLOC);
				d2 = pt ? seq_alloc(&q, 4 * sb * v / t, ALLOC) : 0;
			}
			for (uint64_t k = nchunks; c->loss_chunk && k-- > 0;) { /* each chunk's two gradients */
				double n = 4 * chunk_values(c, k, per_seq);
				uint32_t w;
				d1 = seq_alloc(&q, n, ALLOC);
				d2 = seq_alloc(&q, n, ALLOC);
				w = seq_alloc(&q, dequant_bytes(c, quantized_head(c)), ALLOC);
				seq_free(&q, &w);
				seq_free(&q, &d1);
				seq_free(&q, &chunks[nchunks + k]);
				seq_free(&q, &d2);
			}
			if (!c->lora_rank && !other[0] && !on_host)
				other[0] = seq_alloc(&q, gb * shard(head / t + positions(c) * h, dp2), ALLOC);
			if (fsdp && !c->lora_rank && !c->classifier) /* the root's unsharded output-layer gradient */
				root_grad = seq_alloc(&q, e * v * vocab_width(c) / t, ALLOC);
			if (c->zero < 3) /* DeepSpeed's gradient bucket, for the backward */
				ipg = seq_alloc(&q, ipg_bucket(c), ALLOC);
			if (c->zero >= 2 && sh.dp > 1 && !c->lora_rank && !c->classifier)
				bucket = seq_alloc(&q, e * v * vocab_width(c) / t, ALLOC);
			seq_free(&q, &bucket);
			if (pt && e < 4 && d1) { /* the gradient cast back to the logits' 16 bits */
				seq_free(&q, &d1);
				d1 = seq_alloc(&q, e * sb * v / t, ALLOC);
			}
			seq_free(&q, &d2);
			seq_free(&q, &d1);
			for (int i = 2; i >= 0; i--)
				seq_free(&q, &head_in[i]);
			for (uint64_t l = layers; l-- > 0;) {
				uint32_t *a = acts + l * MAXT, *cc = cast + l * MAXT, *g = grads + l * MAXT;
				uint32_t re[MAXT] = {0}, dx, dffn, full = 0, rs = 0;
				if (fsdp) { /* this block gathered again, the one before prefetched
					     * (but not under reentrant checkpointing: fsdp1_reentrant) */
					gather_unit(&q, gather[l % 2], e * lp, local);
					if (l > 0 && !fsdp1_reentrant(c, &sh))
						gather_unit(&q, gather[(l - 1) % 2], e * lp, local);
				} else if (c->zero >= 3 && sh.dp > 1) {
					gather_unit(&q, gather[l % 2], e * lp, 0);
				}
				for (size_t i = 0; i < nr; i++) /* recomputed */
					re[i] = seq_alloc(&q, sb * rt[i], ALLOC);
				dx = seq_alloc(&q, emb, ALLOC);
				dffn = seq_alloc(&q, e * sb * (double)c->ffn / t, ALLOC);
				if (fsdp) { /* the block's unsharded gradient, and the reduce-scatter's fp32
					     * input (FSDP2) or new shard (FSDP1): fsdp_reduced */
					full = seq_alloc(&q, e * graded_layer, ALLOC);
					rs = seq_alloc(&q, c->fsdp1 ? e * shard(graded_layer, dp2) : 4 * graded_layer,
						       REDUCE);
				} else if (c->zero >= 2 && sh.dp > 1) {
					full = seq_alloc(&q, e * trainable_layer, ALLOC);
				}
				scores(&q, sb * scores_tok, NULL, false, NULL);
				dequantize(&q, lt, nl);
				if (l >= c->dense_layers) { /* router_copies */
					uint32_t fp32[2] = {seq_alloc(&q, router_copies(c) / 2, ALLOC),
							    seq_alloc(&q, router_copies(c) / 2, ALLOC)};
					seq_free(&q, &fp32[1]);
					seq_free(&q, &fp32[0]);
				}
				if (c->orig_params && !on_host && !g[0]) /* the block's flat gradient */
					g[0] = seq_alloc(&q, gb * shard(graded_layer, dp2), ALLOC);
				for (size_t i = 0; i < nt && !on_host && !c->orig_params; i++)
					if (!g[i])
						g[i] = seq_alloc(&q, gb * shard(tt[i] / t, dp2), ALLOC);
				seq_free(&q, &rs);
				seq_free(&q, &full);
				seq_free(&q, &dffn);
				for (size_t i = 0; i < nr; i++)
					seq_free(&q, &re[i]);
				if (holds_checkpoints(c, &sh)) { /* the input and its gradient, to the end */
					held_dx[l] = dx;
				} else {
					seq_free(&q, &dx);
					for (size_t i = 0; i < MAXT; i++)
						seq_free(&q, &a[i]);
				}
				for (size_t i = 0; i < MAXT; i++)
					seq_free(&q, &cc[i]);
				reshard_unit(&q, gather[l % 2]);
			}
			for (uint64_t l = 0; l < layers; l++) {
				seq_free(&q, &held_dx[l]);
				for (size_t i = 0; i < MAXT; i++)
					seq_free(&q, &acts[l * MAXT + i]);
			}
			seq_free(&q, &root_grad);
			seq_free(&q, &root);
			seq_free(&q, &emb_out);
			for (uint64_t k = 0; c->loss_chunk && k < nchunks; k++)
				seq_free(&q, &chunks[k]);
			if (c->zero < 3)
				seq_free(&q, &ipg);
		}
		/* the optimizer: its state made by the first step and kept; then, as it steps
		 * (step_temporaries), an fp32 update per tensor, or foreach's copy of each
		 * tensor's state made for all before any goes, or nothing (fused) */
		if (c->optimizer != MT_NO_OPTIMIZER && !on_host) {
			double per = optimizer_bytes(c), state = state_bytes(c);
			double outside = shard(head / t + positions(c) * h, dp1);
			double ds = deepspeed_step(c, &sh), part = held(c, &sh, 1, true);
			enum step_made made = ds > 0 ? STEP_NOTHING : step_made(c); /* DeepSpeed's: below */
			bool loop = made == STEP_UPDATES, copy = made == STEP_COPIES;
			/* _init_group makes every tensor's state before the step's arithmetic */
			for (uint64_t l = 0; l < layers; l++)
				for (size_t i = 0; i < nt; i++)
					if (!states[l * MAXT + i] && !paged_tensor(c, tt[i]))
						states[l * MAXT + i] =
						    seq_alloc(&q, per * shard(tt[i] / t, dp1), ALLOC);
			if (!c->lora_rank && !other[1] && !paged_tensor(c, head + positions(c) * h))
				other[1] = seq_alloc(&q, per * outside, ALLOC);
			for (uint64_t l = 0; l < layers; l++)
				for (size_t i = 0; i < nt; i++) {
					double n = shard(tt[i] / t, dp1);
					uint32_t up;
					if (copy)
						copies[l * MAXT + i] = seq_alloc(&q, state * n, ALLOC);
					if (loop) {
						up = seq_alloc(&q, 4 * n, ALLOC);
						seq_free(&q, &up);
					}
				}
			if (copy && !c->lora_rank)
				head_copy = seq_alloc(&q, state * outside, ALLOC);
			/* DeepSpeed: the gradients outside the partition freed (at stage 1 the partition's
			 * kept as one), then each sub-group's flat gradient, taken to fp32, then stepped */
			uint32_t kept = 0;
			if (ds > 0 && c->zero == 1) {
				for (uint64_t l = 0; l < layers * MAXT; l++)
					seq_free(&q, &grads[l]);
				seq_free(&q, &other[0]);
				kept = seq_alloc(&q, gb * part, ALLOC);
			}
			for (double left = ds > 0 ? part : 0; left >= 1; left -= ds) {
				double n = fmin(left, ds);
				uint32_t flat = e == 4 ? 0 : seq_alloc(&q, e * n, ALLOC), up = 0;
				uint32_t fp32 = seq_alloc(&q, 4 * n, ALLOC);
				seq_free(&q, &flat);
				seq_free(&q, &kept); /* free_grad_in_param_list(params_in_partition) */
				if (torch_step(c))
					up = seq_alloc(&q, state * n, ALLOC);
				seq_free(&q, &up);
				seq_free(&q, &fp32);
			}
			for (uint64_t l = 0; l < layers * MAXT; l++)
				seq_free(&q, &copies[l]);
			seq_free(&q, &head_copy);
		}
		if (!c->keep_grads) { /* zero_grad(set_to_none=True) */
			for (uint64_t l = 0; l < layers * MAXT; l++)
				seq_free(&q, &grads[l]);
			seq_free(&q, &other[0]);
		}
	}
	mt_free(chunks);
	mt_free(acts_all);
	mt_free(ids);
	return q.too_big ? "a tensor of the step is larger than 1 PiB" : NULL;
}
