"""memtap plan's LoRA activations against what PyTorch's autograd saves: a small Llama
block written as Hugging Face's modeling_llama and PEFT's LoRA layers run it, and as
LitGPT's (one q, k, v matrix, its RMSNorm, its zero_pad), built with Debian's
python3-torch (1.13, CPU, bf16) and counted by saved_tensors_hooks; each the same bytes a
token and layer as `memtap plan --torch 1.13` says. CPU autograd differs from CUDA's in
one place, said where it is taken out: its dropout keeps its noise in the input's type
where CUDA's keeps a bool mask. sdpa (not in 1.13) is a stand-in keeping what the flash
kernel keeps: q, k, v, its output and an fp32 log-sum-exp."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, torch_python  # noqa: E402

MEMTAP = os.path.join(os.environ["MT_BUILDDIR"], "tools/memtap/memtap")
H, HEADS, F, R, VOCAB = 256, 4, 688, 8, 512

COUNT = os.path.join(os.environ["MT_SRCDIR"], "tests/analyze/autograd_count.py")


PY = torch_python()
if not PY:
    print("1..0 # SKIP python3-torch is not installed (./quickstart check installs it)")
    sys.exit(0)


def autograd(impl="pytorch", adapted="qv", dropout=0.0, fp32=False, trained=False, norm32=False):
    """bytes a token that autograd saves for one block, CPU's dropout noise counted as CUDA's
    bool mask"""
    setup = {"hidden": H, "heads": HEADS, "ffn": F, "rank": R, "impl": impl,
             "adapted": list(adapted) if adapted != "mlp" else ["mlp"], "dropout": dropout, "fp32": fp32,
             "trained": trained, "norm32": norm32}
    p = subprocess.run([PY, COUNT, json.dumps(setup)], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(p.stderr)
    per_token = json.loads(p.stdout)
    if dropout:  # CPU keeps the noise in the input's type, CUDA a bool mask
        dropped = {"qv": 2 * H, "mlp": 2 * H + F}[adapted] if impl == "pytorch" else H
        per_token -= ((4 if fp32 else 2) - 1) * dropped
    return per_token


def plan(*options):
    args = ["--layers", 2, "--hidden", H, "--heads", HEADS, "--ffn", F, "--vocab", VOCAB, "--swiglu", "--rmsnorm",
            "--rope", "--bias", "none", "--untied", "--no-dropout", "--attention", "flash", "--precision",
            "bf16-pure", "--torch", "1.13", "--seq", 64, "--micro-batch", 1, "--impl", "pytorch", *options, "--json"]
    p = subprocess.run([MEMTAP, "plan", *map(str, args)], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout)["layer_activation_bytes"] / 64


# The plan leaves out each norm's reciprocal root, one value a token: at most 8 bytes here
LORA = ["--lora-rank", R]
for what, got, want in (
        ("a trained block (full fine-tune): each matrix's input, the projection's the same tensor as sdpa's output",
         autograd(trained=True), plan()),
        ("PEFT on q, k, v and o, no dropout: the adapters' shared inputs, the projection's sdpa's output",
         autograd(adapted="qkvo"), plan(*LORA, "--lora-modules", "qkvo")),
        ("PEFT on q and v, no dropout: the adapters' shared input, A's values; frozen matrices keep nothing",
         autograd(), plan(*LORA, "--lora-modules", "qv")),
        ("PEFT on q and v with dropout 0.1: each adapter's dropped copy and mask",
         autograd(dropout=0.1), plan(*LORA, "--lora-modules", "qv", "--lora-dropout", 0.1)),
        ("PEFT on the MLP with fp32 adapters (autocast_adapter_dtype): each adapter's fp32 copy of its input",
         autograd(adapted="mlp", fp32=True), plan(*LORA, "--lora-modules", "mlp", "--lora-fp32")),
        ("lit_gpt (8641822) on q and v with dropout 0.05: the fused q, k, v kept through v, the padded B output, "
         "its RMSNorm's 16-bit input and squares (PyTorch 1.13's mean)",
         autograd(impl="litgpt", dropout=0.05), plan(*LORA, "--lora-modules", "qv", "--lora-dropout", 0.05,
                                                     "--impl", "litgpt", "--rmsnorm-16bit")),
        ("LitGPT since lit_gpt#606, the same: its RMSNorm's fp32 copy of its input and fp32 squares",
         autograd(impl="litgpt", dropout=0.05, norm32=True),
         plan(*LORA, "--lora-modules", "qv", "--lora-dropout", 0.05, "--impl", "litgpt"))):
    ok(0 <= got - want <= 8, "%s: memtap plans %g bytes a token and layer, PyTorch's autograd saves %g" %
       (what, want, got), (got, want))
done()
