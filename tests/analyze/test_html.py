"""`memtap report --html`: one self-contained page, opened in headless Chromium (Debian's
chromium package). The page must draw without a script error, its charts must be there,
and every number it shows must be the one `--json` gives. Inputs: a recorded simtrain
run with an injected leak, and a PyTorch snapshot with segments, an OOM and a frame
name that tries to close the page's script."""
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("html")
MiB = 1 << 20
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
VOID = {"br", "meta", "link", "img", "input", "hr", "col", "wbr"}


class Dom(HTMLParser):
    """Elements as dicts (tag, attrs, children, text), with an index by id."""

    def __init__(self):
        super().__init__()
        self.root = {"tag": "#root", "attrs": {}, "children": [], "text": ""}
        self.stack, self.by_id = [self.root], {}

    def handle_starttag(self, tag, attrs):
        node = {"tag": tag, "attrs": dict(attrs), "children": [], "text": ""}
        self.stack[-1]["children"].append(node)
        if "id" in node["attrs"]:
            self.by_id[node["attrs"]["id"]] = node
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i]["tag"] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1]["text"] += data


def by_site(rows):
    """--json's rows (one a stack) grouped as the text report and the page group them: by
    device, kind, before recording (and then what it was read as) and where in the code
    (the first user frame; none for blocks made before recording without frames)."""
    sites = {}
    for g in rows:
        key = (g["device"], g.get("kind"), g["before_recording"], g.get("read_as"), g["where"])
        s = sites.setdefault(key, {"device": g["device"], "bytes": 0, "growth_bytes_per_iteration": 0})
        s["bytes"] += g["bytes"]
        s["growth_bytes_per_iteration"] += g.get("growth_bytes_per_iteration", 0)
    return sorted(sites.values(), key=lambda s: (-s["growth_bytes_per_iteration"], -s["bytes"]))


def find(node, tag, cls=None):
    out = []
    for c in node["children"]:
        if c["tag"] == tag and (cls is None or cls in c["attrs"].get("class", "").split()):
            out.append(c)
        out += find(c, tag, cls)
    return out


def values(node):
    """The data-value of every numeric cell, in page order, as integers."""
    return [int(td["attrs"]["data-value"]) for td in find(node, "td", "num")]


def text(node):
    return node["text"] + "".join(text(c) for c in node["children"])


def render(name, trace, extra=()):
    """(json report, page source, rendered DOM or None, body attributes)"""
    rep = json.loads(subprocess.run([MEMTAP, "report", "--json", trace, *extra], capture_output=True, text=True).stdout)
    page = os.path.join(TMP, name + ".html")
    p = subprocess.run([MEMTAP, "report", "--html", page, trace, *extra], capture_output=True, text=True)
    ok(p.returncode == 0 and os.path.exists(page), "%s: --html writes the page" % name, p.stderr)
    source = open(page).read() if os.path.exists(page) else ""
    c = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--user-data-dir=" + os.path.join(TMP, "profile"), "--dump-dom", "file://" + page],
                       capture_output=True, text=True, timeout=120)
    dom = Dom()
    dom.feed(c.stdout)
    body = (find(dom.root, "body") or [{"attrs": {}}])[0]["attrs"]
    return rep, source, dom, body


def self_contained(name, source):
    outside = re.findall(r'<(?:script|img|link|iframe)[^>]*\b(?:src|href)=|@import|url\(|https://', source)
    ok(source.startswith("<!doctype html>") and not outside, "%s: self-contained (nothing fetched)" % name, outside)


