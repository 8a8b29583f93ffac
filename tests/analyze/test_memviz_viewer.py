"""The memviz export in headless Chromium (Debian's chromium package) against what PyTorch's
viewer does with a snapshot (tests/analyze/memviz_viewer.js, written from a reading of
MemoryViz.js): it must open (the viewer's unpickler, annotate_snapshot, every step of the
Allocator State History), and each view must show memtap's numbers: reserved after every
event never above what was mapped, equal to memtap's reserved at the peak there and to
the segments at the end; allocated as memtap's peak. Inputs: an imported snapshot with
expandable segments (pages mapped before the trace, maps, an unmap on the OOM's retry),
a recorded simtrain run, a snapshot whose every allocation has a category, one with
blocks whose free waits on other streams (active_pending_free) and snapshot entries, and
the oldest layout (a list of segments). A
snapshot whose entries have categories but none 'unknown' must not open (the viewer's
bug), so the check is known to see a blank page."""
import base64
import json
import os
import pickle
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("memviz-viewer")
MiB = 1 << 20
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

if not CHROMIUM:
    print("1..0 # SKIP chromium is not installed (./quickstart check installs it)")
    sys.exit(0)

sys.path.insert(0, os.path.join(S, "tests/analyze"))
from snapshots import expandable_oom, frame, legacy_list, pending_free  # noqa: E402


def page(files):
    """Runs the viewer's logic on each file in Chromium: {name: result or {"error": text}}."""
    script = open(os.path.join(S, "tests/analyze/memviz_viewer.js")).read()
    data = {name: base64.b64encode(open(path, "rb").read()).decode() for name, path in files.items()}
    html = ("<!doctype html><html><body><pre id=result></pre><script>\n%s\n</script><script>\n"
            "const files = %s, out = {};\n"
            "for (const [name, b64] of Object.entries(files)) {\n"
            "  const bin = atob(b64), u8 = new Uint8Array(bin.length);\n"
            "  for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);\n"
            "  try { out[name] = viewer(u8); } catch (e) { out[name] = {error: String(e)}; }\n"
            "}\n"
            "document.getElementById('result').textContent = JSON.stringify(out);\n"
            "</script></body></html>\n") % (script, json.dumps(data))
    path = os.path.join(TMP, "viewer.html")
    open(path, "w").write(html)
    c = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--user-data-dir=" + os.path.join(TMP, "profile"), "--dump-dom", "file://" + path],
                       capture_output=True, text=True, timeout=180)
    start = c.stdout.find("<pre id=\"result\">")
    end = c.stdout.find("</pre>", start)
    body = c.stdout[start + len("<pre id=\"result\">"):end] if start >= 0 else ""
    body = body.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    try:
        return json.loads(body)
    except ValueError:
        return {"page": {"error": "no result: " + c.stderr[-500:]}}


def export(name, trace):
    out = os.path.join(TMP, name + ".viz.pickle")
    p = subprocess.run([MEMTAP, "export", "--format=memviz", "-o", out, trace], capture_output=True, text=True)
    ok(p.returncode == 0, "%s: exported" % name, p.stderr)
    rep = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)
    return out, rep


# ---- inputs ----
exp = os.path.join(TMP, "expandable.pickle")
with open(exp, "wb") as f:
    pickle.dump(expandable_oom(), f, protocol=4)
trace = os.path.join(TMP, "train.trace")
env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "tiny", "--iters", "3"], env=env,
               check=True, stdout=subprocess.DEVNULL)
F = [frame("forward", "/home/me/model.py", 20)]
tagged = {"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 0x7f0000000000, "size": 4 * MiB, "stream": 0, "frames": F, "category": "parameter"},
    {"action": "alloc", "addr": 0x7f0000400000, "size": 2 * MiB, "stream": 0, "frames": F, "category": "activation"},
    {"action": "free_requested", "addr": 0x7f0000400000, "size": 2 * MiB, "stream": 0, "frames": F,
     "category": "activation"},
    {"action": "free_completed", "addr": 0x7f0000400000, "size": 2 * MiB, "stream": 0, "frames": F,
     "category": "activation"}]]}
