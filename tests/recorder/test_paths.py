"""Issue 22's paths, end to end under memtap run on simgpu: frees of NULL, a driver layer
in front of the driver, arrays, host registration, IPC imports, pool attributes, graph
memory nodes, and the report's by-library section; issue 37's: the entries at the
versions NVIDIA's runtime looks up, and the driver entry points the runtime hands out."""
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
PATHS = os.path.join(B, "tests/recorder/paths")
TMP = scratch("paths")
MiB = 1 << 20


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
    ok([e["size"] for e in ev if e["kind"] == "alloc"] == [22000001],
       "cudaMalloc of 0 bytes (the runtime answers NULL) is no allocation", ev)
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

# a program linked with -lcuda: its libcuda.so.1 is the layer, which memtap's exported names call
env = {"LD_LIBRARY_PATH": LAYER_DIR + ":" + os.environ.get("LD_LIBRARY_PATH", ""), "LAYER_DRIVER": SIMGPU_DRIVER}
LINKED = os.path.join(B, "tests/recorder/layered_link")
alone = subprocess.run([LINKED, "100"], capture_output=True, text=True, env=dict(os.environ, **env))
p, traces = record("layerlink", [LINKED, "100"], env)
_, rep = report(traces[0]) if traces else (None, None)
ok(alone.returncode == 0 and layer_count(alone) == 100 and p.returncode == 0 and layer_count(p) == 100 and rep and
   rep["events"]["allocs"] == 100 and rep["events"]["frees"] == 100,
   "a layer as a -lcuda program's libcuda.so.1: 100 of 100 with and without memtap, each recorded once",
   (alone.stderr, p.stderr[-1000:], rep and rep["events"]))

# ---- arrays, host registration, pool attributes, IPC imports ----
API_ARRAY, API_REGISTER, API_IPC = 10, 11, 12
p, traces = record("arrays", [PATHS, "arrays"])
if one_trace("arrays", traces, p):
    ev = dump(traces[0])
    arrays = sorted(e["size"] for e in ev if e["kind"] == "alloc" and e["flags"] == API_ARRAY)
    ok(arrays == [21504, 100000, 1600000] and all(e["device"] == 0 for e in ev if e["kind"] == "alloc"),
       "cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate: device memory of their elements' bytes", arrays)
    _, rep = report(traces[0])
    ok(rep and rep["events"]["frees"] == 3 and rep["live_at_exit"] == [] and
       rep["devices"][0]["peak_allocated_bytes"] == 1721504, "arrays: each destroy matched, all three at the peak",
       rep and (rep["events"], rep["devices"]))

p, traces = record("register", [PATHS, "register"])
if one_trace("host registration", traces, p):
    ev = dump(traces[0])
    reg = [e for e in ev if e["kind"] == "host_alloc" and not e["error"]]
    ok(len(reg) == 1 and reg[0]["size"] == 22000003 and reg[0]["flags"] == API_REGISTER and reg[0]["aux"] == 1,
       "cuMemHostRegister: pinned host memory of its own API, with its flags", reg)
    ok(any(e["kind"] == "alloc_failed" and e["flags"] == API_REGISTER for e in ev),
       "a registration the driver refuses is recorded as a failure")
    _, rep = report(traces[0])
    ok(rep and rep["events"]["frees"] == 1 and rep["events"]["unmatched_frees"] == 0 and rep["live_at_exit"] == [],
       "cuMemHostUnregister matches it", rep and rep["events"])

p, traces = record("poolattr", [PATHS, "poolattr"])
if one_trace("pool attributes", traces, p):
    attrs = [(e["aux2"], e["size"]) for e in dump(traces[0]) if e["kind"] == "pool_attr"]
    ok(attrs == [(4, 64 << 20), (2, 0)], "cuMemPoolSetAttribute: the attribute and its value", attrs)

