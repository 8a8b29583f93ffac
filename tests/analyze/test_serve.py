"""memtap report --serve: the page on 127.0.0.1, and the detail of whatever part of the run
it shows, found when the page asks. The input is a trace built byte by byte
(tests/hostile/mtrace.py), so every allocation is known here: one 256 MiB segment of a
caching allocator, 64 MiB of parameters in it, then 40,000 short-lived allocations (far
more than the page embeds), every 5,000th kept. Checked over HTTP (the composition and the allocations of a
range, the segment map stepped event by event, bad requests answered in a line and the
server going on), then in headless Chromium as a user would: zoomed in, the page draws
every allocation of the part in view, and the segment map steps one event at a time."""
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/hostile"))
from cdp import Browser  # noqa: E402
from mtrace import PYFRAME, Trace  # noqa: E402
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
TMP = scratch("serve")
MiB, MS = 1 << 20, 1000000

# ---- the trace ----
frames = ["load\ttrain.py\t10", "main\ttrain.py\t40", "forward\tmodel.py\t20", "backward\tmodel.py\t60"]
stacks = [(i + 1, [PYFRAME | f, PYFRAME | 2]) for i, f in enumerate((1, 3, 4))]  # load, forward, backward; under main
START, T0, SEG, N = 1000, 1000 + MS, 0x7f0000000000, 40000
events = [dict(kind="thread", time=T0, aux=4242), dict(kind="device", time=T0 + 1, device=0, size=16 << 30, aux=1),
          dict(kind="segment_alloc", time=T0 + 2, device=0, addr=SEG, size=256 * MiB),
          dict(kind="alloc", time=T0 + 3, device=0, addr=SEG, size=64 * MiB, stack=1)]
allocs = [(T0 + 3 - START, -1, 64 * MiB)]  # (made, freed or -1, size), times as the page's
kept = SEG + 128 * MiB  # every 5,000th is kept: what is live grows through the run
for k in range(N):
    t, size = T0 + MS + 1000 * k, 4096 * (1 + k % 97)
    if k % 5000 == 4999:
        events.append(dict(kind="alloc", time=t, device=0, addr=kept, size=size, stack=2))
        allocs.append((t - START, -1, size))
        kept += size
        continue
    events.append(dict(kind="alloc", time=t, device=0, addr=SEG + 64 * MiB, size=size, stack=2 + k % 2))
    events.append(dict(kind="free", time=t + 500, device=0, addr=SEG + 64 * MiB))
    allocs.append((t - START, t + 500 - START, size))
trace = os.path.join(TMP, "serve.trace")
with open(trace, "wb") as f:
    f.write(Trace().strings([(i + 1, s) for i, s in enumerate(frames)]).stacks(stacks).events(events)
            .end(written=len(events)).bytes())

server = subprocess.Popen([MEMTAP, "report", "--serve=0", trace], stdout=subprocess.PIPE, text=True)
line = server.stdout.readline()
ok(line.startswith("memtap: serving the report of %s at http://127.0.0.1:" % trace), "it says where it serves", line)
URL = line.split(" at ")[1].split()[0]


def get(path, host=None, method="GET"):
    """(status, body) of one request."""
    r = urllib.request.Request(URL + path.lstrip("/"), method=method)
    if host:
        r.add_header("Host", host)
    try:
        with urllib.request.urlopen(r, timeout=30) as a:
            return a.status, a.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