def common(name, rep, dom, body):
    ok(body.get("data-rendered") == "yes" and body.get("data-errors") == "", "%s: the page draws without a script error"
       % name, body)
    ev = dom.by_id.get("events")
    ok(ev and values(ev) == [rep["events"][k] for k in ("allocs", "frees", "failed", "dropped", "total")],
       "%s: event counts as in --json" % name)
    for dev in rep["devices"]:
        d = dev["device"]
        summary, comp = dom.by_id.get("summary-%d" % d), dom.by_id.get("composition-table-%d" % d)
        ok(summary and values(summary) == [dev["peak_allocated_bytes"], dev["peak_time_ns"], dev["capacity_bytes"],
                                           dev["allocated_at_exit_bytes"]], "%s: device %d's peak as in --json" % (name, d))
        cats = ["params", "grads", "optimizer", "activations", "temporaries", "other", "reserved_unallocated"]
        ok(comp and values(comp) == [dev["composition_at_peak"][c] for c in cats],
           "%s: device %d's composition as in --json" % (name, d), comp and values(comp))
        chart = dom.by_id.get("composition-%d" % d)
        areas = find(chart, "path", "area") if chart else []
        drawn = sorted(a["attrs"]["data-category"] for a in areas)
        ok(chart and find(chart, "line", "peak") and drawn and
           all(dev["composition_at_peak"][c] == 0 or c in drawn for c in cats[:-1]),
           "%s: device %d's timeline draws each category of the peak, the peak marked" % (name, d), drawn)
        libs, count = dom.by_id.get("libraries-%d" % d), dev["driver_count"]
        want = [l["bytes"] for l in dev["by_library_at_peak"]]
        want += [count["used_bytes"], count["recorded_bytes"], count["unseen_bytes"]] if count else []
        cache = dev["caching_allocator_at_peak"]
        want += [cache["reserved_bytes"], cache["tensor_bytes"], cache["cache_bytes"]] if cache else []
        ok(values(libs) == want if libs else not want,
           "%s: device %d's libraries, the driver's count and the reserve's split as in --json" % (name, d),
           libs and values(libs))
        top = dom.by_id.get("top-%d" % d)
        want = [g["bytes"] for g in by_site(rep["top_at_peak"]) if g["device"] == d]
        ok(top and values(top)[0::2] == want, "%s: device %d's stacks at the peak as in --json, by where in the code"
           % (name, d), top and (values(top)[0::2], want))
    leaks = dom.by_id.get("leaks")
    ok(leaks and (values(leaks)[0::3] == [l["growth_bytes_per_iteration"] for l in by_site(rep["leaks"])]
                  if rep["leaks"] else "no stack grew" in text(leaks)), "%s: leaks as in --json" % name)
    oom = dom.by_id.get("oom")
    ok(oom and (values(oom)[0::3] == [o["size"] for o in rep["oom"]] if rep["oom"] else text(oom) == "none"),
       "%s: OOMs as in --json" % name)
    for i, g in enumerate(rep["diagnosis"]):
        fixes = dom.by_id.get("remedies-%d" % i)
        shown = [m for m in g["remedies"] if m["fits"]] + [m for m in g["remedies"] if not m["fits"]]
        want = [int(v) for m in shown for v in (m["allocated_bytes"], m["reserved_bytes"])]
        ok(values(fixes) == want if fixes else not want,
           "%s: what to change (%d) as in --json, what fits first" % (name, i), fixes and values(fixes))
        said = text(dom.by_id["diagnosis"])
        ok("In use then: " in said and (g["of"] == "peak" or " s on device" in said),
           "%s: what was in use then, the time in seconds as in the text (%d)" % (name, i), said[:400])
    ok(("diagnosis" in dom.by_id) == bool(rep["diagnosis"]), "%s: a section for what to change where there is one"
       % name)


if not CHROMIUM:
    print("1..0 # SKIP chromium is not installed (./quickstart check installs it)")
    sys.exit(0)

# ---- a recorded training run with a leak ----
trace = os.path.join(TMP, "train.trace")
env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "tiny", "--iters", "6", "--leak", "1M"],
               env=env, check=True, stdout=subprocess.DEVNULL)
rep, source, dom, body = render("train", trace)
self_contained("train", source)
common("train", rep, dom, body)
ok(rep["leaks"] and rep["devices"][0]["fragmentation"] is None and "fragmentation-section-0" not in dom.by_id,
   "train: a leak shown; no fragmentation section without segments")

