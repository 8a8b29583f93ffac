"""The CUPTI backend. No GPU here, so its callback is driven through a stand-in
libcupti.so.13 with CUPTI's own parameter structures (cupti_driver), and the trace is
checked event by event. Then `memtap run --backend=cupti` with the real libcupti on
simgpu: CUPTI cannot attach without a GPU, and that must be one line, not a failure."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
LIB = os.path.join(B, "src/cupti/.libs/libmemtap-cupti.so")
FAKE = os.path.join(B, "tests/cupti/.libs")
TMP = scratch("cupti")



env = dict(os.environ, MEMTAP_OUTPUT=os.path.join(TMP, "cupti-%p.trace"),
           LD_LIBRARY_PATH=FAKE + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
p = subprocess.run([os.path.join(B, "tests/cupti/cupti_driver"), LIB], env=env, capture_output=True, text=True)
ok(p.returncode == 0, "the backend loads with dlopen, InitializeInjection subscribes and enables the memory callbacks",
   p.stderr)
traces = [os.path.join(TMP, f) for f in os.listdir(TMP)]
ok(len(traces) == 1, "one trace", traces)
if traces:
    ev = [json.loads(l) for l in subprocess.run([MEMTAP, "dump", "--json", traces[0]], capture_output=True,
                                                 text=True).stdout.splitlines()]
    kinds = [(e["kind"], e["size"]) for e in ev if e["kind"] not in ("thread", "device", "exit")]
    # memtap's own reading of the driver's count: after the device's first use (never at exit)
    want = [("alloc", 12000001), ("meminfo", 0), ("alloc", 204800), ("free", 0), ("free", 0), ("alloc", 12000003), ("free", 0),
            ("host_alloc", 12000004), ("host_free", 0), ("vmm_create", 2 << 20), ("vmm_reserve", 4 << 20),
            ("vmm_map", 2 << 20), ("vmm_release", 0), ("vmm_unmap", 2 << 20), ("vmm_addr_free", 4 << 20),
            ("alloc_failed", 12000005), ("free", 0), ("free", 0), ("alloc", 1600000), ("free", 0),
            ("host_alloc", 12000006), ("host_free", 0), ("vmm_create", 0), ("vmm_release", 0),
            ("pool_attr", 12000007), ("alloc", 12000010), ("free", 0), ("alloc", 12000011), ("free", 0),
            ("alloc_failed", 12000012), ("alloc", 12000013), ("free", 0), ("alloc", 12000015), ("free", 0),
            ("alloc", 0), ("free", 0), ("alloc", 0), ("free", 0)]
    ok(kinds == want, "every call becomes the same event the preload backend records, in order; frees of NULL none",
       kinds)
    graph = [e for e in ev if e["kind"] in ("alloc", "alloc_failed") and e["size"] in (12000010, 12000011, 12000012)]
    ok(len(graph) == 3 and all(e["flags"] == 13 for e in graph),
       "graph memory nodes (built, captured on a capturing stream): recorded as the driver holds their memory, "
       "API graph; a free outside the graph while its executable graph lives is none", graph)
    lookups = [e["flags"] for e in ev if e["kind"] == "alloc" and 0x720000300000 <= e["addr"] < 0x740000000000]
    ok(lookups == [13, 13, 12, 12], "cuGraphAddNode's memory nodes in graphs cuGraphInstantiate (both ABIs) made, "
       "an IPC handle opened by the CUDA 4.1 entry and a pool's allocation imported: graph and imports", lookups)
    async_ = [e for e in ev if e["kind"] == "alloc" and e["size"] == 12000003]
    ok(async_ and async_[0]["aux"] == 0x5150 and async_[0]["flags"] == 4, "the stream of an async allocation")
    oom = [e for e in ev if e["kind"] == "alloc_failed"]
    ok(oom and oom[0]["error"] == 2 and oom[0]["aux2"] == 80 << 30, "an OOM carries the error and total memory", oom)
    bad = [e for e in ev if e["kind"] == "free" and e["error"]]
    ok(len(bad) == 1 and bad[0]["error"] == 1, "a failed free is recorded with its error")
    allocs = [e for e in ev if e["kind"] in ("alloc", "vmm_create", "host_alloc")]
    ok(allocs and all("allocate_through_cupti" in e["functions"] for e in allocs),
       "stacks reach the code that made the call", [e["functions"] for e in allocs][:2])
    rep = json.loads(subprocess.run([MEMTAP, "report", "--json", traces[0]], capture_output=True, text=True).stdout)
    ok(rep["devices"][0]["peak_allocated_bytes"] == 12000001 + 204800 and rep["live_at_exit"] == [],
       "the report's peak and live-at-exit from CUPTI events", rep["devices"])
    libs = [l["library"] for l in rep["devices"][0]["by_library_at_peak"]]
    ok(libs == ["cupti_driver"], "CUPTI's own frames are not the library that asked", libs)

# the real libcupti on simgpu: CUPTI refuses (no GPU); the job must run on, with one line
work = os.path.join(B, "tests/recorder/workload")
p = subprocess.run([MEMTAP, "run", "--backend=cupti", "-o", os.path.join(TMP, "real-%p.trace"), "--", work, "runtime"],
                   capture_output=True, text=True)
ok(p.returncode == 0, "--backend=cupti without a GPU: the job runs unchanged", p.stderr)
ok(p.stderr.count("cannot subscribe") == 1, "and CUPTI's refusal is said in one line", p.stderr)
p = subprocess.run([MEMTAP, "run", "--backend=nvml", "--", work, "runtime"], capture_output=True, text=True)
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "an unknown backend: one line, exit 2", p.stderr)
done()