try:
    status, page = get("/")
    ok(status == 200 and '"served": true' in page and "<script>" in page,
       "the page is served, and knows it can ask for more")
    whole = json.loads(page.split("const SERIES = ")[1].split(";\n</script>")[0])
    embeds = len(whole["allocations"]["0"])
    ok(embeds <= 1500, "the page itself embeds at most 1,500 of the 40,001 allocations", embeds)

    # ---- a range: five allocations and their frees, each moment of them ----
    first = 36000  # past the index's first mark (every 65,536 events), and a kept one after it
    frm, to = allocs[1 + first][0] - 100, allocs[1 + first + 4][1] + 100
    status, body = get("/range?device=0&from=%d&to=%d" % (frm, to))
    r = json.loads(body)
    got = [(p[0], sum(p[1:7]), p[7]) for p in r["points"]]
    held = sum(a[2] for a in allocs if a[0] < frm and a[1] < 0)
    want = [(frm, held, 256 * MiB)]
    for made, freed, size in allocs[1 + first:1 + first + 5]:
        want += [(made, held + size, 256 * MiB), (freed, held, 256 * MiB)]
    ok(status == 200 and got == want, "a range's composition: what was live as it began, then every change in it",
       (got[:4], want[:4]))
    live = sorted((a[0], a[1], a[2]) for a in r["allocations"])
    want = sorted(a for a in allocs if a[0] <= to and (a[1] < 0 or a[1] >= frm))
    ok(live == want and all(str(a[4]) in r["stacks"] for a in r["allocations"]),
       "a range's allocations: every one live in it, with its stack", (live, want))
    end = max(max(a[0], a[1]) for a in allocs)  # the last event's moment
    wide = json.loads(get("/range?device=0&from=0&to=%d" % end)[1])
    ok(wide["allocations"] == whole["allocations"]["0"] and len(wide["points"]) <= 4001,
       "a range of the whole run stays bounded as the page is", (len(wide["allocations"]), len(wide["points"])))

    after = json.loads(get("/range?device=0&from=%d&to=%d" % (end + 10, end + 20))[1])["points"]
    ok([(p[0], sum(p[1:7])) for p in after] == [(end + 10, sum(a[2] for a in allocs if a[1] < 0))],
       "a range past the last event: what was live at the end", after)

    # ---- the segment map, event by event ----
    m = json.loads(get("/map?device=0&time=%d" % allocs[1 + first][0])[1])
    size, blocks = allocs[1 + first][2], m["map"][3]
    ok(m["kind"] == "alloc" and m["size"] == size and m["map"][2] == [SEG, 256 * MiB] and
       blocks[:4] == [SEG, 64 * MiB, SEG + 64 * MiB, size] and len(blocks) == 4 + 2 * 7,
       "the map at a moment: after the last event then, the segment with both live blocks", m)
    n = json.loads(get("/map?device=0&event=%d&step=1" % m["event"])[1])
    ok(n["kind"] == "free" and n["size"] == size and n["event"] > m["event"] and n["map"][3] == blocks[:2] + blocks[4:],
       "a step forward: the free, and the block gone", n)
    back = json.loads(get("/map?device=0&event=%d&back=1" % n["event"])[1])
    ok(back["event"] == m["event"] and back["map"] == m["map"], "a step back: the allocation again", back)
    on = json.loads(get("/map?device=0&time=%d&step=1" % allocs[1 + first][0])[1])
    ok(on["event"] == n["event"], "a step from a moment: the device's next event after it", on)
    ok(json.loads(get("/map?device=0&time=0")[1]) == {"event": None}, "before the device's first event: none")

    # ---- bad requests: one line each, and the server goes on ----
    for path, code, what in [("/range?device=0&from=9", 400, "a range without its end"),
                             ("/range?device=0&from=9&to=1", 400, "a range that ends before it begins"),
                             ("/map?device=300&time=1", 400, "a device past the last"),
                             ("/map?device=0", 400, "a map of no moment"),
                             ("/map?device=0&event=99999999", 200, "an event past the last"),
                             ("/trace", 404, "a page that is not there")]:
        status, body = get(path)
        ok(status == code and body.count("\n") <= 1, what + ": %d, in a line" % code, (status, body[:200]))
    ok(get("/", host="evil.example:80")[0] == 403, "a request for another host name is refused (a rebound name)")
    ok(get("/", method="POST")[0] == 405, "only GET")
    PORT = int(URL.split(":")[2].strip("/"))
    with socket.create_connection(("127.0.0.1", PORT)) as c:
        c.sendall(b"GET /ran")  # half a request, then gone
    ok(get("/")[0] == 200, "a client that leaves mid-request does not stop the server")
    with socket.create_connection(("127.0.0.1", PORT)) as idle:  # opened ahead, as browsers do
        answered = get("/range?device=0&from=0&to=10")[0]
        idle.sendall(b"GET /map?device=0&time=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % PORT)
        late = b""
        while True:
            k = idle.recv(65536)
            if not k:
                break
            late += k
    ok(answered == 200 and late.startswith(b"HTTP/1.1 200"), "a connection opened and left idle holds up no "
       "other request, and is answered when its request comes", late[:100])
    ok(server.poll() is None, "and it is still running")

    # ---- a trace of exactly one index mark's events: a range past its end still starts from the end ----
    exact = os.path.join(TMP, "exact.trace")
    pairs = (65536 - 2) // 2  # after the thread, the device and the segment: 65,536 in all
    with open(exact, "wb") as f:
        f.write(Trace().strings([(i + 1, s) for i, s in enumerate(frames)]).stacks(stacks).events(
            events[:3] + [dict(kind="alloc", time=T0 + 10 + k, device=0, addr=SEG + k * 4096, size=4096, stack=1)
                          for k in range(pairs)] +
            [dict(kind="free", time=T0 + 10 + pairs + k, device=0, addr=SEG + k * 4096) for k in range(pairs - 1)])
            .end(written=65536).bytes())
    other = subprocess.Popen([MEMTAP, "report", "--serve=0", exact], stdout=subprocess.PIPE, text=True)
    try:
        there = other.stdout.readline().split(" at ")[1].split()[0]
        last = T0 + 10 + 2 * pairs - 2 - START
        got = json.loads(urllib.request.urlopen(there + "range?device=0&from=%d&to=%d" % (last + 5, last + 9),
                                                timeout=30).read())["points"]
        ok([(p[0], sum(p[1:7])) for p in got] == [(last + 5, 4096)],
           "65,536 events, a range past the last: the one allocation still live", got)
    finally:
        other.kill()
        other.wait()

    # ---- in the browser: zoomed in, every allocation of the part in view ----
    if not CHROMIUM:
        print("# chromium is not installed: the browser's part skipped")
        done()
    browser = Browser(CHROMIUM, os.path.join(TMP, "profile"))
    try:
        ev = browser.eval
        browser.open(URL)
        ok(ev("document.body.dataset.rendered") == "yes", "the served page draws without a script error",
           ev("document.body.dataset.errors"))
        ok(ev("document.getElementById('timeline-0').dataset.detail") == "page", "at first, the page's own data")
        # the keyboard zooms in around the cursor, each + halving the range in view
        ev("document.getElementById('composition-0').focus()")
        for _ in range(2):
            browser.key("Home")
        for _ in range(8):
            browser.key("ArrowRight")
        for _ in range(12):
            browser.key("+")
        ev("new Promise((r) => { const by = Date.now() + 30000, w = () => document.getElementById('timeline-0')"
           ".dataset.detail === 'served' || Date.now() > by ? r(1) : setTimeout(w, 20); w(); })")
        browser.frame()
        x0, x1 = (float(ev("document.getElementById('timeline-0').dataset.%s" % k)) for k in ("x0", "x1"))
        drawn = ev("[...document.querySelectorAll('#allocations-0 rect.alloc')].length")
        want = [a for a in allocs if a[0] <= x1 and (a[1] < 0 or a[1] >= x0)]
        shown = ev("+document.getElementById('allocations-shown-0').dataset.shown")
        ok(x1 - x0 < (end - allocs[0][0]) / 4000 and shown == len(want) == drawn and len(want) > 2,
           "zoomed in, the page draws every allocation live in view, found by the server",
           (x0, x1, shown, len(want), drawn))
        embedded = sum(1 for a in whole["allocations"]["0"] if a[0] <= x1 and (a[1] < 0 or a[1] >= x0))
        ok(embedded < len(want), "more than the page alone had for that range", (embedded, len(want)))
        box = json.loads(ev("(() => { const r = [...document.querySelectorAll('#allocations-0 rect.alloc')]"
                            ".find((e) => e.getAttribute('height') < 50); r.scrollIntoView({block: 'center'}); "
                            "return JSON.stringify(r.getBoundingClientRect()); })()"))
        browser.mouse("mouseMoved", box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        browser.frame()
        tip = ev("document.getElementById('tip').textContent")
        ok("KiB" in tip.split("\n")[0] and ("forward (model.py:20)" in tip or "backward (model.py:60)" in tip),
           "hovering one shows its size and stack", tip)
        ev("document.getElementById('composition-0').focus()")
        browser.key("Escape")
        ok(ev("document.getElementById('timeline-0').dataset.detail") == "page" and
           ev("+document.getElementById('allocations-shown-0').dataset.shown") == embeds,
           "zoomed out, the page's own data again")

        # ---- the segment map steps one allocator event at a time ----
        def shown_map():
            return ev("(() => { const m = document.getElementById('segment-map-0'); "
                      "return [m.dataset.event, document.getElementById('segment-moment-0').textContent, "
                      "m.querySelectorAll('rect.block').length]; })()")

        def after(k):
            ev("document.querySelector('#segment-steps-0 button[aria-label=\"the moment %s\"]').click()" % k)
            ev("new Promise((r) => setTimeout(r, 300))")
            return shown_map()
        a = after("after")
        b = after("after")
        c = after("before")
        ok(a[0] is not None and int(b[0]) == int(a[0]) + 1 and c[0] == a[0] and "after event" in a[1],
           "◀ ▶ step from one allocator event to the next and back, each said", (a, b, c))
        ok({a[2], b[2]} == {1, 2}, "and the map shows the block made, then freed", (a, b))
    finally:
        browser.close()
finally:
    server.kill()
    server.wait()
done()
