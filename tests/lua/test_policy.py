"""Lua policies inside the job (memtap run --policy), on simtrain and the recorder's
workload on simgpu: each handler fires exactly when the trace says it should (checked
against the recorded events with an offline script), an on_oom snapshot holds the failing
request and everything live at that moment, retries and caps behave like the driver, the
sandbox and budgets hold, and each bundled policy does what docs/LUA.md says."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
WORKLOAD = os.path.join(B, "tests/recorder/workload")
TMP = scratch("policy")
GiB = 1 << 30
runs = 0


def script(source, name="policy.lua"):
    path = os.path.join(TMP, name)
    open(path, "w").write(source)
    return path


def run(policies, cmd, env=None, options=()):
    """memtap run with the policies (not -q: their lines are checked); returns (process, trace path,
    folder)."""
    global runs
    runs += 1
    folder = os.path.join(TMP, "run%d" % runs)
    os.mkdir(folder)
    trace = os.path.join(folder, "job.trace")
    args = [MEMTAP, "run", "-o", trace]
    for p in policies:
        args += ["--policy", p]
    for o in options:
        args += ["-O", o]
    e = dict(os.environ, **(env or {}))
    p = subprocess.run(args + ["--"] + cmd, capture_output=True, text=True, env=e, timeout=300)
    return p, trace, folder


def lines(folder, name):
    path = os.path.join(folder, name)
    return [json.loads(x) for x in open(path)] if os.path.exists(path) else []


def offline(source, trace):
    """An offline memtap lua script's JSON answer about a trace."""
    path = script(source, "offline.lua")
    p = subprocess.run([MEMTAP, "lua", path, trace], capture_output=True, text=True)
    return json.loads(p.stdout) if p.returncode == 0 else p.stderr


def size_text(n):
    """mt_format_size: bytes, else two decimals of the largest binary unit below it."""
    units, v, u = ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), float(n), 0
    while v >= 1024.0 and u + 1 < len(units):
        v, u = v / 1024.0, u + 1
    return "%d B" % n if u == 0 else "%.2f %s" % (v, units[u])


def report(trace):
    return json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)


LOG = """
local function log(file, ev, extra)
  local t = {kind = ev.kind, direction = ev.direction, allocated = ev.allocated, size = ev.size,
             name = ev.name, iteration = ev.iteration, level = ev.level, growth = ev.growth,
             device = ev.device, total = ev.total, free = ev.free, peak = ev.peak}
  for k, v in pairs(extra or {}) do t[k] = v end
  assert(memtap.append(file, memtap.json(t) .. "\\n"))
end
"""

# ---- thresholds: once per crossing, up and down, with hysteresis ----
TRAIN = [SIMTRAIN, "--preset", "gpt2-small", "--iters", "4"]
OOM_EXIT = 1  # simtrain's status when an allocation fails (a crash would be negative)
UP, DOWN = 8 * GiB, 4 * GiB
pol = script(LOG + """
memtap.on_threshold("8GiB", function(ev) log("t.jsonl", ev) end, {below = "4GiB"})
memtap.on_threshold(0.5, function(ev) log("f.jsonl", ev) end)
""", "thresholds.lua")
p, trace, folder = run([pol], TRAIN, {"SIMGPU_MEM": "16GiB"})
got = lines(folder, "t.jsonl")
want = offline("""
local live, now, above, out = {}, 0, false, {}
for e in memtap.trace:events() do
  if e.kind == "alloc" then live[e.addr] = e.size; now = now + e.size
  elseif e.kind == "free" and live[e.addr] then now = now - live[e.addr]; live[e.addr] = nil end
  if not above and now >= %d then above = true; out[#out + 1] = {"up", now, e.size}
  elseif above and now < %d then above = false; out[#out + 1] = {"down", now} end
end
local s = {}
for i, c in ipairs(out) do s[i] = string.format("[\\"%%s\\", %%d]", c[1], c[2]) end
print("[" .. table.concat(s, ",") .. "]")
""" % (UP, DOWN), trace)
ok(p.returncode == 0 and isinstance(want, list) and len(want) == 8
   and [[g["direction"], g["allocated"]] for g in got] == want,
   "on_threshold: one call per crossing, up and down (below=), with the bytes at that event",
   "%s\n%s\n%s" % (p.stderr, got, want))
