"""Imports. PyTorch memory snapshots: hand-written pickles (the standard pickle module,
every protocol) covering each trace action and both layouts, with numbers worked out by
hand; hostile or broken pickles, refused in one line without running anything. RAPIDS
RMM logging-adaptor CSV: a log across midnight and a malformed one."""
import json
import os
import pickle
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
TMP = scratch("torch")
MiB = 1 << 20
F_MODEL = [{"filename": "model.py", "line": 40, "name": "forward"}, {"filename": "train.py", "line": 9, "name": "step"}]
# the model built: a module's .to() (a forward's frames would make it an activation)
F_BUILD = [{"filename": "/opt/torch/nn/modules/module.py", "line": 1160, "name": "to"},
           {"filename": "train.py", "line": 5, "name": "main"}]
F_OPT = [{"filename": "optim.py", "line": 77, "name": "_init_group"}, {"filename": "train.py", "line": 12, "name": "step"}]
T0 = 1718000000000000


def entry(action, addr, size, t, frames=None, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + t, "compile_context": "",
         "user_metadata": ""}
    if frames is not None:
        e["frames"] = frames
    e.update(extra)
    return e


SEG = 0x7f0000000000
# One 20 MiB segment reserved before recording began, with a 4 MiB parameter (only in
# segments); a 6 MiB activation freed, an 8 MiB optimizer buffer. OOMs for 9 MiB: before the
# optimizer buffer (10 MiB free in one block: not fragmentation's fault), at the end (8 MiB
# free inside the segment in two blocks + 2 MiB in CUDA: it would have fit without
# fragmentation); and 12 MiB (it would not).
CURRENT = {
    "segments": [{
        "device": 0, "address": SEG, "total_size": 20 * MiB, "allocated_size": 12 * MiB, "active_size": 12 * MiB,
        "requested_size": 12 * MiB - 100, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
        "is_expandable": False, "frames": F_MODEL,
        "blocks": [
            {"address": SEG, "size": 4 * MiB, "requested_size": 4 * MiB, "state": "active_allocated", "frames": F_BUILD},
            {"address": SEG + 4 * MiB, "size": 6 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
            {"address": SEG + 10 * MiB, "size": 8 * MiB, "requested_size": 8 * MiB - 100,
             "state": "active_allocated", "frames": F_OPT},
            {"address": SEG + 18 * MiB, "size": 2 * MiB, "requested_size": 0, "state": "inactive", "frames": []}]}],
    "device_traces": [[
        entry("alloc", SEG + 4 * MiB, 6 * MiB, 2, F_MODEL, category="ACTIVATION"),
        {"action": "oom", "device_free": 2 * MiB, "size": 9 * MiB, "stream": 0, "time_us": T0 + 2, "frames": F_MODEL},
        entry("alloc", SEG + 10 * MiB, 8 * MiB - 100, 3, F_OPT, category="OPTIMIZER_STATE"),
        entry("free_requested", SEG + 4 * MiB, 6 * MiB, 4, F_MODEL),
        entry("free_completed", SEG + 4 * MiB, 6 * MiB, 5, F_MODEL),
        {"action": "oom", "device_free": 2 * MiB, "size": 9 * MiB, "stream": 0, "time_us": T0 + 6, "frames": F_MODEL},
        {"action": "oom", "device_free": 2 * MiB, "size": 12 * MiB, "stream": 0, "time_us": T0 + 6, "frames": F_MODEL},
        entry("snapshot", 0, 12 * MiB, 7)]],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False,
                           "roundup_power2_divisions": {"1": 0}},
    "external_annotations": [],
}
# The oldest layout: a bare list of segments whose blocks carry history, newest first
# (an earlier, merged-away handout of the same block after it).
OLD = [{
    "device": 1, "address": SEG, "total_size": 10 * MiB, "stream": 0, "segment_type": "large",
    "blocks": [
        {"size": 3 * MiB, "state": "active_allocated", "history": [{"addr": SEG, "real_size": 3 * MiB - 8, "frames": F_MODEL},
                                                                     {"addr": SEG, "real_size": MiB, "frames": F_OPT}]},
        {"size": 7 * MiB, "state": "inactive", "history": []}]}]
