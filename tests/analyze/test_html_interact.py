"""The HTML report's interactions in headless Chromium, driven as a user would (tests/cdp.py:
the mouse and keys through the DevTools protocol): hovering an allocation shows its size,
lifetime and stack, a click keeps it, dragging zooms, Esc zooms out, the arrow keys step,
and the OOM and the policy's cap are marked where they are. The input is a trace built
byte by byte (tests/hostile/mtrace.py), so every allocation's time, size and stack is known
here: parameters, then three iterations whose activations come through one helper from
two callers, 2,000 small allocations (more than the page shows), and an OOM under a cap."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/hostile"))
from cdp import Browser  # noqa: E402
from mtrace import PYFRAME, Trace  # noqa: E402
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
TMP = scratch("interact")
MiB, GiB, MS = 1 << 20, 1 << 30, 1000000
if not CHROMIUM:
    print("1..0 # SKIP chromium is not installed (./quickstart check installs it)")
    sys.exit(0)

# ---- the trace ----
frames = ["load_model\ttrain.py\t10", "main\ttrain.py\t40", "tensor\tmodel.py\t5", "forward\tmodel.py\t20",
          "main\ttrain.py\t42", "attention\tmodel.py\t30", "scratch\tmodel.py\t50"]
py = {f: PYFRAME | (i + 1) for i, f in enumerate(frames)}
stacks = [(1, [py[frames[0]], py[frames[1]]]),                        # parameters
          (2, [py[frames[2]], py[frames[3]], py[frames[4]]]),         # tensor <- forward
          (3, [py[frames[2]], py[frames[5]], py[frames[3]], py[frames[4]]]),  # tensor <- attention <- forward
          (4, [py[frames[6]], py[frames[4]]])]                        # small ones
T0, CAP = 1000 + MS, 10 * GiB
# what the cap and oom_snapshot policies note, and the job's own NVTX mark (not memtap's doing)
CAP_NOTE, SNAPSHOT = "memtap.cap 0 10737418240 0.625", "/tmp/run/oom.trace"
frames += [CAP_NOTE, SNAPSHOT, "warmup done"]
events = [dict(kind="thread", time=T0, aux=4242),
          dict(kind="device", time=T0 + 1, device=0, size=16 * GiB, aux=1, aux2=CAP),
          dict(kind="nvtx_mark", time=T0 + 2, aux=len(frames) - 2), dict(kind="nvtx_mark", time=T0 + 3, aux=len(frames))]
addr, allocs = 0x7f0000000000, []  # allocs: (made, freed or None, size, stack)


def alloc(t, size, stack):
    global addr
    events.append(dict(kind="alloc", time=t, device=0, addr=addr, size=size, stack=stack))
    allocs.append([t, None, size, stack, addr])
    addr += size + 2 * MiB
    return allocs[-1]


def free(t, a):
    events.append(dict(kind="free", time=t, device=0, addr=a[4]))
    a[1] = t


for i in range(4):
    alloc(T0 + MS + i, GiB, 1)
for k in range(2000):  # small ones, each freed at once
    free(T0 + 2 * MS + 2 * k + 1, alloc(T0 + 2 * MS + 2 * k, 4096, 4))
t = T0 + 10 * MS
for it in range(3):
    if it == 2:  # too small to be among the biggest, but the biggest of its part of the run
        free(t + 20000, alloc(t + 10000, 1024, 4))
    acts = [alloc(t + j * 100000, 512 * MiB, 2) for j in range(5)]
    big = alloc(t + 600000, 2 * GiB, 3)
    if it == 2:  # the last iteration fails: 5 x 512 MiB + 2 GiB + 4 GiB in use, 3 GiB more asked
        events.append(dict(kind="alloc_failed", time=t + 700000, device=0, size=3 * GiB, stack=3, error=2,
                           aux=CAP - 17 * GiB // 2, aux2=CAP))
        events.append(dict(kind="snapshot", time=t + 710000, aux=len(frames) - 1))
        break
    free(t + 2 * MS, big)
    for j, a in enumerate(acts):
        free(t + 2 * MS + 10 + j, a)
    t += 3 * MS
trace = os.path.join(TMP, "interact.trace")
with open(trace, "wb") as f:
    f.write(Trace().strings([(i + 1, s) for i, s in enumerate(frames)]).stacks(stacks).events(events)
            .end(written=len(events)).bytes())
page = os.path.join(TMP, "interact.html")
p = subprocess.run([MEMTAP, "report", "--html", page, trace], capture_output=True, text=True)
ok(p.returncode == 0, "the page is written", p.stderr)

browser = Browser(CHROMIUM, os.path.join(TMP, "profile"))
try:
    browser.open(page)
    ev = browser.eval

    def where(selector):
        """The element's box in the window, scrolled into view."""
        return json.loads(ev("(() => { const e = document.querySelector(%s); e.scrollIntoView({block: 'center'}); "
                             "return JSON.stringify(e.getBoundingClientRect()); })()" % json.dumps(selector)))
    ok(ev("document.body.dataset.rendered") == "yes", "it draws without a script error", ev("document.body.dataset.errors"))

    # ---- what the page holds: the 750 biggest allocations and the 15 biggest made in each
    # fiftieth of the run, each with its own times ----
    shown = ev("SERIES.allocations[0].map((a) => [a[0], a[1], a[2]])")
    start = 1000  # the trace's start (its info's start_monotonic_ns): the page's times count from it
    span = events[-1]["time"] - start + 1
    key = lambda a: (-a[2], a[0])  # noqa: E731
    want = sorted(allocs, key=key)[:750]
    for s in range(50):
        want += sorted((a for a in allocs if (a[0] - start) * 50 // span == s), key=key)[:15]
    want = {(a[0] - start, a[1] - start if a[1] else -1, a[2]) for a in want}
    ok(len(allocs) == 2023 and sorted(map(tuple, shown)) == sorted(want) and (t + 10000 - start, t + 20000 - start, 1024)
       in want, "the 750 biggest allocations of 2,023 and the biggest of each part of the run, each made and freed when "
       "the trace says", len(shown))
    ok(ev("document.getElementById('allocations-shown-0').textContent").startswith(
        "%d allocations of the 2023 in the trace (the biggest, and the biggest made in each fiftieth of the run)"
        % len(want)), "and the page says how many it shows of how many",
        ev("document.getElementById('allocations-shown-0').textContent"))

    # ---- the OOM and the cap where they are ----
    geo = ev("""(() => { const b = document.getElementById('timeline-0'), o = document.querySelector('#composition-0 line.oom'),
        c = document.querySelector('#composition-0 line.cap'), s = document.getElementById('composition-0');
        return {x0: +b.dataset.x0, x1: +b.dataset.x1, ox: +o.getAttribute('x1'), ot: +o.dataset.timeNs,
                cap: +c.dataset.bytes, cy: +c.getAttribute('y1'), h: +s.getAttribute('height')}; })()""")
    oom_t = t + 700000 - start
    ok(geo["ot"] == oom_t and abs(geo["ox"] - (70 + (oom_t - geo["x0"]) / (geo["x1"] - geo["x0"]) * 810)) < 0.5,
       "the OOM is marked at its time on the time axis", geo)
    first = T0 + 2 - start  # the cap's note, before the first allocation
    ok(geo["x0"] == max(0, first - (geo["x1"] - first) / 50),
       "the time axis begins where the run does (a fiftieth of it before), not at the trace's start", geo)
    ymax = 10 * GiB  # the cap is above every moment
    ok(geo["cap"] == CAP and abs(geo["cy"] - (geo["h"] - 24 - CAP / ymax * (geo["h"] - 34))) < 0.5,
       "the policy's 10 GiB cap is drawn at 10 GiB, not the device's 16", geo)

    marks = ev("[...document.querySelectorAll('#composition-0 path.action')].map((a) => [+a.dataset.timeNs, "
               "a.dataset.text])")
    ok(marks == [[T0 + 2 - start, CAP_NOTE], [oom_t + 10000, "snapshot " + SNAPSHOT]],
       "what the policies did marked where it happened: the cap, the snapshot after the OOM", marks)

    # ---- hover: the second iteration's 2 GiB block, made through the helper from attention() ----
    second = [a for a in allocs if a[2] == 2 * GiB][1]
    index = ev("SERIES.allocations[0].findIndex((a) => a[0] === %d && a[2] === %d)" % (second[0] - start, 2 * GiB))
    box = where("#allocations-0 rect.alloc[data-index='%d']" % index)
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    browser.mouse("mouseMoved", cx, cy)
    browser.frame()
    tip = ev("document.getElementById('tip').hidden ? '' : document.getElementById('tip').textContent")
    lines = tip.split("\n")
    ok(lines[:2] == ["2.00 GiB activations", "made at 14.600 ms, freed at 16.000 ms (lived 1.400 ms)"] and
       lines[2:5] == ["tensor (model.py:5)", "attention (model.py:30)", "forward (model.py:20)"],
       "hovering an allocation shows its size, lifetime and whole stack, through the helper to its caller", tip)
    browser.mouse("mouseMoved", 5, 5)
    browser.frame()
    ok(ev("document.getElementById('tip').hidden"), "and the tip goes when the mouse leaves")

    browser.mouse("mouseMoved", cx, cy)
    browser.mouse("mousePressed", cx, cy, 1)
    browser.mouse("mouseReleased", cx, cy, 1)
    browser.frame()
    detail = ev("document.getElementById('detail-0').textContent")
    ok(ev("document.getElementById('detail-0').dataset.index") == str(index) and "attention (model.py:30)" in detail
       and "lived 1.400 ms" in detail, "a click keeps it beside the chart", (index, detail))

    # ---- brushing zooms to the range, Esc zooms out ----
    comp = where("#composition-0")
    y = comp["y"] + comp["height"] / 2
    before = ev("document.querySelectorAll('#allocations-0 rect.alloc').length")
    a_px, b_px = 70 + 810 * 0.75, 70 + 810 * 0.9
    browser.drag(comp["x"] + a_px, y, comp["x"] + b_px)
    z = ev("[+document.getElementById('timeline-0').dataset.x0, +document.getElementById('timeline-0').dataset.x1]")
    span = geo["x1"] - geo["x0"]
    ok(abs(z[0] - (geo["x0"] + span * 0.75)) < span / 810 and abs(z[1] - (geo["x0"] + span * 0.9)) < span / 810,
       "dragging across the chart zooms to that range", (z, span))
    ticks = ev("[...document.querySelectorAll('#composition-0 text.tick')].map((t) => t.textContent)")
    after = ev("document.querySelectorAll('#allocations-0 rect.alloc').length")
    ok(len(ticks) == 5 and after < before, "the axis and the allocations follow the zoom", (ticks, before, after))
    ev("document.getElementById('composition-0').focus()")
    browser.key("Escape")
    z = ev("[+document.getElementById('timeline-0').dataset.x0, +document.getElementById('timeline-0').dataset.x1]")
    ok(z == [geo["x0"], geo["x1"]] and ev("document.activeElement.id") == "composition-0",
       "Esc zooms out again, the chart keeping the keyboard", z)

    # ---- the keyboard steps through the moments, and through the allocations ----
    points = ev("SERIES.timeline[0].map((p) => p[0])")
    browser.key("Home")
    browser.key("ArrowRight")
    r = ev("[document.getElementById('readout-0').dataset.index, document.getElementById('readout-0').textContent]")
    ok(r[0] == "1" and r[1].startswith("At ") and "allocated" in r[1],
       "the arrow keys step the cursor from one moment to the next and say what was in use", (r, points[:3]))
    browser.key("+")
    z = ev("[+document.getElementById('timeline-0').dataset.x0, +document.getElementById('timeline-0').dataset.x1]")
    ok(abs((z[1] - z[0]) - span / 2) < 2 and z[0] == geo["x0"], "+ zooms in twice, the range kept inside the run", z)
    browser.key("Escape")
    ev("document.getElementById('allocations-0').focus()")
    browser.key("Home")
    browser.key("ArrowRight")
    second_made = sorted(a[0] for a in allocs)[1]
    ok(ev("SERIES.allocations[0][+document.getElementById('detail-0').dataset.index][0]") == second_made - start,
       "on the allocations, the arrow keys go from one allocation to the next made")

    # ---- what was live at the OOM, by caller: the helper's allocations apart by who called it ----
    button = where("#callers-0 button[data-moment='1']")
    ok(ev("document.querySelector('#callers-0 button[data-moment=\"1\"]').textContent") ==
       "at the OOM at 17.700 ms (3.00 GiB asked)", "the caller tree offers the peak and the OOM",
       ev("document.getElementById('callers-0').textContent"))
    browser.mouse("mouseMoved", button["x"] + 5, button["y"] + 5)
    browser.mouse("mousePressed", button["x"] + 5, button["y"] + 5, 1)
    browser.mouse("mouseReleased", button["x"] + 5, button["y"] + 5, 1)
    browser.frame()
    calls = ev("[...document.querySelectorAll('#tree-0 g.call')].map((g) => [g.dataset.name, +g.dataset.bytes, "
               "+g.dataset.depth])")
    ok(sorted(map(tuple, calls)) == sorted([("all", 8.5 * GiB, 0), ("main (train.py:40)", 4 * GiB, 1),
                                           ("load_model (train.py:10)", 4 * GiB, 2), ("main (train.py:42)", 4.5 * GiB, 1),
                                           ("forward (model.py:20)", 4.5 * GiB, 2), ("tensor (model.py:5)", 2.5 * GiB, 3),
                                           ("attention (model.py:30)", 2 * GiB, 3), ("tensor (model.py:5)", 2 * GiB, 4)]),
       "at the OOM: each call with the bytes made under it, the helper once under each caller", calls)
    node = where("#tree-0 g.call[data-name='attention (model.py:30)'] rect")
    browser.mouse("mouseMoved", node["x"] + 3, node["y"] + 3)
    browser.frame()
    tip = ev("document.getElementById('tip').hidden ? '' : document.getElementById('tip').textContent")
    ok(tip == "attention (model.py:30)\n2.00 GiB, 23.5% of what was live, 1 allocation", "hovering a call says its bytes",
       tip)
    browser.mouse("mousePressed", node["x"] + 3, node["y"] + 3, 1)
    browser.mouse("mouseReleased", node["x"] + 3, node["y"] + 3, 1)
    browser.frame()
    width = ev("+document.querySelector('#tree-0 g.call[data-name=\"attention (model.py:30)\"] rect').getAttribute('width')")
    ok(ev("document.getElementById('tree-0').dataset.focus") == "attention (model.py:30)" and width == 899,
       "a click zooms into the call", width)
    ev("document.getElementById('tree-0-svg').focus()")
    browser.key("Escape")
    ok(ev("document.getElementById('tree-0').dataset.focus") == "all", "Esc zooms out")
    for k in ("ArrowUp", "ArrowUp", "ArrowUp", "ArrowDown", "ArrowDown", "ArrowDown", "ArrowRight", "Enter"):
        browser.key(k)
    ok(ev("document.getElementById('tree-0').dataset.focus") == "attention (model.py:30)" and
       ev("document.getElementById('tree-0-readout').textContent").startswith("attention (model.py:30): 2.00 GiB"),
       "the keys walk the tree (down to the biggest call, right to the next) and Enter zooms")

    # ---- the diagnosis links to its evidence: the charts at the failure and what was live then ----
    ev("document.getElementById('tree-0-svg').focus()")
    browser.key("Escape")
    button = where("#evidence-0")
    browser.mouse("mouseMoved", button["x"] + 5, button["y"] + 5)
    browser.mouse("mousePressed", button["x"] + 5, button["y"] + 5, 1)
    browser.mouse("mouseReleased", button["x"] + 5, button["y"] + 5, 1)
    browser.frame()
    z = ev("[+document.getElementById('timeline-0').dataset.x0, +document.getElementById('timeline-0').dataset.x1]")
    pressed = ev("document.querySelector('#callers-0 button[aria-pressed=\"true\"]').dataset.timeNs")
    ok(z[0] <= oom_t <= z[1] and abs((z[1] - z[0]) - span / 10) < 2 and pressed == str(oom_t),
       "the diagnosis' button shows the charts around the failure and what was live then", (z, oom_t, pressed))
    browser.screenshot(os.path.join(TMP, "interact.png"))
    ok(os.path.getsize(os.path.join(TMP, "interact.png")) > 10000, "a screenshot of it")

    # ---- a caching allocator's segments: the map steps through the run and follows the cursor ----
    SEG, SEG2, US = 0x7f1000000000, 0x7f1004000000, 1000
    at = lambda n: start + 100 * US * n  # noqa: E731  (an event every 100 us from the trace's start)
    seg_events = [dict(kind="thread", time=at(0), aux=4242), dict(kind="device", time=at(0), device=0, size=16 * GiB,
                                                                   aux=1),
                  dict(kind="segment_alloc", time=at(1), device=0, addr=SEG, size=20 * MiB)]
    blocks = {}  # address -> (made, freed or None, size)
    for k in range(4):
        seg_events.append(dict(kind="alloc", time=at(2 + k), device=0, addr=SEG + 5 * k * MiB, size=5 * MiB, stack=2))
        blocks[SEG + 5 * k * MiB] = [at(2 + k), None, 5 * MiB]
    for k, n in ((1, 6), (3, 7)):
        seg_events.append(dict(kind="free", time=at(n), device=0, addr=SEG + 5 * k * MiB))
        blocks[SEG + 5 * k * MiB][1] = at(n)
    seg_events += [dict(kind="segment_alloc", time=at(8), device=0, addr=SEG2, size=20 * MiB),
                   dict(kind="alloc", time=at(9), device=0, addr=SEG2, size=15 * MiB, stack=3),
                   dict(kind="alloc_failed", time=at(10), device=0, size=12 * MiB, stack=3, error=2, aux=0,
                        aux2=16 * GiB)]
    blocks[SEG2] = [at(9), None, 15 * MiB]
    segs = {SEG: (at(1), None), SEG2: (at(8), at(13))}
    for n, a in enumerate(sorted(blocks)):
        if blocks[a][1] is None:
            seg_events.append(dict(kind="free", time=at(11) + n, device=0, addr=a))
            blocks[a][1] = at(11) + n
    seg_events.append(dict(kind="segment_free", time=at(13), device=0, addr=SEG2, size=20 * MiB))
    seg_trace, seg_page = os.path.join(TMP, "segments.trace"), os.path.join(TMP, "segments.html")
    with open(seg_trace, "wb") as f:
        f.write(Trace().strings([(i + 1, s) for i, s in enumerate(frames)]).stacks(stacks).events(seg_events)
                .end(written=len(seg_events)).bytes())
    p = subprocess.run([MEMTAP, "report", "--html", seg_page, seg_trace], capture_output=True, text=True)
    browser.open(seg_page)
    ok(p.returncode == 0 and ev("document.body.dataset.rendered") == "yes", "segments: the page draws",
       (p.stderr, ev("document.body.dataset.errors")))

    def live_then(t):
        """(segments, blocks) live at t (ns since the trace's start), as the trace says."""
        t += start
        return (sum(1 for m, f in segs.values() if m <= t and (f is None or f > t)),
                sum(1 for m, f, _ in blocks.values() if m <= t and (f is None or f > t)))

    def map_now():
        return ev("(() => { const m = document.getElementById('segment-map-0'); return [+m.dataset.timeNs, "
                  "m.querySelectorAll('rect.segment').length, m.querySelectorAll('rect.block').length, "
                  "document.getElementById('segment-moment-0').textContent]; })()")

    seen = []
    for button in ("\u25c0", "\u25c0", "\u25b6", "\u25b6", "\u25b6", "\u25b6", "\u25b6"):
        b = where("#segment-steps-0 button:%s-child" % ("first" if button == "\u25c0" else "last"))
        browser.mouse("mouseMoved", b["x"] + 4, b["y"] + 4)
        browser.mouse("mousePressed", b["x"] + 4, b["y"] + 4, 1)
        browser.mouse("mouseReleased", b["x"] + 4, b["y"] + 4, 1)
        browser.frame()
        t_ns, nsegs, nblocks, said = map_now()
        seen.append((t_ns, (nsegs, nblocks) == live_then(t_ns), said))
    ok(all(same for _, same, _ in seen) and len({t for t, _, _ in seen}) >= 4 and
       any("(an OOM; " in said for _, _, said in seen) and not any(") (" in said for _, _, said in seen),
       "the segment map steps back and forth through the run, each moment's segments and blocks as the trace says "
       "(one parenthesis a title)",
       seen)
    ev("document.getElementById('composition-0').focus()")
    browser.key("End")
    browser.key("ArrowLeft")
    point = ev("SERIES.timeline[0][+document.getElementById('readout-0').dataset.index][0]")
    t_ns, nsegs, nblocks, said = map_now()
    maps_times = ev("SERIES.maps[0].map((m) => m[0])")
    ok(t_ns == max(m for m in maps_times if m <= point) and (nsegs, nblocks) == live_then(t_ns),
       "and follows the composition's cursor", (t_ns, point, maps_times))

    # ---- zoomed ten times, the composition still has its own detail (not the whole run's buckets) ----
    saw = [dict(kind="thread", time=start, aux=4242), dict(kind="device", time=start, device=0, size=16 * GiB, aux=1)]
    for k in range(20000):  # a sawtooth: 20,000 allocations of 1 to 100 MiB, each freed at once
        a = 0x7f2000000000 + k * 128 * MiB
        saw += [dict(kind="alloc", time=start + 1000 * (k + 1), device=0, addr=a, size=(k % 100 + 1) * MiB, stack=2),
                dict(kind="free", time=start + 1000 * (k + 1) + 500, device=0, addr=a)]
    saw_trace, saw_page = os.path.join(TMP, "saw.trace"), os.path.join(TMP, "saw.html")
    with open(saw_trace, "wb") as f:
        f.write(Trace().strings([(i + 1, s) for i, s in enumerate(frames)]).stacks(stacks).events(saw)
                .end(written=len(saw)).bytes())
    subprocess.run([MEMTAP, "report", "--html", saw_page, saw_trace], capture_output=True, check=True)
    browser.open(saw_page)
    comp = where("#composition-0")
    browser.drag(comp["x"] + 70 + 405, comp["y"] + 100, comp["x"] + 70 + 486)
    steps = ev("(() => { const d = document.querySelector('#composition-0 path.area').getAttribute('d'); "
               "return new Set([...d.split('Z')[0].matchAll(/[ML]([\\d.]+),/g)].map((m) => m[1])).size; })()")
    ok(steps > 400, "zoomed ten times into a run of 20,000 allocations, the chart still changes nearly every pixel",
       steps)
finally:
    browser.close()
done()