ok(all(g["level"] == (UP if g["direction"] == "up" else DOWN) and g["device"] == 0 for g in got)
   and all(g["size"] > 0 for g in got if g["direction"] == "up"),
   "on_threshold: the level crossed, the device and the crossing allocation's size", got)
frac = lines(folder, "f.jsonl")
ok(len(frac) == 4 and all(f["direction"] == "up" and f["level"] == 8 * GiB and f["total"] == 16 * GiB for f in frac),
   "on_threshold: a fraction of the device, re-armed below 95% of it, no down calls unless asked",
   frac)

# ---- phases by name, iterations, peaks ----
pol = script(LOG + """
memtap.on_phase("^backward$", function(ev) log("phase.jsonl", ev) end)
memtap.on_phase("^layer%.1$", function(ev) log("layer.jsonl", ev) end)
memtap.on_iteration(function(ev) log("iter.jsonl", ev) end)
memtap.on_iteration(function(ev) log("step.jsonl", ev) end, {name = "step"})
memtap.on_peak(function(ev) log("peak.jsonl", ev, {stack = ev.stack}) end, {interval = 0, growth = 0})
""", "phases.lua")
p, trace, folder = run([pol], TRAIN, {"SIMGPU_MEM": "16GiB"})
ph = lines(folder, "phase.jsonl")
ok(p.returncode == 0 and [x["direction"] for x in ph] == ["enter", "leave"] * 4
   and all(x["name"] == "backward" for x in ph) and [x["iteration"] for x in ph[::2]] == [0, 2, 3, 4],
   "on_phase: enter and leave of every range whose name matches, with the iteration", ph)
layer = lines(folder, "layer.jsonl")
pushes = offline("""
local n = 0
for e in memtap.trace:events("range_push") do if e.name == "layer.1" then n = n + 1 end end
print(n)
""", trace)
ok(len(layer) == 2 * pushes and pushes > 0, "on_phase: a Lua pattern, every push and pop of layer.1",
   (len(layer), pushes))
it = lines(folder, "iter.jsonl")
ok([x["iteration"] for x in it] == [2, 3, 4] and all(x["name"] == "iteration" for x in it),
   "on_iteration: without marks, each push of the first top-level range that repeats", it)
st = lines(folder, "step.jsonl")
ok([x["iteration"] for x in st] == [1, 2, 3, 4] and all(x["name"] == "step" for x in st),
   "on_iteration by name: NVTX marks named 'step'", st)
pk = lines(folder, "peak.jsonl")
rep = report(trace)["devices"][0]
ok(len(pk) > 1 and all(a["peak"] < b["peak"] for a, b in zip(pk, pk[1:]))
   and pk[-1]["peak"] == rep["peak_allocated_bytes"] and pk[-1]["allocated"] == pk[-1]["peak"]
   and pk[-1]["stack"],
   "on_peak: each new high-water mark at its moment, the last one the report's peak, with a stack",
   (pk[-3:], rep["peak_allocated_bytes"]))
pol = script(LOG + 'memtap.on_peak(function(ev) log("peak.jsonl", ev) end)\n', "peak_rate.lua")
p, trace, folder = run([pol], TRAIN, {"SIMGPU_MEM": "16GiB"})
ok(p.returncode == 0 and 1 <= len(lines(folder, "peak.jsonl")) <= 3,
   "on_peak: rate-limited by default (1%% growth, one a second)", lines(folder, "peak.jsonl"))

