"""Every figure memtap says is PyTorch's, computed here from the same input by PyTorch's own
rule and compared field by field, so that a swapped or wrong field fails on its own:
- the end of a snapshot as torch/cuda/_memory_viz.py's segsum counts it (per device and,
  for a file of several devices, summed over the file as segsum sums it): the JSON's
  devices[].fragmentation.at_exit and the text's "as PyTorch's segsum counts" lines;
- the memviz export's segments as DeviceCachingAllocator::snapshot() fills them
  (total_size, allocated_size, active_size, requested_size from their blocks), and
  segsum's figures of the export against the original's;
- memtap.allocator_stats(), named as torch.cuda.memory_stats() names its counters
  (reserved, allocated as block sizes, requested, segments, allocs and frees, OOMs),
  against the trace the same allocator wrote, at an OOM and at exit.
The snapshots are every one tests/analyze/snapshots.py makes, and one built so that no
two of these figures are equal (blocks rounded up, blocks pending a free, two devices,
small and large segments)."""
import json
import os
import pickle
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/analyze"))
from tap import done, ok, scratch  # noqa: E402
import snapshots  # noqa: E402
from snapshots import MiB, T0, block, segment, settings  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("pytorch-rules")


# ---- PyTorch's rules, from its source ----

def block_extra(b):
    """_memory_viz.py's _block_extra: (frames, the size the block accounts for)."""
    if "frames" not in b:  # the oldest layout: history, newest first
        if "history" in b:
            return b["history"][0].get("frames", []), b["history"][0]["real_size"]
        return [], b.get("requested_size", b["size"])
    return b["frames"], b["requested_size"]


def segsum(segments):
    """_memory_viz.py's segsum over these segments: total_reserved is every segment's
    total_size; an active_allocated block's accounted size is allocated and the rest of
    it free internal; every other block is free external."""
    out = {"segments": 0, "total_reserved": 0, "total_allocated": 0, "free_internal": 0, "free_external": 0}
    for seg in segments:
        out["segments"] += 1
        out["total_reserved"] += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                _, size = block_extra(b)
                out["total_allocated"] += size
                out["free_internal"] += b["size"] - size
            else:
                out["free_external"] += b["size"]
    assert out["free_internal"] + out["free_external"] + out["total_allocated"] == out["total_reserved"]
    return out


def segment_figures(seg):
    """DeviceCachingAllocator::snapshot()'s segment figures from its blocks: total_size all
    of them, allocated_size the allocated blocks, active_size those and the blocks waiting
    on other streams, requested_size the requested bytes of the active ones."""
    active = [b for b in seg["blocks"] if b["state"] in ("active_allocated", "active_pending_free")]
    return {"total_size": sum(b["size"] for b in seg["blocks"]),
            "allocated_size": sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in active),
            "requested_size": sum(b["requested_size"] for b in active)}


def size_text(n):
    """mt_format_size: bytes, else two decimals of the largest binary unit below it."""
    units, v, u = ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), float(n), 0
    while v >= 1024.0 and u + 1 < len(units):
        v, u = v / 1024.0, u + 1
    return "%d B" % n if u == 0 else "%.2f %s" % (v, units[u])


def free_text(s):
    """segsum's total_free: the free bytes, and the internal share when there is any."""
    total = s["free_internal"] + s["free_external"]
    pct = " (%.1f%% internal)" % (100.0 * s["free_internal"] / total) if total else ""
    return size_text(total) + pct


# ---- a snapshot in which no two of the figures are equal ----

