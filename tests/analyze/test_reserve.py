"""The caching allocator's reserve split at the peak: how much holds tensors (its blocks,
at their rounded sizes) and how much is cache, in text, JSON and HTML. Checked against
the trace's own events replayed here to the peak: simtrain under memtap's caching
allocator on simgpu. A plain run (no blocks in the trace) makes no such claim."""
import json
import os
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

p, path = record("plain")
if ok(p.returncode == 0 and os.path.exists(path), "simtrain runs under the plain hooks", p.stderr):
    dev = json.loads(report(path, "--json"))["devices"][0]
    ok(dev.get("caching_allocator_at_peak", "absent") is None,
       "a plain run claims no split: the hooks see no blocks", dev.get("caching_allocator_at_peak", "absent"))
done()
