/* memtap plan --model: a Hugging Face config.json read into the planner's model, per
 * family as transformers builds the model from it (the modules, their biases, norms and
 * embeddings): Llama-style decoders (llama, mistral, qwen2, qwen3, gemma, phi3; gemma2
 * and gemma3_text with four norms a layer; olmo, olmo2), the GPT-2/NeoX/OPT/BERT style
 * (learned positions, biases, LayerNorm), parallel blocks (phi, gptj, falcon), ALiBi
 * models (bloom, mpt), starcoder2, and mixtures of experts (mixtral, qwen2_moe,
 * qwen3_moe, deepseek_v2/v3 with multi-latent attention).
 * A field that changes the parameters in a way the planner does not model is refused by
 * name. Nothing here exits or prints. */
#include "plan/config.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "plan/hjson.h"

struct hf {
	const char *path;
	const json_t *root;
	struct hf_config *out;
};

static int bad(struct hf *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct hf *h, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(h->out->err, sizeof h->out->err, "%s: ", h->path);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof h->out->err)
		vsnprintf(h->out->err + n, sizeof h->out->err - (size_t)n, fmt, ap);
	va_end(ap);
	return EINVAL;
}

static void note(struct hf *h, const char *text)
{
	size_t n = strlen(h->out->note);

	snprintf(h->out->note + n, sizeof h->out->note - n, "%s%s", n ? "; " : "", text);
}