p, traces = record("ipc", [PATHS, "ipc"])
ok(p.returncode == 0 and len(traces) == 2, "IPC: exporter and importer ran, a trace each", p.stderr)
child = [t for t in traces if any(e["kind"] == "alloc" and e["flags"] == API_IPC for e in dump(t))]
if ok(len(child) == 1, "IPC: the importer's trace has the import"):
    ev = dump(child[0])
    ipc = [e for e in ev if e["kind"] == "alloc" and e["flags"] == API_IPC]
    ok(len(ipc) == 1 and ipc[0]["size"] == 22000004 and ipc[0]["device"] == -1 and "ipc_import" in ipc[0]["functions"],
       "cuIpcOpenMemHandle: another process's memory, its size, on no device of the importer's, with the stack", ipc)
    imp = [e for e in ev if e["kind"] == "vmm_create"]
    ok(len(imp) == 1 and imp[0]["aux2"] == 1 and imp[0]["device"] == -1,
       "cuMemImportFromShareableHandle: an imported handle, on no device of the importer's", imp)
    _, rep = report(child[0])
    ok(rep and rep["events"]["unmatched_frees"] == 0 and rep["live_at_exit"] == [] and
       all(d["peak_allocated_bytes"] == 0 for d in rep["devices"]),
       "IPC: closed and released; the importer's devices hold none of it", rep and (rep["events"], rep["devices"]))

# ---- the entries at the versions NVIDIA's runtime asks for ----
API_DRIVER, API_POOL, API_GRAPH = 1, 5, 13
p, traces = record("lookups", [PATHS, "lookups"])
ok(p.returncode == 0 and len(traces) == 2, "lookups: exporter and importer ran, a trace each", p.stderr)
made = {t: [(e["kind"], e["flags"], e["size"]) for e in dump(t) if e["kind"] in ("alloc", "free", "alloc_failed")]
        for t in traces}
exporter = [t for t in traces if ("alloc", API_GRAPH, 22000020) in made[t]]
importer = [t for t in traces if ("alloc", API_IPC, 22000022) in made[t]]
ok(len(exporter) == 1 and [a for a in made[exporter[0]] if a[0] == "alloc"] ==
   [("alloc", API_GRAPH, 22000020), ("alloc", API_GRAPH, 22000021), ("alloc", API_DRIVER, 22000022),
    ("alloc", API_POOL, 22000023)],
   "cuGraphAddNode (12020, 12030) and cuGraphInstantiate (10000, 11000): graph memory recorded as the launch backs it",
   made)
ok(len(importer) == 1 and made[importer[0]] == [("alloc", API_IPC, 22000022), ("free", 0, 0),
                                                ("alloc", API_IPC, 22000023), ("free", 0, 0)],
   "cuIpcOpenMemHandle (4010) and cuMemPoolImportPointer (11020): imports of their size, each closed or freed", made)
for name, t in (("exporter", exporter), ("importer", importer)):
    _, rep = report(t[0]) if t else (None, None)
    ok(rep and rep["events"]["unmatched_frees"] == 0 and rep["live_at_exit"] == [],
       "lookups, the %s: every free matches what was recorded" % name, rep and rep["events"])

# ---- the driver entry points the runtime hands out, however it finds them ----
for name, how, env in (("gpa", "through the cuGetProcAddress it looked up", {}),
                       ("private", "through the driver's private tables", {"SIMGPU_ENTRY_POINTS": "private"})):
    p, traces = record("entrypoints-" + name, [PATHS, "entrypoints"], env)
    got = [(e["kind"], e["size"]) for e in dump(traces[0])
           if e["kind"] not in ("thread", "device", "meminfo", "exit")] if len(traces) == 1 else p.stderr
    ok(p.returncode == 0 and got == [("vmm_create", 12 * MiB), ("vmm_reserve", 12 * MiB), ("vmm_map", 12 * MiB),
                                     ("vmm_unmap", 12 * MiB), ("vmm_release", 0), ("vmm_addr_free", 12 * MiB),
                                     ("alloc", 22000030), ("free", 0)],
       "cudaGetDriverEntryPoint(ByVersion) %s: cuMemCreate, cuMemMap, cuMemUnmap, cuMemRelease and cuMemAlloc "
       "recorded" % how, got)

