"""`memtap report --html` on a 10-million-event trace (or on FILE, a trace or a PyTorch
snapshot, such as bench/make_snapshot.py writes): the page's size against the input's,
the time to write it against `report --json` on the same trace (the baseline, measured in
the same run), and the page in headless Chromium: until it has drawn, a hover on an
allocation until its tip shows, a zoom until the charts are drawn again.

  python3 bench/html.py BUILD_DIR [EVENTS | FILE]

The trace is a recording of tools/simtrain (GPT-2 small, enough iterations for EVENTS
events). Wall-clock figures are medians of REPEAT alternating runs; the browser's are
measured from the protocol command to the frame after it (tests/cdp.py), so they include
the round trip through the pipe. SHOTS=DIR keeps a screenshot of the page.

Then the same page from `memtap report --serve`: the time until it serves and its memory
(against --html's), and in Chromium a zoom until the detail of the range is drawn, a step
of the segment map to the next allocator event (where the input has segments), and a
step back (the scan run again from the start).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from cdp import Browser  # noqa: E402

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
INPUT = sys.argv[2] if len(sys.argv) > 2 and os.path.isfile(sys.argv[2]) else None
EVENTS = int(sys.argv[2]) if len(sys.argv) > 2 and not INPUT else 10_000_000
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
TMP = tempfile.mkdtemp(prefix="memtap-bench-html-")
REPEAT = 3
EVENTS_PER_ITERATION = 1099  # GPT-2 small under simtrain


def measure(argv):
    """(seconds, peak resident KiB of this child alone)."""
    start = time.monotonic()
    p = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    if status:
        sys.exit("%s failed: %s" % (" ".join(argv), p.stderr.read().decode()))
    return time.monotonic() - start, usage.ru_maxrss


def timed(f):
    start = time.monotonic()
    f()
    return time.monotonic() - start


trace, page = INPUT or os.path.join(TMP, "train.trace"), os.path.join(TMP, "train.html")
iters = max(1, EVENTS // EVENTS_PER_ITERATION)
if not INPUT:
    subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "gpt2-small", "--iters", str(iters)],
                   env=ENV, check=True, stdout=subprocess.DEVNULL)
json_runs, html_runs = [], []
for _ in range(REPEAT):
    json_runs.append(measure([MEMTAP, "report", "--json", trace]))
    if os.path.exists(page):
        os.unlink(page)
    html_runs.append(measure([MEMTAP, "report", "--html", page, trace]))
t_json, t_html = statistics.median(s for s, _ in json_runs), statistics.median(s for s, _ in html_runs)
m_json, m_html = max(m for _, m in json_runs), max(m for _, m in html_runs)
events = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], env=ENV, capture_output=True,
                                   check=True).stdout)["events"]["total"]
print("memtap report --html benchmark (%s): %s, %d events; median of %d" % (
    B, INPUT or "simtrain gpt2-small, %d iterations" % iters, events, REPEAT))
print("input %.1f MB, page %.2f MB: the page is %.2f%% of the input" % (
    os.path.getsize(trace) / 1e6, os.path.getsize(page) / 1e6, 100 * os.path.getsize(page) / os.path.getsize(trace)))
print("writing it: --html %.2f s, %.0f MiB; --json %.2f s, %.0f MiB: %.2fx the time, %.2fx the memory" % (
    t_html, m_html / 1024, t_json, m_json / 1024, t_html / t_json, m_html / m_json))

if not CHROMIUM:
    print("no chromium: the page's times are not measured (./quickstart check installs it)")
    shutil.rmtree(TMP)
    sys.exit(0)
drawn, hover, zoom, unzoom = [], [], [], []
for k in range(REPEAT):
    b = Browser(CHROMIUM, os.path.join(TMP, "profile-%d" % k))
    try:
        drawn.append(timed(lambda: b.open(page)))
        assert b.eval("document.body.dataset.rendered") == "yes", b.eval("document.body.dataset.errors")
        box = json.loads(b.eval("(() => { const r = [...document.querySelectorAll('#allocations-0 rect.alloc')]"
                                ".sort((a, b) => b.getAttribute('height') - a.getAttribute('height'))[0]; "
                                "r.scrollIntoView({block: 'center'}); return JSON.stringify(r.getBoundingClientRect()); })()"))
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        hover.append(timed(lambda: (b.mouse("mouseMoved", x, y), b.frame())))
        assert not b.eval("document.getElementById('tip').hidden")
        comp = json.loads(b.eval("JSON.stringify(document.getElementById('composition-0').getBoundingClientRect())"))
        zoom.append(timed(lambda: b.drag(comp["x"] + 300, comp["y"] + 100, comp["x"] + 400)))
        b.eval("document.getElementById('composition-0').focus()")
        unzoom.append(timed(lambda: b.key("Escape")))
        if k == 0 and os.environ.get("SHOTS"):  # a folder for a screenshot with the tip shown
            b.screenshot(os.path.join(os.environ["SHOTS"], "bench-html-%d.png" % events))
    finally:
        b.close()
for name, runs in (("open until drawn", drawn), ("hover until the tip shows", hover),
                   ("drag-zoom until drawn again", zoom), ("Esc until the whole run is drawn", unzoom)):
    print("chromium: %-34s %.3f s (median of %d)" % (name, statistics.median(runs), len(runs)))

# ---- served ----
WAIT = ("new Promise((r, no) => { const by = Date.now() + 60000; "
        "const w = () => %s ? r(1) : Date.now() > by ? no('waited 60 s') : setTimeout(w, 5); w(); })")
ready, served_zoom, forth, back, memory = [], [], [], [], []
for k in range(REPEAT):
    start = time.monotonic()
    server = subprocess.Popen([MEMTAP, "report", "--serve=0", trace], env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    url = server.stdout.readline().split(" at ")[1].split()[0]
    ready.append(time.monotonic() - start)
    b = Browser(CHROMIUM, os.path.join(TMP, "served-%d" % k))
    try:
        b.open(url)
        assert b.eval("document.body.dataset.rendered") == "yes", b.eval("document.body.dataset.errors")
        comp = json.loads(b.eval("(() => { const e = document.getElementById('composition-0'); e.scrollIntoView(); "
                                 "return JSON.stringify(e.getBoundingClientRect()); })()"))
        served_zoom.append(timed(lambda: (b.drag(comp["x"] + 300, comp["y"] + 100, comp["x"] + 305),
                                          b.eval(WAIT % "document.getElementById('timeline-0').dataset.detail === 'served'"),
                                          b.frame())))
        if b.eval("!!document.getElementById('segment-steps-0')"):
            def step(label):
                was = b.eval("document.getElementById('segment-map-0').dataset.event || ''")
                b.eval("document.querySelector('#segment-steps-0 button[aria-label=\"the moment %s\"]').click()" % label)
                b.eval(WAIT % ("(document.getElementById('segment-map-0').dataset.event || '') !== '%s'" % was))
                b.frame()
            step("after")  # the first: from the peak's moment to an event
            forth.append(timed(lambda: step("after")))
            back.append(timed(lambda: step("before")))
        with open("/proc/%d/status" % server.pid) as f:
            memory.append(int(next(ln for ln in f if ln.startswith("VmHWM:")).split()[1]))
    finally:
        b.close()
        server.kill()
        server.wait()
print("--serve: serving after %.2f s, %.0f MiB (--html: %.2f s, %.0f MiB): %.2fx the time, %.2fx the memory" % (
    statistics.median(ready), max(memory) / 1024, t_html, m_html / 1024, statistics.median(ready) / t_html,
    max(memory) / m_html))
print("chromium, served: %-25s %.3f s (median of %d)" % ("zoom until the detail is drawn", statistics.median(served_zoom),
                                                          REPEAT))
if forth:
    print("chromium, served: %-25s %.3f s; back one %.3f s (medians of %d)" % (
        "segment map, next event", statistics.median(forth), statistics.median(back), REPEAT))
else:
    print("chromium, served: no segments in the input: the segment map's steps are not measured")
shutil.rmtree(TMP)
