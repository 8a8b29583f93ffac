"""The memviz export against what PyTorch's readers rely on, checked with the standard
pickle module: blocks tile each segment; free internal + free external + allocated is
each segment's total; requested never exceeds size; replaying device_traces gives the
live blocks; only opcodes and integer sizes the viewer's JavaScript unpickler accepts;
categories in the profiler's words, some 'unknown', and read back as memtap's. Imported
snapshots go back out as they came in: a block whose free waits on other streams
(active_pending_free) stays pending, snapshot entries stay where they were, and nothing
is added (a legacy list of segments gets no entries); segsum's figures and memtap's
report are the same on the original and on the export read back."""
import json
import os
import pickle
import pickletools
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/analyze"))
from snapshots import PLAIN, block, frame, legacy_list, pending_free, segment  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("memviz")
JS_OPCODES = {"APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1",
              "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP", "TUPLE2", "APPEND",
              "NEWFALSE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE", "BINFLOAT", "TUPLE", "TUPLE1",
              "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM"}

for args in (["--preset", "tiny", "--leak", "64K"], ["--preset", "gpt2-small", "--no-teardown", "--api", "async"]):
    name = " ".join(args)
    trace, truth, out = (os.path.join(TMP, f) for f in ("t.trace", "t.json", "t.pickle"))
    for f in (trace, truth, out):
        if os.path.exists(f):
            os.remove(f)
    subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, *args, "--json", truth], check=True,
                   capture_output=True)
    p = subprocess.run([MEMTAP, "export", "--format=memviz", "-o", out, trace], capture_output=True, text=True)
    if not ok(p.returncode == 0, name + ": exported", p.stderr):
        continue
    data = open(out, "rb").read()
    snap = pickle.loads(data)
    truth = json.load(open(truth))
    ops = [(o.name, arg) for o, arg, _ in pickletools.genops(data)]
    ok(set(n for n, _ in ops) <= JS_OPCODES, name + ": only opcodes the viewer's unpickler knows",
       set(n for n, _ in ops) - JS_OPCODES)
    ok(ops[0] == ("PROTO", 4), name + ": protocol 4")
    ok(all(n != "LONG1" or -(1 << 63) <= a < (1 << 63) for n, a in ops), name + ": integers of at most 8 bytes")
    ok(set(snap) >= {"segments", "device_traces", "allocator_settings"}, name + ": PyTorch's top-level keys")
    tiled = internal_ok = requested_ok = True
    for s in snap["segments"]:
        at = s["address"]
        for b in s["blocks"]:
            tiled &= b["address"] == at
            at += b["size"]
            requested_ok &= b["requested_size"] <= b["size"]
        tiled &= at == s["address"] + s["total_size"]
        active = [b for b in s["blocks"] if b["state"].startswith("active")]
        free_internal = sum(b["size"] - b["requested_size"] for b in active)
        free_external = sum(b["size"] for b in s["blocks"] if b["state"] == "inactive")
        allocated = sum(b["requested_size"] for b in active)
        internal_ok &= free_internal + free_external + allocated == s["total_size"]
        internal_ok &= s["allocated_size"] == sum(b["size"] for b in active)
    ok(tiled, name + ": blocks tile each segment exactly")
    ok(internal_ok, name + ": free internal + free external + allocated = total_size")
    ok(requested_ok, name + ": requested_size never exceeds size")
    own = [s for s in snap["segments"] if s["blocks"][0]["state"] == "active_allocated" and len(s["blocks"]) == 1]
    ok(own and all(tuple(s["segment_pool_id"]) == (0, 0) and s["frames"] == s["blocks"][0]["frames"] for s in own),
       name + ": an allocation live at the end, its own segment: in the default pool, with its own frames",
       [(s["segment_pool_id"], len(s["frames"]), len(s["blocks"][0]["frames"])) for s in own[:3]])
    live, segs, total, peak = {}, {}, 0, 0
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            total += e["size"]
            peak = max(peak, total)
        elif e["action"] == "free_completed":
            total -= live.pop(e["addr"])
        elif e["action"] == "segment_alloc":
            segs[e["addr"]] = e["size"]
        elif e["action"] == "segment_free":
            segs.pop(e["addr"])
    blocks = {b["address"]: b["requested_size"] for s in snap["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"}
    ok(live == blocks and set(segs) == {s["address"] for s in snap["segments"]},
       name + ": replaying device_traces gives the final segments and blocks", (len(live), len(blocks)))
    ok(peak == truth["peak"]["bytes"], name + ": the replayed peak is simtrain's", (peak, truth["peak"]["bytes"]))
    cats = {e.get("category") for e in snap["device_traces"][0] if e["action"] == "alloc"}
    ok(cats >= {"parameter", "activation", "temporary"} and cats <= {"parameter", "gradient", "optimizer_state",
                                                                    "activation", "temporary", "unknown"},
       name + ": each entry carries its category, in the profiler's words", cats)
    ok(all(e.get("category") for e in snap["device_traces"][0]) and
       any(e["category"] == "unknown" for e in snap["device_traces"][0]),
       name + ": every entry has a category and some say 'unknown' (the viewer's annotate_snapshot needs one)")
    # read back, the categories are memtap's again
    p = subprocess.run([MEMTAP, "report", "--json", out], capture_output=True, text=True)
    back = json.loads(p.stdout)["devices"][0] if p.returncode == 0 else {}
    p = subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True)
    orig = json.loads(p.stdout)["devices"][0]
    cats = ("params", "grads", "optimizer", "activations", "temporaries")
    ok(back and all(back["composition_at_peak"][c] == orig["composition_at_peak"][c] for c in cats) and
       all(back["composition_source"][c] == "tags" for c in cats if orig["composition_at_peak"][c]),
       name + ": the export read back has the same composition at the peak, from its categories",
       (back.get("composition_at_peak"), orig["composition_at_peak"]))
    ok(all(isinstance(f, dict) and set(f) == {"filename", "line", "name"} for e in snap["device_traces"][0][:50]
           for f in e["frames"]), name + ": frames as PyTorch writes them")

