"""The caching allocator's targets, each against a baseline from the same run.

  python3 bench/allocator.py BUILD_DIR        (or: make bench)

1. cache-hit alloc+free pair (bench/alloc_bench, no recording), memtap and memtap-vmm,
   against glibc's malloc+free pair; target: at most 50 ns.
2. fragmentation: every simtrain preset recorded, replayed through every policy, and the
   same runs exported as PyTorch-format snapshots (memtap export --format=memviz) and
   replayed from the pickle; target: peak reserved / peak allocated at most 1.02 with
   memtap-vmm and never above the native model's ratio on the same input.
3. the smallest capacity that fits, memtap-vmm against native.
"""
import json
import os
import subprocess
import sys
import tempfile

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
GiB = 1 << 30

subprocess.run(["make", "-C", B, "bench/alloc_bench"], check=True, capture_output=True)
for policy in ("memtap", "memtap-vmm"):
    print(subprocess.run([os.path.join(B, "bench/alloc_bench"), "2000000", policy], capture_output=True, text=True,
                         check=True).stdout.strip() + "   (target: at most 50 ns)")

RUNS = [("tiny", []), ("gpt2-small", []), ("gpt2-small", ["--recompute", "full", "--zero", "3", "--dp", "8"]),
        ("gpt-1.3b", []), ("gpt-1.3b", ["--precision", "fp32", "--optimizer", "sgd"]), ("gpt-7b", ["--zero", "3", "--dp", "8"])]
print("%-44s %-8s %9s %9s %9s %9s  %s" % ("input", "format", "native", "memtap", "vmm", "bump",
                                          "min capacity vmm/native (GiB)"))
for n, (preset, extra) in enumerate(RUNS):
    trace = os.path.join(TMP, "%d-%s.trace" % (n, preset))
    subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", preset, *extra],
                   env=ENV, capture_output=True)
    snap = trace + ".pickle"
    subprocess.run([MEMTAP, "export", "--format=memviz", "-o", snap, trace], capture_output=True)
    for path, fmt in ((trace, "memtap"), (snap, "pytorch")):
        p = subprocess.run([MEMTAP, "replay", "--json", "--find-min-capacity", path], capture_output=True, text=True)
        if not p.stdout.startswith("{"):
            print("%-44s %-8s replay failed: %s" % (preset, fmt, p.stderr.strip()))
            continue
        pol = {x["policy"]: x for x in json.loads(p.stdout)["policies"]}
        ratio = {k: v["peak_reserved"] / v["peak_allocated"] for k, v in pol.items()}
        verdict = "ok" if ratio["memtap-vmm"] <= 1.02 and ratio["memtap-vmm"] <= ratio["native"] else "MISSED"
        print("%-44s %-8s %9.4f %9.4f %9.4f %9.4f  %.2f / %.2f = %.4f  %s" % (
            " ".join([preset, *extra]), fmt, ratio["native"], ratio["memtap"], ratio["memtap-vmm"], ratio["bump"],
            pol["memtap-vmm"]["min_capacity"] / GiB, pol["native"]["min_capacity"] / GiB,
            pol["memtap-vmm"]["min_capacity"] / pol["native"]["min_capacity"], verdict))
print("columns: peak reserved / peak allocated per policy (target: vmm <= 1.02 and <= native)")
