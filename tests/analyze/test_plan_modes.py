"""memtap plan's training modes, each against the bytes its framework keeps (the sources
are named in docs/PLAN.md): gradient accumulation, PyTorch AMP, ZeRO-Offload's gradients,
FSDP2, LoRA and QLoRA, fp8, torchtitan's op-level checkpointing, the optimizers' states;
and the DeepSpeed estimators' options."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

MEMTAP = os.path.join(os.environ["MT_BUILDDIR"], "tools/memtap/memtap")
TMP = scratch("plan-modes")


def model(name, fields):
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(fields, f)
    return path


LLAMA2 = model("llama2-7b", {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
                             "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
                             "tie_word_embeddings": False})
LLAMA3 = model("llama31-8b", {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                              "intermediate_size": 14336, "tie_word_embeddings": False})
BERT = model("bert-large", {"model_type": "bert", "vocab_size": 30522, "hidden_size": 1024, "num_hidden_layers": 24,
                            "num_attention_heads": 16, "intermediate_size": 4096, "max_position_embeddings": 512,
                            "type_vocab_size": 2})
P7 = 6738415616  # Llama-2-7B
VH = 32000 * 4096  # its embedding, and its output layer


def plan(*args):
    p = subprocess.run([MEMTAP, "plan", *map(str, args), "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout)


def per_gpu(*args):
    return plan(*args)["per_gpu_bytes"]


# optimizer state per parameter (fp32 training, model states only, at the optimizer step)
adafactor = 4 * (32 * (4 * (4096 + 4096) + 3 * (4096 + 11008)) + 2 * (32000 + 4096) + 65 * 4096)
WANT = {"adam": 8 * P7, "adam8bit": 2 * (1 + 4 / 256) * P7, "lion": 4 * P7, "sgd": 4 * P7, "adafactor": adafactor,
        "none": 0, "sgd-nomomentum": 0}
got = {o: per_gpu("--model", LLAMA2, "--precision", "fp32", "--optimizer", o)["optimizer"] for o in WANT}
ok(got == WANT, "optimizer states: Adam 8 bytes/param, bitsandbytes 8-bit Adam 2 + an fp32 absmax per 256, Lion "
   "and SGD 4, Adafactor a row and a column per matrix and every vector (11.3 MB for Llama-2-7B)", (got, WANT))

# DeepSpeed's "SGD" is torch.optim.SGD: a momentum buffer only with params.momentum > 0; under
# bf16 its fp32 master copy alone
sgd = {m: model("ds-sgd%s.json" % m, {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                      "optimizer": {"type": "SGD", "params": dict({"lr": 0.1}, **({"momentum": m} if m else {}))}})
       for m in (0, 0.9)}
got = [per_gpu("--model", LLAMA2, "--deepspeed", sgd[m])["optimizer"] for m in (0, 0.9)]
mixed0 = per_gpu("--model", LLAMA2, "--precision", "bf16", "--optimizer", "sgd-nomomentum")["optimizer"]
ok(got == [4 * P7, 8 * P7] and mixed0 == 4 * P7,
   "plain SGD keeps no state: --optimizer sgd-nomomentum 0 bytes (fp32), the fp32 master copy alone (4 bytes/param) "
   "under bf16; a DeepSpeed \"SGD\" without params.momentum is it, with momentum 0.9 it keeps a buffer", (got, mixed0))

# gradient accumulation: every gradient lives through the micro-batches
P_BERT = 335141888 + 1024 * 2 + 2  # BertModel and a two-label classifier
ga = per_gpu("--model", BERT, "--classifier", 2, "--seq", 512, "--micro-batch", 4, "--micro-batches", 4,
             "--precision", "fp32")
one = per_gpu("--model", BERT, "--classifier", 2, "--seq", 512, "--micro-batch", 4, "--precision", "fp32")
ok(ga["grads"] == 4 * P_BERT and one["grads"] < P_BERT and ga["total"] - one["total"] > 3 * P_BERT,
   "gradient accumulation: all of BERT-large's fp32 gradients live while a micro-batch's activations do "
   "(none yet without it at that moment)", (ga, one))

# PyTorch AMP: fp32 weights, gradients and Adam (no master copy), plus autocast's 16-bit
# copy of every weight a matrix multiply used, alive until that layer's backward
layer = 4 * (1024 * 1024 + 1024) + 2 * 1024 + (1024 * 4096 + 4096) + (4096 * 1024 + 1024) + 2 * 1024
fp32 = per_gpu("--model", BERT, "--classifier", 2, "--seq", 512, "--micro-batch", 4, "--precision", "fp32")
amp = per_gpu("--model", BERT, "--classifier", 2, "--seq", 512, "--micro-batch", 4, "--precision", "amp-fp16")
ok(fp32["params"] == 4 * P_BERT and amp["params"] == 4 * P_BERT and amp["optimizer"] == 8 * P_BERT
   and amp["activations"] - 2 * 24 * layer < fp32["activations"],
   "PyTorch AMP: fp32 weights and Adam without a master copy, autocast's fp16 copy of the 24 layers' weights "
   "(counted with the activations, made in forward and freed in backward, as the report reads it), "
   "smaller activations", (fp32, amp))
# autocast casts an fp32 input again for every matrix that reads it: BERT's query, key and
# value each keep an fp16 copy of the attention's input, two more than one fused matrix
# (GPT-2's c_attn) would keep: 2 x 2 bytes x 1024 per token, 2,048 tokens
BATCH4 = ["--classifier", 2, "--seq", 512, "--micro-batch", 4]
SHAPE = ["--layers", 24, "--hidden", 1024, "--heads", 16, "--ffn", 4096, "--vocab", 30522, "--bias", "all",
         "--impl", "pytorch", "--attention", "eager"]
three = plan(*SHAPE, *BATCH4, "--precision", "amp-fp16", "--separate-qkv")["layer_activation_bytes"]
fused = plan(*SHAPE, *BATCH4, "--precision", "amp-fp16")["layer_activation_bytes"]
same = [plan(*SHAPE, *BATCH4, "--precision", "fp32", *x)["layer_activation_bytes"] for x in ([], ["--separate-qkv"])]
GPT2 = model("gpt2", {"model_type": "gpt2", "vocab_size": 50257, "n_layer": 12, "n_embd": 768, "n_head": 12,
                      "n_positions": 1024})
ok(plan("--model", BERT)["setup"]["separate_qkv"] and not plan("--model", GPT2)["setup"]["separate_qkv"],
   "BERT's config.json: three matrices make q, k and v; GPT-2's: one (c_attn)")
ok(three - fused == 2 * 2 * 1024 * 2048 and same[0] == same[1],
   "autocast: query, key and value keep an fp16 copy of their input each (8 MiB more per BERT-large layer at "
   "batch 4); without autocast one copy serves all three", (three, fused, same))

# before PyTorch 1.11 a softmax also keeps its input (pytorch/pytorch#65242): BERT's
# masked scores, 16 heads x 512 keys per token, in fp32 (also under autocast, whose
# softmax runs in fp32) or in the 16-bit values' 2 bytes
old = {p: plan("--model", BERT, *BATCH4, "--precision", p, "--torch", "1.10.1")["layer_activation_bytes"] -
       plan("--model", BERT, *BATCH4, "--precision", p)["layer_activation_bytes"]
       for p in ("fp32", "amp-fp16", "bf16-pure")}
now = plan("--model", BERT, *BATCH4, "--torch", "2.5")
bad = subprocess.run([MEMTAP, "plan", "--model", BERT, "--torch", "1.x"], capture_output=True, text=True)
text = subprocess.run([MEMTAP, "plan", "--model", BERT, *map(str, BATCH4), "--torch", "1.9"], capture_output=True,
                      text=True)
ok(old == {"fp32": 16 * 512 * 4 * 2048, "amp-fp16": 16 * 512 * 4 * 2048, "bf16-pure": 16 * 512 * 2 * 2048} and
   now["layer_activation_bytes"] == plan("--model", BERT, *BATCH4)["layer_activation_bytes"] and
   now["setup"]["torch"] == "2.5" and bad.returncode == 2 and
   "recompute none, PyTorch 1.9 (softmax keeps its input)" in text.stdout and
   bad.stderr.strip().endswith("--torch takes a release such as 1.10 or 2.5.1, not '1.x'"),
   "--torch 1.10: a softmax keeps its input too (64 MiB per BERT-large layer at batch 4 in fp32); 2.5 as the "
   "default; a wrong release refused in one line", (old, now["setup"]["torch"], bad.stderr))

# eager attention's scores as Hugging Face's OPT keeps them under fp16: no attention
# dropout (attention_dropout 0), the softmax run in fp32 and cast back: its fp32 output
# and the fp16 copy (4 + 2 bytes per head and key) where a plain softmax keeps its fp16
# output alone (2); 32 heads x 512 keys x 4,096 tokens
OPT = model("opt-1.3b", {"model_type": "opt", "vocab_size": 50272, "hidden_size": 2048, "num_hidden_layers": 24,
                         "num_attention_heads": 32, "ffn_dim": 8192, "max_position_embeddings": 2048,
                         "dropout": 0.1, "attention_dropout": 0.0})
EAGER = ["--model", OPT, "--seq", 512, "--micro-batch", 8, "--precision", "fp16", "--attention", "eager"]
up = plan(*EAGER, "--upcast-softmax")
plain = plan(*EAGER)
masked = plan(*EAGER[2:], "--layers", 24, "--hidden", 2048, "--heads", 32, "--ffn", 8192, "--vocab", 50272,
              "--impl", "pytorch", "--bias", "all", "--separate-qkv")  # attention dropout: mask and output kept
ok(up["layer_activation_bytes"] - plain["layer_activation_bytes"] == 4 * 32 * 512 * 4096 and
   masked["layer_activation_bytes"] - plain["layer_activation_bytes"] == (1 + 2) * 32 * 512 * 4096 and
   plain["setup"]["no_attention_dropout"] and not plain["setup"]["no_dropout"] and
   plan("--model", LLAMA2)["setup"]["upcast_softmax"],
   "eager OPT in fp16: no attention-dropout mask (attention_dropout 0) and, upcast, the softmax's fp32 output and "
   "its fp16 copy (256 MiB more per layer); a Llama config upcasts", (up["layer_activation_bytes"],
                                                                    plain["layer_activation_bytes"], plain["setup"]))

mixed = per_gpu("--model", BERT, "--classifier", 2, "--seq", 512, "--micro-batch", 4, "--precision", "fp16")
ok(mixed["params"] == 2 * P_BERT and mixed["optimizer"] == 12 * P_BERT,
   "DeepSpeed/Megatron mixed precision differs: fp16 weights, fp32 master copy with Adam (12 bytes/param)", mixed)

# ZeRO-Offload (DeepSpeed's ZeRO-Offload tutorial: a 10B GPT-2 on one 32 GB V100): the
# optimizer and the fp32 gradients on the host, the GPU keeping the 16-bit weights and its
# reduce bucket
GPT10B = ["--layers", 50, "--hidden", 4096, "--heads", 32, "--vocab", 50257, "--seq", 1024, "--micro-batch", 10,
          "--recompute", "full", "--precision", "fp16", "--zero", 2, "--offload-optimizer", "cpu"]
off = plan(*GPT10B, "--gpu-mem", "v100-32gb")
P10 = off["params"]
ok(off["fits"] and off["per_gpu_bytes"]["params"] == 2 * P10 and off["per_gpu_bytes"]["optimizer"] == 0 and
   off["per_gpu_bytes"]["grads"] <= 2 * 2 * 5e8 and off["cpu_bytes_per_node"] == 16 * P10,
   "ZeRO-Offload: the tutorial's 10B GPT-2 fits one 32 GB V100; fp32 master, Adam and gradients (16 bytes/param) "
   "on the host, at most the reduce bucket of gradients on the GPU", off)

# no ZeRO-Offload at stage 0 (DeepSpeed's ZeRO optimizer is what offloads): refused on the command line,
# and the table's ZeRO-0 row plans without offload
z0 = subprocess.run([MEMTAP, "plan", "--params", "7B", "--zero", "0", "--offload-optimizer", "cpu"], capture_output=True,
                    text=True)
rows = {r["zero"]: r["total_bytes"] for r in off["table"] if r["recompute"] == "full"}
plain0 = plan(*GPT10B[:-2], "--zero", 0)["per_gpu_bytes"]["total"]
ok(z0.returncode == 2 and z0.stderr == "memtap: optimizer offload needs ZeRO stage 1, 2 or 3 (DeepSpeed does not "
   "offload at stage 0)\n" and rows[0] == plain0 and rows[2] == off["per_gpu_bytes"]["total"],
   "--offload-optimizer at --zero 0 refused in one line; the ZeRO-0 row of an offload plan's table without offload",
   (z0.stderr, rows, plain0))

# DeepSpeed's contiguous gradient bucket (reduce_bucket_size in the model's type): made as
# backward begins and released after it at stages 1 and 2, kept at stage 3; under offload
# it is the gradient buffer above, not a second one; a DeepSpeed config sets it
SMALL = ["--model", LLAMA2, "--seq", 1024, "--micro-batch", 8, "--gpus-per-node", 8]  # the peak in backward
bucket = {z: [plan(*SMALL, "--zero", z, *x) for x in ([], ["--contiguous-gradients"])] for z in (2, 3)}
step = {z: [b["per_gpu_bytes"]["temporaries"] for b in bucket[z]] for z in (2, 3)}
ok(all(b[1]["per_gpu_bytes"]["total"] - b[0]["per_gpu_bytes"]["total"] == 2 * 5e8 for b in bucket.values()) and
   plan(*GPT10B, "--contiguous-gradients")["per_gpu_bytes"] == off["per_gpu_bytes"],
   "DeepSpeed's gradient bucket: 5e8 bf16 values more at the peak at ZeRO-2 and ZeRO-3; none more under "
   "ZeRO-Offload", step)
cfg = model("ds-zero2.json", {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": True}})
off_cfg = model("ds-zero2-plain.json", {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                        "zero_optimization": {"stage": 2, "contiguous_gradients": False}})
got = plan("--model", LLAMA2, "--seq", 1024, "--deepspeed", cfg, "--gpus-per-node", 8)["setup"]
plain = plan("--model", LLAMA2, "--seq", 1024, "--deepspeed", off_cfg, "--gpus-per-node", 8)["setup"]
ok(got["contiguous_gradients"] and got["reduce_bucket"] == 4e8 and not plain["contiguous_gradients"],
   "a DeepSpeed config: contiguous_gradients by default, 2e8 twice with overlap_comm at stage 2; off when it says "
   "so", (got, plain))

# FSDP2 (fully_shard per block, bf16 compute, fp32 sharded states): the fp32 shard of
# the weights, gradients and Adam over 8, two blocks gathered (this and the prefetched),
# the root's embedding and output layer gathered, a block's unsharded gradient and its
# fp32 reduce-scatter input
fs = per_gpu("--model", LLAMA2, "--fsdp", "--gpus-per-node", 8, "--optimizer-impl", "for-loop")
lp = (P7 - 2 * VH - 4096) // 32
ok(fs["params"] == 4 * P7 / 8 and fs["optimizer"] == 8 * P7 / 8 and fs["grads"] == 4 * P7 / 8 and
   fs["temporaries"] == 2 * 2 * lp + 2 * 2 * VH + 2 * VH + (2 + 4) * lp,
   "FSDP2: fp32 shards over 8 GPUs, two blocks and the root gathered in bf16", fs)
# FSDP's CPU offload (FSDP1's CPUOffload(offload_params=True), FSDP2's CPUOffloadPolicy): the
# fp32 shards of the parameters, their gradients and the optimizer's state on the host,
# which steps there; the GPU keeps what FSDP gathers (its temporaries, as without offload)
off = plan("--model", LLAMA2, "--fsdp", "--offload-params", "cpu", "--gpus-per-node", 8)
nv = subprocess.run([MEMTAP, "plan", "--model", LLAMA2, "--fsdp", "--offload-params", "nvme", "--gpus-per-node", "8"],
                    capture_output=True, text=True)
g = off["per_gpu_bytes"]
ok(g["params"] == g["grads"] == g["optimizer"] == 0 and g["temporaries"] == fs["temporaries"] and
   off["cpu_bytes_per_node"] == 16 * P7 and nv.returncode == 2 and "not to NVMe" in nv.stderr,
   "FSDP with CPU offload: the GPU keeps only what it gathers; the host 16 bytes a parameter per node (fp32 "
   "weights, gradients, Adam); NVMe refused", (g, off["cpu_bytes_per_node"], nv.stderr))
# FSDP1 (--fsdp1, FullyShardedDataParallel): the same shards; a block's unsharded gradient
# reduced in bf16 itself (flat_param.py: a param_dtype without a reduce_dtype) into a new
# bf16 shard, not an fp32 copy; with CPU offload each gathered block also holds the copy of
# its shard the all-gather reads (pre_unshard's flat_param_to(device)): 2 bytes x lp / 8, twice
f1 = per_gpu("--model", LLAMA2, "--fsdp", "--fsdp1", "--gpus-per-node", 8, "--optimizer-impl", "for-loop")
f1off = per_gpu("--model", LLAMA2, "--fsdp", "--fsdp1", "--offload-params", "cpu", "--gpus-per-node", 8)
ok(f1["params"] == fs["params"] and f1["grads"] == fs["grads"] and f1["optimizer"] == fs["optimizer"] and
   f1["temporaries"] == 2 * 2 * lp + 2 * 2 * VH + 2 * VH + 2 * (lp + lp / 8) and
   f1off["temporaries"] == f1["temporaries"] + 2 * 2 * lp / 8,
   "FSDP1: a block's gradient reduced in bf16 into a new shard; under CPU offload each gathered block's shard "
   "copied to the GPU", (f1, f1off))
# FSDP1 with use_orig_params=True and LoRA's adapters inside the blocks' units (Lightning's
# FSDPStrategy): each block's flat gradient covers its frozen values, sharded over 4 in bf16;
# with the adapters as their own units (PEFT's fsdp_auto_wrap_policy, fsdp_qlora) only theirs
LO = ["--model", LLAMA2, "--lora-rank", 8, "--precision", "bf16-pure", "--fsdp", "--fsdp1", "--gpus-per-node", 4]
mixed, apart = plan(*LO, "--orig-params"), plan(*LO)
ok(mixed["per_gpu_bytes"]["grads"] == 2 * (4194304 + 32 * lp) / 4 and apart["per_gpu_bytes"]["grads"] == 2 * 4194304 / 4
   and mixed["per_gpu_bytes"]["optimizer"] == apart["per_gpu_bytes"]["optimizer"],
   "--orig-params: a LoRA block's flat gradient covers its frozen values (its optimizer state does not)",
   (mixed["per_gpu_bytes"], apart["per_gpu_bytes"]))
refused = {" ".join(map(str, a)): subprocess.run([MEMTAP, "plan", "--model", LLAMA2, *map(str, a)], capture_output=True,
                                                  text=True) for a in (["--fsdp1"], ["--fsdp", "--orig-params"],
                                                                       [*LO[2:], "--orig-params", "--quantize", "nf4"])}
ok(all(p.returncode == 2 and p.stderr.splitlines()[-1].startswith("memtap: --") and
       ("needs --fsdp" in p.stderr or "it needs --fsdp1" in p.stderr) for p in refused.values()),
   "--fsdp1 without --fsdp, --orig-params without FSDP1 or on a quantized base: refused in one line",
   {k: p.stderr for k, p in refused.items()})
# FSDP1 wraps a unit at a time, moving it to the GPU whole and flattening it into one tensor
# before sharding it: Llama-2-7B's root unit (embedding and output layer, bf16: 4 x VH bytes)
# twice, the peak of a one-token QLoRA step on one GPU, and left in the replay's cache
W = ["--model", LLAMA2, "--lora-rank", 8, "--quantize", "nf4", "--precision", "bf16-pure", "--seq", 1,
     "--micro-batch", 1, "--fsdp", "--fsdp1"]
wrap = plan(*W, "--reserved")
ok(wrap["moment"].startswith("wrapping the model in FSDP1") and wrap["per_gpu_bytes"]["temporaries"] == 8 * VH and
   wrap["reserved"]["replay_reserved_bytes"] >= wrap["per_gpu_bytes"]["params"] + 8 * VH,
   "FSDP1's wrap: the largest unit moved to the GPU whole and flattened, a moment of its own, replayed",
   (wrap["moment"], wrap["per_gpu_bytes"], wrap["reserved"]))

# torch.optim's AdamW steps with foreach by default (DTensor is among its foreach types):
# _multi_tensor_adamw's torch._foreach_sqrt(device_exp_avg_sqs) copies every fp32 second
# moment of the shard at once, more than the backward's gathered blocks
fe = plan("--model", LLAMA2, "--fsdp", "--gpus-per-node", 8)
ok(fe["moment"] == "optimizer step" and fe["setup"]["optimizer_impl"] == "auto" and
   fe["per_gpu_bytes"]["temporaries"] == 4 * P7 / 8 and
   per_gpu("--model", LLAMA2, "--fsdp", "--gpus-per-node", 8, "--optimizer-impl", "fused")["temporaries"] ==
   fs["temporaries"],
   "FSDP2 with torch.optim's AdamW: foreach by default, a copy of the shard's second moments at the step (4 bytes "
   "a parameter over 8); fused steps in place", fe["per_gpu_bytes"])
# torch.optim's implementations on a 1B model in fp32 (model states only): foreach's copy of
# the second moments (4 bytes a parameter), a tensor at a time the largest tensor's update
# (here given: 100M), fused nothing; PyTorch before 2.0 stepped a tensor at a time, and so
# does what is not a PyTorch module (Megatron's) or under DeepSpeed's ZeRO
ONE = ["--params", "1B", "--largest-layer", "100M", "--precision", "fp32", "--optimizer", "adamw"]
temps = {i: per_gpu(*ONE, "--impl", "pytorch", "--optimizer-impl", i)["temporaries"]
         for i in ("auto", "foreach", "fused", "for-loop")}
ok(temps == {"auto": 4e9, "foreach": 4e9, "fused": 0, "for-loop": 4e8}
   and per_gpu(*ONE, "--impl", "pytorch", "--torch", "1.13")["temporaries"] == 4e8
   and per_gpu(*ONE)["temporaries"] == 4e8
   and per_gpu(*ONE, "--zero", 1, "--gpus-per-node", 2)["temporaries"] == 2e8
   and per_gpu(*ONE, "--impl", "pytorch", "--optimizer", "sgd")["temporaries"] == 0,
   "the optimizer's step by implementation: foreach copies every second moment, a tensor at a time the largest, "
   "fused none; PyTorch 1.x and Megatron a tensor at a time (sharded by ZeRO); SGD's foreach steps in place", temps)
# --reserved replays the step as planned: foreach's copies made for every tensor before any
# goes (a ViT-L/16 in fp32 with torch.optim.Adam, batch 1, as PyTorch's "optimizer step in
# backward" tutorial trains it: its memory snapshot peaks at ~6 GB in the step)
VIT = ["--layers", 24, "--hidden", 1024, "--heads", 16, "--ffn", 4096, "--vocab", 768, "--positions", 197,
       "--classifier", 1000, "--seq", 197, "--micro-batch", 1, "--no-dropout", "--attention", "flash", "--impl",
       "pytorch", "--precision", "fp32", "--optimizer", "adam", "--reserved"]
vit = {i: plan(*VIT, "--optimizer-impl", i) for i in ("auto", "for-loop", "fused")}
ok(vit["auto"]["moment"] == "optimizer step" and vit["for-loop"]["moment"] != "optimizer step" and
   all(abs(v["reserved"]["replay_allocated_bytes"] - v["per_gpu_bytes"]["total"]) < 0.01 * v["per_gpu_bytes"]["total"]
       for v in vit.values()) and abs(vit["auto"]["per_gpu_bytes"]["total"] - 6e9) < 0.03 * 6e9,
   "--reserved replays each implementation's step as planned (ViT-L/16, fp32 Adam: foreach peaks at the step, "
   "~6 GB as PyTorch's tutorial measured)", {i: (v["moment"], v["per_gpu_bytes"]["total"],
                                             v["reserved"]["replay_allocated_bytes"]) for i, v in vit.items()})
# DeepSpeed's ZeRO step (stage_1_and_2.py, stage3.py): the gradients outside the partition
# freed, the partition's flattened (16-bit) and taken to fp32: 6 bytes a partition
# parameter beside its 16-bit gradients; at stage 3 a sub-group (1e9 values) at a time;
# torch.optim's Adam in FusedAdam's place copies the flat state after the 16-bit flat goes
def ds(*x):
    return plan("--model", LLAMA2, "--gpus-per-node", 8, *x)
part = P7 / 8
z = {k: ds("--zero", k)["per_gpu_bytes"] for k in (1, 2, 3)}
big = ds("--zero", 3, "--gpus-per-node", 2)["per_gpu_bytes"]
ok(all(z[k]["temporaries"] == 6 * part and z[k]["grads"] == 2 * part for k in (2, 3)) and
   z[1]["grads"] == 2 * P7 and
   big["temporaries"] == 6e9 and
   ds("--zero", 2, "--precision", "fp32")["per_gpu_bytes"]["temporaries"] == 4 * part and
   ds("--zero", 2, "--optimizer-impl", "foreach")["per_gpu_bytes"]["temporaries"] == 8 * part and
   all(abs(r["reserved"]["replay_allocated_bytes"] - r["per_gpu_bytes"]["total"]) < 0.001 * r["per_gpu_bytes"]["total"]
       for r in (ds("--zero", k, "--seq", 512, "--micro-batch", 1, "--reserved") for k in (1, 2, 3))),
   "DeepSpeed's ZeRO step: 6 bytes a partition parameter for its fp32 flat gradient (4 in fp32), beside the "
   "partition's gradients (at stage 1 the backward's whole gradients peak higher); a 1e9-value sub-group at stage "
   "3; replayed as planned", (z, big))
# PyTorch DDP keeps its gradient buckets, a second copy of the gradients unless
# gradient_as_bucket_view=True (reducer.cpp's initialize_buckets); not one GPU, ZeRO or FSDP
ddp = {k: per_gpu(*ONE, "--impl", "pytorch", "--gpus-per-node", 4, *x)["grads"]
       for k, x in (("ddp", []), ("view", ["--bucket-view"]), ("zero", ["--zero", 1]),
                    ("zero-view", ["--zero", 1, "--bucket-view"]))}
DDP = ["--layers", 12, "--hidden", 768, "--heads", 12, "--vocab", 50257, "--seq", 128, "--micro-batch", 1,
       "--impl", "pytorch", "--precision", "fp32", "--optimizer", "adamw", "--gpus-per-node", 4, "--reserved"]
replayed = {k: plan(*DDP, *x) for k, x in (("ddp", []), ("view", ["--bucket-view"]))}
ok(ddp["ddp"] == 8e9 and ddp["view"] == 4e9 and ddp["zero"] == ddp["zero-view"] and per_gpu(*ONE, "--impl", "pytorch")["grads"] == 4e9 and
   all(abs(r["reserved"]["replay_allocated_bytes"] - r["per_gpu_bytes"]["total"]) < 0.01 * r["per_gpu_bytes"]["total"]
       for r in replayed.values()) and
   replayed["ddp"]["per_gpu_bytes"]["grads"] - replayed["view"]["per_gpu_bytes"]["grads"] == 4 * replayed["ddp"][
       "params"],
   "PyTorch DDP over 4 GPUs: its buckets a second copy of the fp32 gradients, none with gradient_as_bucket_view, "
   "under ZeRO or on one GPU", ddp)

# LoRA and QLoRA (LitGPT's Llama-2-7B, r 8 on q and v: 4,194,304 trainable)
lora = plan("--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 8, "--lora-modules", "qv")
q = plan("--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 8, "--lora-modules", "qv", "--quantize", "nf4")
base = P7 + 4194304
ok(lora["trainable_params"] == 4194304 and lora["per_gpu_bytes"]["params"] == 2 * base and
   lora["per_gpu_bytes"]["optimizer"] == 2 * 2 * 4194304 and
   abs(q["per_gpu_bytes"]["params"] - (2 * 4194304 + (P7 - 2 * VH) * (0.5 + 4 / 64) + 2 * 2 * VH)) < 1,
   "LoRA: 4,194,304 adapters trained on a frozen 16-bit base; QLoRA: the blocks' weights in nf4 (4 bits and an "
   "fp32 absmax per 64), the embedding and output layer kept 16-bit", (lora, q))
# an adapter on the output layer too (PEFT's target_modules "lm_head": A r x hidden, B vocab
# x r), once; the output layer itself stays frozen (no full gradient of it)
head = plan("--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 8, "--lora-modules", "qv,head")
ok(head["trainable_params"] == 4194304 + 8 * (4096 + 32000) and head["setup"]["lora_modules"] == "qv,head" and
   head["per_gpu_bytes"]["optimizer"] == 2 * 2 * head["trainable_params"],
   "LoRA on the output layer (qv,head): 288,768 more adapters, r x (hidden + vocab), the layer frozen", head)
# What LoRA keeps for backward, worked out from the modules' source for Llama-2-7B, r 8 on
# q and v, 16-bit, sdpa (bytes a token and layer, h 4096, f 11008). PEFT's adapters,
# lora_B(lora_A(dropout(x))): the two read the attention's input x, kept once (no dropout),
# and keep A's r values each; the frozen q, k, v, o and MLP matrices keep no input (mm
# saves its input only for the weight's gradient). The rest: two RMSNorms' fp32 inputs (8h),
# sdpa's q, k, v and output (4 x 2h) and fp32 log-sum-exp (4 x 32 heads), the MLP's gate
# output, SiLU output and up output (3 x 2f)
LORA7 = ["--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 8, "--lora-modules", "qv", "--seq", 1304,
         "--micro-batch", 1]
H, F = 4096, 11008
BASE = 8 * H + 4 * 2 * H + 4 * 32 + 3 * 2 * F
kept = {name: plan(*LORA7, *extra)["layer_activation_bytes"] / 1304 for name, extra in (
    ("peft", []), ("dropout", ["--lora-dropout", 0.05]), ("fp32", ["--lora-fp32"]),
    ("litgpt", ["--impl", "litgpt", "--lora-dropout", 0.05, "--rmsnorm-16bit"]), ("nf4", ["--quantize", "nf4"]),
    ("int8", ["--quantize", "int8"]), ("torchao", ["--quantize", "nf4-dq", "--torchao"]))}
ok(kept["peft"] == BASE + 2 * H + 2 * 2 * 8,
   "LoRA (PEFT): the adapters keep their input once and A's r values; frozen matrices keep no input", kept)
# with dropout each adapter keeps its own dropped copy and the bool mask; with the adapters
# in fp32 (PEFT's autocast_adapter_dtype) each keeps its own fp32 cast of x, and A's values
# are fp32
ok(kept["dropout"] == BASE + 2 * (2 * H + H) + 2 * 2 * 8 and kept["fp32"] == BASE + 2 * 4 * H + 2 * 4 * 8,
   "--lora-dropout: a dropped copy and a mask per adapter; --lora-fp32: an fp32 copy of x per adapter", kept)
# LitGPT (lit_gpt/lora.py at 8641822): RMSNorm without an fp32 copy (2 x 2h: --rmsnorm-16bit); one q, k, v
# matrix whose output sdpa keeps whole through v's view (3h beside q and k, 2h each: 5 x 2h);
# one adapter on it, its dropped copy and mask (2h + h), A's 2r values, and B's output for q
# and v padded by zero_pad's index_copy, which keeps it (2h x 2)
ok(kept["litgpt"] == 2 * 2 * H + 5 * 2 * H + 2 * H + 4 * 32 + 3 * 2 * F + 3 * H + 2 * 2 * 8 + 2 * 2 * H,
   "--impl litgpt: its fused q, k, v kept through v, its RMSNorm's 16-bit input, zero_pad's padded B output",
   kept)
# bitsandbytes' matmul keeps each quantized linear's input for backward (MatMul4Bit's
# ctx.tensors = (A, B), to 0.43.1): beyond what the adapters keep (the attention's input)
# and sdpa's output (the output projection's), the MLP's and its last matrix's, h + f
# 16-bit values
ok(all(kept[k] - kept["peft"] == 2 * (H + F) for k in ("nf4", "int8")),
   "QLoRA: a bitsandbytes base keeps its linear layers' inputs, (h + f) x 2 bytes a token and layer more", kept)
# torchao's LinearNF4 (torchtune's QLoRA) keeps only its 4-bit weight: as a 16-bit base
ao = plan(*LORA7, "--quantize", "nf4-dq", "--torchao")
bnb = plan(*LORA7, "--quantize", "nf4-dq")
ok(kept["torchao"] == kept["peft"] and ao["per_gpu_bytes"]["params"] == bnb["per_gpu_bytes"]["params"] and
   not any("bitsandbytes" in a for a in ao["approximations"]) and
   any("bitsandbytes" in a for a in bnb["approximations"]),
   "--torchao: torchao's NF4 keeps no input, as a 16-bit base; stored as bitsandbytes' nf4-dq", (kept, ao, bnb))
bad = subprocess.run([MEMTAP, "plan", *map(str, LORA7), "--torchao"], capture_output=True, text=True)
ok(bad.returncode == 2 and bad.stderr.splitlines()[-1:] == [
    "memtap: --torchao is torchao's NF4: it needs --quantize nf4-dq (or nf4)"],
   "--torchao without a 4-bit base is refused in one line", bad.stderr)
lit_params = plan("--model", LLAMA3, "--precision", "bf16-pure", "--lora-rank", 8, "--lora-modules", "qv",
                  "--impl", "litgpt")
ok(lit_params["trainable_params"] == 32 * (2 * 8 * 4096 + 8 * (4096 + 1024)),
   "--impl litgpt: LoRAQKVLinear's A of 2r rows and B of q's and v's widths (Llama-3.1-8B's GQA)", lit_params)
bad = subprocess.run([MEMTAP, "plan", *map(str, LORA7), "--lora-dropout", "1"], capture_output=True, text=True)
ok(bad.returncode != 0 and bad.stderr.splitlines()[-1:] == [
    "memtap: --lora-dropout is a probability from 0 to below 1, for LoRA's adapters (--lora-rank)"],
   "--lora-dropout 1 is refused in one line", bad.stderr)
zero2 = per_gpu("--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 8, "--zero", 2, "--gpus-per-node", 8)
ok(zero2["params"] >= 2 * P7, "ZeRO-1/2 do not shard a frozen base", zero2)

# fp8 (TransformerEngine, torchao): the blocks' linear weights cached in fp8 for the step,
# the linear layers' saved inputs in fp8
fp8 = plan("--model", LLAMA2, "--seq", 4096, "--micro-batch", 1, "--fp8")
bf = plan("--model", LLAMA2, "--seq", 4096, "--micro-batch", 1)
extra = fp8["per_gpu_bytes"]["params"] - bf["per_gpu_bytes"]["params"]
ok(abs(extra - (P7 - 2 * VH)) < 1e-4 * P7 and fp8["layer_activation_bytes"] < bf["layer_activation_bytes"],
   "fp8: one byte per linear weight cached, smaller saved inputs", (extra, fp8["layer_activation_bytes"],
                                                                     bf["layer_activation_bytes"]))

# torchtitan's op-level selective checkpointing (Llama-3.1-8B): a block keeps its input,
# every other matrix multiply's output (wq, wv, w1, w2: 23,552 wide), the attention's
# output and its fp32 log-sum-exp per head
SEQ = ["--seq", 8192, "--micro-batch", 2, "--fsdp", "--gpus-per-node", 8]
op = plan("--model", LLAMA3, *SEQ, "--recompute", "op")["layer_activation_bytes"]
full = plan("--model", LLAMA3, *SEQ, "--recompute", "full")["layer_activation_bytes"]
none = plan("--model", LLAMA3, *SEQ, "--recompute", "none")["layer_activation_bytes"]
ok(op == 16384 * (2 * 4096 + 2 * (4096 + 1024 + 14336 + 4096 + 4096) + 4 * 32) and full < op < none,
   "op-level checkpointing: 63,616 bytes per token per block, between full and none", (op, full, none))

# DeepSpeed's estimators: the largest layer (refused without it at ZeRO-3, as DeepSpeed's
# function cannot run without it), additional_buffer_factor, --json
p = subprocess.run([MEMTAP, "plan", "--estimator", "deepspeed-zero3", "--params", "7B"], capture_output=True,
                   text=True)
ok(p.returncode == 2 and "needs the largest layer" in p.stderr and not p.stdout,
   "--estimator deepspeed-zero3 without --largest-layer or an architecture is refused, as DeepSpeed's "
   "function raises TypeError", p.stderr)
est = plan("--estimator", "deepspeed-zero3", "--model", LLAMA2, "--gpus-per-node", 8, "--buffer-factor", 2)
cpu0 = est["rows"][0]["cpu_bytes"]
ok(est["largest_layer_params"] == VH and est["rows"][0]["gpu_bytes"] == 4 * VH and
   cpu0 == int(P7 * 18 * 2), "--estimator deepspeed-zero3 --model: the largest module (the embedding, "
   "131,072,000, as _all_live takes it), --buffer-factor 2 in the host column", est)

# LitGPT's chunked loss (lit_gpt/model.py lm_head_chunk_size, utils.py chunked_cross_entropy,
# 8641822), run by Lightning Fabric, whose wrapper hands the outputs back in fp32
# (HalfPrecision.convert_output): at backward start the logits' fp32 chunks and their fp32
# log-softmaxes, and a chunk's two fp32 gradients instead of the whole logits' three fp32
# ones: (4 + 4) - (4 + 8) bytes a logit, and 8 bytes a chunk's logit
LIT = ["--model", LLAMA2, "--seq", 1304, "--micro-batch", 1, "--precision", "bf16-pure", "--lora-rank", 8]
whole, chunked = plan(*LIT), plan(*LIT, "--loss-chunk", 128)
logits = 1304 * 32000
ok(whole["moment"] == chunked["moment"] == "backward start" and
   chunked["per_gpu_bytes"]["total"] - whole["per_gpu_bytes"]["total"] == -4 * logits + 8 * 128 * 32000 and
   chunked["per_gpu_bytes"]["activations"] - whole["per_gpu_bytes"]["activations"] == 4 * logits,
   "--loss-chunk 128: LitGPT's logits in fp32 chunks (Fabric's output conversion) and their fp32 log-softmaxes, a "
   "chunk's gradients at a time (%d bytes fewer at backward start for Llama-2-7B's 1,304 tokens)"
   % (4 * logits - 8 * 128 * 32000), (whole["per_gpu_bytes"], chunked["per_gpu_bytes"]))
rw, rc = plan(*LIT, "--reserved")["reserved"], plan(*LIT, "--loss-chunk", 128, "--reserved")["reserved"]
ok(abs(rc["replay_allocated_bytes"] - chunked["per_gpu_bytes"]["total"]) < 0.01 * chunked["per_gpu_bytes"]["total"] and
   rc["replay_allocated_bytes"] < rw["replay_allocated_bytes"],
   "--reserved replays the chunked loss chunk by chunk, its peak allocated within 1% of the plan", (rw, rc))
p = subprocess.run([MEMTAP, "plan", "--model", BERT, "--classifier", "2", "--seq", "512", "--micro-batch", "1",
                    "--loss-chunk", "128"], capture_output=True, text=True)
ok(p.returncode == 2 and [line for line in p.stderr.splitlines() if "LitGPT's" in line] == p.stderr.splitlines()[-1:],
   "--loss-chunk with a classification head is refused in one line (after --model's note)", p.stderr)

# Loading a quantized base (bitsandbytes' Params4bit._quantize): each weight comes to the GPU
# in 16 bits and is quantized there, the largest MLP matrix's copy 2 x 4096 x 11008 bytes; a
# quantized matmul dequantizes its weight to 16 bits as large (MatMul4Bit: dequantize_4bit, in
# forward and for backward's input gradient), so the backward of a layer holds as much with
# the adapters' gradients and states besides: loading is a moment, never the peak
QL = ["--model", LLAMA2, "--lora-rank", 8, "--quantize", "nf4", "--micro-batch", 1, "--precision", "bf16-pure"]
tiny, long = plan(*QL, "--seq", 1), plan(*QL, "--seq", 1304)
ok(tiny["per_gpu_bytes"]["temporaries"] == 2 * 4096 * 11008 + 2 * (4096 + 11008) and
   tiny["moment"] == "backward of the first layer" and long["moment"] == "backward start",
   "a quantized base's matmuls dequantize their weights: the largest one's 16-bit copy a temporary of a layer's "
   "backward (beside one token's input and MLP gradients), as large as loading's copy",
   (tiny["per_gpu_bytes"], long["moment"]))
reserved = plan(*QL, "--seq", 1, "--reserved")["reserved"]
ok(reserved["replay_reserved_bytes"] >= tiny["per_gpu_bytes"]["params"] + 2 * 4096 * 11008 and
   reserved["cache_bytes"] > 0,
   "--reserved replays the loading: each weight's 16-bit copy made and freed to the cache", reserved)
ok(not plan(*QL, "--seq", 1, "--fsdp", "--gpus-per-node", 2)["moment"].startswith("loading"),
   "the loading moment is not claimed for FSDP, whose loading differs")

# The framework's named parts (docs/PLAN.md, "The framework"): PyTorch's two cuBLAS workspaces
# (CublasHandlePool.cpp: 4096 KiB x 2 + 16 KiB x 8, 32 MiB on sm_90) in every plan of
# PyTorch modules from 2.0; with --nvml the CUDA context (512 MiB lazily loaded, 1343 MiB
# before PyTorch 1.13) and NCCL's buffers (688 MiB a communicator of more than two GPUs, 544
# of two, NVLink SHARP's 256 MiB on Hopper over 4 or more GPUs of a node)
MIB = 2**20
STEP = ["--model", LLAMA2, "--seq", 2048, "--micro-batch", 1]
parts = {name: plan(*STEP, *args)["framework_bytes"] for name, args in {
    "a100": [], "h100": ["--gpu-mem", "h100"], "torch 1.13": ["--torch", "1.13"],
    "h200 torch 2.11": ["--gpu-mem", "h200", "--torch", "2.11"],
    "megatron": ["--impl", "megatron"], "nvml 1 GPU": ["--nvml"],
    "nvml dp 8 h100": ["--nvml", "--gpu-mem", "h100", "--gpus-per-node", 8, "--zero", 1],
    "nvml tp 2 dp 4 h100": ["--nvml", "--gpu-arch", 90, "--gpus-per-node", 8, "--tp", 2, "--zero", 1],
    "nvml dp 2 a100": ["--nvml", "--gpus-per-node", 2], "nvml torch 1.10": ["--nvml", "--torch", "1.10"]}.items()}
want = {"a100": (0, 0, 2 * 8519680), "h100": (0, 0, 64 * MIB), "torch 1.13": (0, 0, 0), "megatron": (0, 0, 0),
        "h200 torch 2.11": (0, 0, 65 * MIB),
        "nvml 1 GPU": (512 * MIB, 0, 2 * 8519680), "nvml dp 8 h100": (512 * MIB, (688 + 256) * MIB, 64 * MIB),
        "nvml tp 2 dp 4 h100": (512 * MIB, (688 + 544 + 256) * MIB, 64 * MIB),
        "nvml dp 2 a100": (512 * MIB, 544 * MIB, 2 * 8519680), "nvml torch 1.10": (1343 * MIB, 0, 0)}
got = {k: (v["cuda_context"], v["nccl"], v["cublas_workspaces"]) for k, v in parts.items()}
ok(got == want, "the framework by name: PyTorch's cuBLAS workspaces (2 x 8.125 MiB, 2 x 32 MiB on Hopper, and "
   "cuBLASLt's 1 MiB from 2.8, as PyTorch 2.11 cleared on an H200; none before 2.0 or for Megatron's kernels); with --nvml the CUDA context and NCCL's buffers per communicator",
   (got, want))
one = plan(*STEP, "--nvml", "--gpu-mem", "h100", "--gpus-per-node", 8, "--zero", 1)
ok(one["per_gpu_bytes"]["framework"] == sum(one["framework_bytes"].values()) and
   one["per_gpu_bytes"]["total"] == sum(one["per_gpu_bytes"][k] for k in one["per_gpu_bytes"] if k != "total"),
   "the named parts are the framework, and the framework is in the total", one["per_gpu_bytes"])
text = subprocess.run([MEMTAP, "plan", *map(str, STEP), "--nvml"], capture_output=True, text=True).stdout
ok("of which the CUDA context 0.50 GiB, PyTorch's cuBLAS workspaces 0.02 GiB (docs/PLAN.md)" in text,
   "the text names the framework's parts", text)

# bitsandbytes' paged optimizers (optim/optimizer.py get_state_buffer, functional.py get_paged):
# the state of each tensor of 1e5 values or more in managed memory, outside the total; the
# smaller ones' on the GPU (Llama-2-7B: 65 norms of 4096 values, 4 bytes of pure-bf16 Adam
# state each); LoRA's rank-8 adapters (8 x 4096) stay on the GPU, rank 64's are paged
FULL = ["--model", LLAMA2, "--seq", 2048, "--micro-batch", 1, "--precision", "bf16-pure"]
plain, paged = plan(*FULL), plan(*FULL, "--paged")
ok(paged["per_gpu_bytes"]["optimizer"] == 4 * 65 * 4096 and
   paged["paged_optimizer_bytes"] == 4 * (P7 - 65 * 4096) and plain["paged_optimizer_bytes"] == 0 and
   paged["per_gpu_bytes"]["total"] < plain["per_gpu_bytes"]["total"] - 4 * (P7 - 65 * 4096),
   "--paged: Llama-2-7B's matrices' and tables' Adam state in managed memory, outside the total, its norms' on the "
   "GPU, and bitsandbytes' step in place (no foreach copy)", (plain["per_gpu_bytes"], paged))
r8 = plan(*FULL, "--lora-rank", 8, "--paged")
r64 = plan(*FULL, "--lora-rank", 64, "--lora-modules", "q,k,v,mlp", "--paged")
ok(r8["paged_optimizer_bytes"] == 0 and r8["per_gpu_bytes"]["optimizer"] > 0 and
   r64["per_gpu_bytes"]["optimizer"] == 0 and r64["paged_optimizer_bytes"] == 4 * r64["trainable_params"],
   "--paged with LoRA: rank 8's adapters (32,768 values each) keep their state on the GPU, rank 64's are paged",
   (r8["per_gpu_bytes"], r64["per_gpu_bytes"], r64["paged_optimizer_bytes"]))
replayed = plan(*FULL, "--paged", "--reserved")
ok(abs(replayed["reserved"]["replay_allocated_bytes"] - paged["per_gpu_bytes"]["total"]) <
   0.01 * paged["per_gpu_bytes"]["total"],
   "--reserved replays a paged optimizer without its paged state, within 1% of the plan", replayed["reserved"])
p = subprocess.run([MEMTAP, "plan", "--params", "1B", "--optimizer", "sgd", "--paged"], capture_output=True,
                   text=True)
ok(p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "bitsandbytes'" in p.stderr,
   "--paged with SGD is refused in one line", p.stderr)

# Megatron's token dispatchers (moe/token_dispatcher.py) gather the tokens over the expert
# tensor-parallel ranks before the experts: each rank keeps every gathered token's copy (top-k
# x hidden, not split), while the experts' MLPs split by etp. Mixtral's shape at tp 2 with
# sequence parallelism, 4,096 tokens: etp 2 against etp 1 keeps the copies of twice the tokens
# (4096 x 2 x 2 x 4096 / 2 bytes more) and half the MLPs' (4096 x 2 x 2 x 3 x 14336 / 2 fewer)
MOE = ["--layers", 32, "--hidden", 4096, "--heads", 32, "--query-groups", 8, "--ffn", 14336, "--vocab", 32000,
       "--swiglu", "--rmsnorm", "--rope", "--experts", 8, "--topk", 2, "--tp", 2, "--sp", "--gpus-per-node", 8,
       "--seq", 4096, "--micro-batch", 1, "--precision", "bf16"]
by_etp = {etp: plan(*MOE, "--etp", etp)["layer_activation_bytes"] for etp in (1, 2)}
ok(by_etp[2] - by_etp[1] == 4096 * 2 * 2 * (4096 // 2 - 3 * 14336 // 2),
   "MoE: the experts' input copies gathered over the expert tensor-parallel ranks, their MLPs split by them", by_etp)

# Megatron's default all-gather dispatcher keeps one buffer of every tensor- and expert-parallel
# rank's tokens for all layers (mappings.py: get_global_memory_buffer().get_tensor): this
# rank's 4096 / 2 tokens (sp) x etp 2 x ep 2 x 4096 hidden, bf16; --alltoall has none
gathered, a2a = plan(*MOE, "--ep", 2), plan(*MOE, "--ep", 2, "--alltoall")
ok(gathered["per_gpu_bytes"]["total"] - a2a["per_gpu_bytes"]["total"] == 2 * 4096 // 2 * 2 * 2 * 4096 and
   gathered["moment"] == a2a["moment"],
   "MoE: Megatron's all-gather dispatcher's buffer of every rank's tokens, kept for all layers; none with --alltoall",
   (gathered["per_gpu_bytes"], a2a["per_gpu_bytes"]))

# Megatron's router in fp32 (--moe-router-dtype fp32): its backward's fp32 gradient of the
# router's input and fp32 copy of the input, this rank's 4096 / 2 tokens (sp) x 4096 each
fp32 = plan(*MOE, "--router-fp32")
p = subprocess.run([MEMTAP, "plan", "--params", "7B", "--router-fp32"], capture_output=True, text=True)
ok(fp32["per_gpu_bytes"]["temporaries"] - plan(*MOE)["per_gpu_bytes"]["temporaries"] == 2 * 4 * 4096 // 2 * 4096 and
   p.returncode == 2 and p.stderr.count("\n") == 1 and "--experts" in p.stderr,
   "--router-fp32: a MoE layer's backward holds the router input's fp32 gradient and fp32 copy; refused without "
   "experts", (fp32["per_gpu_bytes"], p.stderr))

# LitGPT's modules have no dropout (its model.py; sdpa's dropout_p=0.0), whatever the Hugging
# Face config says: phi-2's resid_pdrop 0.1 keeps masks in transformers' modules, none in LitGPT's
phi = {"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560, "num_hidden_layers": 32,
       "num_attention_heads": 32, "intermediate_size": 10240, "partial_rotary_factor": 0.4,
       "tie_word_embeddings": False}
drops = {(impl, p): plan("--model", model("phi2-%s" % p, dict(phi, resid_pdrop=p)), "--impl", impl, "--seq", 512,
                         "--micro-batch", 1)["layer_activation_bytes"] for impl in ("litgpt", "pytorch") for p in (0, 0.1)}
ok(drops["litgpt", 0.1] == drops["litgpt", 0] and drops["pytorch", 0.1] > drops["pytorch", 0],
   "--impl litgpt keeps no dropout mask whatever the config's dropout; transformers' modules do", drops)

# LitGPT's 4-bit base, quantized by Lightning's BitsandbytesPrecision: every nn.Linear, the
# output layer's too (4.5 bits instead of 16), each from fp16, so a weight dequantizes to fp16
# and then bf16 (4 bytes a value): backward start holds the output layer's two copies beside
# a chunk's two fp32 gradients (8 bytes a logit of 128 of the 512 positions), and a layer's
# backward the largest MLP matrix's. With --outputs-kept (LitGPT's loop holds the last
# micro-batch's logits into the next forward) the next forward's end also holds the last
# one's fp32 logits and, on bitsandbytes' graph (ctx.tensors), each 4-bit layer's input:
# the attention's, the MLP's, the output and down projections' (3 x 4096 + 11008 a token and
# layer) and the output layer's (4096), beside its own 16-bit chunks and the output layer
# dequantized for the last (more than their fp32 copies), but not yet its log-softmaxes
Q4 = ["--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 32, "--loss-chunk", 128, "--seq", 512,
      "--micro-batch", 2, "--quantize", "nf4"]
lit, hf, kept = plan(*Q4, "--impl", "litgpt"), plan(*Q4, "--impl", "pytorch"), plan(*Q4, "--impl", "litgpt",
                                                                                   "--outputs-kept")
lv = 1024 * 32000
ok(hf["per_gpu_bytes"]["params"] - lit["per_gpu_bytes"]["params"] == (2 - 0.5 - 4 / 64) * VH and
   lit["moment"] == "backward start" and lit["per_gpu_bytes"]["temporaries"] == 8 * lv // 4 + 4 * VH and
   kept["moment"].startswith("the next micro-batch's forward") and
   kept["per_gpu_bytes"]["activations"] - lit["per_gpu_bytes"]["activations"] ==
   4 * VH - 2 * lv + 2 * 1024 * (32 * (3 * 4096 + 11008) + 4096),
   "LitGPT's 4-bit base: its output layer quantized and dequantized as fp16 and bf16; --outputs-kept: the next "
   "forward's end beside the last micro-batch's logits and bitsandbytes' kept inputs",
   (lit["per_gpu_bytes"], hf["per_gpu_bytes"], kept["moment"], kept["per_gpu_bytes"]))
res = plan(*Q4, "--impl", "litgpt", "--outputs-kept", "--reserved")
ok(abs(res["reserved"]["replay_allocated_bytes"] - (res["per_gpu_bytes"]["total"] - res["per_gpu_bytes"]["framework"]))
   < 0.01 * res["per_gpu_bytes"]["total"],
   "--reserved replays --outputs-kept: the last micro-batch's logits and kept inputs held into the next forward, "
   "its peak allocated within 1% of the plan", res["reserved"])
TIED = model("llama2-7b-tied", {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
                                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                                 "intermediate_size": 11008, "tie_word_embeddings": True})
dq = {i: plan("--model", TIED, "--precision", "bf16-pure", "--lora-rank", 8, "--quantize", "nf4", "--seq", 1,
              "--micro-batch", 1, "--impl", i)["per_gpu_bytes"]["temporaries"] for i in ("litgpt", "pytorch")}
ok(dq["litgpt"] == 4 * 4096 * 3 * 4096 + 2 * (4096 + 11008) and dq["pytorch"] == 2 * 4096 * 11008 + 2 * (4096 + 11008),
   "a layer's backward dequantizes its largest 4-bit matrix to fp16 and bf16 under Lightning's plugin (LitGPT's "
   "fused q, k, v), to bf16 alone under transformers' (an MLP matrix); a tied head is not quantized", dq)

# FSDP's no_sync() accumulation (Lightning's no_backward_sync, as LitGPT accumulates): no
# reduce-scatter until the last micro-batch, the unsharded gradient of every unit that has one
# kept in bf16: with use_orig_params (Lightning's FSDP1) a LoRA block's frozen values' with
# its adapters' (one flat parameter), 32 blocks of lp values and the adapters' 4,194,304, 2
# bytes each on each of 4 GPUs; the root's tables, all frozen, have none; with the adapters
# apart (or FSDP2's parameters) only theirs
NS = ["--model", LLAMA2, "--seq", 1304, "--micro-batch", 1, "--precision", "bf16-pure", "--lora-rank", 8, "--fsdp",
      "--gpus-per-node", 4, "--recompute", "full", "--micro-batches", 128]
synced, unsynced = plan(*NS), plan(*NS, "--no-sync", "--fsdp1", "--orig-params")
apart = plan(*NS, "--no-sync", "--fsdp1")
ok(unsynced["per_gpu_bytes"]["grads"] == 2 * (32 * lp + 4194304) and synced["per_gpu_bytes"]["grads"] < 2**30 and
   apart["per_gpu_bytes"]["grads"] == 2 * 4194304,
   "--no-sync: FSDP keeps every unit's unsharded flat gradient until the last micro-batch, a LoRA block's frozen "
   "values' too under --orig-params", (synced["per_gpu_bytes"], unsynced["per_gpu_bytes"], apart["per_gpu_bytes"]))
p = subprocess.run([MEMTAP, "plan", *map(str, NS[:-2]), "--no-sync"], capture_output=True, text=True)
q = subprocess.run([MEMTAP, "plan", *map(str, NS), "--no-sync", "--reserved"], capture_output=True, text=True)
ok(p.returncode == 2 and p.stderr.splitlines()[-1:] == [
    "memtap: --no-sync is FSDP's gradient accumulation: it needs --fsdp and --micro-batches of 2 or more"] and
   q.returncode == 2 and "no_sync" in q.stderr,
   "--no-sync without accumulation is refused in one line, and the replay says it does not model it",
   (p.stderr, q.stderr))

# What the plan only approximates is said, with the way it errs; nothing for a plain full
# fine-tune
said = {name: plan(*FULL, *args)["approximations"] for name, args in {
    "full": [], "lora": ["--lora-rank", 8], "lora fp32": ["--lora-rank", 8, "--lora-fp32"],
    "litgpt": ["--lora-rank", 8, "--lora-fp32", "--impl", "litgpt"],
    "megatron": ["--lora-rank", 8, "--impl", "megatron"],
    "qlora fsdp": ["--lora-rank", 8, "--lora-fp32", "--quantize", "nf4", "--fsdp", "--gpus-per-node", 2],
    "qlora fsdp1": ["--lora-rank", 8, "--lora-fp32", "--quantize", "nf4", "--fsdp", "--fsdp1", "--gpus-per-node", 2],
    "nvml": ["--nvml"]}.items()}
moe = plan("--model", model("mixtral", {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
                                        "num_hidden_layers": 32, "num_attention_heads": 32,
                                        "num_key_value_heads": 8, "intermediate_size": 14336,
                                        "num_local_experts": 8, "num_experts_per_tok": 2}),
           "--seq", 4096, "--micro-batch", 1, "--gpus-per-node", 8, "--zero", 1)["approximations"]
ok(said["full"] == [] and said["lora fp32"] == [] and len(said["lora"]) == 1 and "--lora-fp32" in said["lora"][0] and
   said["litgpt"] == [] and
   len(said["megatron"]) == 1 and said["megatron"][0].endswith("errs high") and
   len(said["qlora fsdp"]) == 4 and any("0.43.2" in a for a in said["qlora fsdp"]) and
   any("FSDP2" in a for a in said["qlora fsdp"]) and any("gathered here as if 16-bit" in a for a in said["qlora fsdp"]) and
   any(a.endswith("may be low") and "loading" in a for a in said["qlora fsdp"]) and
   [a for a in said["qlora fsdp1"] if "FSDP2" in a or "loading" in a] == [] and len(said["qlora fsdp1"]) == 2 and
   len(moe) == 1 and moe[0].endswith("may be low") and len(said["nvml"]) == 1 and "published" in said["nvml"][0],
   "what the plan only approximates is said, each with the way it errs (PEFT's fp32 adapters, Megatron's frozen "
   "inputs, bitsandbytes' kept inputs, FSDP1 as FSDP2, a quantized base gathered and loaded, Megatron's token "
   "dispatch, "
   "--nvml's figures); nothing for a full fine-tune or LitGPT's LoRA", (said, moe))
text = subprocess.run([MEMTAP, "plan", *map(str, FULL), "--lora-rank", "8"], capture_output=True, text=True).stdout
ok("approximated (docs/PLAN.md):\n  PEFT from 0.12 keeps the adapters in fp32" in text, "and the text lists them", text)


# transformers 4.46 to 4.48's ForCausalLMLoss: logits.float(), then logits[..., :-1, :]
# .contiguous(), while the model's forward holds its 16-bit logits: the log-softmax is
# made beside 2 + 4 + 4 bytes a logit, 2 more than backward's start holds (its output and
# two fp32 gradients); 1,024 tokens x 32,000 logits, in the plan and in the replay
LORA512 = ["--model", LLAMA2, "--precision", "bf16-pure", "--lora-rank", 8, "--seq", 512, "--micro-batch", 2,
           "--recompute", "full", "--reserved"]
hf = {v: plan(*LORA512, "--transformers", v) for v in ("4.48", "4.49")}
base = plan(*LORA512)
old = [subprocess.run([MEMTAP, "plan", "--model", LLAMA2, *args], capture_output=True, text=True)
       for args in (["--transformers", "4.45"], ["--transformers", "4.48", "--impl", "litgpt"])]
ok(hf["4.48"]["per_gpu_bytes"]["total"] - base["per_gpu_bytes"]["total"] == 2 * 1024 * 32000 and
   hf["4.48"]["reserved"]["replay_allocated_bytes"] - base["reserved"]["replay_allocated_bytes"] == 2 * 1024 * 32000 and
   hf["4.48"]["moment"].startswith("the loss being made") and base["moment"] == "backward start" and
   hf["4.49"]["per_gpu_bytes"] == base["per_gpu_bytes"] and
   all(p.returncode == 2 and p.stderr.strip().endswith("--transformers is Hugging Face's release, from 4.46 (each "
                                                        "model made its own loss before), for its modules (--impl "
                                                        "pytorch)") for p in old),
   "--transformers 4.48: its loss shifts the fp32 logits into a copy beside the 16-bit ones (62.5 MiB more at "
   "1,024 tokens, planned and replayed); 4.49 shifts the labels; before 4.46 and LitGPT's modules refused",
   (hf["4.48"]["per_gpu_bytes"], base["per_gpu_bytes"], hf["4.48"]["moment"], [p.stderr for p in old]))

# an RMSNorm keeps an fp32 copy of its input (x.float(): LitGPT since lit_gpt#606, as
# Hugging Face's): 2 bytes a value more than lit_gpt's 16-bit one before, for each of a
# Llama layer's two norms, 512 tokens x 4,096; from PyTorch 1.13 to 2.1 its mean's squares
# too, in fp32 (norm_squares); nothing for a LayerNorm; Megatron's fused norms refused
LIT512 = ["--impl", "litgpt", "--precision", "bf16-pure", "--seq", 512, "--micro-batch", 1]
norm = {(t, b): plan("--model", LLAMA2, *LIT512, *t, *b)["layer_activation_bytes"]
        for t in ((), ("--torch", "2.1")) for b in ((), ("--rmsnorm-16bit",))}
ln = [plan("--model", GPT2, *LIT512, *b)["layer_activation_bytes"] for b in ((), ("--rmsnorm-16bit",))]
mg = subprocess.run([MEMTAP, "plan", "--model", LLAMA2, "--impl", "megatron", "--rmsnorm-16bit"], capture_output=True,
                    text=True)
ok(norm[(), ()] - norm[(), ("--rmsnorm-16bit",)] == 2 * 2 * 4096 * 512 and
   norm[("--torch", "2.1"), ()] - norm[("--torch", "2.1"), ("--rmsnorm-16bit",)] == 2 * 4 * 4096 * 512 and
   ln[0] == ln[1] and mg.returncode == 2 and
   mg.stderr.strip().endswith("--rmsnorm-16bit describes PyTorch modules' RMSNorm (--impl pytorch or litgpt)"),
   "LitGPT's RMSNorm keeps an fp32 copy of its input (8 MiB a Llama-2-7B layer at 512 tokens; 16 with PyTorch "
   "2.1's squares); --rmsnorm-16bit keeps lit_gpt's 16-bit one; a LayerNorm unchanged; Megatron's refused",
   (norm, ln, mg.stderr))


# reentrant checkpointing under FSDP1 (torch.utils.checkpoint's CheckpointFunction): no
# unit prefetched in backward, one layer's weights (2 x 202,383,360 bytes) fewer at a
# full fine-tune's first-layer peak; with LoRA (frozen block units) each layer's
# checkpointed input and its gradient stay until backward ends, so at the first layer's
# backward the activations are 33 inputs of 4,096 tokens x 4,096 (its own, the
# embedding's output, the other 31), in the plan and within 1% in the replay
FS1 = ["--model", LLAMA2, "--precision", "bf16-pure", "--seq", 4096, "--micro-batch", 1, "--recompute", "full",
       "--fsdp", "--fsdp1", "--gpus-per-node", 2, "--reserved"]
full = {r: plan(*FS1, "--vocab", 1024, "--optimizer", "sgd-nomomentum", *r) for r in ((), ("--reentrant",))}
lora = plan(*FS1, "--lora-rank", 8, "--reentrant")
bad = subprocess.run([MEMTAP, "plan", "--model", LLAMA2, "--reentrant"], capture_output=True, text=True)
ok(full[()]["per_gpu_bytes"]["total"] - full[("--reentrant",)]["per_gpu_bytes"]["total"] == 2 * 202383360 and
   lora["moment"] == "backward of the first layer" and
   lora["per_gpu_bytes"]["activations"] == 33 * 2 * 4096 * 4096 and
   abs(lora["reserved"]["replay_allocated_bytes"] - lora["per_gpu_bytes"]["total"]) < 0.01 *
   lora["per_gpu_bytes"]["total"] and bad.returncode == 2 and
   bad.stderr.strip().endswith("--reentrant is a form of full recomputation: give --recompute full"),
   "--reentrant under FSDP1: no backward prefetch (one Llama-2-7B layer fewer gathered); LoRA's frozen units keep "
   "every checkpointed input and its gradient to backward's end (33 inputs at the first layer), planned and "
   "replayed; without --recompute full refused",
   (full[()]["per_gpu_bytes"], full[("--reentrant",)]["per_gpu_bytes"], lora["moment"], lora["per_gpu_bytes"],
    lora["reserved"], bad.stderr))

done()