# Expandable segments: pages mapped next to each other join, a block spans them, unmapping
# pages shrinks the segment; a free whose alloc fell out of the ring buffer.
EXPANDABLE = {
    "segments": [],
    "device_traces": [[
        entry("free_completed", SEG - 4 * MiB, 1000, 1, F_MODEL),
        entry("segment_map", SEG, 2 * MiB, 2, F_MODEL),
        entry("segment_map", SEG + 2 * MiB, 2 * MiB, 3, F_MODEL),
        entry("alloc", SEG + 1 * MiB, 2 * MiB, 4, F_MODEL),
        entry("alloc", SEG + 3 * MiB + 512 * 1024, 256 * 1024, 5, F_MODEL),
        entry("free_completed", SEG + 1 * MiB, 2 * MiB, 6, F_MODEL),
        entry("free_completed", SEG + 3 * MiB + 512 * 1024, 256 * 1024, 7, F_MODEL),
        entry("segment_unmap", SEG + 2 * MiB, 2 * MiB, 8, F_MODEL)]],
}


def frag(segments, reserved, allocated, requested, largest):
    return {"segments": segments, "reserved_bytes": reserved, "allocated_bytes": allocated,
            "requested_bytes": requested, "internal_bytes": allocated - requested,
            "external_bytes": reserved - allocated, "largest_free_block_bytes": largest}


def without_time(state):
    return {k: v for k, v in state.items() if k != "time_ns"}


def report(name, obj, proto):
    path = os.path.join(TMP, "%s-%d.pickle" % (name, proto))
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=proto)
    p = subprocess.run([MEMTAP, "report", "--json", path], capture_output=True, text=True)
    return p, (json.loads(p.stdout) if p.stdout.startswith("{") else None)


for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
    p, rep = report("current", CURRENT, proto)
    if not ok(p.returncode == 0 and rep, "current layout, protocol %d: read" % proto, p.stderr):
        continue
    dev = rep["devices"][0]
    # allocated: param 4 MiB (initially) + act 6 MiB + opt 8 MiB - 100 at its peak
    ok(dev["peak_allocated_bytes"] == 18 * MiB - 100, "protocol %d: the peak" % proto, dev)
    comp = dev["composition_at_peak"]
    ok(comp["activations"] == 6 * MiB and comp["optimizer"] == 8 * MiB - 100 and comp["params"] == 4 * MiB,
       "protocol %d: categories from the trace entries; a block made before recording and kept is a parameter"
       % proto, comp)
    ok(comp["reserved_unallocated"] == 20 * MiB - (18 * MiB - 100), "protocol %d: reserved but unallocated" % proto)
    fr = dev["fragmentation"]
    # the optimizer buffer's block size comes from the final segments: 8 MiB for 8 MiB - 100
    ok(without_time(fr["at_exit"]) == frag(1, 20 * MiB, 12 * MiB, 12 * MiB - 100, 6 * MiB),
       "protocol %d: fragmentation at the end, block sizes from the final segments" % proto, fr["at_exit"])
    ok(without_time(fr["at_peak"]) == frag(1, 20 * MiB, 18 * MiB, 18 * MiB - 100, 2 * MiB),
       "protocol %d: fragmentation at the peak" % proto, fr["at_peak"])
    ok(fr["block_sizes"] == "estimated" and fr["segments_at_peak"] == [
        {"address": SEG, "size": 20 * MiB, "allocated_bytes": 18 * MiB, "blocks": 3, "largest_free_block_bytes": 2 * MiB}],
       "protocol %d: the segment at the peak (the activation's block size estimated)" % proto, fr["segments_at_peak"])
    tl = fr["timeline"]
    ok(len(tl) >= 3 and tl[-1] == fr["at_exit"] and all(x["allocated_bytes"] <= x["reserved_bytes"] for x in tl)
       and sorted(tl, key=lambda x: x["time_ns"]) == tl and max(x["allocated_bytes"] for x in tl) == 18 * MiB,
       "protocol %d: a timeline of fragmentation" % proto, tl)
    o = rep["oom"]
    ok(len(o) == 3 and o[0]["size"] == 9 * MiB and o[0]["fits_without_fragmentation"] is False
       and o[0]["fragmentation"]["largest_free_block_bytes"] == 10 * MiB,
       "protocol %d: early, 9 MiB had a 10 MiB free block: not fragmentation's fault" % proto, o)
    ok(len(o) == 3 and o[1]["size"] == 9 * MiB and o[1]["free_bytes"] == 2 * MiB and o[1]["fits_without_fragmentation"],
       "protocol %d: at the end, 9 MiB would have fit without fragmentation (8 MiB free inside, 2 MiB in CUDA)" % proto, o)
    ok(len(o) == 3 and o[2]["size"] == 12 * MiB and o[2]["fits_without_fragmentation"] is False,
       "protocol %d: 12 MiB would not have fit anyway" % proto)
    ok(o and [f["function"] for f in o[0]["frames"]] == ["forward", "step"], "protocol %d: PyTorch's frames" % proto)
    live = sorted((g["bytes"], g["frames"][0]["function"] if g["frames"] else None) for g in rep["live_at_exit"])
    ok(live == [(4 * MiB, "to"), (8 * MiB - 100, "_init_group")], "protocol %d: live at exit" % proto, live)

