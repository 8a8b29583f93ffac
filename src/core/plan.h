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

/* MT_MIXED16: bf16/fp16 values and gradients, fp32 master weights in the optimizer
 * (DeepSpeed, Megatron); MT_AMP16: PyTorch autocast: fp32 weights and gradients, 16-bit
 * copies of the weights made in the forward pass; MT_PURE16: bf16/fp16 everything,
 * optimizer state included, no master copy. */
enum mt_precision { MT_FP32, MT_MIXED16, MT_AMP16, MT_PURE16 };
/* MT_SGD: plain SGD (momentum 0): no state of its own, an fp32 master copy under MT_MIXED16 */
enum mt_optimizer { MT_ADAM, MT_ADAM8BIT, MT_SGD_MOMENTUM, MT_NO_OPTIMIZER, MT_ADAFACTOR, MT_LION, MT_SGD };
/* MT_RECOMPUTE_OP: torchtitan's op-level selective checkpointing (saves matmul outputs
 * but every second one, and the attention's; recomputes the rest) */
enum mt_recompute { MT_RECOMPUTE_NONE, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_FULL, MT_RECOMPUTE_OP };
enum mt_offload { MT_OFFLOAD_NONE, MT_OFFLOAD_CPU, MT_OFFLOAD_NVME };
enum mt_bias { MT_BIAS_ALL, MT_BIAS_QKV, MT_BIAS_NONE, MT_BIAS_MLP };
enum mt_attention { MT_ATTN_EAGER, MT_ATTN_FLASH };
/* How the layers are written: Megatron's fused kernels (Korthikanti et al.'s accounting);
 * PyTorch modules as Hugging Face, torchtitan and torchtune write them; LitGPT's own
 * (litgpt/model.py, lora.py: one matrix makes q, k and v, its own LoRA layers). */
enum mt_impl { MT_IMPL_MEGATRON, MT_IMPL_PYTORCH, MT_IMPL_LITGPT };
/* How torch.optim steps (torch/optim/optimizer.py's _default_to_fused_or_foreach):
 * foreach, multi-tensor ops over every parameter of a device and dtype at once (its
 * default on CUDA since PyTorch 2.0); fused, one kernel in place; a tensor at a time.
 * MT_STEP_AUTO: foreach for PyTorch modules (impl pytorch) from PyTorch 2.0, DeepSpeed's
 * own step (its FusedAdam on an fp32 flat gradient) under its ZeRO, else a tensor at a
 * time. */
enum mt_step { MT_STEP_AUTO, MT_STEP_FOREACH, MT_STEP_FUSED, MT_STEP_LOOP };
/* A frozen base's storage (LoRA): its own precision, 8-bit, 4-bit NF4 (+ double quantization) */
enum mt_quant { MT_QUANT_NONE, MT_QUANT_INT8, MT_QUANT_NF4, MT_QUANT_NF4_DQ };
/* LoRA targets, a set: q, k, v, o projections, the MLP's matrices, the output layer */
enum { MT_LORA_Q = 1, MT_LORA_K = 2, MT_LORA_V = 4, MT_LORA_O = 8, MT_LORA_MLP = 16, MT_LORA_HEAD = 32 };
enum mt_component {
	MT_PLAN_PARAMS,
	MT_PLAN_GRADS,
	MT_PLAN_OPTIMIZER,
	MT_PLAN_ACTIVATIONS,
	MT_PLAN_TEMPORARIES,
	MT_PLAN_COMPONENTS
};
extern const char *const mt_plan_component_names[MT_PLAN_COMPONENTS];
/* The names options take, NULL-terminated; precision and optimizer names map through
 * their _values tables ("bf16" and "fp16" are both MT_MIXED16, "adam" and "adamw" MT_ADAM). */
extern const char *const mt_plan_recompute_names[5];
extern const char *const mt_plan_offload_names[4];
extern const char *const mt_plan_precision_names[8];
extern const enum mt_precision mt_plan_precision_values[7];
extern const char *const mt_plan_optimizer_names[9];
extern const enum mt_optimizer mt_plan_optimizer_values[8];
extern const char *const mt_plan_bias_names[5];
extern const char *const mt_plan_attention_names[3];
extern const char *const mt_plan_impl_names[4];
extern const char *const mt_plan_quant_names[5];
extern const char *const mt_plan_step_names[5];