# ---- leaks ----
pol = script(LOG + 'memtap.on_leak(function(ev) log("leak.jsonl", ev, {top = ev.stack[1]}) end)\n', "leak.lua")
p, trace, folder = run([pol], [SIMTRAIN, "--preset", "tiny", "--iters", "8", "--leak", "4M"])
lk = lines(folder, "leak.jsonl")
ok(p.returncode == 0 and len(lk) == 1 and lk[0]["growth"] == 4 << 20 and lk[0]["device"] == 0
   and lk[0]["iteration"] == 5 and lk[0]["size"] >= 3 * (4 << 20),
   "on_leak: 4 MiB an iteration found after 3 boundaries of growth, once, with where the bytes are", lk)
p, trace, folder = run([pol], [SIMTRAIN, "--preset", "tiny", "--iters", "8"])
ok(p.returncode == 0 and lines(folder, "leak.jsonl") == [], "on_leak: nothing without a leak",
   lines(folder, "leak.jsonl"))

# ---- out of memory: once per failure, on the failing thread, with a snapshot of that moment ----
pol = script(LOG + """
memtap.on_oom(function(ev)
  log("oom.jsonl", ev, {error = ev.error, snapshot = memtap.snapshot("oom-%n.trace"), phase = ev.phase})
  if os.getenv("RETRY") then return "retry" end
end)
""", "oom.lua")
p, trace, folder = run([pol], [WORKLOAD, "ooms"], {"SIMGPU_MEM": "1GiB"})
oo = lines(folder, "oom.jsonl")
ok(p.returncode == 0 and [o["size"] for o in oo] == [GiB + 1, GiB + 2, GiB + 3, GiB + (2 << 20)]
   and all(o["error"] == 2 and o["total"] == GiB for o in oo),
   "on_oom: once per failure, through the runtime, stream-ordered, driver and VMM paths", (p.stderr, oo))
p, trace, folder = run([pol], TRAIN, {"SIMGPU_MEM": "3GiB"})
oo = lines(folder, "oom.jsonl")
snap = oo[0]["snapshot"] if len(oo) == 1 else None
ok(p.returncode == OOM_EXIT and snap and os.path.dirname(snap) == folder and oo[0]["phase"].startswith("layer."),
   "on_oom: simtrain's one failure, in its layer, a snapshot in the policy folder", (p.stderr, oo))
if snap:
    at = offline("""
local r = memtap.trace:report()
local fail
for e in memtap.trace:events("alloc_failed") do fail = fail or e end
local n, bytes = 0, 0
for _, l in ipairs(memtap.trace:live_at(fail.time)) do
  if l.kind == "device" then n = n + 1; bytes = bytes + l.size end
end
print(string.format('{"n": %d, "bytes": %d, "size": %d}', n, bytes, fail.size))
""", trace)
    sr = report(snap)
    ok(isinstance(at, dict) and sr["events"]["failed"] == 1 and at["size"] == oo[0]["size"]
       and sr["events"]["allocs"] - sr["events"]["frees"] == at["n"] and oo[0]["allocated"] == at["bytes"],
       "the on_oom snapshot: the failing request and exactly what the trace says was live then",
       (at, sr["events"], oo))

# retry: a failure a policy answers with "retry" is made again once; the job never sees it
env = {"SIMGPU_MEM": "16GiB", "SIMGPU_FAIL_NTH": "300", "RETRY": "1"}
p, trace, folder = run([pol], TRAIN, env)
oo = lines(folder, "oom.jsonl")
ok(p.returncode == 0 and len(oo) == 1 and report(trace)["events"]["failed"] == 1,
   "on_oom 'retry': the call is made again and the job goes on (cudaGetLastError cleared)", (p.stderr, oo))
p, trace, folder = run([pol], TRAIN, {k: v for k, v in env.items() if k != "RETRY"})
ok(p.returncode == OOM_EXIT, "without 'retry' the same injected failure ends simtrain", p.stderr)
p, trace, folder = run([pol], [WORKLOAD, "ooms"], {"SIMGPU_MEM": "1GiB", "RETRY": "1"})
ok(p.returncode == 0 and len(lines(folder, "oom.jsonl")) == 4 and report(trace)["events"]["failed"] == 8
   and "cudaGetLastError 2" in p.stdout,
   "'retry' is bounded to one: a second failure goes to the job, recorded, without a second call",
   p.stdout + p.stderr)

