"""simtrain's ground truth against the analytic sizes of its model description.

Bytes per parameter follow the precision and optimizer (ZeRO paper, section III-A:
2 + 2 + 12 bytes for mixed-precision Adam), activations per layer follow Korthikanti
et al. (sbh(34 + 5as/h) for 16-bit values with d_ff = 4h, fewer with recomputation),
and ZeRO stages divide what they partition by the data-parallel size.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

BUILD = os.environ["MT_BUILDDIR"]
SIMTRAIN = [os.path.join(BUILD, "tools/simgpu/simgpu-run"), os.path.join(BUILD, "tools/simtrain/simtrain")]
SHAPES = {  # layers, hidden, heads, ffn, vocab, seq, batch
    "tiny": (2, 64, 4, 256, 512, 32, 2),
    "gpt2-small": (12, 768, 12, 3072, 50257, 1024, 8),
    "gpt-1.3b": (24, 2048, 16, 8192, 50257, 2048, 2),
    "gpt-7b": (32, 4096, 32, 16384, 50257, 2048, 1),
}



def run(args, env=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        e = dict(os.environ, **(env or {}))
        p = subprocess.run(SIMTRAIN + args + ["--json", f.name], env=e, capture_output=True, text=True)
        try:
            truth = json.load(open(f.name))
        except ValueError:
            truth = None
        return p, truth


def param_count(L, h, f, v, s, tied=True):
    return L * (4 * h * h + 2 * f * h + 9 * h + f) + v * h + s * h + 2 * h + (0 if tied else v * h)


def layer_activations(L, h, a, f, v, s, b, elem, recompute):
    sbh, sbf, ass = s * b * h, s * b * f, a * s * s * b
    if recompute == "full":
        return sbh * elem
    scores = 0 if recompute == "selective" else ass * (2 * elem + 1)
    return sbh * (8 * elem + 2) + 2 * sbf * elem + scores


def expected(preset, precision="bf16", optimizer="adamw", recompute="none", zero=0, dp=1):
    L, h, a, f, v, s, b = SHAPES[preset]
    P = param_count(L, h, f, v, s)
    elem = 4 if precision == "fp32" else 2
    master = 0 if precision == "fp32" or optimizer == "none" else 1
    states = {"adam": 2, "adamw": 2, "sgd": 1, "none": 0}[optimizer] + master
    part = lambda stage: dp if zero >= stage else 1
    layer = layer_activations(L, h, a, f, v, s, b, elem, recompute)
    return {
        "params": P * elem // part(3),
        "grads": P * elem // part(2),
        "optimizer": P * 4 * states // part(1),
        "layer_activations": layer,
        "activations": L * layer + 3 * s * b * h * elem + 4 * s * b * v,
    }


def check(preset, **cfg):
    args = ["--preset", preset]
    for k, val in cfg.items():
        args += ["--" + k, str(val)]
    p, t = run(args)
    name = " ".join(args[1:])
    ok(p.returncode == 0 and t is not None, name + ": runs", p.stderr.strip())
    if not t:
        return
    want = expected(preset, **cfg)
    for k in want:
        ok(t["sizes"][k] == want[k], "%s: %s bytes" % (name, k), "got %d, want %d" % (t["sizes"][k], want[k]))
    cats = t["peak"]["categories"]
    ok(sum(cats.values()) == t["peak"]["bytes"], name + ": peak categories add up to the peak")
    ok(t["allocs"] == t["frees"] and t["live_at_exit"]["bytes"] == 0, name + ": everything freed")


# parameter counts of the published models these presets follow
p, t = run(["--preset", "gpt2-small", "--iters", "1"])
ok(t and t["param_count"] == 124439808, "GPT-2 small has 124,439,808 parameters")
p, t = run(["--preset", "tiny", "--untied", "--iters", "1"])
ok(t and t["param_count"] == param_count(2, 64, 256, 512, 32, tied=False), "an untied head adds vocab x hidden")

check("tiny")
check("gpt2-small")
check("gpt2-small", precision="fp32", optimizer="adam")
check("gpt2-small", precision="fp16", optimizer="sgd", recompute="selective")
check("gpt2-small", optimizer="none", recompute="full")
check("gpt2-small", zero=1, dp=8)
check("gpt2-small", zero=2, dp=8)
check("gpt2-small", zero=3, dp=8, recompute="selective")
check("gpt-1.3b", zero=2, dp=4)
check("gpt-7b", zero=3, dp=8, recompute="full")

# mixed-precision Adam is 16 bytes per parameter (ZeRO paper): 2 + 2 + 12
t = expected("gpt-7b")
P = param_count(*[SHAPES["gpt-7b"][i] for i in (0, 1, 3, 4, 5)])
ok(t["params"] + t["grads"] + t["optimizer"] == 16 * P, "model states are 16 bytes per parameter")

# the peak falls in the second iteration's backward: optimizer state exists by then
p, t = run(["--preset", "gpt2-small"])
ok(t["peak"]["iteration"] == 2 and t["peak"]["phase"] == "backward", "peak in iteration 2, backward")
ok(t["peak"]["categories"]["optimizer"] == t["sizes"]["optimizer"], "all optimizer state is live at the peak")
ok(t["peak"]["categories"]["activations"] == t["sizes"]["activations"], "all activations are live at the peak")

# the stream-ordered API gives the same ground truth
p, a = run(["--preset", "gpt2-small", "--api", "async"])
ok(p.returncode == 0 and a["peak"] == t["peak"] and a["allocs"] == t["allocs"], "--api async: same ground truth")

# leak injection: one buffer per iteration stays
p, t = run(["--preset", "tiny", "--leak", "1MiB", "--iters", "4"])
ok(t["live_at_exit"] == {"bytes": 4 << 20, "count": 4}, "leak injection leaves one buffer per iteration")
ok(t["allocs"] - t["frees"] == 4, "the leaked buffers are never freed")

# a 7B model with plain data parallelism does not fit 80 GiB: simtrain reports the OOM
p, t = run(["--preset", "gpt-7b"], env={"SIMGPU_MEM": "80GiB"})
ok(p.returncode == 1, "gpt-7b without ZeRO: out of memory on 80 GiB")
ok(t is not None and t["oom"] is not None and t["oom"]["size"] > 0, "the OOM is in the ground truth")
ok("cudaErrorMemoryAllocation" in p.stderr and p.stderr.count("\n") == 1, "one line on stderr", p.stderr)
p, t = run(["--preset", "gpt-7b", "--iters", "1"], env={"SIMGPU_MEM": "192GiB"})
ok(p.returncode == 0 and t["peak"]["bytes"] > 16 * P, "and fits a 192 GiB device")

# bad input: one clear line, exit 2
for bad in (["--precision", "fp8"], ["--zero", "5"], ["--preset", "nope"], ["--layers", "0"], ["--hidden", "100", "--heads", "7"]):
    p = subprocess.run(SIMTRAIN + bad, capture_output=True, text=True)
    ok(p.returncode == 2 and p.stderr.count("\n") == 1, "rejects " + " ".join(bad), p.stderr)

done()
