"""memtap lua: scripts over a recorded simtrain run see the same numbers as
`memtap report --json` and simtrain's ground truth; the bundled examples work; bad
scripts and traces fail in one line with the documented exit status."""
import json
import os
import pickle
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("lua")

trace, truth_path = os.path.join(TMP, "run.trace"), os.path.join(TMP, "truth.json")
subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "gpt2-small", "--iters", "6",
                "--leak", "1M", "--json", truth_path], check=True, capture_output=True)
truth = json.load(open(truth_path))
report = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)


def lua(source, *args, name="script.lua"):
    path = os.path.join(TMP, name)
    open(path, "w").write(source)
    return subprocess.run([MEMTAP, "lua", path, *args], capture_output=True, text=True)


# a replay in Lua from the events gives simtrain's peak
p = lua("""
local live, now, peak = {}, 0, 0
for e in memtap.trace:events() do
  if e.kind == "alloc" then live[e.addr] = e.size; now = now + e.size
  elseif e.kind == "free" and live[e.addr] then now = now - live[e.addr]; live[e.addr] = nil end
  if now > peak then peak = now end
end
print(peak)
""", trace)
ok(p.returncode == 0 and int(p.stdout) == truth["peak"]["bytes"] == report["devices"][0]["peak_allocated_bytes"],
   "events: a replay in Lua finds simtrain's peak", p.stdout + p.stderr)

# the report as a table: the same numbers as --json
p = lua("""
local r = memtap.trace:report()
local d = r.devices[1]
print(d.peak_allocated_bytes, d.composition_at_peak.activations, d.composition_at_peak.optimizer, #r.leaks,
      r.leaks[1].growth_bytes_per_iteration, r.iterations.boundary)
""", trace)
want = report["devices"][0]
ok(p.returncode == 0 and p.stdout.split("\t") == [str(want["peak_allocated_bytes"]),
   str(want["composition_at_peak"]["activations"]), str(want["composition_at_peak"]["optimizer"]),
   str(len(report["leaks"])), str(report["leaks"][0]["growth_bytes_per_iteration"]),
   report["iterations"]["boundary"] + "\n"], "report(): the table form of --json", p.stdout + p.stderr)

# the whole report as a table, value for value and type for type (integer or float),
# on the run and on snapshots with segments and expandable segments
DUMP = """
local function dump(v, out)
  if type(v) ~= "table" then
    if math.type(v) == "integer" then out[#out + 1] = "i" .. v
    elseif type(v) == "number" then out[#out + 1] = string.format("f%.17g", v)
    elseif type(v) == "boolean" then out[#out + 1] = v and "T" or "F"
    else out[#out + 1] = "s" .. #v .. ":" .. v end
  elseif next(v) == nil then out[#out + 1] = "E"
  elseif v[1] ~= nil then
    out[#out + 1] = "["
    for _, x in ipairs(v) do dump(x, out) end
    out[#out + 1] = "]"
  else
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    out[#out + 1] = "{"
    for _, k in ipairs(keys) do out[#out + 1] = "k" .. #k .. ":" .. k; dump(v[k], out) end
    out[#out + 1] = "}"
  end
  return out
end
io.write(table.concat(dump(memtap.trace:report(3), {}), "\\n"))
"""


def dump(v, out):
    if isinstance(v, dict):
        v = {k: x for k, x in v.items() if x is not None}  # null is nil: no key
    if isinstance(v, bool):
        out.append("T" if v else "F")
    elif isinstance(v, int):
        out.append("i%d" % v)
    elif isinstance(v, float):
        out.append("f%.17g" % v)
    elif isinstance(v, str):
        b = v.encode("utf-8", "surrogateescape")
        out.append("s%d:" % len(b) + v)
    elif not v:
        out.append("E")
    elif isinstance(v, list):
        out.append("[")
        for x in v:
            dump(x, out)
        out.append("]")
    else:
        out.append("{")
        for k in sorted(v):
            out.append("k%d:%s" % (len(k.encode()), k))
            dump(v[k], out)
        out.append("}")
    return out