# The OOM's verdict at each edge of its rule (fragmentation's fault when the request was no
# more than the free space inside segments and in CUDA together, yet more than the largest
# free block and than CUDA's free memory): at the end above, 8 MiB is free inside the
# segment, its largest block 6 MiB.
edges = [(10 * MiB, 2 * MiB, True, "exactly what was free inside and in CUDA together"),
         (10 * MiB + 512, 2 * MiB, False, "512 bytes more than was free inside and in CUDA together"),
         (6 * MiB, 2 * MiB, False, "exactly the largest free block"),
         (6 * MiB + 512, 2 * MiB, True, "512 bytes more than the largest free block"),
         (7 * MiB, 7 * MiB, False, "no more than CUDA had free"),
         (7 * MiB + 512, 7 * MiB, True, "512 bytes more than CUDA had free")]
edge = dict(CURRENT, device_traces=[[e for e in CURRENT["device_traces"][0][:5] if e["action"] != "oom"] + [
    {"action": "oom", "device_free": free, "size": size, "stream": 0, "time_us": T0 + 6, "frames": F_MODEL}
    for size, free, _, _ in edges]])
p, rep = report("edges", edge, 4)
o = rep["oom"] if rep else []
for k, (size, free, want, what) in enumerate(edges):
    ok(len(o) == len(edges) and o[k]["size"] == size and o[k]["free_bytes"] == free and
       o[k]["fits_without_fragmentation"] is want, "an OOM of %s: %s fragmentation's fault" %
       (what, "is" if want else "is not"), o[k] if k < len(o) else p.stderr)

# A free requested is not yet a free: the block stays the caller's until free_completed
# (its stream's work may still read it). Another allocation in between: both are live.
PENDING = {"segments": [], "device_traces": [[
    entry("alloc", SEG, 6 * MiB, 1, F_MODEL),
    entry("free_requested", SEG, 6 * MiB, 2, F_MODEL),
    entry("alloc", SEG + 6 * MiB, 8 * MiB, 3, F_OPT),
    entry("free_completed", SEG, 6 * MiB, 4, F_MODEL),
    entry("free_requested", SEG + 6 * MiB, 8 * MiB, 5, F_OPT)]]}
p, rep = report("pending", PENDING, 4)
ok(p.returncode == 0 and rep and rep["devices"][0]["peak_allocated_bytes"] == 14 * MiB
   and rep["devices"][0]["allocated_at_exit_bytes"] == 8 * MiB and rep["events"]["unmatched_frees"] == 0
   and rep["events"]["frees"] == 1,
   "free_requested then another alloc, then free_completed: both live at the peak (14 MiB); a free requested "
   "but never completed is still live at the end", rep and (rep["devices"][0], rep["events"]))

p, rep = report("old", OLD, 4)
ok(p.returncode == 0 and rep and rep["devices"][0]["device"] == 1, "the oldest layout (segments with history)", p.stderr)
if rep:
    ok(rep["devices"][0]["peak_allocated_bytes"] == 3 * MiB - 8, "history's first (newest) real_size is the block's "
       "request, as _memory_viz.py's history[0]")
    fr = rep["devices"][0]["fragmentation"]
    ok(fr["block_sizes"] == "exact" and without_time(fr["at_exit"]) == frag(1, 10 * MiB, 3 * MiB, 3 * MiB - 8, 7 * MiB),
       "its fragmentation", fr)