def distinct():
    """Device 0: a 20 MiB large segment holding an allocated block of 6 MiB (6 MiB - 700
    asked), a block of 3 MiB (3 MiB - 300 asked) freed while another stream used it
    (active_pending_free at the end) and free space; a 2 MiB small segment holding blocks
    of 1536 (1000 asked) and 512 (100 asked), and one of 512 (200 asked) pending. Device
    1: a 40 MiB segment holding 10 MiB
    (10 MiB - 9 asked), 7 MiB pending (7 MiB - 1000 asked) and free space."""
    A, Bs, C, F = 0x7f1000000000, 0x7f2000000000, 0x7f3000000000, snapshots.PLAIN
    t = [0]

    def e(action, addr, size):
        t[0] += 3
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + t[0], "frames": F}
    d0 = [e("segment_alloc", A, 20 * MiB), e("alloc", A, 6 * MiB - 700), e("alloc", A + 6 * MiB, 3 * MiB - 300),
          e("segment_alloc", Bs, 2 * MiB), e("alloc", Bs, 1000), e("alloc", Bs + 1536, 100),
          e("alloc", Bs + 2048, 200), e("free_requested", A + 6 * MiB, 3 * MiB - 300),
          e("free_requested", Bs + 2048, 200)]
    d1 = [e("segment_alloc", C, 40 * MiB), e("alloc", C, 10 * MiB - 9), e("alloc", C + 10 * MiB, 7 * MiB - 1000),
          e("free_requested", C + 10 * MiB, 7 * MiB - 1000)]
    segs = [segment(0, A, [block(A, 6 * MiB, 6 * MiB - 700, "active_allocated", F),
                           block(A + 6 * MiB, 3 * MiB, 3 * MiB - 300, "active_pending_free", F),
                           block(A + 9 * MiB, 11 * MiB, 0, "inactive", [])], expandable=False),
            segment(0, Bs, [block(Bs, 1536, 1000, "active_allocated", F),
                            block(Bs + 1536, 512, 100, "active_allocated", F),
                            block(Bs + 2048, 512, 200, "active_pending_free", F),
                            block(Bs + 2560, 2 * MiB - 2560, 0, "inactive", [])], small=True, expandable=False),
            segment(1, C, [block(C, 10 * MiB, 10 * MiB - 9, "active_allocated", F),
                           block(C + 10 * MiB, 7 * MiB, 7 * MiB - 1000, "active_pending_free", F),
                           block(C + 17 * MiB, 23 * MiB, 0, "inactive", [])], expandable=False)]
    return {"segments": segs, "device_traces": [d0, d1], "allocator_settings": settings(False),
            "external_annotations": []}


CASES = [("distinct", distinct()), ("expandable", snapshots.expandable_oom()), ("training", snapshots.training()),
         ("inference", snapshots.inference()), ("warm step", snapshots.warm_step()),
         ("later step", snapshots.later_step()), ("pending", snapshots.pending_free()),
         ("pending before recording", snapshots.pending_free(before=True)), ("legacy", snapshots.legacy_list())]

# the scenario itself: in `distinct`, no two figures of a device are equal, nor a segment's
for d in (0, 1):
    s = segsum(x for x in CASES[0][1]["segments"] if x["device"] == d)
    alloc_sizes = s["total_allocated"] + s["free_internal"]
    vals = list(s.values()) + [alloc_sizes]
    ok(len(set(vals)) == len(vals), "distinct, device %d: segsum's figures all differ (a swap shows)" % d, s)
ok(all(len(set(segment_figures(x).values())) == 4 for x in CASES[0][1]["segments"]),
   "distinct: each segment's four figures differ",
   [segment_figures(x) for x in CASES[0][1]["segments"]])


def segments_of(snap, device=None):
    segs = snap if isinstance(snap, list) else snap["segments"]
    return [s for s in segs if device is None or s["device"] == device]


def run(*args):
    return subprocess.run([MEMTAP, *args], capture_output=True, text=True)


SEGSUM_LINE = re.compile(r"total_reserved (.+?), total_allocated (.+?), total_free (.+)$")

