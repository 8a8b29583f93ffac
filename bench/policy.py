"""The Lua policies' cost, each against a baseline measured in the same run.

  python3 bench/policy.py BUILD_DIR        (or: make bench)

1. Overhead on the job: simtrain (gpt2-small, 5,000 iterations, 3.3 million events, no
   simulated compute: the worst case) under memtap, without policies and with threshold
   handlers and phase handlers on the iteration's phases (the engine sees every event);
   the ratio of wall-clock times (target: at most 1.05), and of CPU time, which counts the
   policy thread's work even when a spare core hides it. For scale: a phase handler that
   matches every layer's range (48 Lua calls per iteration) and what one handler call
   costs; every kind of handler; a microbenchmark of back-to-back cudaMalloc + cudaFree
   pairs, where the policy thread competes for the 2 cores with the job and the writer.
2. OOM -> handler: failed cudaMalloc calls under memtap without a policy and with an
   on_oom handler (one that does nothing, one that writes a snapshot); the difference is
   what the synchronous handler adds to each failure.
3. The instruction budget in time: an on_oom handler that loops until its budget
   (policy_budget, default 200,000 instructions) stops it.
Medians of alternating runs (the machine is noisy).
"""
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
BENCH = os.path.join(B, "bench/recorder_bench")
LIB = os.path.join(B, "src/recorder/.libs/libmemtap.so")
ENGINE = os.path.join(B, "src/policy/.libs/libmemtap-policy.so")
SIMLIBS = os.path.join(B, "tools/simgpu/.libs")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
REPEAT = 7


def policy(name, text):
    path = os.path.join(TMP, name)
    open(path, "w").write(text)
    return path


THRESHOLD_PHASE = policy("threshold_phase.lua", """
memtap.on_threshold(0.5, function(ev) end, {below = 0.25})
memtap.on_threshold("4GiB", function(ev) end)
memtap.on_phase("^backward", function(ev) end)
memtap.on_phase("^optimizer", function(ev) end)
""")
LAYERS = policy("layers.lua", """
memtap.on_phase("^layer%.", function(ev) end)
""")
NO_LAYERS = policy("no_layers.lua", """
memtap.on_phase("^no such range", function(ev) end)
""")
LAYER_CALLS = 12 * 2 * 2  # gpt2-small: 12 layers, forward and backward, enter and leave
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
    """Medians of alternating runs; a run may return a tuple of figures."""
    got = [[] for _ in runs]
    for _ in range(REPEAT):
        for i, r in enumerate(runs):
            got[i].append(r())
    return [tuple(map(statistics.median, zip(*g))) if isinstance(g[0], tuple) else statistics.median(g)
            for g in got]


ITERS = 5000


def job(pol=None):
    """Wall-clock and CPU seconds of a simtrain run under memtap."""
    e = dict(os.environ, LD_LIBRARY_PATH=SIMLIBS, SIMGPU_MEM="16GiB")
    args = [MEMTAP, "run", "-q", "-o", os.path.join(TMP, "j-%p.trace")]
    if pol:
        args += ["--policy", pol]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(args + ["--", SIMTRAIN, "--preset", "gpt2-small", "--iters", str(ITERS)], env=e, check=True,
                   capture_output=True)
    t = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for f in os.listdir(TMP):
        if f.startswith("j-"):
            os.remove(os.path.join(TMP, f))
    return t, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


runs = medians(*[lambda p=p: job(p) for p in (None, THRESHOLD_PHASE, NO_LAYERS, LAYERS, EVERYTHING)])
(plain, plain_cpu), (tp, tp_cpu), (_, no_layers_cpu), (layers, layers_cpu), (everything, _) = runs
print("policy overhead on simtrain (%d iterations): %.3f s without policies, %.3f s with threshold and phase "
      "handlers: ratio %.3f (target <= 1.05); CPU time %.3f s against %.3f s, ratio %.3f"
      % (ITERS, plain, tp, tp / plain, tp_cpu, plain_cpu, tp_cpu / plain_cpu))
print("for scale: a phase handler on every layer's range %.3f s, ratio %.3f (%.2f us of CPU per handler call); "
      "every handler kind %.3f s, ratio %.3f"
      % (layers, layers / plain, (layers_cpu - no_layers_cpu) / (ITERS * LAYER_CALLS) * 1e6, everything,
         everything / plain))
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