# ---- caps: the real out-of-memory error, every path, the cap as the device's size ----
cap = os.path.join(S, "lua/cap.lua")
for api in ("malloc", "async"):
    p, trace, folder = run([cap, pol], TRAIN + ["--api", api], {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "2GiB"})
    rep = report(trace)
    oo = lines(folder, "oom.jsonl")
    ok(p.returncode == OOM_EXIT and "out of memory" in p.stderr and rep["devices"][0]["peak_allocated_bytes"] <= 2 * GiB
       and len(oo) == 1 and oo[0]["total"] == 2 * GiB and oo[0]["free"] < oo[0]["size"],
       "cap.lua (%s): past 2 GiB of a 16 GiB device the job gets out-of-memory; the event says 2 GiB" % api,
       p.stderr[-500:])
# memtap's caching allocator reserves through the driver itself: the cap holds there too
for policy in ("native", "memtap-vmm"):
    p, trace, folder = run([cap], TRAIN + ["--iters", "2"], {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "2GiB"},
                           options=["allocator=caching", "alloc_policy=" + policy])
    seg = report(trace)["devices"][0]["peak_reserved_bytes"]
    ok(p.returncode == OOM_EXIT and "out of memory" in p.stderr and 0 < seg <= 2 * GiB,
       "cap.lua with --allocator=caching (%s): the allocator's segments stay within the cap" % policy,
       (seg, p.stderr[-500:]))
p, trace, folder = run([cap], [WORKLOAD, "ooms"], {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "1GiB"})
ok(p.returncode == 0 and p.stdout.count(" 2\n") == 5, "cap.lua: the driver and VMM paths are capped too",
   p.stdout + p.stderr)
p, trace, folder = run([cap], TRAIN, {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "25%"})
ok(p.returncode == OOM_EXIT and report(trace)["devices"][0]["peak_allocated_bytes"] <= 4 * GiB,
   "cap.lua: a share of the device", p.stderr[-300:])

# the cap is the device's capacity in every report, and memtap run's summary says the job failed and under what
p, trace, folder = run([cap], TRAIN, {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "3GiB"})
rep = report(trace)
said = [x for x in p.stderr.splitlines() if x.startswith("memtap: the job's allocation failed")]
oom = rep["oom"][0] if rep["oom"] else {}
ok(p.returncode == OOM_EXIT and len(said) == 1 and oom
   and ("out of memory: %s asked on device 0 at " % size_text(oom["size"])) in said[0]
   and " in NVTX range %s, from tensor_new (simtrain.c:" % oom["phase"] in said[0]
   and said[0].endswith("free of 3.00 GiB (a policy's cap; the device has 16.00 GiB)"),
   "memtap run's summary: the allocation that failed, where, and under the policy's cap", p.stderr[-800:])
why = [x for x in p.stderr.splitlines() if x.startswith("memtap: why: ")]
ok(len(why) == 1 and why[0] == "memtap: why: the step needs more than the device; what to change so that it fits: "
   "memtap report %s (with --plan 'the model and setup' for the training setup's changes)" % trace,
   "...and why, with the report that says what to change", p.stderr[-800:])
text = subprocess.run([MEMTAP, "report", trace], capture_output=True, text=True).stdout
top = subprocess.run([MEMTAP, "top", "--once", "--json", trace], capture_output=True, text=True).stdout
top = json.loads(top)["ranks"][0]["devices"][0] if top.startswith("{") else {}
ok("(simgpu 16.00 GiB, capped at 3.00 GiB by a policy; the device has 16.00 GiB)" in p.stderr
   and "capped at 3.00 GiB by a policy; the device has 16.00 GiB): peak" in text
   and rep["devices"][0]["capacity_bytes"] == 3 * GiB and rep["devices"][0]["device_bytes"] == 16 * GiB
   and top.get("capacity_bytes") == 3 * GiB and top.get("device_bytes") == 16 * GiB,
   "a capped device's capacity is the cap: summary, report, --json and memtap top", (text[:400], top))
