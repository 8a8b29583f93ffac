"""The Lua policies' cost, each against a baseline measured in the same run.

  python3 bench/policy.py BUILD_DIR        (or: make bench)

1. Overhead on the job: simtrain (gpt2-small, 500 iterations, 330,000 allocations and
   frees) under memtap, without policies and with threshold and phase handlers (which see
   every event); the ratio of wall-clock times (target: at most 1.05). For scale, the
   same with every kind of handler, and a microbenchmark of back-to-back cudaMalloc +
   cudaFree pairs, where the policy thread competes for the 2 cores with the job and
   memtap's writer.
2. OOM -> handler: failed cudaMalloc calls under memtap without a policy and with an
   on_oom handler (one that does nothing, one that writes a snapshot); the difference is
   what the synchronous handler adds to each failure.
3. The instruction budget in time: an on_oom handler that loops until its budget
   (policy_budget, default 200,000 instructions) stops it.
Medians of alternating runs (the machine is noisy).
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
BENCH = os.path.join(B, "bench/recorder_bench")
LIB = os.path.join(B, "src/preload/.libs/libmemtap.so")
ENGINE = os.path.join(B, "src/lua/.libs/libmemtap-policy.so")
SIMLIBS = os.path.join(B, "tools/simgpu/.libs")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
REPEAT = 5


def policy(name, text):
    path = os.path.join(TMP, name)
    open(path, "w").write(text)
    return path


THRESHOLD_PHASE = policy("threshold_phase.lua", """
memtap.on_threshold(0.5, function(ev) end, {below = 0.25})
memtap.on_threshold("4GiB", function(ev) end)
memtap.on_phase("^backward", function(ev) end)
memtap.on_phase("^layer%.", function(ev) end)
""")
EVERYTHING = policy("everything.lua", """
memtap.on_threshold(0.5, function(ev) end, {below = 0.25})
memtap.on_threshold("1MiB", function(ev) end)
memtap.on_peak(function(ev) end)
memtap.on_phase(".", function(ev) end)
memtap.on_iteration(function(ev) end)
memtap.on_leak(function(ev) end)
memtap.every(0.1, function(ev) memtap.stats() end)
""")
NOTHING = policy("oom_nothing.lua", "memtap.on_oom(function(ev) end)\n")
SNAPSHOT = policy("oom_snapshot.lua", 'memtap.on_oom(function(ev) memtap.snapshot("s-%p-%n.trace") end)\n')
SPIN = policy("oom_spin.lua", "memtap.on_oom(function(ev) while true do end end)\n")


def ns(mode, n, pol=None, **extra):
    e = dict(os.environ, LD_LIBRARY_PATH=SIMLIBS, LD_PRELOAD=LIB, MEMTAP_OUTPUT=os.path.join(TMP, "b-%p.trace"),
             MEMTAP_QUIET="1", MEMTAP_POLICY_ENGINE=ENGINE, MEMTAP_POLICY_DIR=TMP, **extra)
    if pol:
        e["MEMTAP_POLICY"] = pol
    out = subprocess.run([BENCH, mode, str(n)], env=e, capture_output=True, text=True, check=True).stdout
    return float([x for x in out.splitlines() if re.fullmatch(r"[0-9.]+", x.strip())][-1])


def medians(*runs):
    got = [[] for _ in runs]
    for _ in range(REPEAT):
        for i, r in enumerate(runs):
            got[i].append(r())
    return [statistics.median(g) for g in got]


def job(pol=None):
    e = dict(os.environ, LD_LIBRARY_PATH=SIMLIBS, SIMGPU_MEM="16GiB")
    args = [MEMTAP, "run", "-q", "-o", os.path.join(TMP, "j-%p.trace")]
    if pol:
        args += ["--policy", pol]
    t = time.perf_counter()
    subprocess.run(args + ["--", SIMTRAIN, "--preset", "gpt2-small", "--iters", "500"], env=e, check=True,
                   capture_output=True)
    return time.perf_counter() - t


plain, tp, everything = medians(job, lambda: job(THRESHOLD_PHASE), lambda: job(EVERYTHING))
print("policy overhead on simtrain: %.3f s without policies, %.3f s with threshold and phase handlers: "
      "ratio %.3f (target <= 1.05); with every handler kind %.3f s, ratio %.3f"
      % (plain, tp, tp / plain, everything, everything / plain))
plain, everything = medians(lambda: ns("cuda", 200000), lambda: ns("cuda", 200000, EVERYTHING))
print("microbenchmark: %.1f ns per back-to-back alloc+free pair without policies, %.1f with every handler "
      "kind: ratio %.3f" % (plain, everything, everything / plain))

base, nothing, snap = medians(lambda: ns("oom", 2000), lambda: ns("oom", 2000, NOTHING),
                              lambda: ns("oom", 200, SNAPSHOT))
print("OOM -> on_oom: a failed cudaMalloc takes %.1f us under memtap; an on_oom handler adds %.1f us "
      "(%.1f us with a snapshot of a short trace)" % (base / 1e3, (nothing - base) / 1e3, (snap - base) / 1e3))

spin = statistics.median(ns("oom", 20, SPIN) for _ in range(REPEAT))
print("instruction budget: a handler stopped at policy_budget=200000 instructions costs %.2f ms" % ((spin - base) / 1e6))
shutil.rmtree(TMP, ignore_errors=True)
