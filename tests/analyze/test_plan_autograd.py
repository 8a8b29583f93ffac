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
from tap import done, ok, scratch  # noqa: E402

MEMTAP = os.path.join(os.environ["MT_BUILDDIR"], "tools/memtap/memtap")
TMP = scratch("plan-autograd")
H, HEADS, F, R, VOCAB = 256, 4, 688, 8, 512

COUNT = r'''
import json, sys, torch
import torch.nn as nn

H, HEADS, F, R = %d, %d, %d, %d
setup = json.loads(sys.argv[1])
HS = H // HEADS
torch.manual_seed(0)


class Flash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        s = (q.float() @ k.float().transpose(-2, -1)) / HS ** 0.5
        T = q.size(-2)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        out = (s.softmax(-1) @ v.float()).to(q.dtype)
        out = out.transpose(1, 2).contiguous().transpose(1, 2)  # the kernel writes (B, T, heads, hs)
        ctx.save_for_backward(q, k, v, out, torch.logsumexp(s, -1))
        return out


def frozen(n_in, n_out):
    return nn.Linear(n_in, n_out, bias=False).requires_grad_(False)


class Lora(nn.Module):
    """PEFT's lora.Linear: base(x) + lora_B(lora_A(dropout(x))) * scaling, x cast to the
    adapters' type"""
    def __init__(self, n_in, n_out, dtype):
        super().__init__()
        self.base = frozen(n_in, n_out)
        self.a, self.b = nn.Linear(n_in, R, bias=False).to(dtype), nn.Linear(R, n_out, bias=False).to(dtype)
        self.drop = nn.Dropout(setup["dropout"]) if setup["dropout"] else nn.Identity()

    def forward(self, x):
        out = self.base(x)
        return (out + self.b(self.a(self.drop(x.to(self.a.weight.dtype)))) * 2.0).to(out.dtype)


def linear(name, n_in, n_out):
    if name in setup["adapted"]:
        return Lora(n_in, n_out, torch.float32 if setup["fp32"] else torch.bfloat16)
    return frozen(n_in, n_out)


def rope(x, cos, sin):
    half = x.size(-1) // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class HFNorm(nn.Module):  # LlamaRMSNorm: in fp32, the weight frozen
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H), requires_grad=False)

    def forward(self, x):
        y = x.to(torch.float32)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * y.to(x.dtype)


class LitNorm(HFNorm):  # lit_gpt/rmsnorm.py: in the input's type
    def forward(self, x):
        return self.weight * (x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5))


class HFBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = HFNorm(), HFNorm()
        self.q, self.k, self.v, self.o = (linear(m, H, H) for m in "qkvo")
        self.gate, self.up, self.down = linear("mlp", H, F), linear("mlp", H, F), linear("mlp", F, H)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        y = self.n1(x)
        q, k, v = (m(y).view(B, T, HEADS, HS).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = Flash.apply(rope(q, cos, sin), rope(k, cos, sin), v)
        x = x + self.o(a.transpose(1, 2).contiguous().reshape(B, T, H))
        y = self.n2(x)
        return x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))


class LitBlock(nn.Module):
    """lit_gpt/lora.py's block, q and v adapted in its one q, k, v matrix"""
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = LitNorm(), LitNorm()
        self.attn, self.proj = frozen(H, 3 * H), frozen(H, H)
        self.fc1, self.fc2, self.mlp_proj = frozen(H, F), frozen(H, F), frozen(F, H)
        self.lora_a = nn.Parameter(torch.randn(2 * R, H) / 16)
        self.lora_b = nn.Parameter(torch.randn(2 * H, R) / 16)
        self.drop = nn.Dropout(setup["dropout"])
        self.index = torch.tensor(list(range(H)) + list(range(2 * H, 3 * H)))

    def qkv(self, x):
        after_a = nn.functional.linear(self.drop(x), self.lora_a)
        after_b = nn.functional.conv1d(after_a.transpose(-2, -1), self.lora_b.unsqueeze(-1), groups=2)
        after_b = after_b.transpose(-2, -1).transpose(0, 1)
        pad = after_b.new_zeros((*after_b.shape[:-1], 3 * H)).view(-1, 3 * H)
        pad = pad.index_copy(1, self.index, after_b.reshape(-1, 2 * H))
        return self.attn(x) + pad.view(*after_b.shape[:-1], 3 * H).transpose(0, 1) * 2.0

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qkv = self.qkv(self.n1(x)).view(B, T, HEADS, 3, HS).permute(0, 2, 3, 1, 4)
        q, k, v = (t.reshape(B, HEADS, T, HS) for t in qkv.split(1, dim=2))
        q, k = (torch.cat((rope(t, cos, sin), t[..., HS:]), -1) for t in (q, k))
        x = x + self.proj(Flash.apply(q, k, v).transpose(1, 2).reshape(B, T, H))
        y = self.n2(x)
        return x + self.mlp_proj(nn.functional.silu(self.fc1(y)) * self.fc2(y))


def saved(T):
    """bytes the block's saved tensors hold (their storages, once each; no weights)"""
    torch.set_default_dtype(torch.bfloat16)
    block = LitBlock() if setup["impl"] == "litgpt" else HFBlock()
    torch.set_default_dtype(torch.float32)
    weights = {p.data_ptr() for p in block.parameters()}
    held = {}

    def pack(t):
        st = t.storage()
        if st.data_ptr() not in weights:
            held[st.data_ptr()] = st.size() * t.element_size()
        return t

    x = torch.randn(1, T, H, dtype=torch.bfloat16, requires_grad=True)
    angle = torch.arange(T)[:, None] * torch.ones(HS)[None, :]
    cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)
    weights |= {cos.data_ptr(), sin.data_ptr()}  # made once for every layer
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, cos, sin)
    return sum(held.values())


print(json.dumps((saved(128) - saved(64)) / 64))
''' % (H, HEADS, F, R)


