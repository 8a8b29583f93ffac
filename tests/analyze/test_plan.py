"""memtap plan against published figures (each check names its source, from
shared reference capacity-formulas.md), against simtrain's measured peaks, and with
impossible input."""
import itertools
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
SIMRUN = os.path.join(B, "tools/simgpu/simgpu-run")


def plan(*args, check=True):
    p = subprocess.run([MEMTAP, "plan", *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(p.stderr)
    return p


def plan_json(*args):
    return json.loads(plan(*args, "--json").stdout)


# ZeRO paper (Rajbhandari et al., SC20) Table I: per-device model-state memory in GB (1e9)
# for mixed-precision Adam (K = 12), exact values from its formulas, and as printed.
TABLE_I = {  # params: {dp: (Pos, Pos+g, Pos+g+p)}
    7.5e9: {4: (52.5, 41.25, 30), 16: (35.625, 21.5625, 7.5), 64: (31.40625, 16.640625, 1.875),
            1024: (30.0879, 15.1025, 0.1171875)},
    128e9: {4: (896, 704, 512), 16: (608, 368, 128), 64: (536, 284, 32)},
    1e12: {4: (7000, 5500, 4000), 64: (4187.5, 2218.75, 250), 1024: (4011.7188, 2013.6719, 15.625)},
}
bad = []
for params, rows in TABLE_I.items():
    for dp, want in rows.items():
        for stage, gb in zip((1, 2, 3), want):
            got = plan_json("--params", int(params), "--zero", stage, "--gpus-per-node", dp)["per_gpu_bytes"]["total"]
            if abs(got / 1e9 - gb) > 1e-4 * gb:
                bad.append("%g params, dp %d, ZeRO-%d: %.4f GB, paper %.4f" % (params, dp, stage, got / 1e9, gb))
ok(not bad, "ZeRO paper Table I: model states per device for 7.5B, 128B and 1T parameters, ZeRO-1/2/3", "\n".join(bad))
got = plan_json("--params", "7.5B", "--gpus-per-node", 1)["per_gpu_bytes"]["total"]
ok(got == 120e9, "ZeRO paper: 16 bytes per parameter with plain data parallelism (7.5B: 120 GB)", str(got))

# DeepSpeed's estimators, their documented outputs (memory.rst: t5-3b on 1 node x 8 GPUs,
# cold with 2851M / 32M; Hugging Face's DeepSpeed docs: bigscience/T0_3B, 1 and 2 GPUs).
ZERO3_T5 = """Estimated memory needed for params, optim states and gradients for a:
HW: Setup with 1 node, 8 GPUs per node.
SW: Model with 2851M total params, 32M largest layer params.
  per CPU  |  per GPU |   Options
   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1
  127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0
   63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1
  127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0
    1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1
  127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0
"""
out = plan("--estimator", "deepspeed-zero3", "--params", "2851M", "--largest-layer", "32M", "--gpus-per-node", 8).stdout
ok(out == ZERO3_T5, "DeepSpeed memory.rst: estimate_zero3_model_states_mem_needs_all_cold for t5-3b, 1 node x 8 GPUs",
   out)
T0 = {1: ["70.00GB |   0.25GB", "70.00GB |   0.25GB", "62.23GB |   5.43GB", "62.23GB |   5.43GB",
          " 0.37GB |  46.91GB", "15.56GB |  46.91GB"],
      2: ["70.00GB |   0.25GB", "70.00GB |   0.25GB", "62.23GB |   2.84GB", "62.23GB |   2.84GB",
          " 0.74GB |  23.58GB", "31.11GB |  23.58GB"]}
bad = []
for gpus, rows in T0.items():
    out = plan("--estimator", "deepspeed-zero3", "--params", 2783959040, "--largest-layer", 65798144,
               "--gpus-per-node", gpus).stdout.splitlines()[4:]
    if [l.strip()[:len(r.strip())] for l, r in zip(out, rows)] != [r.strip() for r in rows]:
        bad.append("%d GPUs:\n%s" % (gpus, "\n".join(out)))
ok(not bad, "Hugging Face DeepSpeed docs: ZeRO-3 estimator for bigscience/T0_3B on 1 and 2 GPUs", "\n".join(bad))
out = plan("--estimator", "deepspeed-zero2", "--params", "2851M", "--gpus-per-node", 8).stdout.splitlines()
ok(out[2] == "SW: Model with 2851M total params." and out[4] == "  127.45GB |   5.31GB | offload_optimizer=cpu "
   and out[5] == "  127.45GB |  11.28GB | offload_optimizer=none",
   "DeepSpeed memory.rst: ZeRO-2 estimator for t5-3b (offload row as documented; the other row as the code "
   "computes since PR #5099)", "\n".join(out))

# Korthikanti et al. (arXiv:2205.05198) Table 2: activation bytes per layer, for the
# paper's 22B, 175B, 530B and 1T configurations (Table 3; s = 2048, v = 51200).
CONFIGS = {"22B": (64, 6144, 48, 8, 4), "175B": (96, 12288, 96, 8, 1), "530B": (128, 20480, 105, 8, 1),
           "1T": (160, 25600, 128, 8, 1)}
bad = []
for name, (a, h, L, t, b) in CONFIGS.items():
    s = 2048
    sbh = s * b * h
    want = {("none", False): sbh * (10 + 24 / t + 5 * a * s / (h * t)), ("none", True): sbh * (34 / t + 5 * a * s / (h * t)),
            ("selective", False): sbh * (10 + 24 / t), ("selective", True): sbh * 34 / t, ("full", False): 2 * sbh}
    for (rc, sp), w in want.items():
        args = ["--layers", L, "--hidden", h, "--heads", a, "--vocab", 51200, "--seq", s, "--micro-batch", b,
                "--tp", t, "--gpus-per-node", t, "--recompute", rc] + (["--sp"] if sp else [])
        got = plan_json(*args)["layer_activation_bytes"]
        if abs(got - w) > 1e-9 * w:
            bad.append("%s %s%s: %.0f, paper %.0f" % (name, rc, " sp" if sp else "", got, w))
ok(not bad, "Korthikanti et al. Table 2: per-layer activations with TP, TP+SP, selective and full recomputation",
   "\n".join(bad))

# simtrain: the predicted peak against the measured one, on every preset that fits simgpu
# and every precision, optimizer, recomputation and ZeRO emulation simtrain supports
PRESETS = {"tiny": (2, 64, 4, 256, 512, 32, 2), "gpt2-small": (12, 768, 12, 3072, 50257, 1024, 8),
           "gpt-1.3b": (24, 2048, 16, 8192, 50257, 2048, 2), "gpt-7b": (32, 4096, 32, 16384, 50257, 2048, 1)}
bad, n = [], 0
for preset, prec, optim, rc, zero in itertools.product(PRESETS, ("fp32", "bf16", "fp16"), ("adamw", "sgd", "none"),
                                                       ("none", "selective", "full"), (0, 1, 2, 3)):
    if preset == "gpt-7b" and (zero < 3 or rc == "none"):
        continue  # beyond simgpu's 80 GiB
    if preset == "gpt-1.3b" and (prec == "fp16" or optim == "sgd"):
        continue  # covered by the smaller presets; keeps the test quick
    dp = 1 if zero == 0 else 8
    p = subprocess.run([SIMRUN, SIMTRAIN, "--preset", preset, "--precision", prec, "--optimizer", optim,
                        "--recompute", rc, "--zero", str(zero), "--dp", str(dp), "--iters", "2", "--json", "-"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        bad.append("%s %s %s %s zero %d: simtrain failed: %s" % (preset, prec, optim, rc, zero, p.stderr.strip()))
        continue
    measured = json.loads(p.stdout)["peak"]["bytes"]
    L, h, a, f, v, s, b = PRESETS[preset]
    got = plan_json("--layers", L, "--hidden", h, "--heads", a, "--ffn", f, "--vocab", v, "--seq", s,
                    "--micro-batch", b, "--precision", prec, "--optimizer", optim, "--recompute", rc,
                    "--zero", zero, "--gpus-per-node", dp)["per_gpu_bytes"]["total"]
    n += 1
    if abs(got - measured) > 0.02 * measured:
        bad.append("%s %s %s %s zero %d: plan %.0f, simtrain %.0f (%+.2f%%)" % (
            preset, prec, optim, rc, zero, got, measured, 100 * (got - measured) / measured))
ok(n > 200 and not bad, "memtap plan predicts simtrain's peak within 2%% on %d configurations" % n, "\n".join(bad))

# impossible input: one clear line each, exit status 2
BAD = [(["--layers", 12, "--hidden", 768, "--heads", 12, "--vocab", 100, "--seq", 8, "--micro-batch", 1, "--tp", 8,
         "--gpus-per-node", 8], "tensor-parallel size must divide the heads"),
       (["--params", "1B", "--zero", 3, "--gpus-per-node", 0], "at least one node and one GPU"),
       (["--params", "-5"], "whole non-negative count"),
       (["--params", "1B", "--zero", 4], "stage from 0 to 3"),
       (["--params", "1B", "--offload-params", "cpu"], "needs ZeRO stage 3"),
       (["--params", "1B", "--offload-params"], "--offload-params needs a value"),
       (["--params", "1B", "--zeros", 1], "does not know '--zeros'"),
       (["--params", "1B", "--gpu-mem", "lots"], "--gpu-mem takes a size"),
       (["--layers", 12], "an architecture needs"),
       ([], "give the model")]
bad = []
for args, says in BAD:
    p = plan(*args, check=False)
    lines = p.stderr.splitlines()
    if p.returncode != 2 or len(lines) != 1 or says not in lines[0]:
        bad.append("%s: exit %d, %r" % (args, p.returncode, p.stderr))
ok(not bad, "impossible combinations are refused with one line each", "\n".join(bad))
done()