struct mt_plan_config {
	/* the model: an architecture (layers > 0), or parameter counts alone */
	uint64_t layers, hidden, heads, query_groups, head_dim, ffn, vocab, seq, micro_batch;
	uint64_t positions;	     /* learned position-embedding rows (and token types); 0: seq */
	bool untied;		     /* a separate output layer instead of the tied embedding */
	bool swiglu, rmsnorm;	     /* gated MLP (three h x ffn matrices); RMSNorm (no bias) */
	bool rmsnorm_16bit;	     /* ... computed in 16 bits, no fp32 copy kept (lit_gpt before #606) */
	bool rope, pooler, qk_norm;  /* rotary positions; an encoder's pooler; per-head q/k norms */
	bool qk_norm_heads;	     /* ... the q/k norms over every head's values (OLMo 2) */
	uint64_t norms;		     /* norms per layer, each keeping its input; 0: two */
	bool parallel;		     /* attention and MLP read one residual (GPT-J, Phi, Falcon) */
	bool norm_no_bias;	     /* LayerNorms with weights and no bias (MPT) */
	bool fixed_norms;	     /* norms without parameters (OLMo) */
	bool head_bias, embed_norm;  /* a bias on the output layer (Phi, GPT-J); a norm after the embedding (BLOOM) */
	bool post_norm;		     /* norms after each sublayer, none at the end (OPT-350m) */
	uint64_t embed_dim;	     /* the token embedding's width, projected to hidden (OPT-350m); 0: hidden */
	bool no_dropout;	     /* no dropout masks kept */
	bool no_attention_dropout;   /* none on the attention probabilities (dropout elsewhere) */
	bool upcast_softmax;	     /* eager softmax in fp32 of 16-bit scores, then cast back */
	bool separate_qkv;	     /* three matrices make q, k and v though biases are on all (BERT, OPT) */
	bool fused_proj;	     /* one matrix makes q, k and v, one a gated MLP's gate and up (Phi-3) */
	uint64_t classifier;	     /* labels of a classification head instead of the output layer */
	uint64_t loss_chunk;	     /* LitGPT's chunked loss: positions per logits chunk; 0: whole */
	enum mt_bias bias;	     /* which linear layers carry biases */
	enum mt_attention attention; /* eager (scores kept) or fused attention */
	enum mt_impl impl;	     /* how the layers are written */
	uint64_t torch;		     /* PyTorch's release, major * 100 + minor; 0: a current one */
	uint64_t transformers;	     /* Hugging Face transformers' release, the same way */
	uint64_t experts, topk, moe_ffn, shared_ffn, dense_layers; /* mixture of experts */
	bool shared_gate;					   /* a sigmoid gate on the shared experts (Qwen-MoE) */
	uint64_t q_lora_rank, kv_lora_rank, rope_head_dim, v_head_dim; /* multi-latent attention */
	uint64_t mtp_layers;					       /* multi-token prediction layers */
	bool alltoall;			/* Megatron's all-to-all token dispatcher, not its default all-gather one */
	bool router_fp32;		/* Megatron's router in fp32 (--moe-router-dtype fp32) */
	uint64_t params, largest_layer; /* 0: from the architecture */
	/* the training setup */
	enum mt_precision precision;
	enum mt_optimizer optimizer;
	enum mt_step optimizer_impl;
	bool paged; /* bitsandbytes' paged optimizer: large tensors' state in managed memory */
	enum mt_recompute recompute;
	bool reentrant; /* ... by torch.utils.checkpoint's reentrant form */
	int zero;	/* ZeRO stage 0-3 */
	uint64_t nodes, gpus_per_node;
	uint64_t tp, pp, vpp, cp, ep, etp; /* tensor, pipeline, virtual, context, expert (and its tp) sizes */
	uint64_t micro_batches;		   /* per step (gradient accumulation); 0: enough to fill the pipeline */
	bool sp;			   /* sequence parallelism (with tp) */
	bool fsdp;			   /* PyTorch FSDP2: sharded fp32 parameters, a block gathered at a time */
	bool fsdp1;			   /* ... as FSDP1: flat parameters, no forward prefetch, 16-bit reduction */
	bool orig_params;		   /* ... FSDP1's use_orig_params: a block's frozen values get gradients */
	bool no_sync;			   /* FSDP's gradient accumulation inside no_sync(): unsharded gradients */
	bool fp8;			   /* fp8 matrix multiplies (TransformerEngine, torchao) */
	bool grad_fp32;			   /* gradients accumulated in fp32 (Megatron's main_grad) */
	bool keep_grads;		   /* gradients live through forward and backward */
	bool bucket_view;		   /* PyTorch DDP's gradients are views of its buckets */
	enum mt_offload offload_optimizer, offload_params;
	uint64_t reduce_bucket;	   /* DeepSpeed's gradient bucket in elements; 0: 5e8 */
	bool contiguous_gradients; /* ... kept on the GPU through backward (stages 1-2) or always (3) */
	uint64_t lora_rank;	   /* LoRA adapters of this rank on a frozen base (0: full training) */
	unsigned lora_modules;	   /* MT_LORA_* targets; 0: q and v */
	double lora_dropout;	   /* the adapters' dropout probability (PEFT's lora_dropout) */
	bool lora_fp32;		   /* the adapters in fp32 on a 16-bit base (PEFT's autocast_adapter_dtype) */
	bool outputs_kept;	   /* the loop holds the last micro-batch's outputs into the next forward */
	bool torchao;		   /* the quantized base is torchao's NF4Tensor, not bitsandbytes' */
	enum mt_quant quantize;	   /* the frozen base's storage */
	double overhead;	   /* framework bytes per GPU: CUDA context, library workspaces */
	bool nvml;		   /* count what NVML counts: the CUDA context and NCCL's buffers too */
	uint64_t gpu_arch;	   /* the GPU's compute capability x 10 (90: Hopper); 0: 80 */
	double buffer_factor;	   /* DeepSpeed estimators' additional_buffer_factor; 0: 1.5 */
	/* derived by mt_plan_check */
	uint64_t expert_params, trainable, layer_params;
};