p, rep = report("expandable", EXPANDABLE, 4)
ok(p.returncode == 0 and rep, "expandable segments", p.stderr)
if rep:
    ok(rep["events"]["allocs"] == 3 and rep["events"]["frees"] == 3 and rep["live_at_exit"] == [],
       "a free whose alloc was not recorded is matched by an alloc before the first entry", rep["events"])
    dev = rep["devices"][0]
    ok(dev["peak_allocated_bytes"] == 2 * MiB + 256 * 1024 and
       dev["composition_at_peak"]["reserved_unallocated"] == 4 * MiB - dev["peak_allocated_bytes"],
       "segment_map counts as reserved", dev)
    fr = dev["fragmentation"]
    ok(without_time(fr["at_peak"]) == frag(1, 4 * MiB, 2 * MiB + 256 * 1024, 2 * MiB + 256 * 1024, 1 * MiB),
       "adjacent mapped pages are one segment, a block spans them", fr["at_peak"])
    ok(without_time(fr["at_exit"]) == frag(1, 2 * MiB, 0, 0, 2 * MiB), "unmapping pages shrinks the segment",
       fr["at_exit"])

# several snapshots: one row per rank, with fragmentation at each one's peak
p = subprocess.run([MEMTAP, "report", "--json", os.path.join(TMP, "current-4.pickle"), os.path.join(TMP, "old-4.pickle")],
                   capture_output=True, text=True)
rows = json.loads(p.stdout)["ranks"] if p.returncode == 0 else []
ok([r["fragmentation_at_peak"] for r in rows] == [
    {"reserved_bytes": 20 * MiB, "external_bytes": 2 * MiB, "largest_free_block_bytes": 2 * MiB},
    {"reserved_bytes": 10 * MiB, "external_bytes": 7 * MiB, "largest_free_block_bytes": 7 * MiB}],
   "ranks: fragmentation at each peak", p.stdout + p.stderr)

# hostile and broken input: one line, exit 2, nothing run
marker = os.path.join(TMP, "pwned")
hostile = b"\x80\x04cos\nsystem\n(V touch " + marker.encode() + b"\ntR."
cases = {"GLOBAL + REDUCE (os.system)": (hostile, "GLOBAL"),
         "a class instance": (pickle.dumps(OSError("x"), protocol=4), "STACK_GLOBAL"),
         "cut short": (pickle.dumps(CURRENT, protocol=4)[:100], "cut short"),
         "not a snapshot": (pickle.dumps({"a": 1}, protocol=4), "not a PyTorch memory snapshot"),
         "a huge integer": (pickle.dumps({"segments": [{"device": 2 ** 80}]}, protocol=4), "bytes")}
for name, (data, words) in cases.items():
    path = os.path.join(TMP, "bad.pickle")
    open(path, "wb").write(data)
    p = subprocess.run([MEMTAP, "report", path], capture_output=True, text=True)
    ok(p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, "refused: " + name, p.stderr)
ok(not os.path.exists(marker), "nothing in a pickle is ever run")

# ---- RMM logging_resource_adaptor CSV ----
RMM = """Thread,Time,Action,Pointer,Size,Stream
140215,23:59:59.900000,allocate,0x7f5e40000000,4096,0x0
140215,23:59:59.950000,allocate,0x7f5e40001000,8192,0x0
140216,00:00:00.100000,free,0x7f5e40000000,4096,0x0
140216,00:00:00.200000,allocate failure,(nil),1073741824,0x0
"""
csv = os.path.join(TMP, "rmm.csv")
open(csv, "w").write(RMM)
p = subprocess.run([MEMTAP, "report", "--json", csv], capture_output=True, text=True)
rep = json.loads(p.stdout) if p.returncode == 0 else None
ok(rep is not None, "an RMM log reads as a trace", p.stderr)
if rep:
    ok(rep["devices"][0]["peak_allocated_bytes"] == 12288 and rep["events"]["frees"] == 1,
       "RMM: peak and frees (the free after midnight is matched)", rep["devices"])
    ok([g["bytes"] for g in rep["live_at_exit"]] == [8192] and len(rep["oom"]) == 1 and rep["oom"][0]["size"] == 1 << 30,
       "RMM: live at exit and the allocation failure")
p = subprocess.run([MEMTAP, "report", csv], capture_output=True, text=True)
ok(p.stdout.startswith("memtap report: %s (an RMM log)\n" % csv), "RMM: the report says it read an RMM log",
   p.stdout[:200])
open(csv, "w").write(RMM.replace("8192", "lots"))
p = subprocess.run([MEMTAP, "report", csv], capture_output=True, text=True)
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "line 3" in p.stderr, "RMM: a malformed row, with its line",
   p.stderr)
done()