ok(rep["plan"] is None and "plan" not in dom.by_id, "train: no capacity plan without --plan")

# ---- the same run with its capacity plan ----
rep, source, dom, body = render("plan", trace, ["--plan", "--layers 2 --hidden 64 --heads 4 --ffn 256 --vocab 512 "
                                                "--seq 32 --micro-batch 2 --gpus-per-node 4"])
common("plan", rep, dom, body)
plan = rep["plan"]
comps, tab = dom.by_id.get("plan-components"), dom.by_id.get("plan-table")
ok(plan and comps and values(comps) == [v for c in plan["components"] for v in (c["measured"], c["estimated"])] and
   tab and values(tab) == [row[k] for row in plan["table"] for k in ("none", "selective", "full")] and
   plan["table"][3]["none"] < plan["table"][0]["none"],
   "plan: the measured composition and the ZeRO x recomputation table as in --json", plan)

# ---- libraries named as NVIDIA's, a context no hook sees: the by-library table and the driver's count ----
libtrace = os.path.join(TMP, "libraries.trace")
subprocess.run([MEMTAP, "run", "-q", "-o", libtrace, "--", os.path.join(B, "tests/recorder/paths"), "libraries",
                os.path.join(B, "tests/recorder/libs/.libs")], env=dict(env, SIMGPU_CONTEXT_MEM="300MiB"), check=True,
               stdout=subprocess.DEVNULL)
rep, source, dom, body = render("libraries", libtrace)
common("libraries", rep, dom, body)
libs = dom.by_id.get("libraries-0")
ok(libs and "libnccl.so.2" in text(libs) and "libcublasLt.so.13" in text(libs) and values(libs)[-1] == 300 * MiB
   and "not seen by memtap (CUDA contexts" in text(libs),
   "libraries: each library's bytes, and 300 MiB memtap could not see", libs and text(libs))

# ---- a PyTorch snapshot: segments, an OOM, a hostile frame name ----
SEG = 0x7f0000000000
EVIL = [{"filename": "</script><script>document.body.dataset.pwned='yes'</script>", "line": 1, "name": "</script>"}]
trace_entries = [{"action": "segment_alloc", "addr": SEG, "size": 20 * MiB, "stream": 0, "time_us": 1, "frames": EVIL}]
for i in range(8):
    trace_entries.append({"action": "alloc", "addr": SEG + i * 2 * MiB, "size": 2 * MiB - 1000, "stream": 0,
                          "time_us": 2 + i, "frames": EVIL, "category": "ACTIVATION" if i % 2 else "PARAMETER"})
for i in range(0, 8, 2):
    trace_entries.append({"action": "free_completed", "addr": SEG + i * 2 * MiB, "size": 2 * MiB - 1000, "stream": 0,
                          "time_us": 20 + i, "frames": EVIL})
trace_entries.append({"action": "oom", "device_free": 1 * MiB, "size": 6 * MiB, "stream": 0, "time_us": 40,
                      "frames": EVIL})
snap = os.path.join(TMP, "snapshot.pickle")
with open(snap, "wb") as f:
    pickle.dump({"segments": [], "device_traces": [trace_entries]}, f, protocol=4)
rep, source, dom, body = render("snapshot", snap)
self_contained("snapshot", source)
common("snapshot", rep, dom, body)
ok("pwned" not in body and "<\\/script>" in source, "snapshot: a frame name cannot close the page's script", body)
words = text(dom.by_id.get("device-0", {"text": "", "children": []}))
ok(rep["devices"][0]["caching_allocator_at_peak"] and "reserve at the peak" in words and "cuMemGetInfo" not in words
   and "driver" not in words, "snapshot: the reserve's split is explained; the driver's figure, which a snapshot "
   "has not, is not", words[:1500])
fr = rep["devices"][0]["fragmentation"]
table = dom.by_id.get("fragmentation-table-0")
keys = ["segments", "reserved_bytes", "allocated_bytes", "internal_bytes", "external_bytes", "largest_free_block_bytes"]
ok(table and values(table) == [fr["at_peak"][k] for k in keys] + [fr["at_exit"][k] for k in keys],
   "snapshot: fragmentation at the peak and at the end as in --json", table and values(table))