/* The setup where nothing says otherwise: memtap plan's and memtap.plan{}'s start. */
#define MT_PLAN_DEFAULTS                                                                                               \
	{                                                                                                              \
		.precision = MT_MIXED16, .optimizer = MT_ADAM, .nodes = 1, .gpus_per_node = 1                          \
	}

/* What a measured run teaches the model: each component's measured bytes over the
 * estimate at the run's own setting (k), measured bytes where the model expects none
 * (carry), and bytes of no component (other), carried as framework overhead. */
struct mt_plan_scale {
	double k[MT_PLAN_COMPONENTS], carry[MT_PLAN_COMPONENTS], other;
	const char *moment;	       /* the model's moment the measurement was compared with */
	double at[MT_PLAN_COMPONENTS]; /* ... the model's components then */
};

/* Bytes on one GPU at the moment of its peak, by component; offloaded bytes per node. */
struct mt_plan {
	uint64_t dp;
	double bytes[MT_PLAN_COMPONENTS];
	double framework, total, cpu, nvme;
	double context, nccl, cublas; /* the framework's named parts (the rest: --overhead, a measured run's) */
	double paged;		      /* optimizer state in CUDA managed memory, outside the total */
	const char
	    *moment; /* "backward start", "loss backward", "backward of the last/first layer", "optimizer step" */
};

/* The options that describe a model and a setup (plan_options.def), each setting the
 * struct mt_plan_config field of its name. */
