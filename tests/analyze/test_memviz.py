"""The memviz export against what PyTorch's readers rely on, checked with the standard
pickle module: blocks tile each segment; free internal + free external + allocated is
each segment's total; requested never exceeds size; replaying device_traces gives the
live blocks; only opcodes and integer sizes the viewer's JavaScript unpickler accepts;
categories in the profiler's words, some 'unknown', and read back as memtap's."""
import json
import os
import pickle
import pickletools
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

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
done()