segmap = dom.by_id.get("segments-0")
ok(segmap and len(find(segmap, "rect", "segment")) == len(fr["segments_at_peak"]) and
   len(find(segmap, "rect", "block")) == sum(s["blocks"] for s in fr["segments_at_peak"]) == 8,
   "snapshot: the segment map draws each segment and each live block at the peak")
fchart = dom.by_id.get("fragmentation-0")
ok(fchart and len(find(fchart, "path", "line")) == 3, "snapshot: reserved, allocated and requested over time")
ok(rep["oom"] and rep["oom"][0]["fits_without_fragmentation"] and
   "would have fit without fragmentation" in text(dom.by_id.get("oom", {"text": "", "children": []})),
   "snapshot: the OOM's verdict shown")
cause = dom.by_id.get("diagnosis", {"text": "", "children": []})
ok(rep["diagnosis"] and rep["diagnosis"][0]["cause"] == "fragmentation" and "Cause: fragmentation" in text(cause)
   and {m["kind"] for m in rep["diagnosis"][0]["remedies"]} == {"allocator"},
   "snapshot: what to change: fragmentation, allocator settings replayed (in one 20 MiB page of an expandable "
   "segment the blocks cannot move either)", rep["diagnosis"])

# ---- 450 segments: the 400 with the most free space drawn, the rest said ----
segs = [{"device": 0, "address": SEG + i * 4 * MiB, "total_size": 4 * MiB, "stream": 0, "segment_type": "large",
         "blocks": [{"address": SEG + i * 4 * MiB, "size": (i % 4 + 1) * MiB, "requested_size": (i % 4 + 1) * MiB,
                     "state": "active_allocated", "frames": []}] +
                   ([{"address": SEG + i * 4 * MiB + (i % 4 + 1) * MiB, "size": (3 - i % 4) * MiB,
                      "requested_size": 0, "state": "inactive", "frames": []}] if i % 4 != 3 else [])}
        for i in range(450)]
many = os.path.join(TMP, "many.pickle")
with open(many, "wb") as f:
    pickle.dump({"segments": segs, "device_traces": [[]]}, f, protocol=4)
rep, source, dom, body = render("many", many)
segmap, note = dom.by_id.get("segments-0"), dom.by_id.get("segments-shown-0")
drawn = [int(r["attrs"]["data-allocated"]) for r in find(segmap, "rect", "segment")] if segmap else []
ok(len(drawn) == 400 and drawn == sorted(drawn) and drawn[0] == MiB and note and
   note["attrs"].get("data-total") == "450" and "50 left out hold 0 B free" in text(note),
   "450 segments: the 400 with the most free space drawn, the 50 left out said", (len(drawn), note and text(note)))

# ---- a training step's stacks: as the text reads them, every frame a click away ----
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/analyze"))
from snapshots import (block, expandable_oom, forward_stack, later_step, many_places, segment, training,  # noqa: E402
                       warm_step)