# ---- which library holds the memory, and what no hook saw ----
LIBS = os.path.join(B, "tests/recorder/libs/.libs")
p, traces = record("libraries", [PATHS, "libraries", LIBS], {"SIMGPU_CONTEXT_MEM": "300MiB"})
if one_trace("libraries", traces, p):
    used = int(p.stdout.split()[1])
    _, rep = report(traces[0])
    dev = rep["devices"][0]
    libs = {l["library"]: l["bytes"] for l in dev["by_library_at_peak"]}
    ok(libs == {"libcublasLt.so.13": 20 * MiB, "libnccl.so.2": 10 * MiB, "paths": 12 * MiB},
       "by library at the peak: libnccl.so.2, libcublasLt.so.13 and the application (its calls through the "
       "runtime too), each its own bytes", libs)
    c = dev["driver_count"]
    ok(c and c["used_bytes"] == used and c["recorded_bytes"] == 42 * MiB and c["unseen_bytes"] == used - 42 * MiB
       and c["unseen_bytes"] == 300 * MiB,
       "the driver's count: cuMemGetInfo's used memory, what memtap saw, and the difference no hook saw (the context)",
       (used, c))
    text = subprocess.run([MEMTAP, "report", traces[0]], capture_output=True, text=True).stdout
    ok("libnccl.so.2                10.00 MiB" in text and "libcublasLt.so.13           20.00 MiB" in text and
       ": 342.00 MiB; memtap recorded 42.00 MiB of it; 300.00 MiB it could not see" in text,
       "the text report shows the libraries and the driver's count", text)

# a trace read where a library of the same path is another build (another machine's
# libc, a library rebuilt since): its frames stay addresses, never another build's names
moved = os.path.join(TMP, "libs")
os.makedirs(moved)
for lib in ("libnccl.so.2", "libcublasLt.so.13"):
    shutil.copy(os.path.join(LIBS, lib), moved)
p, traces = record("libraries-rebuilt", [PATHS, "libraries", moved])
if one_trace("a library rebuilt since the trace", traces, p):
    def nccl_frames():
        return [f for e in dump(traces[0]) if e["kind"] == "alloc" and e["size"] == 10 * MiB for f in e["functions"]]
    before = nccl_frames()
    shutil.copy(os.path.join(LIBS, "libcublasLt.so.13"), os.path.join(moved, "libnccl.so.2"))
    after = nccl_frames()
    ok("nccl_buffers" in before and "nccl_buffers" not in after and "cublaslt_workspace" not in after,
       "a library whose build id is not the trace's is not read for names: its frames stay addresses",
       (before, after))

p, traces = record("oomcount", [os.path.join(B, "tests/recorder/workload"), "oom"],
                   {"SIMGPU_MEM": "1GiB", "SIMGPU_CONTEXT_MEM": "100MiB"})
if one_trace("an out-of-memory failure", traces, p):
    _, rep = report(traces[0])
    c = rep["devices"][0]["driver_count"]
    ok(c and c["used_bytes"] == 100 * MiB and c["recorded_bytes"] == 0 and c["unseen_bytes"] == 100 * MiB,
       "the driver's count at an out-of-memory failure: the context no hook saw", c)