# ---- imported snapshots: back out as they came in ----
MiB = 1 << 20
S, T0, F = 0x7f3000000000, 1718000000000000, PLAIN


def segsum(snap):
    """torch/cuda/_memory_viz.py's segsum: reserved is every segment; an active_allocated
    block's requested size is allocated, the rest of it free internal; every other block
    (inactive and active_pending_free alike) free external. Also the viewer's active
    bytes (active_size: allocated and pending blocks)."""
    segs = snap if isinstance(snap, list) else snap["segments"]
    out = {"reserved": 0, "allocated": 0, "free_internal": 0, "free_external": 0, "active": 0}
    for s in segs:
        out["reserved"] += s["total_size"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                req = b["requested_size"] if "frames" in b else b["history"][0]["real_size"]
                out["allocated"] += req
                out["free_internal"] += b["size"] - req
            else:
                out["free_external"] += b["size"]
            out["active"] += b["size"] if b["state"].startswith("active") else 0
    return out


def roundtrip(name, snap):
    """The snapshot, its export and memtap's reports of both (the trace's name left out)."""
    orig, out = os.path.join(TMP, name + ".pickle"), os.path.join(TMP, name + ".viz.pickle")
    with open(orig, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    p = subprocess.run([MEMTAP, "export", "--format=memviz", "-o", out, orig], capture_output=True, text=True)
    if not ok(p.returncode == 0, name + ": exported", p.stderr):
        return None, None, None
    reports = []
    for path in (orig, out):
        r = subprocess.run([MEMTAP, "report", "--json", path], capture_output=True, text=True)
        rep = json.loads(r.stdout) if r.returncode == 0 else {}
        rep.pop("trace", None)
        reports.append(rep)
    return pickle.load(open(out, "rb")), reports[0], reports[1]


def entries(trace):
    return [(e["action"], e["addr"], e["size"], e["stream"], e.get("time_us")) for e in trace]


def pending_figures(name, original, snap, orig, back, active):
    """pending_free()'s figures: segsum's worked out by hand on the original and the export
    (its pending blocks `active` bytes in all), memtap's peak with every pending block live
    until the end and what is allocated at the end, and the export read back."""
    want = {"reserved": 20 * MiB, "allocated": 4 * MiB - 100, "free_internal": 100, "free_external": 16 * MiB,
            "active": active}
    ok(segsum(original) == want and segsum(snap) == want, name + ": segsum's figures, worked out by hand, on the "
       "original and the export", (segsum(original), segsum(snap)))
    dev = (orig.get("devices") or [{}])[0]
    ok(dev.get("peak_allocated_bytes") == active - 100 and dev.get("allocated_at_exit_bytes") == 4 * MiB - 100,
       name + ": memtap's peak (the pending blocks live until the end) and what is allocated at the end", dev)
    ok(orig and orig == back, name + ": memtap's report of the export read back is the original's")


pending = pending_free()
snap, orig, back = roundtrip("pending", pending)
if snap:
    got = snap["device_traces"][0]
    ok([e for e in entries(got) if e[0] == "free_completed"] == [] and
       [e[1] for e in entries(got) if e[0] == "free_requested"] == [S, S + 10 * MiB],
       "pending: each free still waiting on other streams is a free_requested with no free_completed", entries(got))
    ok([b["state"] for b in snap["segments"][0]["blocks"]] ==
       ["active_pending_free", "active_allocated", "active_pending_free", "inactive"],
       "pending: their blocks stay active_pending_free", snap["segments"][0]["blocks"])
    seg = snap["segments"][0]
    ok((seg["allocated_size"], seg["active_size"], seg["requested_size"]) == (4 * MiB, 12 * MiB, 12 * MiB - 100),
       "pending: the segment's allocated, active and requested sizes as PyTorch's snapshot() sums them",
       (seg["allocated_size"], seg["active_size"], seg["requested_size"]))
    ok(entries(got) == entries(pending["device_traces"][0]), "pending: the trace's entries come back in place "
       "(free_requested where it was asked, snapshot entries in the middle and last)", entries(got))
    ok(got[-1]["action"] == "snapshot" and "frames" not in got[-1], "pending: the trailing snapshot entry is kept, "
       "with no frames as PyTorch writes it", got[-1])
    pending_figures("pending", pending, snap, orig, back, 12 * MiB)

# A block made before recording, freed while another stream used it: live from the start
# until the end (it was missing from memtap's figures), its free_requested kept in place.
pending = pending_free(before=True)
snap, orig, back = roundtrip("pending-before", pending)
if snap:
    got = snap["device_traces"][0]
    ok(entries(got) == entries(pending["device_traces"][0]) and
       snap["segments"][0]["blocks"][3]["state"] == "active_pending_free",
       "pending before recording: no alloc made up, its free_requested where it was, its block still pending",
       (entries(got), snap["segments"][0]["blocks"]))
    pending_figures("pending before recording", pending, snap, orig, back, 20 * MiB)

# The same taken without memory history (no entries, as a public verl snapshot was): the
# pending block is free at the snapshot's moment, as segsum counts it; with no free_requested
# to say when it was asked, the export writes it as free space.
bare = {"segments": [segment(0, S, [block(S, 6 * MiB, 6 * MiB, "active_pending_free", []),
                                    block(S + 6 * MiB, 4 * MiB, 4 * MiB - 100, "active_allocated", []),
                                    block(S + 10 * MiB, 10 * MiB, 0, "inactive", [])], expandable=False)],
        "device_traces": [[]]}
snap, orig, back = roundtrip("pending-untraced", bare)
if snap:
    want = {"reserved": 20 * MiB, "allocated": 4 * MiB - 100, "free_internal": 100, "free_external": 16 * MiB,
            "active": 10 * MiB}
    ok(segsum(bare) == want and segsum(snap) == dict(want, active=4 * MiB),
       "pending without a trace: segsum's figures on the original and the export (active: its block is free space "
       "there)", (segsum(bare), segsum(snap)))
    dev = (orig.get("devices") or [{}])[0]
    ok(dev.get("peak_allocated_bytes") == dev.get("allocated_at_exit_bytes") == 4 * MiB - 100,
       "pending without a trace: free at the snapshot, not allocated", dev)

# Frames come back as they were: a filename '' (PyTorch writes it for some C++ frames) stays
# '', a 600-character kernel name is not cut.
framed = pending_free()
odd = [frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", "", 0),
       frame("x" * 700, "??", 0), frame("forward", "/home/me/model.py", 31)]
for e in framed["device_traces"][0]:
    if "frames" in e:
        e["frames"] = odd
snap, orig, back = roundtrip("frames", framed)
if snap:
    got = [e["frames"] for e in snap["device_traces"][0] if e.get("frames")]
    ok(got and all(f == odd for f in got), "frames: '' filenames and long names come back unchanged",
       got[:1] and [(f["filename"], len(f["name"])) for f in got[0]])

legacy = legacy_list()
snap, orig, back = roundtrip("legacy", legacy)
if snap:
    ok([len(t) for t in snap["device_traces"]] == [0, 0], "legacy: no trace entries made up (it had no trace)",
       snap["device_traces"])
    want = {"reserved": 22 * MiB, "allocated": 11 * MiB - 96, "free_internal": MiB + 608,
            "free_external": 10 * MiB - 512, "active": 12 * MiB + 512}
    ok(segsum(snap) == segsum(legacy) == want, "legacy: segsum's figures on the original (history[0]'s real_size) "
       "and the export", (segsum(legacy), segsum(snap)))
    ok(orig and orig == back, "legacy: memtap's report of the export read back is the original's")

# Every entry with a category and none 'unknown', all in a segment reserved before the trace
# (no segment entries): the export adds nothing; its entries say no category, so the
# viewer (whose annotate_snapshot throws on categories without 'unknown') opens it.
tagged = {"segments": [segment(0, S, [block(S, 4 * MiB, 4 * MiB, "active_allocated", F),
                                       block(S + 4 * MiB, 16 * MiB, 0, "inactive", [])], expandable=False)],
          "device_traces": [[{"action": "alloc", "addr": S, "size": 4 * MiB, "stream": 0, "time_us": T0 + 1,
                              "frames": F, "category": "parameter"}]]}
snap, orig, back = roundtrip("tagged", tagged)
if snap:
    got = snap["device_traces"][0]
    ok(entries(got) == entries(tagged["device_traces"][0]), "tagged: no entry made up", entries(got))
    cats = {e["category"] for e in got if "category" in e}
    ok(not cats or "unknown" in cats, "tagged: the viewer can open it (no categories, or some 'unknown')", cats)
done()