p, trace, folder = run([], TRAIN, {"SIMGPU_MEM": "2GiB"})
said = [x for x in p.stderr.splitlines() if x.startswith("memtap: the job's allocation failed")]
ok(p.returncode == OOM_EXIT and len(said) == 1 and said[0].endswith("free of 2.00 GiB (the device's whole memory)")
   and "(simgpu 2.00 GiB, 2.00 GiB) at" in p.stderr,
   "without a cap: the device's own memory ran out (SIMGPU_MEM), said as that", p.stderr[-600:])

# ---- a policy runs only where the GPU is used, and -q quiets it ----
if "thread" in os.environ.get("MT_SANITIZERS", ""):
    # a shell cannot load a ThreadSanitizer build of memtap: the chain records nothing
    ok(True, "# SKIP a chain of shells under a ThreadSanitizer build of memtap")
    ok(True, "# SKIP memtap run -q through a chain of shells under a ThreadSanitizer build of memtap")
else:
    # sh -> sh -> simtrain: the outer shell forks a subshell for dirname and the inner shell,
    # which execs simtrain; only simtrain touches the GPU
    inner = script('#!/bin/sh\nexec "$@"\n', "inner.sh")
    outer = script('#!/bin/sh\n"$(dirname "$0")/inner.sh" "$@"\n', "outer.sh")
    os.chmod(inner, 0o755)
    os.chmod(outer, 0o755)
    p, trace, folder = run([cap], [outer] + TRAIN, {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "2GiB"})
    ok(p.returncode == OOM_EXIT and p.stderr.count("device memory capped") == 1
       and report(trace)["devices"][0]["peak_allocated_bytes"] <= 2 * GiB,
       "through a chain of shells the policy runs once, in the process that uses the GPU, and caps it",
       p.stderr[-800:])
    p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(folder, "quiet.trace"), "--policy", cap, "--policy",
                        "oom_snapshot", "--", outer] + TRAIN, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SIMGPU_MEM="16GiB", MEMTAP_CAP="2GiB"))
    ok(p.returncode == OOM_EXIT and "memtap" not in p.stderr and "out of memory" in p.stderr,
       "memtap run -q: no summary and no policy line (memtap.log, cap.lua's, oom_snapshot's); the job's own lines stay", p.stderr[-800:])

# ---- the bundled policies ----
lua = lambda name: os.path.join(S, "lua", name + ".lua")  # noqa: E731
p, trace, folder = run([cap, "oom_snapshot"], TRAIN, {"SIMGPU_MEM": "16GiB", "MEMTAP_CAP": "3GiB"})
snaps = [f for f in os.listdir(folder) if f.startswith("memtap-oom-")]
counts = re.findall(r" in (\d+) allocation(s?) from ", p.stderr)
ok(p.returncode == OOM_EXIT and len(snaps) == 1 and "out of memory: " in p.stderr and " 1. " in p.stderr
   and report(os.path.join(folder, snaps[0]))["events"]["failed"] == 1
   and len(counts) >= 2 and ("1", "") in counts and all((n == "1") == (not s) for n, s in counts),
   "oom_snapshot (by name): one snapshot `memtap report` reads, the request and the top stacks logged",
   p.stderr[-800:])
frames = re.findall(r" in \d+ allocations? from (.*)", p.stderr)
ok(len(frames) >= 2 and len(set(frames)) == len(frames) and all(re.fullmatch(r"\w+ \(simtrain\.c:\d+\)", f) for f in frames),
   "oom_snapshot: each top stack shown by its own frame, past the helper they all share (tensor_new), by name "
   "and line (simtrain's functions are not exported: read from its file)", frames)
said = re.search(r"cause: (.*); what to change: memtap report (\S+) ", p.stderr)
ok(said and said.group(1).endswith("more than the 3.00 GiB the job had") and said.group(2).endswith(snaps[0])
   and report(said.group(2))["diagnosis"][0]["cause"] == "step",
   "oom_snapshot: the cause as the job sees it, and the report that says what to change", p.stderr[-800:])