# ---- the driver's count is there without the job asking: memtap reads it itself, at the
# device's first use (never at exit: an exit from a signal handler may have interrupted a
# call that holds the driver's lock) ----
p, traces = record("reading", [os.path.join(B, "tests/recorder/workload"), "runtime"], {"SIMGPU_CONTEXT_MEM": "100MiB"})
if one_trace("memtap's own readings", traces, p):
    ev = dump(traces[0])
    mine = [(e["flags"], e["aux2"] - e["aux"]) for e in ev if e["kind"] == "meminfo"]
    first = next((e for e in ev if e["kind"] in ("alloc", "free")), {})
    # the driver counts the first allocation at its footprint (simgpu rounds it up)
    ok(len(mine) == 1 and mine[0][0] == 1 and 0 <= mine[0][1] - 100 * MiB - first.get("size", 0) < MiB,
       "memtap reads cuMemGetInfo at the device's first use (after the call that used it), for a job that never "
       "asks, and not at exit", mine)
    _, rep = report(traces[0])
    c = rep["devices"][0]["driver_count"]
    ok(c and c["reading"] == "first_use" and 0 <= c["unseen_bytes"] - 100 * MiB < MiB,
       "the reconciliation line is there: at first use, the context no hook saw", c)
    text = subprocess.run([MEMTAP, "report", traces[0]], capture_output=True, text=True).stdout
    ok("in use on the device as the driver said when memtap asked, at the device's first use, at " in text,
       "the text report says the reading was memtap's, at first use", text)
p, traces = record("libraries-reading", [PATHS, "libraries", LIBS], {"SIMGPU_CONTEXT_MEM": "300MiB"})
if one_trace("the job's reading beside memtap's", traces, p):
    _, rep = report(traces[0])
    c = rep["devices"][0]["driver_count"]
    ok(c and c["reading"] == "job" and c["recorded_bytes"] == 42 * MiB,
       "the job's own cuMemGetInfo (a chosen moment) wins over memtap's reading at first use", c)

# ---- graph memory nodes: recorded when the driver holds their memory, once each ----
p, traces = record("graph", [PATHS, "graph"])
if one_trace("graph memory nodes", traces, p):
    ev = dump(traces[0])
    made = [e for e in ev if e["kind"] == "alloc"]
    ok(sorted(e["size"] for e in made) == [22000010, 22000011, 22000012, 22000013, 22000014, 22000015]
       and all(e["flags"] == 13 for e in made) and "reused 1" in p.stdout,
       "graph memory nodes: each allocation node recorded once, with API graph (built, uploaded, "
       "outliving its executable graph, captured through the driver and the runtime; two captured "
       "at one address, as the widest)", ([(e["size"], e["flags"]) for e in made], p.stdout))
    frees = [e for e in ev if e["kind"] == "free"]
    once = all(len([f for f in frees if f["addr"] == a["addr"] and f["time_ns"] > a["time_ns"]
                    and not any(b["addr"] == a["addr"] and a["time_ns"] < b["time_ns"] < f["time_ns"] for b in made)])
               == 1 for a in made)
    ok(len(frees) == 6 and once, "graph memory nodes: each freed once (trim, executable graph destroyed, "
       "another graph's free node), none by a free while its executable graph keeps the memory", frees)
    first = next((e for e in made if e["size"] == 22000010), {})
    ok("alloc_node" in first.get("functions", []), "graph memory nodes: recorded at the stack that added the node",
       first.get("functions"))
    _, rep = report(traces[0])
    dev = rep and rep["devices"][0]
    ok(rep and rep["events"]["unmatched_frees"] == 0 and dev["peak_allocated_bytes"] == 22000015
       and dev["allocated_at_exit_bytes"] == 0,
       "graph memory nodes: no unmatched frees, the peak is the largest node's bytes, nothing at exit",
       rep and (rep["events"], dev["peak_allocated_bytes"], dev["allocated_at_exit_bytes"]))
    failed = [e for e in ev if e["kind"] == "alloc_failed"]
    ok(len(failed) == 1 and failed[0]["flags"] == 13 and failed[0]["size"] > failed[0]["aux2"]
       and rep and len(rep["oom"]) == 1,
       "graph memory nodes: a launch past the device is an out-of-memory failure of its node's bytes", failed)

done()
