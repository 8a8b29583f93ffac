"""The caching allocator's reserve split at the peak: how much holds tensors (its blocks,
at their rounded sizes) and how much is cache, in text, JSON and HTML. Checked against
the trace's own events replayed here to the peak: simtrain under memtap's caching
allocator on simgpu. A plain run (no blocks in the trace) makes no such claim."""
import json
import os
import pickle
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("reserve")


def record(name, *opts):
    path = os.path.join(TMP, name + ".trace")
    p = subprocess.run([MEMTAP, "run", "-q", "-o", path, *opts, "--", SIMTRAIN, "--preset", "tiny", "--iters", "2"],
                       capture_output=True, text=True)
    return p, path


def report(path, *args):
    p = subprocess.run([MEMTAP, "report", *args, path], capture_output=True, text=True)
    return p.stdout


p, path = record("caching", "--allocator=caching")
if ok(p.returncode == 0 and os.path.exists(path), "simtrain runs under memtap's caching allocator", p.stderr):
    rep = json.loads(report(path, "--json"))
    dev = rep["devices"][0]
    split = dev.get("caching_allocator_at_peak")
    # the same, replayed from the events: segments reserved and blocks live when the peak was reached
    evs = [json.loads(line) for line in subprocess.run([MEMTAP, "dump", "--json", path], capture_output=True,
                                                        text=True).stdout.splitlines()]
    reserved, blocks, peak_at = 0, {}, None
    for e in evs:
        if e["device"] != 0 and e["kind"] not in ("free",):
            continue
        if e["kind"] == "segment_alloc":
            reserved += e["size"]
        elif e["kind"] == "segment_free":
            reserved -= e["size"]
        elif e["kind"] == "alloc" and not e["error"] and e["flags"] & 0x3f == 9:
            blocks[e["addr"]] = e["aux2"] or e["size"]
        elif e["kind"] == "free":
            blocks.pop(e["addr"], None)
        # dump's times and the report's peak time count from the trace's start alike
        if e["time_ns"] >= dev["peak_time_ns"] and peak_at is None and e["kind"] == "alloc":
            peak_at = (reserved, sum(blocks.values()))
    ok(split and peak_at and split["reserved_bytes"] == peak_at[0] and split["tensor_bytes"] == peak_at[1]
       and split["cache_bytes"] == peak_at[0] - peak_at[1] and split["cache_bytes"] > 0,
       "JSON: the reserve at the peak, its tensors' blocks and the cache, as the events say", (split, peak_at))
    text = report(path)
    line = [ln for ln in text.splitlines() if ln.startswith("the caching allocator's reserve at the peak")]
    ok(len(line) == 1 and "in tensors' blocks" in line[0] and line[0].endswith(" cache"),
       "text: one line with the reserve, its tensors and the cache", line)
    html = report(path, "--html", os.path.join(TMP, "r.html")) or open(os.path.join(TMP, "r.html")).read()
    ok("caching_allocator_at_peak" in html and "the caching allocator's reserve" in html,
       "HTML: the page carries the split and shows it in the libraries table")

# a snapshot whose reserve changes after its peak: a segment given back (empty_cache), then
# an allocation. At the peak 60 MiB was reserved, 38 MiB of it in blocks; at the end 20 MiB.
MiB, S1, S2, T0 = 1 << 20, 0x7f1000000000, 0x7f2000000000, 1718000000000000
F = [{"filename": "train.py", "line": 7, "name": "step"}]


def entry(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + t, "frames": F}


snap = {"segments": [{"device": 0, "address": S1, "total_size": 20 * MiB, "allocated_size": 10 * MiB,
                      "active_size": 10 * MiB, "requested_size": 10 * MiB, "stream": 0, "segment_type": "large",
                      "segment_pool_id": (0, 0), "is_expandable": False, "frames": F,
                      "blocks": [{"address": S1, "size": 8 * MiB, "requested_size": 8 * MiB,
                                  "state": "active_allocated", "frames": F},
                                 {"address": S1 + 8 * MiB, "size": 2 * MiB, "requested_size": 2 * MiB,
                                  "state": "active_allocated", "frames": F},
                                 {"address": S1 + 10 * MiB, "size": 10 * MiB, "requested_size": 0,
                                  "state": "inactive", "frames": []}]}],
        "device_traces": [[entry("segment_alloc", S1, 20 * MiB, 1), entry("alloc", S1, 8 * MiB, 2),
                           entry("segment_alloc", S2, 40 * MiB, 3), entry("alloc", S2, 30 * MiB, 4),
                           entry("free_requested", S2, 30 * MiB, 5), entry("free_completed", S2, 30 * MiB, 6),
                           entry("segment_free", S2, 40 * MiB, 7), entry("alloc", S1 + 8 * MiB, 2 * MiB, 8)]]}
path = os.path.join(TMP, "later.pickle")
with open(path, "wb") as f:
    pickle.dump(snap, f, protocol=4)
dev = json.loads(report(path, "--json"))["devices"][0]
split = dev.get("caching_allocator_at_peak") or {}
ok(dev["peak_allocated_bytes"] == 38 * MiB and split.get("reserved_bytes") == 60 * MiB and
   split.get("tensor_bytes") == 38 * MiB and dev["composition_at_peak"]["reserved_unallocated"] == 22 * MiB,
   "a reserve that shrinks after the peak: the reserve at the peak (60 MiB), not at a later allocation (20 MiB)",
   (dev["peak_allocated_bytes"], split, dev["composition_at_peak"]))

p, path = record("plain")
if ok(p.returncode == 0 and os.path.exists(path), "simtrain runs under the plain hooks", p.stderr):
    dev = json.loads(report(path, "--json"))["devices"][0]
    ok(dev.get("caching_allocator_at_peak", "absent") is None,
       "a plain run claims no split: the hooks see no blocks", dev.get("caching_allocator_at_peak", "absent"))
done()