# a job slower than the policy thread's reaction (100 ms at most): layers take 20 ms
p, trace, folder = run([lua("threshold_capture")], TRAIN + ["--iters", "3", "--compute-ms", "20"], {"SIMGPU_MEM": "16GiB", "MEMTAP_CAPTURE_ABOVE": "60%",
                                                           "MEMTAP_CAPTURE_BELOW": "40%"},
                       options=["capture_stacks=1"])
marks = offline("""
local out, inside, with, without = {}, false, 0, 0
for e in memtap.trace:events() do
  if e.kind == "nvtx_mark" and e.name:match("^memtap%.capture") then out[#out + 1] = '"' .. e.name .. '"'; inside = e.name == "memtap.capture_start" end
  if e.kind == "alloc" then if (e.stack or 0) ~= 0 then with = with + 1 end; if inside ~= ((e.stack or 0) ~= 0) then without = without + 1 end end
end
print(string.format('{"marks": [%s], "stacks": %d, "wrong": %d}', table.concat(out, ","), with, without))
""", trace)
ok(p.returncode == 0 and isinstance(marks, dict)
   and marks["marks"] == ["memtap.capture_start", "memtap.capture_stop"] * 3
   and marks["stacks"] > 0 and marks["wrong"] == 0 and p.stderr.count("capture started") == 3,
   "threshold_capture: a capture range above 60%, closed below 40%; with capture_stacks=1 stacks only inside",
   (marks, p.stderr[-400:]))
p, trace, folder = run([lua("leak_watch")], [SIMTRAIN, "--preset", "tiny", "--iters", "8", "--leak", "4M"])
snaps = [f for f in os.listdir(folder) if f.startswith("memtap-leak-")]
ok(p.returncode == 0 and len(snaps) == 1 and "grows by at least 4.00 MiB per iteration" in p.stderr,
   "leak_watch: a snapshot and a line when per-iteration growth is found", p.stderr[-400:])
p, trace, folder = run([lua("peak_report")], TRAIN + ["--tag"], {"SIMGPU_MEM": "16GiB", "MEMTAP_PEAK_INTERVAL": "0",
                                                                  "MEMTAP_PEAK_GROWTH": "0"})
pk = [json.loads(x) for f in os.listdir(folder) if f.endswith(".jsonl") for x in open(os.path.join(folder, f))]
ok(p.returncode == 0 and len(pk) > 1 and pk[-1]["peak"] == report(trace)["devices"][0]["peak_allocated_bytes"]
   and sum(pk[-1]["by_phase"].values()) == pk[-1]["allocated"] == sum(pk[-1]["by_tag"].values()),
   "peak_report: a JSON line per new peak, with what is live by tag and by range", pk[-1:] or p.stderr)
# tag by tag and range by range, not only in sum: what was live at the peak, from the trace
live, now, top, at_top = {}, 0, 0, {}
for e in (json.loads(x) for x in subprocess.run([MEMTAP, "dump", "--json", trace], capture_output=True,
                                                text=True).stdout.splitlines()):
    if e["kind"] == "alloc" and not e["error"] and e["device"] == 0:
        live[e["addr"]] = e
        now += e["size"]
    elif e["kind"] == "free" and e["addr"] in live:
        now -= live.pop(e["addr"])["size"]
    if now > top:
        top, at_top = now, dict(live)
by_tag, by_phase = {}, {}
for e in at_top.values():
    by_tag[e["tag"]] = by_tag.get(e["tag"], 0) + e["size"]
    by_phase[e["phase"]] = by_phase.get(e["phase"], 0) + e["size"]
got = pk[-1] if pk else {}
ok(got.get("by_tag") == {k: v for k, v in by_tag.items()} and len(by_tag) >= 4,
   "peak_report: the bytes of each tag live at the peak, as the trace says", (got.get("by_tag"), by_tag))
ok(got.get("by_phase") == by_phase and len(set(by_phase.values())) >= 4,
   "peak_report: the bytes of each NVTX range live at the peak, as the trace says", (got.get("by_phase"), by_phase))