def torch_python():
    for py in (os.environ.get("PYTHON3"), "/usr/bin/python3"):
        if py and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


PY = torch_python()
if not PY:
    print("1..0 # SKIP python3-torch is not installed (./quickstart check installs it)")
    sys.exit(0)
script = os.path.join(TMP, "count.py")
with open(script, "w") as f:
    f.write(COUNT)


def autograd(impl="pytorch", adapted="qv", dropout=0.0, fp32=False):
    """bytes a token that autograd saves for one block, CPU's dropout noise counted as CUDA's
    bool mask"""
    setup = {"impl": impl, "adapted": list(adapted) if adapted != "mlp" else ["mlp"], "dropout": dropout,
             "fp32": fp32}
    p = subprocess.run([PY, script, json.dumps(setup)], capture_output=True, text=True)
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
            "bf16-pure", "--torch", "1.13", "--seq", 64, "--micro-batch", 1, "--lora-rank", R, "--impl", "pytorch", *options,
            "--json"]
    p = subprocess.run([MEMTAP, "plan", *map(str, args)], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout)["layer_activation_bytes"] / 64


# The plan leaves out each norm's reciprocal root, one value a token: at most 8 bytes here
for what, got, want in (
        ("PEFT on q and v, no dropout: the adapters' shared input, A's values; frozen matrices keep nothing",
         autograd(), plan("--lora-modules", "qv")),
        ("PEFT on q and v with dropout 0.1: each adapter's dropped copy and mask",
         autograd(dropout=0.1), plan("--lora-modules", "qv", "--lora-dropout", 0.1)),
        ("PEFT on the MLP with fp32 adapters (autocast_adapter_dtype): each adapter's fp32 copy of its input",
         autograd(adapted="mlp", fp32=True), plan("--lora-modules", "mlp", "--lora-fp32")),
        ("LitGPT on q and v with dropout 0.05: the fused q, k, v kept through v, the padded B output, its "
         "RMSNorm's 16-bit squares (PyTorch 1.13's mean)",
         autograd(impl="litgpt", dropout=0.05), plan("--lora-modules", "qv", "--lora-dropout", 0.05, "--impl",
                                                     "litgpt"))):
    ok(0 <= got - want <= 8, "%s: memtap plans %g bytes a token and layer, PyTorch's autograd saves %g" %
       (what, want, got), (got, want))
done()