tagged_path = os.path.join(TMP, "tagged.pickle")
with open(tagged_path, "wb") as f:
    pickle.dump(tagged, f, protocol=4)

more = {}
for name, snap in (("pending", pending_free()), ("legacy", legacy_list())):
    more[name] = os.path.join(TMP, name + ".pickle")
    with open(more[name], "wb") as f:
        pickle.dump(snap, f, protocol=4)

files, reports = {}, {}
for name, path in (("expandable", exp), ("train", trace), ("tagged", tagged_path), ("pending", more["pending"]),
                   ("legacy", more["legacy"])):
    files[name], reports[name] = export(name, path)
files["tagged-original"] = tagged_path  # categories, none 'unknown': the viewer's blank page
got = page(files)

ok("error" in got.get("tagged-original", {}) and "unknown" in got["tagged-original"]["error"],
   "the check sees the viewer's blank page: categories without 'unknown' throw", got.get("tagged-original"))
for name in ("expandable", "train", "tagged", "pending", "legacy"):
    r = got.get(name, {})
    ok("error" not in r and r.get("devices"), "%s: the viewer opens memtap's export (unpickled, annotated, every "
       "step of the state history drawn)" % name, r.get("error"))
    if name != "legacy":
        ok("unknown" in r.get("categories", []), "%s: some entry says 'unknown'" % name, r.get("categories"))

# expandable segments: each state as memtap counts it
r, rep = got.get("expandable", {}), reports["expandable"]
dev = (r.get("devices") or [{}])[0]
d0 = rep["devices"][0]
hist = dev.get("history", [])
reserved = [h[0] for h in hist]
ok(hist and max(reserved) == d0["composition_at_peak"]["reserved_unallocated"] + d0["peak_allocated_bytes"]
   and reserved[-1] == d0["fragmentation"]["at_exit"]["reserved_bytes"] == 62 * MiB,
   "expandable: the state history's reserved peaks where memtap's does and ends at the final segments", reserved)
ok(dev.get("start") == [40 * MiB, 40 * MiB], "expandable: before the trace, the pages mapped then and the "
   "parameter's blocks", dev.get("start"))
ok(dev.get("active", {}).get("max") == d0["peak_allocated_bytes"], "expandable: the active memory timeline peaks at "
   "memtap's peak", (dev.get("active"), d0["peak_allocated_bytes"]))
ok((r.get("allocator_settings") or {}).get("expandable_segments") is True and
   r["allocator_settings"].get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True",
   "expandable: allocator_settings as the snapshot had them", r.get("allocator_settings"))
# the recorded run: the viewer's peak is memtap's
r, rep = got.get("train", {}), reports["train"]
dev = (r.get("devices") or [{}])[0]
ok(dev.get("active", {}).get("max") == rep["devices"][0]["peak_allocated_bytes"],
   "train: the active memory timeline peaks at memtap's peak", (dev.get("active"), rep["devices"][0]))
# pending frees: blocks drawn (pending) to the end, where the state history ends at the segment
r, rep = got.get("pending", {}), reports["pending"]
dev = (r.get("devices") or [{}])[0]
ok(dev.get("active", {}).get("max") == rep["devices"][0]["peak_allocated_bytes"] == 12 * MiB - 100 and
   (dev.get("history") or [None])[-1] == [20 * MiB, 12 * MiB - 100],
   "pending: the active memory timeline peaks at memtap's peak; the state history ends with the pending blocks",
   (dev.get("active"), (dev.get("history") or [None])[-1]))
# the oldest layout: no entries, each device's segment as it was
r = got.get("legacy", {})
ok([(d["device"], d["entries"], d["start"]) for d in r.get("devices", [])] ==
   [(0, 0, [20 * MiB, 11 * MiB - 100]), (1, 0, [2 * MiB, 4])],
   "legacy: no entries; each device's segment and blocks as the list had them", r.get("devices"))
done()
