"""memtap plan --model: Hugging Face config.json files (the fields their published
config.json files give, written here) counted to the published parameter counts of the
real models, exactly; fields memtap does not model refused by name."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

MEMTAP = os.path.join(os.environ["MT_BUILDDIR"], "tools/memtap/memtap")
TMP = scratch("plan-models")


def llama(**fields):
    return dict({"model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                 "attention_bias": False, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}, **fields)


# (model, config.json fields, parameters). The counts are the models' safetensors totals
# (the Hugging Face hub's "Model size", printed exactly by PEFT's print_trainable_parameters
# and in the model cards named); see docs/PLAN.md.
MODELS = [
    ("Llama-2-7B", llama(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=32, intermediate_size=11008, torch_dtype="float16"), 6738415616),
    ("Llama-3.1-8B", llama(vocab_size=128256, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                           num_key_value_heads=8, intermediate_size=14336, max_position_embeddings=131072),
     8030261248),
    ("Mistral-7B-v0.1", llama(model_type="mistral", vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                              sliding_window=4096), 7241732096),
    ("Qwen2-7B", llama(model_type="qwen2", vocab_size=152064, hidden_size=3584, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944), 7615616512),
    # and q/k RMSNorms of one head's width
    ("Qwen3-8B", llama(model_type="qwen3", vocab_size=151936, hidden_size=4096, num_hidden_layers=36,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=12288),
     8190735360),
    ("Qwen3-30B-A3B (128 experts, every layer)",
     llama(model_type="qwen3_moe", vocab_size=151936, hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
           num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
           num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[]), 30532122624),
    ("Qwen2-0.5B (tied)", llama(model_type="qwen2", vocab_size=151936, hidden_size=896, num_hidden_layers=24,
                                num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                                tie_word_embeddings=True), 494032768),
    ("Gemma-7B (head_dim 256, tied by default)",
     {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072, "num_hidden_layers": 28,
      "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576,
      "hidden_act": "gelu"}, 8537680896),
    ("Gemma-2B (MQA)", {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 2048, "num_hidden_layers": 18,
                        "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
                        "intermediate_size": 16384}, 2506172416),
    ("Llama-3.2-1B (tied, head_dim)", llama(vocab_size=128256, hidden_size=2048, num_hidden_layers=16,
                                            num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                            intermediate_size=8192, tie_word_embeddings=True,
                                            rope_scaling={"factor": 32.0, "rope_type": "llama3"}), 1235814400),
    ("Phi-3-mini-4k", llama(model_type="phi3", vocab_size=32064, hidden_size=3072, num_hidden_layers=32,
                            num_attention_heads=32, num_key_value_heads=32, intermediate_size=8192,
                            sliding_window=2047), 3821079552),
    ("Phi-3-medium-4k", llama(model_type="phi3", vocab_size=32064, hidden_size=5120, num_hidden_layers=40,
                              num_attention_heads=40, num_key_value_heads=10, intermediate_size=17920,
                              sliding_window=2047), 13960238080),
    ("TinyLlama-1.1B", llama(vocab_size=32000, hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                             num_key_value_heads=4, intermediate_size=5632), 1100048384),
    ("GPT-2", {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
               "n_head": 12, "n_inner": None}, 124439808),
    ("GPT-2 XL", {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 1600, "n_layer": 48,
                  "n_head": 25}, 1557611200),
    ("GPT-NeoX-20B", {"model_type": "gpt_neox", "vocab_size": 50432, "hidden_size": 6144, "num_hidden_layers": 44,
                      "num_attention_heads": 64, "intermediate_size": 24576, "rotary_pct": 0.25,
                      "tie_word_embeddings": False}, 20554567680),
    ("Pythia-1.4B", {"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 2048, "num_hidden_layers": 24,
                     "num_attention_heads": 16, "intermediate_size": 8192, "rotary_pct": 0.25}, 1414647808),
    ("OPT-1.3B", {"model_type": "opt", "vocab_size": 50272, "hidden_size": 2048, "num_hidden_layers": 24,
                  "num_attention_heads": 32, "ffn_dim": 8192, "max_position_embeddings": 2048,
                  "word_embed_proj_dim": 2048, "do_layer_norm_before": True}, 1315758080),
    ("BERT-base-uncased (BertModel)", {"model_type": "bert", "vocab_size": 30522, "hidden_size": 768,
                                       "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                                       "max_position_embeddings": 512, "type_vocab_size": 2}, 109482240),
    ("BERT-large-uncased (BertModel)", {"model_type": "bert", "vocab_size": 30522, "hidden_size": 1024,
                                        "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
                                        "max_position_embeddings": 512, "type_vocab_size": 2}, 335141888),
    ("RoBERTa-base (RobertaModel: 514 positions, one token type)",
     {"model_type": "roberta", "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514, "type_vocab_size": 1},
     124645632),
    ("Mixtral-8x7B", llama(model_type="mixtral", vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                           num_local_experts=8, num_experts_per_tok=2), 46702792704),
    ("Qwen1.5-MoE-A2.7B (shared expert with its gate)",
     {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 24,
      "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
      "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
      "mlp_only_layers": [], "tie_word_embeddings": False}, 14315784192),
    ("DeepSeek-V2-Lite (MLA, shared experts, a dense first layer)",
     {"model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 2048, "num_hidden_layers": 27,
      "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 10944, "moe_intermediate_size": 1408,
      "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
      "moe_layer_freq": 1, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128, "tie_word_embeddings": False}, 15706484224),
    # four RMSNorms a layer, head_dim 256, tied (the hub's safetensors total)
    ("Gemma-2-9B", {"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 3584, "num_hidden_layers": 42,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336,
                    "attention_bias": False, "query_pre_attn_scalar": 256, "sliding_window": 4096}, 9241705984),
    # and q/k RMSNorms of one head's width
    ("Gemma-3-1B", {"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152, "num_hidden_layers": 26,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912,
                    "sliding_window": 512}, 999885952),
    # one LayerNorm for attention and MLP in parallel, biases everywhere, a biased untied output layer
    ("Phi-2", {"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 10240,
               "partial_rotary_factor": 0.4, "qk_layernorm": False, "tie_word_embeddings": False, "resid_pdrop": 0.1},
     2779683840),
    # a LayerNorm after the embedding, ALiBi, one query_key_value (the model card's count)
    ("BLOOM-560M", {"model_type": "bloom", "vocab_size": 250880, "hidden_size": 1024, "n_layer": 24, "n_head": 16,
                    "hidden_dropout": 0.0, "attention_dropout": 0.0}, 559214592),
    # RMSNorms after attention and MLP only, q/k norms over every head
    ("OLMo-2-7B", {"model_type": "olmo2", "vocab_size": 100352, "hidden_size": 4096, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
                   "attention_bias": False, "tie_word_embeddings": False}, 7298617344),
]

# Where no exact published count was found: the count worked by hand from the modules
# transformers builds (modeling_*.py), each parameter tensor by its shape (docs/PLAN.md)
WORKED = [
    # a 512-wide embedding projected in and out (project_in, project_out), LayerNorms after
    # each sublayer and none at the end (do_layer_norm_before false); its hub page: 331M
    ("OPT-350M", {"model_type": "opt", "vocab_size": 50272, "hidden_size": 1024, "num_hidden_layers": 24,
                  "num_attention_heads": 16, "ffn_dim": 4096, "max_position_embeddings": 2048,
                  "word_embed_proj_dim": 512, "do_layer_norm_before": False},
     24 * (4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024) + 50272 * 512 + 2050 * 1024
     + 2 * 512 * 1024),
    # a multi-query query_key_value, parallel to the MLP on one LayerNorm, no biases, tied
    ("Falcon-7B", {"model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32,
                   "num_attention_heads": 71, "multi_query": True, "new_decoder_architecture": False,
                   "parallel_attn": True, "bias": False, "alibi": False},
     32 * (4544 * (4544 + 2 * 64) + 4544 * 4544 + 2 * 4544 * 4 * 4544 + 2 * 4544) + 65024 * 4544 + 2 * 4544),
    # LayerNorms without bias, no biases, ALiBi, transformers' MptMLP of 4 x d_model, tied
    ("MPT-7B", {"model_type": "mpt", "vocab_size": 50432, "d_model": 4096, "n_layers": 32, "n_heads": 32,
                "expansion_ratio": 4, "no_bias": True, "attn_config": {"alibi": True, "attn_pdrop": 0}},
     32 * (4 * 4096 * 4096 + 2 * 4 * 4096 * 4096 + 2 * 4096) + 50432 * 4096 + 4096),
    # GQA, LayerNorms and biases everywhere, a plain (not gated) MLP, tied
    ("StarCoder2-3B", {"model_type": "starcoder2", "vocab_size": 49152, "hidden_size": 3072, "num_hidden_layers": 30,
                       "num_attention_heads": 24, "num_key_value_heads": 2, "intermediate_size": 12288,
                       "use_bias": True},
     30 * (3072 * 3072 * 2 + 2 * 3072 * 256 + 3072 + 2 * 256 + 3072 + 2 * 3072 * 12288 + 12288 + 3072 + 4 * 3072)
     + 49152 * 3072 + 2 * 3072),
    # LayerNorms without parameters, tied
    ("OLMo-1B", {"model_type": "olmo", "vocab_size": 50304, "hidden_size": 2048, "num_hidden_layers": 16,
                 "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 8192,
                 "attention_bias": False, "tie_word_embeddings": True},
     16 * (4 * 2048 * 2048 + 3 * 2048 * 8192) + 50304 * 2048),
    # one LayerNorm in parallel, biases on the MLP only, a biased untied output layer (the
    # model card's 6,053,381,344 counts Mesh Transformer JAX's parameters, not these modules)
    ("GPT-J-6B", {"model_type": "gptj", "vocab_size": 50400, "n_embd": 4096, "n_layer": 28, "n_head": 16,
                  "n_inner": None, "rotary_dim": 64, "tie_word_embeddings": False},
     28 * (2 * 4096 + 4 * 4096 * 4096 + 2 * 4096 * 16384 + 16384 + 4096) + 2 * 50400 * 4096 + 50400 + 2 * 4096),
]


def write(name, fields, text=None):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text if text is not None else json.dumps(fields, indent=2))
    return path


def plan(*args):
    return subprocess.run([MEMTAP, "plan", *map(str, args)], capture_output=True, text=True)


def miscounted(cases, tag, against):
    """The cases --model does not count as `want`, one line each."""
    bad = []
    for i, (name, fields, want) in enumerate(cases):
        p = plan("--model", write("%s%d.json" % (tag, i), fields), "--json")
        got = json.loads(p.stdout)["params"] if p.returncode == 0 else p.stderr.strip()
        if got != want:
            bad.append("%s: %s, %s %d" % (name, got, against, want))
    return "\n".join(bad)


bad = miscounted(MODELS, "m", "published")
ok(not bad, "--model counts %d published models' parameters exactly (Llama/Mistral/Qwen2/Gemma, GPT-2, "
   "GPT-NeoX/Pythia, OPT, BERT, Mixtral, Qwen-MoE, DeepSeek-V2 MLA, Gemma 2 and 3, Phi-2, BLOOM, OLMo 2)" % len(MODELS),
   bad)
bad = miscounted(WORKED, "w", "worked by hand")
ok(not bad, "--model counts %d more families as their modules are built, worked by hand (Falcon, MPT, StarCoder2, "
   "OLMo, GPT-J, OPT-350M)" % len(WORKED), bad)
# a parallel block's one LayerNorm keeps its input once, and its output is both the
# attention's and the MLP's input; with two (Falcon-40B's ln_attn and ln_mlp) each keeps
# its input and the MLP has its own: 2 + 2 bf16 bytes a token and hidden value more
phi = write("phi.json", [m for m in MODELS if m[0] == "Phi-2"][0][1])
acts = [json.loads(plan("--model", phi, "--seq", 512, "--micro-batch", 1, "--precision", "bf16-pure", *x,
                        "--json").stdout)["layer_activation_bytes"] for x in ([], ["--norms", 2])]
ok(acts[1] - acts[0] == 4 * 2560 * 512, "Phi-2's parallel block keeps one norm's input and one input for attention "
   "and MLP; a second norm keeps 4 bytes a token and hidden value more", acts)
p = plan("--model", write("gemma3.json", {"model_type": "gemma3", "text_config": MODELS[-4][1]}))
ok(p.returncode == 2 and "vision tower" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
   "gemma3 (with its vision tower) refused in one line, saying what is missing", p.stderr)
said = {t: plan("--model", write(t + ".json", {"model_type": t, "d_model": 512, "num_layers": 6})) for t in
        ("t5", "bart", "vit")}
ok(all(q.returncode == 2 and len(q.stderr.strip().splitlines()) == 1 for q in said.values()) and
   "encoder-decoder" in said["t5"].stderr and "encoder-decoder" in said["bart"].stderr and
   "patch embedding" in said["vit"].stderr,
   "t5 and bart (encoder-decoder), vit (patches): refused in one line each, saying what memtap would need",
   {t: q.stderr for t, q in said.items()})

# a directory holding config.json; the architecture it gives, with the options' setup
d = os.path.join(TMP, "Llama-2-7b-hf")
os.mkdir(d)
write("Llama-2-7b-hf/config.json", MODELS[0][1])
p = plan("--model", d, "--seq", 4096, "--micro-batch", 1, "--zero", 3, "--gpus-per-node", 8, "--json")
got = json.loads(p.stdout) if p.returncode == 0 else {}
s = got.get("setup", {})
ok(got.get("params") == 6738415616 and s.get("query_groups") == 32 and s.get("ffn") == 11008 and s.get("rope") and
   s.get("rmsnorm") and s.get("swiglu") and s.get("untied") and s.get("bias") == "none" and
   got["largest_layer_params"] == 32000 * 4096 and got["per_gpu_bytes"]["activations"] > 0,
   "--model DIR reads DIR/config.json: RoPE, RMSNorm, SwiGLU, no biases, untied; the largest module is the "
   "embedding (131,072,000, DeepSpeed's _all_live)", p.stdout + p.stderr)
p2 = plan("--model", d, "--seq", 4096, "--micro-batch", 1, "--zero", 3, "--gpus-per-node", 8, "--layers", 16,
          "--json")
ok(p2.returncode == 0 and json.loads(p2.stdout)["setup"]["layers"] == 16, "options given override --model",
   p2.stderr)
p = plan("--model", d)
ok(p.returncode == 0 and "model states only" in p.stdout, "--model alone: model states only, said", p.stdout)

# MoE: expert parameters and their sharding over expert parallelism
mix = write("mixtral.json", [m for m in MODELS if m[0] == "Mixtral-8x7B"][0][1])
one = json.loads(plan("--model", mix, "--seq", 4096, "--micro-batch", 1, "--gpus-per-node", 8, "--zero", 1,
                      "--json").stdout)
ep = json.loads(plan("--model", mix, "--seq", 4096, "--micro-batch", 1, "--gpus-per-node", 8, "--zero", 1,
                     "--ep", 8, "--json").stdout)
ok(one["expert_params"] == 32 * 8 * 3 * 4096 * 14336 and
   ep["per_gpu_bytes"]["params"] < one["per_gpu_bytes"]["params"] / 4,
   "--model mixtral: 45.1B expert parameters; --ep 8 holds one expert per layer per GPU",
   (one["expert_params"], one["per_gpu_bytes"], ep["per_gpu_bytes"]))

# LoRA on MoE: PEFT wraps every expert's matrices (Mixtral's w1, w2, w3; gate/up/down_proj
# of Qwen-MoE's and DeepSeek's experts and shared experts), not the router; rank x (in +
# out) each. Mixtral-8x7B, r 8 on q, k, v, o, w1, w2, w3: 32 x (8 x (4096 + 4096) x 2 +
# 8 x (4096 + 1024) x 2 + 8 experts x 3 x 8 x (4096 + 14336)) = 120,061,952.
# Qwen1.5-MoE-A2.7B, all: 24 x 8 x (4 x 4096 + 60 x 3 x 3456 + 3 x 7680) = 127,008,768.
# DeepSeek-V2-Lite, the MLPs: 26 x 8 x (64 x 3 x 3456 + 3 x 4864) + 8 x 3 x 12992 (its
# dense first layer) = 141,365,760.
LORA_MOE = [("Mixtral-8x7B", "q,k,v,o,mlp", 120061952), ("Qwen1.5-MoE-A2.7B (shared expert with its gate)", "all",
                                                          127008768),
            ("DeepSeek-V2-Lite (MLA, shared experts, a dense first layer)", "mlp", 141365760)]
bad = []
for i, (name, modules, want) in enumerate(LORA_MOE):
    path = write("lm%d.json" % i, [m for m in MODELS if m[0] == name][0][1])
    p = plan("--model", path, "--lora-rank", 8, "--lora-modules", modules, "--json")
    got = json.loads(p.stdout)["trainable_params"] if p.returncode == 0 else p.stderr
    if got != want:
        bad.append("%s: %s, PEFT %d" % (name, got, want))
p = plan("--model", write("lm0.json", MODELS[[m[0] for m in MODELS].index("Mixtral-8x7B")][1]), "--lora-rank", 8,
         "--lora-modules", "all", "--seq", 256, "--micro-batch", 1, "--reserved", "--json")
if p.returncode:
    bad.append("--reserved: %s" % p.stderr)
ok(not bad, "LoRA on MoE adapts every expert's and the shared experts' matrices as PEFT does (Mixtral 120,061,952 "
   "at r 8), --reserved replays them", "\n".join(bad))

# Phi-3's qkv_proj and gate_up_proj are one module each: DeepSpeed's _all_live takes
# gate_up_proj (5120 x 35840) as Phi-3-medium's largest; the same shape as a Llama keeps
# the embedding (32064 x 5120), as Phi-3-mini's embedding stays. A LoRA adapter on a fused module is one (PEFT's GPT-2 on
# c_attn at r 8, q, k and v named: 294,912 trainable; Phi-3-mini on qkv_proj, o_proj, gate_up_proj and
# down_proj: 32 x 8 x ((3072 + 9216) + (3072 + 3072) + (3072 + 16384) + (8192 + 3072)) =
# 12,582,912); autocast casts a fused module's input once.
PHI = {name: fields for name, fields, _ in MODELS if name.startswith("Phi-3")}
g2 = [m for m in MODELS if m[0] == "GPT-2"][0][1]
bad = []
for name, want, as_llama in (("Phi-3-medium-4k", 5120 * 35840, 32064 * 5120), ("Phi-3-mini-4k", 32064 * 3072,
                                                                                32064 * 3072)):
    got = [json.loads(plan("--model", write("phi%d.json" % i, dict(PHI[name], model_type=t)), "--json").stdout)
           for i, t in enumerate(("phi3", "llama"))]
    if got[0]["largest_layer_params"] != want or got[1]["largest_layer_params"] != as_llama:
        bad.append("%s: largest %d (as llama %d), want %d (%d)" % (name, got[0]["largest_layer_params"],
                                                                   got[1]["largest_layer_params"], want, as_llama))
mini = write("phi-mini.json", PHI["Phi-3-mini-4k"])
for path, modules, want in ((write("g2.json", g2), "qkv", 294912), (mini, "all", 12582912)):
    p = plan("--model", path, "--lora-rank", 8, "--lora-modules", modules, "--json")
    got = json.loads(p.stdout)["trainable_params"] if p.returncode == 0 else p.stderr
    if got != want:
        bad.append("LoRA %s %s: %s, PEFT %d" % (path, modules, got, want))
amp = [json.loads(plan("--model", write("phi-amp%d.json" % i, dict(PHI["Phi-3-mini-4k"], model_type=t)), "--seq",
                       4096, "--micro-batch", 1, "--precision", "amp-bf16", "--json").stdout)
       for i, t in enumerate(("phi3", "llama"))]
if not amp[0]["layer_activation_bytes"] < amp[1]["layer_activation_bytes"]:
    bad.append("autocast: phi3 keeps %s, as llama %s" % (amp[0]["layer_activation_bytes"],
                                                         amp[1]["layer_activation_bytes"]))
# sdpa keeps v as a view of qkv_proj's output when nothing copies it (no query groups to
# repeat): the whole output stays, 2 x 3072 more values a token in Phi-3-mini; Phi-3-medium's
# 10 groups are repeated (copies), as a Llama's
for name, more in (("Phi-3-mini-4k", 2 * 3072 * 2 * 4096), ("Phi-3-medium-4k", 0)):
    kept = [json.loads(plan("--model", write("phi-kv%d.json" % i, dict(PHI[name], model_type=t)), "--seq", 4096,
                            "--micro-batch", 1, "--json").stdout)["layer_activation_bytes"]
            for i, t in enumerate(("phi3", "llama"))]
    if kept[0] - kept[1] != more:
        bad.append("%s keeps %s, as llama %s: %d more, want %d" % (name, kept[0], kept[1], kept[0] - kept[1], more))
p = plan("--model", mini, "--lora-rank", 8, "--lora-modules", "all", "--seq", 512, "--micro-batch", 1, "--reserved")
if p.returncode:
    bad.append("--reserved: %s" % p.stderr)
p = plan("--layers", 2, "--hidden", 64, "--heads", 4, "--vocab", 100, "--fused-proj", "--swiglu")
if p.returncode != 2 or "--fused-proj, Phi-3's) come without biases" not in p.stderr:
    bad.append("--fused-proj with biases: %d %s" % (p.returncode, p.stderr))
ok(not bad, "Phi-3's fused qkv_proj and gate_up_proj: the largest module 183,500,800 for Phi-3-medium (a Llama "
   "unchanged), one LoRA adapter per fused module as PEFT (GPT-2 294,912, Phi-3-mini 12,582,912), one autocast "
   "copy, sdpa's v a view of the fused output, --reserved; --fused-proj refused with biases", "\n".join(bad))

# GPT-2's scale_attn_by_inverse_layer_idx divides the scores by a number: the same
# parameters and the same memory (stanford-crfm's GPT-2 configs set it)
runs = [plan("--model", write("g2-%d.json" % i, dict(g2, scale_attn_by_inverse_layer_idx=bool(i))), "--seq", 1024,
             "--micro-batch", 4, "--json") for i in range(2)]
got = [json.loads(p.stdout) if p.returncode == 0 else p.stderr for p in runs]
ok(runs[1].returncode == 0 and got[1]["params"] == 124439808 and got[1]["per_gpu_bytes"] == got[0]["per_gpu_bytes"],
   "--model gpt2 with scale_attn_by_inverse_layer_idx: true: 124,439,808 parameters, the same plan", got[1])

# GPT-2's reorder_and_upcast_attn: the scores and their softmax in fp32, cast back to
# 16 bits for the product with V (transformers' _upcast_and_reordered_attn): as
# --upcast-softmax: its fp32 output and the 16-bit copy (4 + 2 bytes per head and key of a
# token) where a 16-bit softmax keeps its output alone (2; no attention dropout here)
up = [plan("--model", write("g2-up-%d.json" % i, dict(g2, reorder_and_upcast_attn=bool(i))), "--seq", 1024,
           "--micro-batch", 4, "--precision", "bf16-pure", "--attention", "eager", "--json") for i in range(2)]
got = [json.loads(p.stdout)["layer_activation_bytes"] if p.returncode == 0 else p.stderr for p in up]
ok(up[1].returncode == 0 and got[1] - got[0] == 4 * 12 * 1024 * 4096,
   "--model gpt2 with reorder_and_upcast_attn: true keeps the fp32 softmax output and its 16-bit copy (4 more bytes "
   "per head, key and token)", got)

# quantization_config (bitsandbytes) read as the planner's --quantize, with LoRA adapters;
# other methods named in a note. The config is Llama-3-8B's with the block a
# BitsAndBytesConfig writes (transformers 4.40).
L3 = [m for m in MODELS if m[0] == "Llama-3.1-8B"][0][1]
BNB = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
       "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
       "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
       "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}
LORA = ["--lora-rank", 16, "--lora-modules", "all", "--seq", 2048, "--micro-batch", 1, "--json"]
plain = write("l3.json", L3)


def lora_plan(path, *extra):
    p = plan("--model", path, *LORA, *extra)
    return (json.loads(p.stdout)["per_gpu_bytes"] if p.returncode == 0 else None), p.stderr


QUANT = [("nf4, double quantization", {}, "nf4-dq", "4-bit nf4 with double quantization as --quantize nf4-dq"),
         ("nf4", {"bnb_4bit_use_double_quant": False}, "nf4", "4-bit nf4 as --quantize nf4"),
         ("fp4 (stored as nf4 is)", {"bnb_4bit_quant_type": "fp4"}, "nf4-dq", "fp4 is stored as nf4 is"),
         ("8-bit", {"_load_in_4bit": False, "load_in_4bit": False, "_load_in_8bit": True, "load_in_8bit": True,
                    "bnb_4bit_use_double_quant": False}, "int8", "8-bit as --quantize int8"),
         ("gptq (not modelled)", {"quant_method": "gptq", "bits": 4}, "none",
          "quant_method 'gptq' is not modelled")]
bad = []
for i, (name, change, option, says) in enumerate(QUANT):
    got, err = lora_plan(write("q%d.json" % i, dict(L3, quantization_config=dict(BNB, **change))))
    want, _ = lora_plan(plain, "--quantize", option)
    if got is None or got != want or says not in err:
        bad.append("%s: %s against --quantize %s %s; %s" % (name, got, option, want, err))
got, err = lora_plan(write("q0.json", dict(L3, quantization_config=BNB)), "--quantize", "none")
if got != lora_plan(plain)[0]:
    bad.append("--quantize none does not override: %s" % got)
p = plan("--model", write("q0.json", dict(L3, quantization_config=BNB)), "--json")
full = plan("--model", plain, "--json")
if p.returncode or json.loads(p.stdout) != json.loads(full.stdout) or "applies with LoRA adapters" not in p.stderr:
    bad.append("without --lora-rank: %d %s" % (p.returncode, p.stderr))
ok(not bad, "--model reads quantization_config: bitsandbytes 4-bit nf4/fp4 with or without double quantization "
   "and 8-bit as --quantize nf4-dq, nf4, int8 under LoRA (without --lora-rank planned unquantized, said); "
   "other methods named as not modelled", "\n".join(bad))

# architectures [*ForSequenceClassification]: the head of num_labels (len(id2label), else
# num_labels, else 2) instead of the output layer; no bias on a decoder's score layer.
# Skywork-Reward-Llama-3.1-8B-v0.2 (one label): Llama-3.1-8B's 8,030,261,248 less its
# lm_head (128256 x 4096) plus the 4096 x 1 score; GPT-2 and BERT-base (MNLI's 3 labels)
# likewise from their counts above
CLS = [("Skywork-Reward-Llama-3.1-8B", dict(L3, architectures=["LlamaForSequenceClassification"],
                                            id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0}),
        8030261248 - 128256 * 4096 + 4096, 1),
       ("GPT-2, the default 2 labels", dict(g2, architectures=["GPT2ForSequenceClassification"]),
        124439808 + 768 * 2, 2),
       ("BERT-base, num_labels 3", dict([m for m in MODELS if m[0].startswith("BERT-base")][0][1],
                                        architectures=["BertForSequenceClassification"], num_labels=3),
        109482240 + 768 * 3 + 3, 3)]
bad = []
for i, (name, fields, want, labels) in enumerate(CLS):
    p = plan("--model", write("c%d.json" % i, fields), "--seq", 512, "--micro-batch", 1, "--json")
    got = json.loads(p.stdout) if p.returncode == 0 else {}
    if (got.get("params") != want or got["setup"].get("classifier") != labels or got["setup"].get("untied") or
            "--classifier %d" % labels not in p.stderr):
        bad.append("%s: %s, want %d with %d labels; %s" % (name, got.get("params"), want, labels, p.stderr))
p = plan("--model", write("tok.json", dict(L3, architectures=["LlamaForTokenClassification"])), "--json")
if p.returncode or json.loads(p.stdout)["params"] != 8030261248 or "LlamaForTokenClassification: its head is not " \
        "modelled" not in p.stderr:
    bad.append("token classification: %d %s" % (p.returncode, p.stderr))
ok(not bad, "--model reads architectures *ForSequenceClassification as --classifier num_labels instead of the "
   "output layer (a reward model's 1 label, the default 2, num_labels), said in the note; token "
   "classification, question answering and multiple choice heads named as not modelled", "\n".join(bad))

# what transformers does not build, or memtap does not count, named in a note
V3 = {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "num_hidden_layers": 61,
      "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
      "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
      "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "tie_word_embeddings": False,
      "topk_method": "noaux_tc", "num_nextn_predict_layers": 1}
p = plan("--model", write("v3.json", V3), "--json")
ok(p.returncode == 0 and json.loads(p.stdout)["params"] == 671026404352 and
   "e_score_correction_bias" in p.stderr and "num_nextn_predict_layers" in p.stderr,
   "--model deepseek_v3: 671,026,404,352 (the card's 671B without the MTP module), the router's correction "
   "bias and the MTP layers named as not counted", p.stderr)

# refused by name
REFUSED = [
    (llama(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
           intermediate_size=11008, attention_bias=True), "attention_bias: true is not modelled"),
    (llama(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
           intermediate_size=11008, mlp_bias=True), "mlp_bias: true is not modelled"),
    ({"model_type": "mamba", "d_model": 512}, "model_type 'mamba' is not modelled"),
    ({"model_type": "opt", "vocab_size": 50272, "hidden_size": 1024, "num_hidden_layers": 24,
      "num_attention_heads": 16, "ffn_dim": 4096, "max_position_embeddings": 2048, "enable_bias": False},
     "enable_bias: false is not modelled"),
    ({"model_type": "bert", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512,
      "position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not modelled"),
    (llama(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, intermediate_size=11008),
     "has no vocab_size"),
    ({"hidden_size": 4096}, "a Hugging Face config.json is an object with a model_type"),
]
bad = []
for i, (fields, says) in enumerate(REFUSED):
    p = plan("--model", write("r%d.json" % i, fields))
    if p.returncode != 2 or says not in p.stderr or len(p.stderr.splitlines()) != 1:
        bad.append("%s: %d %s" % (says, p.returncode, p.stderr))
p = plan("--model", write("broken.json", None, '{"model_type": "llama",\n  "hidden_size": }'))
if p.returncode != 2 or "broken.json:2:" not in p.stderr:
    bad.append("broken: %d %s" % (p.returncode, p.stderr))
p = plan("--model", os.path.join(TMP, "nothing-here"))
if p.returncode != 2 or "nothing-here" not in p.stderr:
    bad.append("missing: %d %s" % (p.returncode, p.stderr))
ok(not bad, "--model refuses, in one line naming the field, what it does not model (attention_bias, mlp_bias, "
   "an unknown model_type, OPT's projections, relative positions), a missing field, broken JSON, a missing file",
   "\n".join(bad))

done()