enum mt_plan_kind {
	MT_PLAN_OPT_COUNT,
	MT_PLAN_OPT_FLAG,
	MT_PLAN_OPT_SIZE,
	MT_PLAN_OPT_REAL,
	MT_PLAN_OPT_ZERO,
	MT_PLAN_OPT_PRECISION,
	MT_PLAN_OPT_OPTIMIZER,
	MT_PLAN_OPT_RECOMPUTE,
	MT_PLAN_OPT_OFFLOAD,
	MT_PLAN_OPT_BIAS,
	MT_PLAN_OPT_ATTENTION,
	MT_PLAN_OPT_IMPL,
	MT_PLAN_OPT_QUANT,
	MT_PLAN_OPT_STEP,
	MT_PLAN_OPT_LORA,
	MT_PLAN_OPT_VERSION
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
/* A whole count in text; k, M, B (or G) and T multiply by powers of 1000. */
bool mt_plan_parse_count(const char *text, uint64_t *out);
/* The option's current value as text, as mt_plan_set reads it */
void mt_plan_get(const struct mt_plan_config *c, const struct mt_plan_option *o, char *buf, size_t n);

/* Fills what the architecture implies (params, largest layer, query groups, ffn).
 * Returns NULL, or one line saying why the configuration is impossible. */
const char *mt_plan_check(struct mt_plan_config *c);
/* c must have passed mt_plan_check; s may be NULL (the formulas alone). */
void mt_plan_compute(const struct mt_plan_config *c, const struct mt_plan_scale *s, struct mt_plan *out);
/* The scale that makes the model of `run`, at the moment the measurement resembles most,
 * reproduce measured[] and other bytes. */
void mt_plan_calibrate(const struct mt_plan_config *run, const double measured[MT_PLAN_COMPONENTS], double other,
		       struct mt_plan_scale *s);
/* The total over ZeRO stages 0-3 x recomputation none/selective/full, INFINITY where
 * that setting is impossible. */
void mt_plan_table(const struct mt_plan_config *c, const struct mt_plan_scale *s, double table[4][3]);
/* Parameters whose params, grads or optimizer state one GPU holds (after tp, pp, ZeRO). */
double mt_plan_params_on_gpu(const struct mt_plan_config *c, enum mt_component j);
/* The setup in words: precision, optimizer, ZeRO, GPUs, micro-batch, recomputation. */
void mt_plan_describe(const struct mt_plan_config *c, char *buf, size_t len);
/* What the plan of c only approximates, each a sentence saying which way it errs
 * (docs/PLAN.md); how many, at most max in out. */
size_t mt_plan_approximations(const struct mt_plan_config *c, const char **out, size_t max);
/* Activation bytes one transformer layer keeps for backward (Korthikanti et al. Table 2,
 * generalised to any ffn, GQA, MoE and to fp32 values). */
double mt_plan_layer_activations(const struct mt_plan_config *c);
/* Parameters of the model's parts: one dense and one MoE layer, the embeddings (with
 * the output layer, final norm, pooler), the active parameters per token. */
struct mt_plan_count {
	double dense_layer, moe_layer, moe_layer_active, embedding, total, active, expert;
};
void mt_plan_count(const struct mt_plan_config *c, struct mt_plan_count *n);

/* One training step's allocations as the model sees them, tensor by tensor, in the
 * order the step makes and frees them (the model, then `steps` steps of forward,
 * backward and the optimizer): what the caching allocator's replay runs. alloc names a
 * new id (from 1) and the stream (0 compute, 1 an all-gather's, 2 a reduce-scatter's). */
struct mt_plan_sink {
	void *ctx;
	void (*alloc)(void *ctx, uint32_t id, uint64_t bytes, uint64_t stream);
	void (*free)(void *ctx, uint32_t id);
};
/* c must have passed mt_plan_check. NULL, or one line saying why the setup has no
 * sequence (no architecture, pipeline parallelism, offload). */
const char *mt_plan_steps(const struct mt_plan_config *c, int steps, const struct mt_plan_sink *sink);

/* DeepSpeed's estimate_zero2/zero3_model_states_mem_needs (cpu and gpu bytes), exactly. */
void mt_plan_deepspeed_zero2(double params, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     double buffer_factor, double *cpu, double *gpu);
void mt_plan_deepspeed_zero3(double params, double largest, uint64_t gpus_per_node, uint64_t nodes, bool cpu_offload,
			     bool cpu_offload_params, bool zero_init, double buffer_factor, double *cpu, double *gpu);
/* Megatron-LM's theoretical_memory_usage.py as of the commit in docs/PLAN.md (GPT with
 * GQA, kv_channels, MoE with expert parallelism, MLA, MTP; context parallelism in its
 * data-parallel size): weight and optimizer bytes and activation bytes, with its padded
 * vocabulary and total parameters; ZeRO >= 1 stands for its distributed optimizer. */
#define MT_MEGATRON_COMMIT "d98e8a64dd" /* NVIDIA/Megatron-LM, 2026-08-22 */
struct mt_megatron {
	uint64_t padded_vocab, ffn;
	double weights, activations, total_params, active_params, most_loaded;
};
void mt_plan_megatron(const struct mt_plan_config *c, struct mt_megatron *out);

#endif
