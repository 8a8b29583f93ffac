"""CUDA programs built with the toolkit's nvcc (-cudart shared) run on simgpu's runtime
and driver, plain and under memtap: kernels (registered, configured, launched: checked
and counted, not run), copies and memsets, events, streams, symbols, host registration,
IPC, stream capture and graphs with memory nodes, VMM, pools and a PTX module through the
driver API. Each program checks what it can observe itself and prints an "expect SIZE"
line for every allocation its source makes and frees; memtap must record each exactly
once, and its free, and no free of what was never allocated (graph memory nodes are
allocations with API "graph", recorded when the graph's launch backs them). In a
sanitizer build the sanitizer's runtime is preloaded into the (uninstrumented)
programs, so simgpu and memtap run sanitized under them."""
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
S = os.environ["MT_SRCDIR"]
NVCC = os.path.join(os.environ.get("MT_CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SRC = os.path.join(S, "tests/simgpu/cuda")
TMP = scratch("cuda")
# program, extra nvcc arguments, kernel launches it makes that reach the driver
PROGRAMS = [("basics", [], 4), ("graphs", [], 3), ("driver", ["-lcuda"], 1)]
ALLOCS = {"alloc", "host_alloc", "managed_alloc", "vmm_create"}
FREES = {"free", "host_free", "vmm_release"}

if not shutil.which(NVCC):
    print("1..0 # SKIP no nvcc at %s" % NVCC)
    sys.exit(0)
# nvcc's programs are not instrumented: under a sanitizer build, its runtime is preloaded
# so that it comes first, as it must, before simgpu's sanitized libraries load
PRELOAD = {}
SAN = os.environ.get("MT_SANITIZERS", "no")
for word, lib in (("address", "libasan.so"), ("thread", "libtsan.so")):
    if word in SAN:
        path = subprocess.run(["cc", "-print-file-name=" + lib], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(path):
            print("1..0 # SKIP no %s to preload into nvcc's programs" % lib)
            sys.exit(0)
        PRELOAD = {"LD_PRELOAD": path}


def events(trace):
    p = subprocess.run([MEMTAP, "dump", "--json", trace], capture_output=True, text=True)
    return [json.loads(line) for line in p.stdout.splitlines()]


def recorded_once(evs, expected):
    """Each expected size allocated once (successfully), and each of those freed once."""
    allocs = [e for e in evs if e["kind"] in ALLOCS and not e["error"]]
    problems = []
    if Counter(e["size"] for e in allocs) != Counter(expected):
        problems.append("allocated %s, expected %s" % (sorted(e["size"] for e in allocs), sorted(expected)))
    for a in allocs:
        # VMM handles are matched by handle (aux), everything else by address
        key = "aux" if a["kind"] == "vmm_create" else "addr"
        frees = [e for e in evs if e["kind"] in FREES and not e["error"] and e["time_ns"] > a["time_ns"]
                 and e[key] == a[key] and (e["kind"] == "vmm_release") == (key == "aux")]
        if len(frees) < 1:
            problems.append("%s of %d at %#x: no free" % (a["kind"], a["size"], a["addr"]))
    for f in evs:
        # a free of what was never allocated (graph memory freed outside its graph, say)
        if f["kind"] in ("free", "host_free") and not f["error"] and not any(
                a["addr"] == f["addr"] and a["time_ns"] < f["time_ns"] for a in allocs):
            problems.append("%s at %#x: nothing allocated there" % (f["kind"], f["addr"]))
    return problems


for name, extra, launches in PROGRAMS:
    exe = os.path.join(TMP, name)
    p = subprocess.run([NVCC, "-cudart", "shared", "-I", SRC, "-o", exe, os.path.join(SRC, name + ".cu"), *extra],
                       capture_output=True, text=True)
    if not ok(p.returncode == 0, "%s: nvcc builds it" % name, p.stderr):
        continue
    log = os.path.join(TMP, name + ".log")
    env = dict(os.environ, SIMGPU_LOG=log, **PRELOAD)
    plain = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=120)
    ok(plain.returncode == 0 and plain.stdout.endswith("%s: done\n" % name), "%s: runs to its end on simgpu" % name,
       plain.stdout[-500:] + plain.stderr)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    refused = [ln for ln in lines if ln.startswith("refused ")]
    ok(not refused, "%s: every driver function it calls is simulated" % name, refused[:5])
    n = sum(1 for ln in lines if ln.startswith("launch "))
    ok(n == launches, "%s: %d kernel launches reach the driver and are counted" % (name, launches), n)
    expected = [int(ln.split()[1]) for ln in plain.stdout.splitlines() if ln.startswith("expect ")]

    d = os.path.join(TMP, name + "-trace")
    os.makedirs(d)
    m = subprocess.run([MEMTAP, "run", "-o", os.path.join(d, "t-%p.trace"), "--", exe], capture_output=True,
                       text=True, env=dict(os.environ, **PRELOAD), timeout=120)
    ok(m.returncode == 0 and m.stdout == plain.stdout, "%s: runs the same under memtap" % name,
       m.stdout[-500:] + m.stderr)
    traces = sorted(os.path.join(d, f) for f in os.listdir(d))
    if not ok(len(traces) == 1, "%s: one trace" % name, traces):
        continue
    evs = events(traces[0])
    problems = recorded_once(evs, expected)
    ok(expected and not problems, "%s: each of its %d allocations recorded once, and freed" % (name, len(expected)),
       "\n".join(problems))
    r = subprocess.run([MEMTAP, "report", "--json", traces[0]], capture_output=True, text=True)
    rep = json.loads(r.stdout) if r.stdout.startswith("{") else {}
    ok(rep.get("complete") and rep["events"]["dropped"] == 0, "%s: the trace is complete, nothing dropped" % name,
       r.stderr)
done()