/* A whole number field: 0 when absent or null (then def), an error when not a count */
static int count(struct hf *h, const char *key, uint64_t def, uint64_t *out)
{
	const json_t *v = json_object_get(h->root, key);

	*out = def;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_real(v) && json_real_value(v) == (double)(uint64_t)json_real_value(v) && json_real_value(v) >= 0 &&
	    json_real_value(v) < 1e15) {
		*out = (uint64_t)json_real_value(v);
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000000ll)
		return bad(h, "%s must be a whole number from 0 to 10^12", key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int need(struct hf *h, const char *key, uint64_t *out)
{
	int r = count(h, key, 0, out);

	if (!r && !*out)
		return bad(h, "%s (%s) has no %s: memtap needs it to count the parameters", h->out->model_type, h->path,
			   key);
	return r;
}

static bool flag(struct hf *h, const char *key, bool def)
{
	const json_t *v = json_object_get(h->root, key);

	return v && json_is_boolean(v) ? json_is_true(v) : def;
}

/* a dropout probability field: true when it drops something */
static bool drops(struct hf *h, const char *key)
{
	const json_t *v = json_object_get(h->root, key);

	return v && json_is_number(v) && json_number_value(v) > 0;
}

/* A field set to a value the planner does not model: refused by name */
static int refuse_true(struct hf *h, const char *key, const char *why)
{
	if (flag(h, key, false))
		return bad(h, "%s: true is not modelled (%s)", key, why);
	return 0;
}

enum family {
	LLAMA,
	GPT2,
	NEOX,
	OPT,
	BERT,
	MOE_MIXTRAL,
	MOE_QWEN,
	MOE_DEEPSEEK,
	GEMMA2,
	PHI,
	GPTJ,
	FALCON,
	BLOOM,
	MPT,
	STARCODER2,
	OLMO
};

static const struct {
	const char *type;
	enum family family;
} families[] = {{"llama", LLAMA},
		{"mistral", LLAMA},
		{"qwen2", LLAMA},
		{"qwen3", LLAMA},
		{"gemma", LLAMA},
		{"phi3", LLAMA},
		{"gpt2", GPT2},
		{"gpt_neox", NEOX},
		{"opt", OPT},
		{"bert", BERT},
		{"roberta", BERT},
		{"mixtral", MOE_MIXTRAL},
		{"qwen2_moe", MOE_QWEN},
		{"qwen3_moe", MOE_QWEN},
		{"deepseek_v2", MOE_DEEPSEEK},
		{"deepseek_v3", MOE_DEEPSEEK},
		{"gemma2", GEMMA2},
		{"gemma3_text", GEMMA2},
		{"phi", PHI},
		{"gptj", GPTJ},
		{"falcon", FALCON},
		{"bloom", BLOOM},
		{"mpt", MPT},
		{"starcoder2", STARCODER2},
		{"olmo", OLMO},
		{"olmo2", OLMO}};

/* Known model types memtap cannot plan from their config, and what it would need */
static const struct {
	const char *const types[12];
	const char *why;
} unmodelled[] = {
    {{"t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper", "nllb-moe", NULL},
     "an encoder-decoder model: memtap plans one stack of layers (a decoder, or an encoder), not an encoder and a "
     "decoder with cross-attention between them"},
    {{"vit", "deit", "beit", "swin", "dinov2", "clip", "siglip", "convnext", NULL},
     "a vision model: its patch embedding and image tokens are not read from a config (describe it: --layers, "
     "--hidden, --heads, --ffn, --vocab channels x patch^2, --positions patches + 1, --classifier N)"},
    {{"gemma3", "llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "mllama", "idefics2", "paligemma", NULL},
     "a vision-language model: its vision tower is not modelled (give its text_config's fields as the text "
     "model's own config, e.g. gemma3_text, or describe it with --layers, --hidden, ...)"},
};

/* The first of two names a field goes by (falcon's n_layer, bloom's n_embed) present */
static const char *either(struct hf *h, const char *name, const char *alias)
{
	return json_object_get(h->root, name) || !json_object_get(h->root, alias) ? name : alias;
}

/* The layers a MoE config makes MoE: Qwen's every decoder_sparse_step-th (1-based) but
 * mlp_only_layers; DeepSeek's from first_k_dense_replace on, every moe_layer_freq-th */
static int moe_layers(struct hf *h, enum family f, uint64_t layers, uint64_t *moe)
{
	uint64_t step, first;
	const json_t *only = json_object_get(h->root, "mlp_only_layers");
	int r;

	*moe = 0;
	if (f == MOE_MIXTRAL) {
		*moe = layers;
		return 0;
	}
	if (f == MOE_QWEN) {
		if ((r = count(h, "decoder_sparse_step", 1, &step)))
			return r;
		if (only && !json_is_array(only) && !json_is_null(only))
			return bad(h, "mlp_only_layers must be a list of layer numbers");
		for (uint64_t i = 0; i < layers; i++) {
			bool dense = step == 0 || (i + 1) % step != 0;
			for (size_t j = 0; j < json_array_size(only); j++)
				if (json_is_integer(json_array_get(only, j)) &&
				    (uint64_t)json_integer_value(json_array_get(only, j)) == i)
					dense = true;
			*moe += !dense;
		}
		return 0;
	}
	if ((r = count(h, "first_k_dense_replace", 0, &first)) || (r = count(h, "moe_layer_freq", 1, &step)))
		return r;
	for (uint64_t i = first; i < layers; i++)
		*moe += step && i % step == 0;
	return 0;
}

/* architectures [*ForSequenceClassification]: the head transformers puts in place of the
 * output layer, of len(id2label) labels, else num_labels, else its default 2 */
static int read_head(struct hf *h, struct mt_plan_config *c)
{
	const json_t *archs = json_object_get(h->root, "architectures"), *ids = json_object_get(h->root, "id2label");
	static const char suffix[] = "ForSequenceClassification";
	const char *head = NULL;
	char text[256];
	uint64_t labels;
	int r;

	for (size_t i = 0; i < json_array_size(archs); i++) {
		const char *a = json_string_value(json_array_get(archs, i));
		size_t n = a ? strlen(a) : 0;
		if (n >= sizeof suffix - 1 && !strcmp(a + n - (sizeof suffix - 1), suffix))
			head = a;
		else if (a && (strstr(a, "ForTokenClassification") || strstr(a, "ForQuestionAnswering") ||
			       strstr(a, "ForMultipleChoice"))) {
			snprintf(text, sizeof text,
				 "architectures %s: its head is not modelled (planned with the output layer)", a);
			note(h, text);
		}
	}
	if (!head)
		return 0;
	if (json_is_object(ids) && json_object_size(ids))
		labels = json_object_size(ids);
	else if ((r = count(h, "num_labels", 2, &labels)))
		return r;
	if (!labels)
		return bad(h, "num_labels: 0 labels make no classification head");
	c->classifier = labels;
	c->untied = false;
	snprintf(text, sizeof text, "%s: a head of %llu labels (--classifier %llu) instead of the output layer", head,
		 (unsigned long long)labels, (unsigned long long)labels);
	note(h, text);
	return 0;
}

static bool qflag(const json_t *q, const char *key)
{
	return json_is_true(json_object_get(q, key));
}

/* quantization_config: bitsandbytes' 4-bit (nf4 or fp4, stored alike: 4 bits and an
 * absmax per 64; double quantization) and 8-bit loads as the planner's --quantize, which
 * the CLI applies with LoRA adapters; any other method named in a note */
static int read_quantization(struct hf *h, struct mt_plan_config *c)
{
	const json_t *q = json_object_get(h->root, "quantization_config"), *skip;
	const char *method, *type;
	char text[256];

	if (!q || json_is_null(q))
		return 0;
	if (!json_is_object(q))
		return bad(h, "quantization_config must be an object");
	method = json_string_value(json_object_get(q, "quant_method"));
	if (!method || strcmp(method, "bitsandbytes")) {
		snprintf(text, sizeof text,
			 "quantization_config: quant_method '%s' is not modelled (weights planned at the precision's "
			 "bytes)",
			 method ? method : "(none)");
		note(h, text);
		return 0;
	}
	if (qflag(q, "load_in_4bit") || qflag(q, "_load_in_4bit")) {
		type = json_string_value(json_object_get(q, "bnb_4bit_quant_type")) ?: "fp4";
		if (strcmp(type, "nf4") && strcmp(type, "fp4"))
			return bad(h, "quantization_config: bnb_4bit_quant_type '%s' is not nf4 or fp4", type);
		c->quantize = qflag(q, "bnb_4bit_use_double_quant") ? MT_QUANT_NF4_DQ : MT_QUANT_NF4;
		snprintf(text, sizeof text, "quantization_config: bitsandbytes 4-bit %s%s as --quantize %s%s", type,
			 c->quantize == MT_QUANT_NF4_DQ ? " with double quantization" : "",
			 mt_plan_quant_names[c->quantize], strcmp(type, "fp4") ? "" : " (fp4 is stored as nf4 is)");
	} else if (qflag(q, "load_in_8bit") || qflag(q, "_load_in_8bit")) {
		c->quantize = MT_QUANT_INT8;
		snprintf(text, sizeof text, "quantization_config: bitsandbytes 8-bit as --quantize int8");
	} else {
		snprintf(text, sizeof text,
			 "quantization_config: bitsandbytes loads neither 4- nor 8-bit: not quantized");
	}
	note(h, text);
	skip = json_object_get(q, "llm_int8_skip_modules");
	if (json_array_size(skip))
		note(h, "quantization_config: llm_int8_skip_modules not modelled (the blocks' linear layers planned "
			"quantized, the embeddings and output layer not)");
	return 0;
}

int hf_config_parse(const char *path, const char *text, size_t len, struct mt_plan_config *c, struct hf_config *out)
{
	struct hjson_error err;
	json_t *root;
	struct hf h = {.path = path, .out = out};
	const char *type;
	enum family f = LLAMA;
	bool known = false;
	uint64_t layers, hidden, heads, groups, head_dim, ffn, vocab, positions = 0, types = 0, moe;
	int r = 0;

	memset(out, 0, sizeof *out);
	if (!(root = hjson_load(text, len, false, &err))) {
		mt_text_line(err.text);
		snprintf(out->err, sizeof out->err, "%s:%d:%d: not valid JSON: %s", path, err.line, err.column,
			 err.text);
		return EINVAL;
	}
	h.root = root;
	if (!json_is_object(root) || !(type = json_string_value(json_object_get(root, "model_type")))) {
		r = bad(&h, "a Hugging Face config.json is an object with a model_type");
		goto done;
	}
	snprintf(out->model_type, sizeof out->model_type, "%s", type);
	for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
		if (!strcmp(type, families[i].type))
			f = families[i].family, known = true;
	for (size_t i = 0; i < sizeof unmodelled / sizeof unmodelled[0]; i++)
		for (const char *const *t = unmodelled[i].types; *t; t++)
			if (!strcmp(type, *t)) {
				r = bad(&h, "model_type '%s' is %s", type, unmodelled[i].why);
				goto done;
			}
	if (!known) {
		r = bad(
		    &h,
		    "model_type '%s' is not modelled: memtap reads llama, mistral, qwen2, qwen3, gemma, gemma2, "
		    "gemma3_text, phi, phi3, gptj, falcon, bloom, mpt, starcoder2, olmo, olmo2, gpt2, gpt_neox, opt, "
		    "bert, roberta, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3 (or describe it with "
		    "--layers, --hidden, ...)",
		    type);
		goto done;
	}
	/* torch_dtype (transformers <= 4.55) or dtype: what the DeepSpeed "auto" precision reads */
	const char *dtype = json_string_value(json_object_get(root, "torch_dtype"));
	if (!dtype)
		dtype = json_string_value(json_object_get(root, "dtype"));
	if (dtype)
		snprintf(out->dtype, sizeof out->dtype, "%s", dtype);

	if (f == GPT2 || f == GPTJ) {
		if ((r = need(&h, "n_layer", &layers)) || (r = need(&h, "n_embd", &hidden)) ||
		    (r = need(&h, "n_head", &heads)) || (r = need(&h, "vocab_size", &vocab)) ||
		    (r = count(&h, "n_inner", 4 * hidden, &ffn)))
			goto done;
		if (f == GPT2 && (r = need(&h, "n_positions", &positions)))
			goto done;
		groups = heads;
		head_dim = 0;
	} else if (f == MPT || f == BLOOM || f == FALCON) {
		/* their own names; an MLP of 4 x hidden (MPT's and BLOOM's fixed, Falcon's default) */
		const char *l = f == MPT     ? "n_layers"
				: f == BLOOM ? either(&h, "n_layer", "num_hidden_layers")
					     : either(&h, "num_hidden_layers", "n_layer");
		const char *d = f == MPT ? "d_model" : either(&h, "hidden_size", "n_embed");
		const char *a = f == MPT     ? "n_heads"
				: f == BLOOM ? either(&h, "n_head", "num_attention_heads")
					     : either(&h, "num_attention_heads", "n_head");
		if ((r = need(&h, l, &layers)) || (r = need(&h, d, &hidden)) || (r = need(&h, a, &heads)) ||
		    (r = need(&h, "vocab_size", &vocab)))
			goto done;
		ffn = 4 * hidden;
		if (f == FALCON && (r = count(&h, "ffn_hidden_size", 4 * hidden, &ffn)))
			goto done;
		groups = heads; /* Falcon's below */
		head_dim = 0;
	} else {
		if ((r = need(&h, "num_hidden_layers", &layers)) || (r = need(&h, "hidden_size", &hidden)) ||
		    (r = need(&h, "num_attention_heads", &heads)) || (r = need(&h, "vocab_size", &vocab)) ||
		    (r = count(&h, "num_key_value_heads", heads, &groups)) || (r = count(&h, "head_dim", 0, &head_dim)))
			goto done;
		if ((r = count(&h, f == OPT ? "ffn_dim" : "intermediate_size", 0, &ffn)))
			goto done;
		if (!ffn && f != MOE_MIXTRAL)
			r = bad(&h, "%s has no %s: memtap needs it to count the parameters", type,
				f == OPT ? "ffn_dim" : "intermediate_size");
		if (r)
			goto done;
	}
	c->layers = layers;
	c->hidden = hidden;
	c->heads = heads;
	c->query_groups = groups;
	c->head_dim = head_dim;
	c->ffn = ffn;
	c->vocab = vocab;
	c->experts = c->topk = c->moe_ffn = c->shared_ffn = c->dense_layers = 0;
	c->shared_gate = c->pooler = c->qk_norm = c->separate_qkv = c->upcast_softmax = c->fused_proj = false;
	c->qk_norm_heads = c->parallel = c->norm_no_bias = c->fixed_norms = c->head_bias = c->embed_norm = false;
	c->post_norm = false;
	c->norms = c->embed_dim = 0;
	c->kv_lora_rank = c->q_lora_rank = c->rope_head_dim = c->v_head_dim = 0;
	c->impl = MT_IMPL_PYTORCH;
	c->attention = MT_ATTN_FLASH;
	c->positions = c->classifier = 0;
	c->quantize = MT_QUANT_NONE;
	c->params = c->largest_layer = 0;

	switch (f) {
	case LLAMA:
	case MOE_MIXTRAL:
	case MOE_QWEN:
	case MOE_DEEPSEEK:
		/* RoPE, RMSNorm, gated MLP, no biases but Qwen2's on q, k, v */
		c->rope = true;
		c->positions = 0;
		c->rmsnorm = true;
		c->swiglu = true;
		c->untied = !flag(&h, "tie_word_embeddings", !strcmp(type, "gemma") ? true : false);
		c->bias = !strcmp(type, "qwen2") || !strcmp(type, "qwen2_moe") ? MT_BIAS_QKV : MT_BIAS_NONE;
		if ((r = refuse_true(&h, "attention_bias", "biases on q, k, v and o without the MLP's")) ||
		    (r = refuse_true(&h, "mlp_bias", "biases on the MLP alone")))
			goto done;
		c->qk_norm = !strcmp(type, "qwen3") || !strcmp(type, "qwen3_moe");
		c->fused_proj = !strcmp(type, "phi3"); /* qkv_proj and gate_up_proj */
		c->no_dropout = !drops(&h, "attention_dropout") && !drops(&h, "hidden_dropout") &&
				!drops(&h, "resid_pdrop") && !drops(&h, "embd_pdrop");
		c->no_attention_dropout = !drops(&h, "attention_dropout");
		c->upcast_softmax = true; /* eager: softmax(..., dtype=torch.float32).to(query's dtype) */
		break;
	case GEMMA2: /* Gemma 2 and 3: RMSNorm before and after attention and MLP; Gemma 3's q/k norms */
	case OLMO:   /* OLMo: LayerNorm without parameters; OLMo 2: RMSNorm after each, q/k norms over all heads */
		c->rope = c->swiglu = true;
		c->positions = 0;
		c->bias = MT_BIAS_NONE;
		if ((r = refuse_true(&h, "attention_bias", "biases on q, k, v and o without the MLP's")))
			goto done;
		c->untied = !flag(&h, "tie_word_embeddings", f == GEMMA2);
		c->rmsnorm = f == GEMMA2 || !strcmp(type, "olmo2");
		c->fixed_norms = !strcmp(type, "olmo");
		c->norms = f == GEMMA2 ? 4 : 2;
		c->qk_norm = !strcmp(type, "gemma3_text") || !strcmp(type, "olmo2");
		c->qk_norm_heads = !strcmp(type, "olmo2");
		c->no_dropout = !drops(&h, "attention_dropout");
		c->no_attention_dropout = c->no_dropout;
		c->upcast_softmax = true; /* eager softmax in fp32, cast back */
		break;
	case PHI:  /* Phi-1, 1.5, 2: one LayerNorm for attention and MLP in parallel; biases */
	case GPTJ: /* GPT-J: the same, biases on the MLP only */
		if (f == PHI && (r = refuse_true(&h, "qk_layernorm", "LayerNorms of queries and keys")))
			goto done;
		c->rope = c->parallel = c->head_bias = true;
		c->positions = 0;
		c->rmsnorm = c->swiglu = false;
		c->norms = 1;
		c->bias = f == PHI ? MT_BIAS_ALL : MT_BIAS_MLP;
		c->separate_qkv = true;
		c->untied = !flag(&h, "tie_word_embeddings", false);
		c->no_dropout = !drops(&h, "resid_pdrop") && !drops(&h, "embd_pdrop") &&
				!drops(&h, f == PHI ? "attention_dropout" : "attn_pdrop");
		c->no_attention_dropout = !drops(&h, f == PHI ? "attention_dropout" : "attn_pdrop");
		c->attention = f == GPTJ ? MT_ATTN_EAGER : MT_ATTN_FLASH;
		break;
	case FALCON: {
		/* one query_key_value (multi-query, or grouped with new_decoder_architecture), in
		 * parallel with the MLP on one LayerNorm, or two (ln_attn, ln_mlp) */
		bool fresh = flag(&h, "new_decoder_architecture", false), parallel = flag(&h, "parallel_attn", true);
		uint64_t lns;
		if (fresh && (r = count(&h, "num_kv_heads", heads, &c->query_groups)))
			goto done;
		if (!fresh)
			c->query_groups = flag(&h, "multi_query", true) ? 1 : heads;
		if ((r = count(&h, "num_ln_in_parallel_attn", fresh ? 2 : 1, &lns)))
			goto done;
		c->rope = true; /* rotary or ALiBi: no learned positions */
		c->positions = 0;
		c->rmsnorm = c->swiglu = false;
		c->parallel = parallel;
		c->norms = !parallel || lns == 2 ? 2 : 1;
		c->bias = flag(&h, "bias", false) ? MT_BIAS_ALL : MT_BIAS_NONE;
		c->untied = !flag(&h, "tie_word_embeddings", true);
		c->no_dropout = !drops(&h, "attention_dropout") && !drops(&h, "hidden_dropout");
		c->no_attention_dropout = !drops(&h, "attention_dropout");
		break;
	}
	case BLOOM: /* ALiBi, a LayerNorm after the embedding, biases everywhere, one query_key_value */
	case MPT:   /* ALiBi, LayerNorms without bias, no biases (transformers' MptMLP: 4 x d_model) */
	case STARCODER2: {
		const json_t *attn = json_object_get(root, "attn_config");
		double mpt_drop = json_number_value(json_object_get(attn, "attn_pdrop"));
		c->rope = true; /* ALiBi (BLOOM, MPT) or rotary: no learned positions */
		c->positions = 0;
		c->rmsnorm = c->swiglu = false;
		c->embed_norm = f == BLOOM;
		c->norm_no_bias = f == MPT;
		c->bias = f == BLOOM || (f == STARCODER2 && flag(&h, "use_bias", true)) ? MT_BIAS_ALL : MT_BIAS_NONE;
		c->separate_qkv = f == STARCODER2;
		c->untied = !flag(&h, "tie_word_embeddings", true);
		if (f == MPT) {
			c->no_attention_dropout = !(mpt_drop > 0);
			c->no_dropout = c->no_attention_dropout && !drops(&h, "resid_pdrop") && !drops(&h, "emb_pdrop");
		} else {
			c->no_attention_dropout = !drops(&h, "attention_dropout");
			c->no_dropout = c->no_attention_dropout && !drops(&h, "hidden_dropout") &&
					!drops(&h, "residual_dropout") && !drops(&h, "embedding_dropout");
		}
		break;
	}
	case GPT2:
		c->rope = false;
		c->positions = positions;
		c->rmsnorm = c->swiglu = c->untied = false;
		c->bias = MT_BIAS_ALL;
		/* scale_attn_by_inverse_layer_idx divides the scores by the layer's number:
		 * no parameters, no tensor kept that eager attention does not keep anyway;
		 * reorder_and_upcast_attn makes the scores and their softmax in fp32, cast back
		 * to the values' type (_upcast_and_reordered_attn) */
		c->no_dropout = !drops(&h, "resid_pdrop") && !drops(&h, "attn_pdrop") && !drops(&h, "embd_pdrop");
		c->no_attention_dropout = !drops(&h, "attn_pdrop");
		c->upcast_softmax = flag(&h, "reorder_and_upcast_attn", false);
		c->attention = MT_ATTN_EAGER;
		break;
	case NEOX:
		c->rope = true; /* rotary_pct of each head: no parameters */
		c->positions = 0;
		c->rmsnorm = c->swiglu = false;
		c->untied = !flag(&h, "tie_word_embeddings", false);
		c->bias = flag(&h, "attention_bias", true) ? MT_BIAS_ALL : MT_BIAS_NONE;
		if (!flag(&h, "attention_bias", true)) {
			r = bad(&h, "attention_bias: false (GPT-NeoX without attention biases) is not modelled");
			goto done;
		}
		c->no_dropout = !drops(&h, "attention_dropout") && !drops(&h, "hidden_dropout");
		c->no_attention_dropout = !drops(&h, "attention_dropout");
		break;
	case OPT: {
		uint64_t proj;
		if ((r = count(&h, "word_embed_proj_dim", hidden, &proj)) ||
		    (r = need(&h, "max_position_embeddings", &positions)))
			goto done;
		if (!flag(&h, "enable_bias", true)) {
			r = bad(&h, "enable_bias: false is not modelled (OPT without biases)");
			goto done;
		}
		/* OPT-350m: a 512-wide embedding projected in and out of the hidden size, and
		 * LayerNorms after each sublayer with none at the end */
		c->embed_dim = proj == hidden ? 0 : proj;
		c->post_norm = !flag(&h, "do_layer_norm_before", true);
		c->rope = false;
		c->positions = positions + 2; /* OPT's learned positions start at offset 2 */
		c->rmsnorm = c->swiglu = false;
		c->untied = !flag(&h, "tie_word_embeddings", true);
		c->bias = MT_BIAS_ALL;
		c->separate_qkv = true; /* q_proj, k_proj, v_proj */
		c->no_dropout = !drops(&h, "dropout") && !drops(&h, "attention_dropout");
		c->no_attention_dropout = !drops(&h, "attention_dropout");
		break;
	}
	case BERT:
		if ((r = need(&h, "max_position_embeddings", &positions)) ||
		    (r = count(&h, "type_vocab_size", 2, &types)))
			goto done;
		c->rope = false;
		c->positions = positions + types; /* position and token-type tables, both hidden wide */
		c->rmsnorm = c->swiglu = c->untied = false;
		c->bias = MT_BIAS_ALL;
		c->separate_qkv = true; /* query, key, value */
		c->pooler = true;	/* BertModel's; its embedding LayerNorm counts as the final norm */
		c->no_dropout = !drops(&h, "hidden_dropout_prob") && !drops(&h, "attention_probs_dropout_prob");
		c->no_attention_dropout = !drops(&h, "attention_probs_dropout_prob");
		c->attention = MT_ATTN_EAGER;
		if (strcmp(json_string_value(json_object_get(root, "position_embedding_type")) ?: "absolute",
			   "absolute")) {
			r = bad(&h, "position_embedding_type '%s' is not modelled (only absolute)",
				json_string_value(json_object_get(root, "position_embedding_type")));
			goto done;
		}
		break;
	}
	if (f == MOE_MIXTRAL) {
		if ((r = need(&h, "num_local_experts", &c->experts)) ||
		    (r = count(&h, "num_experts_per_tok", 2, &c->topk)))
			goto done;
		c->moe_ffn = ffn;
	} else if (f == MOE_QWEN) {
		if ((r = need(&h, "num_experts", &c->experts)) || (r = need(&h, "num_experts_per_tok", &c->topk)) ||
		    (r = need(&h, "moe_intermediate_size", &c->moe_ffn)) ||
		    (r = count(&h, "shared_expert_intermediate_size", 0, &c->shared_ffn)))
			goto done;
		c->shared_gate = c->shared_ffn > 0; /* Qwen2-MoE: a one-output gate on the shared expert */
	} else if (f == MOE_DEEPSEEK) {
		uint64_t shared;
		if ((r = need(&h, "n_routed_experts", &c->experts)) ||
		    (r = need(&h, "num_experts_per_tok", &c->topk)) ||
		    (r = need(&h, "moe_intermediate_size", &c->moe_ffn)) ||
		    (r = count(&h, "n_shared_experts", 0, &shared)) ||
		    (r = need(&h, "kv_lora_rank", &c->kv_lora_rank)) ||
		    (r = count(&h, "q_lora_rank", 0, &c->q_lora_rank)) ||
		    (r = need(&h, "qk_nope_head_dim", &c->head_dim)) ||
		    (r = count(&h, "qk_rope_head_dim", 0, &c->rope_head_dim)) ||
		    (r = need(&h, "v_head_dim", &c->v_head_dim)))
			goto done;
		c->shared_ffn = shared * c->moe_ffn;
		c->query_groups = heads; /* multi-latent attention: one key and value per head */
		if (!strcmp(json_string_value(json_object_get(root, "topk_method")) ?: "", "noaux_tc"))
			note(&h, "e_score_correction_bias (n_routed_experts per MoE layer, fp32) not counted");
		const json_t *mtp = json_object_get(root, "num_nextn_predict_layers");
		if (mtp && json_is_integer(mtp) && json_integer_value(mtp) > 0)
			note(&h, "num_nextn_predict_layers: transformers does not build the MTP layers; not counted "
				 "(--mtp-layers "
				 "to add them)");
	}
	if (c->experts) {
		if ((r = moe_layers(&h, f, layers, &moe)))
			goto done;
		if (!moe) {
			c->experts = c->topk = c->moe_ffn = c->shared_ffn = 0;
			c->shared_gate = false;
		} else {
			c->dense_layers = layers - moe;
		}
		if (!ffn && c->dense_layers) {
			r = bad(&h, "%s has dense layers but no intermediate_size", type);
			goto done;
		}
		if (!c->ffn)
			c->ffn = c->moe_ffn;
		if (c->dense_layers)
			note(&h, "dense layers counted as the first ones (only their number changes memory)");
	}
	if ((r = read_head(&h, c)) || (r = read_quantization(&h, c)))
		goto done;
	note(&h, c->attention == MT_ATTN_FLASH
		     ? "layers as Hugging Face's PyTorch modules run them, fused (sdpa) attention"
		     : "layers as Hugging Face's PyTorch modules run them, eager attention");
done:
	json_decref(root);
	mt_text_line(out->err);
	mt_text_line(out->note);
	return r;
}