def snapshot_page(name, snap):
    """A snapshot of tests/analyze/snapshots.py, its page drawn and checked against --json."""
    path = os.path.join(TMP, name + ".pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    rep, source, dom, body = render(name, path)
    common(name, rep, dom, body)
    return rep, dom


rep, dom = snapshot_page("training", training())
top = dom.by_id.get("top-0")
views = [text(d) for d in find(top, "div", "view")] if top else []
alls = find(top, "details", "all-frames") if top else []
ok(views and views[0].startswith("from 2 stacks; the biggest:\n_init_group (adamw.py:160)\nstep (adamw.py:220)") and
   values(top)[0] == 320 * MiB and
   "torch::unwind" not in "".join(views) and alls and "torch::unwind::unwind()" in text(alls[0]) and
   any("allocated before recording started" in text(td) for td in find(top, "td", "frames")),
   "training: stacks read and grouped as the text report groups them (320 MiB from 2 stacks at train_step), "
   "every frame on a click", views[:2])

# ---- blocks made before recording: a row per what they were read as, in the text's words ----
rep, dom = snapshot_page("warm", warm_step())
top = dom.by_id.get("top-0")
cells = [text(td) for td in find(top, "td", "frames")] if top else []
ok(any("allocated before recording started, read as optimizer state" in c for c in cells) and
   any("the model's parameters and buffers, typically" in c for c in cells),
   "warm step: blocks made before recording apart by what they were read as, as the text says", cells)
# blocks the trace did not see made but whose frames were recorded: recording was on, the
# ring buffer lost their entries (they read 'made before recording started')
rep, dom = snapshot_page("later", later_step())
top = dom.by_id.get("top-0")
cells = [text(td) for td in find(top, "td", "frames")] if top else []
ok(any(c.startswith("made before the trace's first entry:") and "_init_group (adamw.py:160)" in c for c in cells) and
   not any("made before recording started" in c for c in cells),
   "later step: a framed block the trace did not see made is said to be made before its first entry", cells)

# ---- a place whose small stacks are not among the biggest: its row sums every stack, as the text's ----
rep, dom = snapshot_page("places", many_places())
top = dom.by_id.get("top-0")
row = values(top)[:2] if top else []
text_row = next((line for line in subprocess.run([MEMTAP, "report", os.path.join(TMP, "places.pickle")],
                                                capture_output=True, text=True).stdout.splitlines()
                 if line.endswith(": forward (model.py:30)")), "")
ok(row == [103 * MiB, 4] and text_row == "  103.00 MiB in 4 allocations from 4 stacks: forward (model.py:30)" and
   [text(d) for d in find(top, "div", "view")][0].startswith("from 4 stacks; the biggest:"),
   "many places: the biggest row holds all 4 of its stacks (3 below the 10 biggest stacks), as the text's row",
   (row, text_row))
extra = rep["top_at_peak"][10:]
ok(len(extra) == 3 and all(g["frames"] == [] and g["view"] == [] and g["where"] == "forward (model.py:30)"
                           for g in extra) and rep["top_at_peak"][0]["frames"],
   "many places: --json's 3 stacks past the 10 biggest come without frames, their row's biggest with them",
   [(g["bytes"], len(g["frames"])) for g in rep["top_at_peak"]])

# ---- an OOM that was not fragmentation's: the verdict in the text's words ----
rep, dom = snapshot_page("expandable", expandable_oom())
verdict = [text(td) for td in find(dom.by_id.get("oom"), "td")] if dom.by_id.get("oom") else []
ok("not fragmentation: 39.00 MiB of 62.00 MiB reserved was allocated, 23.00 MiB free in segments" in verdict,
   "expandable OOM: the page's verdict says why, as the text does", verdict)


# ---- one time axis per device: a device whose last entry came before another device's (a
# public 3-GPU job: cuda:0's composition ended at 2.056 s, its fragmentation at 2.735 s) ----
def last_tick(chart):
    axis = find(chart, "g", "axis") if chart else []
    return [text(t) for t in find(axis[0], "text")][-1] if axis else None


ends = [(last_tick(dom.by_id.get("composition-%d" % d)), last_tick(dom.by_id.get("fragmentation-%d" % d)))
        for d in (0, 1)]
ok(all(c and c == f for c, f in ends) and ends[0] == ends[1],
   "two devices: each composition chart runs to the trace's end, as its fragmentation chart", ends)

# ---- a snapshot without time_us: entries' places, not a made-up microsecond axis ----
rep, dom = snapshot_page("untimed", training(timed=False))
summary, chart = dom.by_id.get("summary-0"), dom.by_id.get("composition-0")
ticks = [text(t) for t in find(chart, "text")] if chart else []
ok(summary and "entry %d" % rep["devices"][0]["peak_time_ns"] in text(summary) and "\u00b5s" not in text(summary)
   and any(t.startswith("entry ") for t in ticks) and not any(t.endswith("s") for t in ticks),
   "untimed: the peak and the time axis in entries, as the text says", (summary and text(summary), ticks))

# ---- a snapshot with no trace (one moment): what it held drawn across the chart, one time label ----
S = 0x7f6000000000
blocks = [block(S + k * 32 * MiB, 32 * MiB, 32 * MiB, "active_allocated", []) for k in range(4)]
blocks += [block(S + 128 * MiB + k * 16 * MiB, 16 * MiB, 16 * MiB, "active_allocated", forward_stack(k, "mm"))
           for k in range(3)]
rep, dom = snapshot_page("one-moment", [segment(0, S, blocks, expandable=False)])
chart = dom.by_id.get("composition-0")
areas = find(chart, "path", "area") if chart else []
# each area's height at the chart's left edge (a moment drawn at the right edge alone has none)
left = []
for a in areas:
    pts = [(float(x), float(y)) for x, y in re.findall(r"[ML]([\d.]+),([\d.]+)", a["attrs"]["d"])]
    edge = min(x for x, _ in pts)
    left.append(max(y for x, y in pts if x == edge) - min(y for x, y in pts if x == edge))
labels = [text(t) for t in find(chart, "text")] if chart else []
ok(rep["times"] == "none" and len(areas) == 2 and all(h > 10 for h in left) and
   labels.count("the snapshot") == 1, "one moment: its parameters and activations drawn across the chart, "
   "one time label", (left, labels))

# ---- a trace of one entry (a public 15 GiB snapshot held one free_completed, the rest made
# before recording; state-mode recording writes one entry per device): one moment too, not a
# time axis of five "0.0 µs" labels with the memory drawn from its middle ----
one = [{"action": "alloc", "addr": S + 128 * MiB, "size": 16 * MiB, "stream": 0, "time_us": 1748730219000000,
        "frames": forward_stack(0, "mm")}]
rep, dom = snapshot_page("one-entry", {"segments": [segment(0, S, blocks, expandable=False)], "device_traces": [one]})
chart = dom.by_id.get("composition-0")
labels = [text(t) for t in find(chart, "text")] if chart else []
summary = dom.by_id.get("summary-0")
txt = subprocess.run([MEMTAP, "report", os.path.join(TMP, "one-entry.pickle")], capture_output=True, text=True).stdout
ok(rep["times"] == "none" and labels.count("the snapshot") == 1 and not any("\u00b5s" in t for t in labels) and
   summary and "the snapshot" in text(summary) and "peak 176.00 MiB allocated at the snapshot" in txt and
   "taken without memory history" not in txt, "one entry: one moment, as a snapshot without a trace, its history kept",
   (rep["times"], labels, txt[:300]))

# ...and without time_us (PyTorch 2.1's FlexGen snapshots: one free_completed): entry 0 and
# entry 1 were a time axis of two places
del one[0]["time_us"]
rep, dom = snapshot_page("one-entry-untimed",
                         {"segments": [segment(0, S, blocks, expandable=False)], "device_traces": [one]})
chart = dom.by_id.get("composition-0")
labels = [text(t) for t in find(chart, "text")] if chart else []
txt = subprocess.run([MEMTAP, "report", os.path.join(TMP, "one-entry-untimed.pickle")], capture_output=True,
                     text=True).stdout
ok(rep["times"] == "none" and labels.count("the snapshot") == 1 and not any(t.startswith("entry") for t in labels) and
   "at the snapshot" in txt and "no times and one entry" in txt, "one entry without time_us: one moment too",
   (rep["times"], labels, txt[:300]))

# ---- a peak shorter than a pixel, after a long flat stretch (a public snapshot of a compiled
# cross-entropy: 250 MiB for 1.46 s, then 1000 MiB for 0.1 ms at the end): both charts reach it ----
S, BIG = 0x7f4000000000, 250 * MiB
t0 = 1748730219000000
spike, segs = [], []
for k, (start, end) in enumerate([(0, None), (1461811, 1495143), (1494188, 1495128), (1495037, None)]):
    a = S + k * 512 * MiB
    spike += [{"action": "segment_alloc", "addr": a, "size": BIG, "stream": 0, "time_us": t0 + start, "frames": []},
              {"action": "alloc", "addr": a, "size": BIG, "stream": 0, "time_us": t0 + start + 1,
               "frames": forward_stack(k, "mm")}]
    if end:
        spike += [{"action": act, "addr": a, "size": BIG, "stream": 0, "time_us": t0 + end, "frames": []}
                  for act in ("free_requested", "free_completed")]
    segs.append(segment(0, a, [block(a, BIG, BIG, "active_allocated" if end is None else "inactive",
                                     forward_stack(k, "mm") if end is None else [])], expandable=False))
spike.sort(key=lambda e: e["time_us"])
rep, dom = snapshot_page("spike", {"segments": segs, "device_traces": [spike]})


def chart_points(d):
    return [(float(x), float(y)) for x, y in re.findall(r"[ML]([\d.]+),([\d.]+)", d)]


def axis_top(chart):
    """y of the chart's highest value (the vertical axis line's top) and of 0"""
    line = find(chart, "line")[1]["attrs"]
    return float(line["y2"]), float(line["y1"])


chart = dom.by_id.get("composition-0")
areas = find(chart, "path", "area") if chart else []
pts = [p for a in areas for p in chart_points(a["attrs"]["d"])]
top, zero = axis_top(chart) if chart else (0, 0)
high = min((y for _, y in pts), default=zero)
wide = [x for x, y in pts if abs(y - high) < 0.01]
ok(rep["devices"][0]["peak_allocated_bytes"] == 4 * BIG and abs(high - top) < 0.5 and max(wide) - min(wide) >= 1,
   "spike: the stacked areas reach the 1000 MiB peak, at least a pixel wide, though it lasted 0.1 ms of 1.5 s",
   (high, top, wide))
fchart = dom.by_id.get("fragmentation-0")
lines = {p["attrs"]["data-key"]: chart_points(p["attrs"]["d"]) for p in find(fchart, "path", "line")} if fchart else {}
top, zero = axis_top(fchart) if fchart else (0, 0)
alloc = lines.get("allocated_bytes", [])
ok(alloc and abs(min(y for _, y in alloc) - top) < 0.5 and
   all(a[0] == b[0] or a[1] == b[1] for pts in lines.values() for a, b in zip(pts, pts[1:])),
   "spike: reserved, allocated and requested over time drawn as steps (no slope where nothing changed), "
   "allocated reaching the peak's 1000 MiB", (min((y for _, y in alloc), default=None), top, alloc[:8]))

# ---- errors: one line, non-zero ----
# ---- the job's text as UTF-8 whatever it is: a name cut mid-character, a file name's stray byte ----
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/hostile"))
from mtrace import PYFRAME, Trace  # noqa: E402
odd = os.path.join(TMP, "odd.trace")
name = "f" + "\u20ac" * 1500  # 4,501 bytes: every bound on a line cuts it, each at some byte
with open(odd, "wb") as f:
    f.write(Trace().strings([(1, (name + "\tbad").encode() + b"\xff.py\t7")]).stacks([(1, [PYFRAME | 1])])
            .events([dict(kind="alloc", time=1000, device=0, addr=1 << 40, size=MiB, stack=1)]).end(written=1).bytes())
outs = [subprocess.run([MEMTAP, "report", "--json", odd], capture_output=True).stdout]
subprocess.run([MEMTAP, "report", "--html", os.path.join(TMP, "odd.html"), odd], capture_output=True)
outs.append(open(os.path.join(TMP, "odd.html"), "rb").read())
bad = []
for out in outs:
    try:
        out.decode()
    except UnicodeDecodeError as e:
        bad.append(out[max(0, e.start - 40):e.start + 10])
frames = json.loads(outs[0])["top_at_peak"][0]["frames"] if not bad else []
ok(not bad and frames and frames[0]["function"].startswith("f\u20ac\u20ac") and frames[0]["file"] == "bad\ufffd.py",
   "--json and the page are UTF-8, as JSON must be: a long name cut at a character, a stray byte as U+FFFD",
   (bad, frames[:1]))
text = subprocess.run([MEMTAP, "report", odd], capture_output=True).stdout
try:
    cut = [len(line) for line in text.decode().splitlines() if "\u20ac" * 1000 in line]
except UnicodeDecodeError as e:
    cut = text[max(0, e.start - 20):e.start + 10]
ok(isinstance(cut, list) and len(cut) >= 2, "the text cuts a name too long for its line at a character", cut)

# ---- the charts' marks: memtap's own actions, each snapshot and "memtap.*" mark, the first 200 ----
acts = os.path.join(TMP, "actions.trace")
marks = [dict(kind="nvtx_mark", time=2000 + 10 * k, aux=(2, 3, 4)[k % 3]) for k in range(300)]
with open(acts, "wb") as f:
    f.write(Trace().strings([(1, "f\tjob.py\t3"), (2, "memtap.cap 0 8 GiB"), (3, "the job's own mark"),
                             (4, "/tmp/at-oom.pickle")])
            .stacks([(1, [PYFRAME | 1])])
            .events([dict(kind="alloc", time=1000, device=0, addr=1 << 40, size=MiB, stack=1)] +
                    [dict(m, kind="snapshot") if m["aux"] == 4 else m for m in marks]).end(written=301).bytes())
p = subprocess.run([MEMTAP, "report", "--html", os.path.join(TMP, "actions.html"), acts], capture_output=True,
                   text=True)
source = open(os.path.join(TMP, "actions.html")).read() if p.returncode == 0 else ""
got = json.loads(source.split("const SERIES = ")[1].split(";\n</script>")[0])["actions"] if source else p.stderr
want = [[1000 + 10 * k, "memtap.cap 0 8 GiB" if k % 3 == 0 else "snapshot /tmp/at-oom.pickle"]
        for k in range(300) if k % 3 != 1][:200]
ok(got == want, "the page's actions: memtap's marks and the snapshots, not the job's marks, the first 200 in order",
   got[:4] if isinstance(got, list) else got)

# ---- the page's allocations, each with when it was freed: 3,000 of sizes in no order, each
# freed 100 allocations (two of the page's 50 spans) later, the last 100 never; the page
# keeps at most 1,500 (its heaps fill, and picks freed while picked are put out again) ----
churn = os.path.join(TMP, "churn.trace")
sizes = [((k * 7919) % 3000 + 1) << 12 for k in range(3000)]
events = []
for k, size in enumerate(sizes):
    events.append(dict(kind="alloc", time=1000 + 10 * k, device=0, addr=(1 << 40) + (k << 24), size=size, stack=1))
    if k >= 100:
        events.append(dict(kind="free", time=1000 + 10 * k + 1, device=0, addr=(1 << 40) + ((k - 100) << 24)))
with open(churn, "wb") as f:
    f.write(Trace().strings([(1, "f\tjob.py\t3")]).stacks([(1, [PYFRAME | 1])]).events(events).end().bytes())
p = subprocess.run([MEMTAP, "report", "--html", os.path.join(TMP, "churn.html"), churn], capture_output=True, text=True)
source = open(os.path.join(TMP, "churn.html")).read() if p.returncode == 0 else ""
drawn = json.loads(source.split("const SERIES = ")[1].split(";\n</script>")[0])["allocations"]["0"] if source else []
wrong = [a for a in drawn if a[1] != (-1 if a[0] // 10 >= 2900 else a[0] + 1001)]
ok(len(drawn) > 750 and not wrong, "the page's %d allocations each freed when the trace says, or live" % len(drawn),
   wrong[:4])

p = subprocess.run([MEMTAP, "report", "--html", os.path.join(TMP, "no/such/dir/x.html"), trace], capture_output=True,
                   text=True)
ok(p.returncode == 1 and p.stderr.count("\n") == 1 and "cannot write" in p.stderr, "an unwritable page: one line",
   p.stderr)
done()