for name, snap in CASES:
    path = os.path.join(TMP, name.replace(" ", "-") + ".pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    p = run("report", "--json", path)
    rep = json.loads(p.stdout) if p.returncode == 0 and p.stdout.startswith("{") else {}
    text = run("report", path).stdout
    devices = sorted({s["device"] for s in segments_of(snap)})
    lines = [SEGSUM_LINE.search(x) for x in text.splitlines() if "as PyTorch's segsum counts the end" in x]
    ok(len(lines) == len(devices) and all(lines), name + ": a segsum line per device", text[-1500:])
    for i, d in enumerate(devices):
        want = segsum(segments_of(snap, d))
        dev = [x for x in rep.get("devices", []) if x["device"] == d]
        end = (dev[0].get("fragmentation") or {}).get("at_exit", {}) if dev else {}
        for field, key in (("segments", "segments"), ("total_reserved", "reserved_bytes"),
                           ("total_allocated", "requested_bytes"), ("free_internal", "internal_bytes"),
                           ("free_external", "external_bytes")):
            ok(end.get(key) == want[field], "%s, device %d: %s is segsum's %s" % (name, d, key, field),
               (end.get(key), want[field]))
        ok(end.get("allocated_bytes") == want["total_allocated"] + want["free_internal"],
           "%s, device %d: allocated_bytes is the allocated blocks' sizes" % (name, d),
           (end.get("allocated_bytes"), want))
        m = lines[i] if i < len(lines) else None
        for k, (field, got) in enumerate((("total_reserved", m and m.group(1)), ("total_allocated", m and m.group(2)),
                                          ("total_free", m and m.group(3)))):
            w = free_text(want) if field == "total_free" else size_text(want[field])
            ok(got == w, "%s, device %d: the text's %s is segsum's" % (name, d, field), (got, w))
    if len(devices) > 1:  # segsum sums every segment of the file
        want = segsum(segments_of(snap))
        m = [SEGSUM_LINE.search(x) for x in text.splitlines() if "as PyTorch's segsum sums the file" in x]
        m = m[0] if len(m) == 1 else None
        for k, (field, got) in enumerate((("total_reserved", m and m.group(1)), ("total_allocated", m and m.group(2)),
                                          ("total_free", m and m.group(3)))):
            w = free_text(want) if field == "total_free" else size_text(want[field])
            ok(got == w, "%s, every device: the text's %s is segsum's over the file" % (name, field), (got, w))

    # the memviz export: each segment's figures by snapshot()'s rule, segsum's as the original's
    out = os.path.join(TMP, name.replace(" ", "-") + ".viz.pickle")
    p = run("export", "--format=memviz", "-o", out, path)
    viz = pickle.load(open(out, "rb")) if p.returncode == 0 else {"segments": []}
    ok(p.returncode == 0 and segments_of(viz), name + ": exported", p.stderr)
    orig = {(s["device"], s["address"]): s for s in segments_of(snap)}
    for field in ("total_size", "allocated_size", "active_size", "requested_size"):
        bad = [(s["address"], s.get(field), segment_figures(s)[field]) for s in segments_of(viz)
               if s.get(field) != segment_figures(s)[field]]
        ok(not bad, "%s: the export's %s of each segment, as snapshot() sums its blocks" % (name, field), bad)
        bad = [(k, s.get(field), orig[k][field]) for s in segments_of(viz)
               for k in [(s["device"], s["address"])] if k in orig and field in orig[k] and
               (orig[k]["total_size"], orig[k]["blocks"][0]["state"]) == (s["total_size"], s["blocks"][0]["state"])
               and s.get(field) != orig[k][field]]
        ok(not bad, "%s: the export's %s of each segment is the snapshot's own" % (name, field), bad)
    for d in devices:
        w, g = segsum(segments_of(snap, d)), segsum(segments_of(viz, d))
        for field in w:
            ok(g[field] == w[field], "%s, device %d: segsum's %s of the export is the original's" % (name, d, field),
               (g[field], w[field]))

# ---- memtap.allocator_stats(): memory_stats()'s counters, against the trace ----
# simtrain on memtap's caching allocator (PyTorch's rules), a limit that one allocation
# passes: at the OOM (the job's thread waits while the handler runs) and at exit, every
# counter is what the trace the allocator wrote says
POLICY = os.path.join(TMP, "stats.lua")
open(POLICY, "w").write("""
memtap.allocator{policy = "native", limit_mb = 1024}
local keys = {"reserved", "allocated", "requested", "peak_reserved", "segments", "allocs", "frees", "ooms", "retries"}
local function say(when)
  local s = memtap.allocator_stats(0)
  local out = {}
  for _, k in ipairs(keys) do out[#out + 1] = k .. "=" .. tostring(s[k]) end
  memtap.log(when .. " " .. table.concat(out, " "))
end
local seen = false
memtap.on_oom(function(ev)
  if seen then return end
  seen = true
  say("stats-oom")
  memtap.allocator{limit_mb = 0, device = 0}
  return "retry"
end)
memtap.on_exit(function() say("stats-exit") end)
""")
trace = os.path.join(TMP, "stats.trace")
p = subprocess.run([MEMTAP, "run", "-o", trace, "--allocator=caching", "--policy", POLICY, "--", SIMTRAIN,
                    "--preset", "gpt2-small", "--no-teardown"], capture_output=True, text=True, timeout=600)
said = {}
for line in p.stderr.splitlines():
    m = re.search(r"(stats-\w+) (.*)$", line)
    if m:
        said[m.group(1)] = {k: int(v) for k, v in (x.split("=") for x in m.group(2).split())}
ok(p.returncode == 0 and set(said) == {"stats-oom", "stats-exit"},
   "simtrain on the caching allocator: its counters said at the OOM and at exit", p.stderr[-2000:])
ev = [json.loads(x) for x in run("dump", "--json", trace).stdout.splitlines()]
BLOCK = 9


def counters(events):
    """memory_stats()'s counters worked out from the events: reserved_bytes (live
    segments), allocated_bytes (live blocks' sizes), requested_bytes (what they asked),
    segment (live segments), reserved_bytes' peak, allocations and frees made, OOMs."""
    live, segs = {}, {}
    c = {"reserved": 0, "peak_reserved": 0, "allocs": 0, "frees": 0, "ooms": 0}
    for e in events:
        if e["error"] and e["kind"] != "alloc_failed":
            continue
        if e["kind"] == "alloc" and e["flags"] & 0x3f == BLOCK:
            live[e["addr"]] = e
            c["allocs"] += 1
        elif e["kind"] == "free" and e["addr"] in live:
            del live[e["addr"]]
            c["frees"] += 1
        elif e["kind"] == "segment_alloc":
            segs[e["addr"]] = e["size"]
        elif e["kind"] == "segment_free":
            segs.pop(e["addr"], None)
        elif e["kind"] == "alloc_failed":
            c["ooms"] += 1
        c["reserved"] = sum(segs.values())
        c["peak_reserved"] = max(c["peak_reserved"], c["reserved"])
    c.update(allocated=sum(e["aux2"] for e in live.values()), requested=sum(e["size"] for e in live.values()),
             segments=len(segs))
    return c


oom_at = next((i for i, e in enumerate(ev) if e["kind"] == "alloc_failed"), len(ev))
for when, events in (("stats-oom", ev[:oom_at + 1]), ("stats-exit", ev)):
    want, got = counters(events), said.get(when, {})
    for k in ("reserved", "allocated", "requested", "segments", "peak_reserved", "allocs", "frees", "ooms"):
        ok(got.get(k) == want[k], "allocator_stats at %s: %s as the trace counts it" % (when[6:], k),
           (got.get(k), want[k]))
    ok(len({want["reserved"], want["allocated"], want["requested"]}) == 3,
       "at %s: reserved, allocated and requested differ (a swap shows)" % when[6:], want)
ok(said.get("stats-oom", {}).get("retries", 0) >= 1, "the OOM came after the allocator's own retry", said)

# the memviz export of that run: each segment's figures by snapshot()'s rule, each live block
# at the size and request the allocator recorded for it
out = os.path.join(TMP, "stats.viz.pickle")
p = run("export", "--format=memviz", "-o", out, trace)
viz = pickle.load(open(out, "rb")) if p.returncode == 0 else {"segments": []}
live = {}
for e in ev:
    if e["kind"] == "alloc" and e["flags"] & 0x3f == BLOCK and not e["error"]:
        live[e["addr"]] = e
    elif e["kind"] == "free":
        live.pop(e["addr"], None)
for field in ("total_size", "allocated_size", "active_size", "requested_size"):
    bad = [(x["address"], x.get(field), segment_figures(x)[field]) for x in segments_of(viz)
           if x.get(field) != segment_figures(x)[field]]
    ok(segments_of(viz) and not bad, "the allocator's export: each segment's %s as snapshot() sums its blocks" % field,
       bad)
blocks = {b["address"]: b for x in segments_of(viz) for b in x["blocks"] if b["state"] == "active_allocated"}
ok(live and {a: (b["size"], b["requested_size"]) for a, b in blocks.items()} ==
   {a: (e["aux2"], e["size"]) for a, e in live.items()},
   "the allocator's export: every block live at the end, at the size it was given and the bytes it was asked for",
   len(live))
done()