sys.path.insert(0, os.path.join(S, "tests/analyze"))
import snapshots  # noqa: E402

open(os.path.join(TMP, "dump.lua"), "w").write(DUMP)
inputs = [trace, os.path.join(S, "tests/hostile/pickles/frames-cycle.pickle")]
for name, snap in (("oom", snapshots.expandable_oom()), ("training", snapshots.training(leak=1 << 20))):
    inputs.append(os.path.join(TMP, name + ".pickle"))
    pickle.dump(snap, open(inputs[-1], "wb"))
for path in inputs:
    got = subprocess.run([MEMTAP, "lua", os.path.join(TMP, "dump.lua"), path], capture_output=True)
    text = subprocess.run([MEMTAP, "report", "--json", "--top", "3", path], capture_output=True).stdout
    want = "\n".join(dump(json.loads(text.decode("utf-8", "surrogateescape")), []))
    ok(got.returncode == 0 and got.stdout.decode("utf-8", "surrogateescape") == want,
       "report(): every value of --json with its type, " + os.path.basename(path), (got.stderr, len(want)))

# live allocations at the peak's moment, and a stack's frames
p = lua("""
local r = memtap.trace:report()
local at = r.devices[1].peak_time_ns / 1e9
local sum, stack = 0, nil
for _, a in ipairs(memtap.trace:live_at(at)) do
  if a.kind == "device" then sum = sum + a.size end
  if a.category == "activations" then stack = a.stack end
end
local names = {}
for _, f in ipairs(memtap.trace:stack(stack)) do names[#names + 1] = f["function"] end
print(sum, table.concat(names, " "))
""", trace)
fields = p.stdout.split("\t")
ok(p.returncode == 0 and int(fields[0]) == truth["peak"]["bytes"], "live_at(the peak) holds the peak's bytes",
   p.stdout + p.stderr)
ok(p.returncode == 0 and "forward" in fields[1], "stack(): an activation's frames name simtrain's forward pass",
   p.stdout)

# the bundled examples
ex = os.path.join(S, "lua/examples")
acts = report["devices"][0]["composition_at_peak"]["activations"]
p = subprocess.run([MEMTAP, "lua", os.path.join(ex, "peak_budget.lua"), trace, "--", "activations",
                    "%dB" % (acts + 1)], capture_output=True, text=True)
ok(p.returncode == 0 and "within budget" in p.stdout, "peak_budget.lua: within budget, exit 0", p.stdout + p.stderr)
p = subprocess.run([MEMTAP, "lua", os.path.join(ex, "peak_budget.lua"), trace, "--", "activations", "1GiB"],
                   capture_output=True, text=True)
ok(p.returncode == 1 and p.stderr.count("\n") == 1 and "over budget by" in p.stderr,
   "peak_budget.lua: over budget fails the check in one line, exit 1", p.stderr)
p = subprocess.run([MEMTAP, "lua", os.path.join(ex, "phases.lua"), trace], capture_output=True, text=True)
ok(p.returncode == 0 and "optimizer" in p.stdout and "layer.0 " in p.stdout, "phases.lua: bytes per NVTX phase",
   p.stdout + p.stderr)

# bad input
p = lua("for i = 1, 3 do print(i)\n", trace, name="broken.lua")
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "broken.lua:2:" in p.stderr, "a syntax error: file and line, exit 2",
   p.stderr)
p = lua("print(1)", os.path.join(TMP, "missing.trace"))
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "a missing trace: one line, exit 2", p.stderr)
p = lua("memtap.trace:events('nonsense')", trace)
ok(p.returncode == 1 and "no event kind 'nonsense'" in p.stderr, "a wrong event kind: the script's error", p.stderr)
cut = os.path.join(TMP, "cut.trace")
open(cut, "wb").write(open(trace, "rb").read()[:-1])
p = lua("print(memtap.trace.complete, memtap.trace.nevents > 0)", cut)
ok(p.returncode == 3 and p.stdout == "false\ttrue\n", "a cut trace: the script sees what it held, exit 3",
   p.stdout + p.stderr)
done()