# ---- safety: sandbox, budget, memory, errors ----
pol = script(LOG + """
local t = {}
for _, name in ipairs({"io", "require", "load", "loadfile", "dofile", "debug", "package"}) do
  t[name] = type(_G[name])
end
t.execute, t.popen = type(os.execute), type(io)
t.dotdot = select(2, pcall(memtap.snapshot, "../escape.trace"))
t.outside = select(2, pcall(memtap.append, "/tmp/memtap-outside.txt", "x"))
assert(memtap.append("sandbox.json", memtap.json(t)))
""", "sandbox.lua")
p, trace, folder = run([pol], [WORKLOAD, "runtime"])
sb = json.load(open(os.path.join(folder, "sandbox.json")))
ok(p.returncode == 0 and all(sb[k] == "nil" for k in ("io", "require", "load", "loadfile", "dofile", "debug",
                                                          "package", "execute", "popen"))
   and "'..'" in sb["dotdot"] and "not under the policy directory" in sb["outside"]
   and not os.path.exists("/tmp/memtap-outside.txt"),
   "sandbox: no io, os.execute, require, load or debug; files only under the policy folder", sb)
pol = script("""
memtap.on_phase(".", function(ev) while true do end end)
memtap.on_threshold("1KiB", function(ev) local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1 << 20) .. i end end)
memtap.on_iteration(function(ev) error("my mistake") end)
memtap.on_oom(function(ev) memtap.capture_start(); memtap.capture_stop(); return "retry" end)
""", "bad_handlers.lua")
# (on_oom calls the driver from inside the failing hook, and asks for a retry of an injected failure)
# (a budget big enough for the hog to reach the memory cap first: each string is charged as it is
# made; a deadline long enough that only the budget stops the loop, however loaded the machine)
p, trace, folder = run([pol], TRAIN, {"SIMGPU_MEM": "16GiB", "SIMGPU_FAIL_NTH": "500"},
                       options=["policy_memory=8M", "policy_budget=20M", "policy_deadline_ms=600000"])
err = p.stderr
ok(p.returncode == 0 and err.count("instruction budget exceeded") == 1 and err.count("switched off") == 3
   and err.count("my mistake") == 1 and "stack traceback" in err and "bad_handlers.lua:4" in err,
   "an endless loop and an error: each said once with a traceback, off after 3; a memory hog off at once; the job is fine",
   err[-1500:])
ok("on_threshold handler (%s/bad_handlers.lua:3) ran out of memory (policy_memory): switched off" % TMP in err,
   "the Lua state's memory cap (policy_memory) stops the hog, and switches it off", err[-1500:])
rep = report(trace)
ok(rep["devices"][0]["peak_allocated_bytes"] > 0 and rep["events"]["failed"] == 1,
   "the job's allocations are recorded as without policies; the handler's driver calls and retry did no harm",
   rep["events"])

bad = script("memtap.on_oom(function(ev)\n  return 'x' +\nend)\n", "syntax.lua")
p, trace, folder = run([bad], [WORKLOAD, "runtime"])
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "syntax.lua:3:" in p.stderr and not os.listdir(folder),
   "a syntax error stops memtap run before the job starts, with file and line", p.stderr)
p, trace, folder = run(["no_such_policy"], [WORKLOAD, "runtime"])
ok(p.returncode == 2 and "no policy file no_such_policy" in p.stderr and not os.listdir(folder),
   "an unknown policy is one line and exit 2", p.stderr)
p, trace, folder = run([], [WORKLOAD, "runtime"], {"MEMTAP_POLICY": bad})
ok(p.returncode == 2 and "syntax.lua:3:" in p.stderr, "MEMTAP_POLICY is checked the same way", p.stderr)
boom = script("memtap.on_exit(function() end)\nerror('refuses to start')\n", "boom.lua")
good = script(LOG + "memtap.on_exit(function(ev) log('exit.jsonl', ev) end)\n", "good.lua")
p, trace, folder = run([boom, good], [WORKLOAD, "runtime"])
ex = lines(folder, "exit.jsonl")
ok(p.returncode == 0 and "refuses to start" in p.stderr and "this policy is not run" in p.stderr and len(ex) == 1,
   "a policy whose top level fails is off (its handlers too); the others run; on_exit once", (p.stderr, ex))

