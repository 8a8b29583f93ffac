"""What PyTorch's autograd saves for one Llama block, bytes a token: the block as Hugging
Face's modeling_llama and PEFT's LoRA layers run it, or as LitGPT's (one q, k, v matrix,
its RMSNorm, its zero_pad), counted by saved_tensors_hooks over the storages the saved
tensors hold (each once; no weights, no rotary tables, which every layer shares); the
difference between two sequence lengths, so what a sequence holds whatever its length
drops out. Used by tests/analyze/test_plan_autograd.py (Debian's PyTorch, CPU, with a
stand-in for sdpa) and tests/gpu/run (sdpa on the GPU).

    python3 autograd_count.py '{"hidden": 256, "heads": 4, "ffn": 688, "rank": 8, "impl":
        "pytorch", "adapted": ["q", "v"], "dropout": 0.0, "fp32": false, "trained": false,
        "device": "cpu"}'
"""
import json, sys, torch
import torch.nn as nn

setup = json.loads(sys.argv[1])
H, HEADS, F, R = setup["hidden"], setup["heads"], setup["ffn"], setup["rank"]
CUDA = setup.get("device") == "cuda"
HS = H // HEADS
device = "cuda" if CUDA else "cpu"
torch.manual_seed(0)


class Flash(torch.autograd.Function):
    """sdpa's flash kernel as autograd sees it, for a PyTorch without sdpa (or on the CPU)"""
    @staticmethod
    def forward(ctx, q, k, v):
        s = (q.float() @ k.float().transpose(-2, -1)) / HS ** 0.5
        T = q.size(-2)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        out = (s.softmax(-1) @ v.float()).to(q.dtype)
        out = out.transpose(1, 2).contiguous().transpose(1, 2)  # the kernel writes (B, T, heads, hs)
        ctx.save_for_backward(q, k, v, out, torch.logsumexp(s, -1))
        return out


def attention(q, k, v):
    if CUDA:  # sdpa itself: bf16 on a GPU runs the flash kernel
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return Flash.apply(q, k, v)


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
    if setup["trained"]:
        return nn.Linear(n_in, n_out, bias=False)
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


class LitNorm(HFNorm):  # lit_gpt/rmsnorm.py at 8641822: in the input's type
    def forward(self, x):
        return self.weight * (x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5))


class LitNorm32(HFNorm):  # litgpt/model.py's RMSNorm since lit_gpt#606 (as from 69dd8227): in fp32
    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(torch.mean(y * y, dim=-1, keepdim=True) + 1e-5)
        return y.to(x.dtype) * self.weight


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
        a = attention(rope(q, cos, sin), rope(k, cos, sin), v)
        x = x + self.o(a.transpose(1, 2).contiguous().reshape(B, T, H))
        y = self.n2(x)
        return x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))


class LitBlock(nn.Module):
    """lit_gpt/lora.py's block, q and v adapted in its one q, k, v matrix"""
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = (LitNorm32(), LitNorm32()) if setup.get("norm32") else (LitNorm(), LitNorm())
        self.attn, self.proj = frozen(H, 3 * H), frozen(H, H)
        self.fc1, self.fc2, self.mlp_proj = frozen(H, F), frozen(H, F), frozen(F, H)
        self.lora_a = nn.Parameter(torch.randn(2 * R, H) / 16)
        self.lora_b = nn.Parameter(torch.randn(2 * H, R) / 16)
        self.drop = nn.Dropout(setup["dropout"])
        self.register_buffer("index", torch.tensor(list(range(H)) + list(range(2 * H, 3 * H))))

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
        x = x + self.proj(attention(q, k, v).transpose(1, 2).reshape(B, T, H))
        y = self.n2(x)
        return x + self.mlp_proj(nn.functional.silu(self.fc1(y)) * self.fc2(y))


def saved(T):
    """bytes the block's saved tensors hold (their storages, once each; no weights)"""
    torch.set_default_dtype(torch.bfloat16)
    block = (LitBlock() if setup["impl"] == "litgpt" else HFBlock()).to(device)
    torch.set_default_dtype(torch.float32)
    weights = {p.data_ptr() for p in block.parameters()}
    held = {}

    def pack(t):
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        if st.data_ptr() not in weights:
            held[st.data_ptr()] = st.nbytes() if hasattr(st, "nbytes") else st.size() * t.element_size()
        return t

    x = torch.randn(1, T, H, dtype=torch.bfloat16, device=device, requires_grad=True)
    angle = torch.arange(T, device=device)[:, None] * torch.ones(HS, device=device)[None, :]
    cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)
    weights |= {cos.data_ptr(), sin.data_ptr()}  # made once for every layer
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, cos, sin)
    return sum(held.values())


print(json.dumps((saved(128) - saved(64)) / 64))