# ---- several devices: a handler for one device, one for each ----
pol = script(LOG + """
memtap.on_threshold("5MB", function(ev) log("one.jsonl", ev) end, {device = 1})
memtap.on_threshold("5MB", function(ev) log("each.jsonl", ev) end)
""", "devices.lua")
p, trace, folder = run([pol], [WORKLOAD, "devices"], {"SIMGPU_DEVICES": "2"})
one, each = lines(folder, "one.jsonl"), lines(folder, "each.jsonl")
ok(p.returncode == 0 and [(e["device"], e["allocated"]) for e in one] == [(1, 7000000)]
   and sorted((e["device"], e["allocated"]) for e in each) == [(0, 10000000), (1, 7000000)],
   "on_threshold on two devices: {device = 1} sees device 1 only; without it, each device crosses once",
   (one, each, p.stderr[-500:]))

# ---- the budget is per call: a handler using 60% of it each time runs every time ----
pol = script(LOG + """
calls = 0
memtap.on_phase(".", function(ev)
  local x = 0
  for i = 1, 60000 do x = x + i end -- 2 instructions a turn: 120,000 of the 200,000
  calls = calls + 1
end)
memtap.on_exit(function(ev) log("calls.jsonl", ev, {calls = calls}) end)
""", "sixty.lua")
p, trace, folder = run([pol], [SIMTRAIN, "--preset", "tiny", "--iters", "20"], {"SIMGPU_MEM": "16GiB"},
                       options=["policy_deadline_ms=600000"])
calls = lines(folder, "calls.jsonl")
phases = offline("""
local n = 0
for _, kind in ipairs({"range_push", "range_pop"}) do
  for e in memtap.trace:events(kind) do n = n + 1 end
end
print(n)
""", trace)
ok(p.returncode == 0 and "budget" not in p.stderr and calls and isinstance(phases, int) and phases > 100
   and calls[0]["calls"] == phases,
   "a handler that uses 60%% of policy_budget per call runs at every one of the %s ranges entered and left"
   % phases, (p.stderr[-500:], calls, phases))

# ---- every, on the policy thread ----
pol = script(LOG + 'memtap.every(0.05, function(ev) log("tick.jsonl", ev) end)\n', "every.lua")
p, trace, folder = run([pol], [WORKLOAD, "sleep", "600"])
ticks = lines(folder, "tick.jsonl")
ok(p.returncode == 0 and 3 <= len(ticks) <= 13 and any(t.get("allocated") == 12000001 for t in ticks),
   "every(0.05): called on a timer while the job runs, with the memory at that time", len(ticks))

# ---- a global function named like a hook, never registered: said, once a name ----
pol = script("""function on_oom(ev)
  return "retry"
end
function on_exit(ev) memtap.log("bye") end
function on_peak(ev) end
memtap.on_peak(on_peak)
on_phase = 3
function every() end
""", "globals.lua")
other = script("function on_leak(ev) end\n", "globals_other.lua")
later = script("memtap.on_leak(on_leak)\n", "registers.lua")
p, trace, folder = run([pol, other, later], [SIMTRAIN, "--preset", "tiny", "--iters", "1"])
said = [x for x in p.stderr.splitlines() if "defines a global" in x]
want = ["globals.lua:1 defines a global on_oom but never calls memtap.on_oom(on_oom): it will not run",
        "globals.lua:4 defines a global on_exit but never calls memtap.on_exit(on_exit): it will not run"]
# the file as Lua names it in messages (its short_src: the path's end when it is long)
ok(p.returncode == 0 and len(said) == 2 and all(x.startswith("memtap: policy: ") and x.endswith(w) and
                                                w.split(":")[0] in pol for x, w in zip(said, want)),
   "function on_oom(...) without memtap.on_oom: one line each, naming the file and line; not for a hook "
   "registered (in this file or another), a global that is no function, or every", p.stderr)

done()
