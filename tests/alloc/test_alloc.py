"""memtap's caching allocator in a job and `memtap replay`, on simgpu: the pluggable entry
points driven as PyTorch drives them; simtrain served from the cache with the same ground
truth; replays of simtrain runs and of PyTorch snapshots through every policy, with the
native model checked against segment totals worked out by hand from PyTorch's rules."""
import glob
import json
import os
import pickle
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
HARNESS = os.path.join(B, "tests/alloc/pluggable")
TMP = scratch("alloc")
MiB = 1 << 20


def record(name, argv, opts=()):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    p = subprocess.run([MEMTAP, "run", "-o", os.path.join(d, "t-%p.trace"), *opts, "--", *argv],
                       capture_output=True, text=True)
    return p, sorted(glob.glob(os.path.join(d, "*.trace*")))


def report(path):
    p = subprocess.run([MEMTAP, "report", "--json", path], capture_output=True, text=True)
    return json.loads(p.stdout) if p.stdout.startswith("{") else None


def replay(path, *args):
    p = subprocess.run([MEMTAP, "replay", "--json", path, *args], capture_output=True, text=True)
    r = json.loads(p.stdout) if p.stdout.startswith("{") else None
    return p, r and {x["policy"]: x for x in r["policies"]}, r


# ---- the pluggable entry points, called as CUDAPluggableAllocator calls them ----
p, traces = record("harness", [HARNESS])
ok(p.returncode == 0 and "not ok" not in p.stdout and traces, "the CUDAPluggableAllocator harness passes",
   p.stdout[-2000:] + p.stderr[-2000:])
for line in p.stdout.splitlines():
    if line.startswith(("ok", "not ok")):
        print("# harness: " + line)
if traces:
    rep = report(traces[0])
    frag = rep and rep["devices"][0]["fragmentation"]
    ok(rep and rep["events"]["allocs"] > 1000 and rep["events"]["allocs"] == rep["events"]["frees"],
       "every block the harness had is in the trace, and freed", rep and rep["events"])
    ok(frag and frag["at_peak"]["reserved_bytes"] >= frag["at_peak"]["allocated_bytes"] > 0 and frag["block_sizes"] == "exact",
       "the report shows the allocator's segments and exact block sizes", frag and frag["at_peak"])

# ---- transparent: the runtime's own answers and last errors, under every policy ----
ERRORS = os.path.join(B, "tests/alloc/errors")
alone = subprocess.run([ERRORS], capture_output=True, text=True)
ok(alone.returncode == 0 and "cudaMalloc(SIZE_MAX): 2, last error 2" in alone.stdout
   and "cudaMallocAsync(bad stream): 400, last error 400" in alone.stdout,
   "errors.c on simgpu alone: out-of-memory and a bad stream, with their last errors", alone.stdout)
for opts in ([], ["--allocator=caching", "-O", "alloc_policy=memtap-vmm"], ["--allocator=caching", "-O", "alloc_policy=native"],
             ["--allocator=caching", "-O", "alloc_policy=bump"]):
    p, traces = record("errors%d" % len(opts), [ERRORS], ["-q"] + opts)
    diff = [(a, b) for a, b in zip(alone.stdout.splitlines(), p.stdout.splitlines()) if a != b]
    ok(p.returncode == 0 and p.stdout == alone.stdout,
       "memtap run %s: every failing call returns what the runtime returns, and leaves its last error" % " ".join(opts),
       diff or p.stdout)

# ---- simtrain on --allocator=caching: the same ground truth, exact fragmentation ----
for policy in ("memtap-vmm", "native", "memtap"):
    for args in (["--preset", "gpt2-small"], ["--preset", "gpt2-small", "--api", "async", "--zero", "2", "--dp", "4"]):
        name = "simtrain %s on %s" % (" ".join(args), policy)
        truth_path = os.path.join(TMP, "truth.json")
        p, traces = record("simtrain", [SIMTRAIN, *args, "--json", truth_path],
                           ["--allocator=caching", "-O", "alloc_policy=" + policy])
        if not ok(p.returncode == 0 and len(traces) == 1, name + ": ran", p.stderr):
            continue
        truth = json.load(open(truth_path))
        rep = report(traces[0])
        dev = rep["devices"][0]
        ok(rep["events"]["allocs"] == truth["allocs"] and rep["events"]["frees"] == truth["frees"],
           name + ": allocations and frees equal simtrain's", (rep["events"], truth["allocs"]))
        ok(dev["peak_allocated_bytes"] == truth["peak"]["bytes"], name + ": peak equals simtrain's",
           (dev["peak_allocated_bytes"], truth["peak"]["bytes"]))
        at = dev["fragmentation"]["at_peak"]
        ok(at["reserved_bytes"] >= at["allocated_bytes"] >= truth["peak"]["bytes"],
           name + ": segments hold the blocks at the peak", at)
        # one thread: replaying its blocks under the same policy gives the same peak
        _, pol, _ = replay(traces[0], "--policy", policy)
        ok(pol and pol[policy]["peak_allocated"] == at["allocated_bytes"],
           name + ": the replay of its blocks peaks where the job did",
           pol and (pol[policy]["peak_allocated"], at["allocated_bytes"]))
        os.remove(traces[0])

# ---- in a job with expandable_segments:True: memtap-vmm in native's range, never above ----
# (the range, 256 GiB per pool, is larger than simgpu's address space: the largest half
# that fits is taken, as on any device with less; before, native ran out at once)
peaks = {}
for policy in ("native", "memtap-vmm"):
    name = "simtrain gpt2-small on %s, expandable segments" % policy
    truth_path = os.path.join(TMP, "truth.json")
    p, traces = record("simtrain-x", [SIMTRAIN, "--preset", "gpt2-small", "--json", truth_path],
                       ["--allocator=caching", "-O", "alloc_policy=" + policy, "-O", "alloc_conf=expandable_segments:True"])
    if not ok(p.returncode == 0 and len(traces) == 1, name + ": ran", p.stderr[-2000:]):
        continue
    truth, dev = json.load(open(truth_path)), report(traces[0])["devices"][0]
    ok(dev["peak_allocated_bytes"] == truth["peak"]["bytes"], name + ": peak equals simtrain's",
       (dev["peak_allocated_bytes"], truth["peak"]["bytes"]))
    peaks[policy] = max(x["reserved_bytes"] for x in dev["fragmentation"]["timeline"] + [dev["fragmentation"]["at_peak"]])
    os.remove(traces[0])
ok(len(peaks) == 2 and peaks["memtap-vmm"] <= peaks["native"],
   "in a job with expandable segments memtap-vmm reserves no more than native", peaks)

# ---- knobs from a Lua policy: at start, and changed in an OOM handler ----
# At start: PyTorch's rules with roundup_power2_divisions 4 instead of the run's memtap
# policy, and a 1 GiB limit. The first allocation past it fails (after the engine has
# released its cache and retried); the on_oom handler, on the failing thread, lifts the
# limit and asks for the retry, so the job runs to the end.
POLICY = os.path.join(TMP, "knobs.lua")
with open(POLICY, "w") as f:
    f.write("""
memtap.allocator{policy = "native", roundup_power2_divisions = 4, limit_mb = 1024}
local ok, err = pcall(memtap.allocator, {bogus = 1})
memtap.log("bad knob: " .. tostring(err))
ok, err = pcall(memtap.allocator, {policy = "fast"})
memtap.log("bad policy: " .. tostring(err))
memtap.log("before the first allocation: " .. tostring(memtap.allocator_stats(0)))
memtap.on_oom(function(ev)
  local s = memtap.allocator_stats(0)
  memtap.log(string.format("oom: reserved %d ooms %d conf %s", s.reserved, s.ooms, s.conf))
  local ok, err = pcall(memtap.allocator, {policy = "bump"})
  memtap.log("bump: " .. tostring(err))
  memtap.allocator{limit_mb = 0, device = 0}
  return "retry"
end)
memtap.on_exit(function()
  local s = memtap.allocator_stats(0)
  memtap.log(string.format("exit: peak reserved %d allocs %d frees %d conf %s", s.peak_reserved, s.allocs, s.frees, s.conf))
end)
""")
truth_path = os.path.join(TMP, "knobs.json")
p, traces = record("knobs", [SIMTRAIN, "--preset", "gpt2-small", "--json", truth_path],
                   ["--allocator=caching", "-O", "alloc_policy=memtap", "--policy", POLICY])
log = {line.split(": ", 2)[2].split(":")[0]: line.split(": ", 2)[2] for line in p.stderr.splitlines()
       if line.startswith("memtap: policy: ")}
if ok(p.returncode == 0 and len(traces) == 1, "knobs from Lua: the job ran to the end", p.stderr[-2000:]):
    truth = json.load(open(truth_path))
    ok("cannot use 'bogus:1'" in log.get("bad knob", ""), "an unknown knob raises, naming it", log)
    ok("'fast' is not native" in log.get("bad policy", ""), "so does an unknown policy", log)
    ok(log.get("before the first allocation") == "before the first allocation: nil",
       "no allocator stats before the device has an allocator", log)
    oom = log.get("oom", "")
    words = oom.split()
    ok(len(words) > 4 and int(words[2]) <= 1024 * MiB and int(words[4]) >= 1 and
       "roundup_power2_divisions:4" in oom and "limit_mb:1024" in oom and "stitch:False" in oom,
       "the OOM handler sees the limit and the knobs set at start", oom)
    ok("caching cannot be turned off" in log.get("bump", ""), "caching is not turned off under a running job", log)
    words = log.get("exit", "").split()
    ok(len(words) > 8 and int(words[3]) > 1024 * MiB and int(words[5]) == int(words[7]) == truth["allocs"] and
       "limit_mb:0" in words[-1], "the handler lifted the limit: the job reserved past it", log.get("exit"))
    rep = report(traces[0])
    ok(rep["events"]["allocs"] == truth["allocs"] and rep["events"]["failed"] == 1,
       "one failed allocation in the trace, every other as simtrain made it", rep["events"])
    at = rep["devices"][0]["fragmentation"]["at_peak"]["allocated_bytes"]
    _, div4, _ = replay(traces[0], "--policy", "native", "--conf", "roundup_power2_divisions:4")
    _, plain, _ = replay(traces[0], "--policy", "native")
    ok(div4 and plain and div4["native"]["peak_allocated"] == at != plain["native"]["peak_allocated"],
       "the blocks were rounded as the policy said at start",
       div4 and plain and (at, div4["native"]["peak_allocated"], plain["native"]["peak_allocated"]))
    script = os.path.join(TMP, "marks.lua")
    with open(script, "w") as f:
        f.write('for e in memtap.trace:events("nvtx_mark") do print(e.name) end\n')
    marks = subprocess.run([MEMTAP, "lua", script, traces[0]], capture_output=True, text=True).stdout
    ok("memtap.allocator 0 limit_mb:0" in marks.splitlines(), "the trace notes the change", marks)
    ok(any(m.startswith("memtap.allocator 0 start caching:True,") and "roundup_power2_divisions:4," in m and
           "limit_mb:1024" in m for m in marks.splitlines()),
       "and the knobs the device's allocator started with", marks)

# ---- the memviz export of the allocator's trace: its real segments, blocks inside ----
for policy in ("memtap-vmm", "native"):
    name = "memviz export of a %s run" % policy
    p, traces = record("memviz-" + policy, [SIMTRAIN, "--preset", "gpt2-small", "--no-teardown"],
                       ["--allocator=caching", "-O", "alloc_policy=" + policy])
    pk = os.path.join(TMP, "memviz-%s.pickle" % policy)
    e = subprocess.run([MEMTAP, "export", "--format=memviz", "-o", pk, *traces], capture_output=True, text=True)
    if not ok(p.returncode == 0 and e.returncode == 0, name + ": exported", p.stderr + e.stderr):
        continue
    snap = pickle.load(open(pk, "rb"))
    segs, entries = snap["segments"], snap["device_traces"][0]
    end = report(traces[0])["devices"][0]["fragmentation"]["at_exit"]
    tiled = all(b["address"] == g["address"] + sum(x["size"] for x in g["blocks"][:i])
                for g in segs for i, b in enumerate(g["blocks"])) and \
        all(sum(b["size"] for b in g["blocks"]) == g["total_size"] for g in segs)
    ok(tiled, name + ": blocks tile every segment")
    ok((len(segs), sum(g["total_size"] for g in segs), sum(g["allocated_size"] for g in segs)) ==
       (end["segments"], end["reserved_bytes"], end["allocated_bytes"]),
       name + ": the segments the report counts at exit, with their live blocks", (len(segs), end))
    ok(any(b["state"] == "inactive" for g in segs for b in g["blocks"]) and
       all(b["state"] == "inactive" or b["frames"] for g in segs for b in g["blocks"]),
       name + ": cached free space as inactive blocks, live ones with their stacks")
    actions = {x["action"] for x in entries}
    allocs = sum(x["action"] == "alloc" for x in entries)
    if policy == "memtap-vmm":
        ok(all(g["is_expandable"] for g in segs) and {"segment_map", "segment_unmap"} <= actions,
           name + ": VMM pages as segment_map/unmap, joined into expandable segments", actions)
    else:
        ok(not any(g["is_expandable"] for g in segs) and
           0 < sum(x["action"] == "segment_alloc" for x in entries) < allocs / 4,
           name + ": plain segments, far fewer than allocations", actions)
    again = report(pk)
    back = again and again["devices"][0]["fragmentation"]["at_exit"]
    ok(back and all(back[k] == end[k] for k in ("segments", "reserved_bytes", "allocated_bytes", "requested_bytes")),
       name + ": imported again, the same segments and blocks", (back, end))

# ---- memtap replay of simtrain runs (device allocations, tensor by tensor) ----
for preset in ("gpt2-small", "gpt-1.3b"):
    p, traces = record("replay-" + preset, [SIMTRAIN, "--preset", preset])
    _, pol, raw = replay(traces[0], "--find-min-capacity")
    if not ok(pol and set(pol) == {"native", "memtap", "memtap-vmm", "bump"}, preset + ": all four policies"):
        continue
    ratio = {k: v["peak_reserved"] / v["peak_allocated"] for k, v in pol.items()}
    ok(ratio["memtap-vmm"] <= 1.02, preset + ": memtap-vmm reserves at most 2% over allocated", ratio)
    ok(ratio["memtap-vmm"] <= ratio["native"], preset + ": and no more than the native model", ratio)
    ok(pol["bump"]["peak_reserved"] == pol["bump"]["peak_allocated"], preset + ": bump reserves what it allocates")
    ok(all(v["peak_requested"] == pol["bump"]["peak_requested"] for v in pol.values()),
       preset + ": the same requests under every policy")
    ok(pol["memtap-vmm"]["min_capacity"] <= pol["native"]["min_capacity"],
       preset + ": memtap-vmm fits in no more memory than native",
       (pol["memtap-vmm"]["min_capacity"], pol["native"]["min_capacity"]))
    ok(all(len(v["timeline"]) > 10 for v in pol.values()), preset + ": a fragmentation timeline per policy")
    cap = pol["native"]["min_capacity"] - 4 * MiB
    _, small, _ = replay(traces[0], "--policy", "native", "--capacity", str(cap))
    ok(small and small["native"]["ooms"] > 0, preset + ": below native's smallest capacity, native fails", cap)
    text = subprocess.run([MEMTAP, "replay", traces[0]], capture_output=True, text=True).stdout
    ok("memtap-vmm" in text and "peak reserved" in text, preset + ": a table as text")
    # exported as a PyTorch snapshot, its cudaFree's segment frees are no releases
    snap = traces[0] + ".pickle"
    subprocess.run([MEMTAP, "export", "--format=memviz", "-o", snap, traces[0]], capture_output=True)
    _, spol, sraw = replay(snap)
    ok(sraw and sraw["releases"] == 0 and {k: v["peak_reserved"] for k, v in spol.items()} ==
       {k: v["peak_reserved"] for k, v in pol.items()}, preset + ": its export replays alike, without releases",
       sraw and (sraw["releases"], {k: v["peak_reserved"] for k, v in spol.items()}))

# ---- memtap-vmm never above native: 500 live blocks of 2 MiB + 512 B (an RMM log) ----
# (issue 20: each block had its own range of whole pages, 1.95 GiB against native's 1.09)
rmm = os.path.join(TMP, "pages.csv")
with open(rmm, "w") as f:
    f.write("Thread,Time,Action,Pointer,Size,Stream\n")
    for i in range(500):
        f.write("1,00:00:00.%06d,allocate,0x%x,%d,0x0\n" % (i, (i + 1) << 32, 2 * MiB + 512))
_, pol, _ = replay(rmm)
ok(pol and pol["memtap-vmm"]["peak_reserved"] <= pol["native"]["peak_reserved"],
   "500 x (2 MiB + 512 B): memtap-vmm reserves no more than native",
   pol and {k: v["peak_reserved"] for k, v in pol.items()})

# ---- and on large blocks (1 MiB to 8 GiB, freed at random), where whole runs of pages ----
# move at once (issue 20: one backend call per 2 MiB page made replay cost ~1,000 ns an op)
for seed in range(4):
    r, live = random.Random(seed), []
    rmm = os.path.join(TMP, "large-%d.csv" % seed)
    with open(rmm, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for i in range(1, 1501):
            if live and r.random() < (0.5 if len(live) > 12 else 0.3):
                a, size = live.pop(r.randrange(len(live)))
                f.write("1,00:00:00.%06d,free,0x%x,%d,0x0\n" % (i, a, size))
            else:
                live.append(((i + 1) << 34, int(2 ** r.uniform(20, 33))))
                f.write("1,00:00:00.%06d,allocate,0x%x,%d,0x0\n" % (i, *live[-1]))
    _, pol, _ = replay(rmm, "--policy=native,memtap-vmm")
    peak = pol and {k: v["peak_reserved"] for k, v in pol.items()}
    ok(pol and peak["memtap-vmm"] <= peak["native"] and
       peak["memtap-vmm"] <= 1.02 * pol["memtap-vmm"]["peak_requested"],
       "large blocks freed at random (seed %d): memtap-vmm within 1.02 of requested, no more than native" % seed,
       pol and (peak, pol["memtap-vmm"]["peak_requested"]))

# ---- PyTorch snapshots: the native model against segment totals worked out by hand ----
T0 = 1718000000000000


def snapshot(entries, segments):
    return {"segments": segments, "device_traces": [[
        dict(e, stream=0, time_us=T0 + i, frames=[{"filename": "t.py", "line": 1, "name": "f"}])
        for i, e in enumerate(entries)]],
        "allocator_settings": {}, "external_annotations": []}


def seg(addr, total):
    return {"device": 0, "address": addr, "total_size": total, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": []}


# What PyTorch's rules give (reference/pytorch-allocator.md §5): 100 B -> a 2 MiB small
# segment; two 5 MiB -> one 20 MiB segment (the second split from the first's); 30 MiB ->
# its own 30 MiB segment; 1.5 MiB (large pool) -> the 20 MiB segment's free 10 MiB; after
# the 30 MiB is freed, 28 MiB is best fit into its cached segment (2 MiB left is > 1 MiB:
# split); 700 KiB -> the small segment. Total 52 MiB.
S = 0x7f0000000000
ENTRIES = []
for action, addr, size in (("segment_alloc", S, 2 * MiB), ("alloc", S, 100),
                           ("segment_alloc", S + 64 * MiB, 20 * MiB), ("alloc", S + 64 * MiB, 5 * MiB),
                           ("alloc", S + 69 * MiB, 5 * MiB),
                           ("segment_alloc", S + 128 * MiB, 30 * MiB), ("alloc", S + 128 * MiB, 30 * MiB),
                           ("alloc", S + 74 * MiB, 3 * MiB // 2),
                           ("free_requested", S + 128 * MiB, 30 * MiB), ("free_completed", S + 128 * MiB, 30 * MiB),
                           ("alloc", S + 128 * MiB, 28 * MiB), ("alloc", S + 512, 700 * 1024),
                           ("free_requested", S + 64 * MiB, 5 * MiB), ("free_completed", S + 64 * MiB, 5 * MiB)):
    ENTRIES.append({"action": action, "addr": addr, "size": size})
path = os.path.join(TMP, "hand.pickle")
with open(path, "wb") as f:
    pickle.dump(snapshot(ENTRIES, [seg(S, 2 * MiB), seg(S + 64 * MiB, 20 * MiB), seg(S + 128 * MiB, 30 * MiB)]), f)
p, pol, raw = replay(path, "--policy", "native")
ok(raw and raw["blocks"] and raw["final_segments"] == 52 * MiB, "the snapshot's segments: 52 MiB",
   raw and raw["final_segments"])
ok(pol and pol["native"]["final_reserved"] == 52 * MiB and pol["native"]["peak_reserved"] == 52 * MiB,
   "native replay reproduces the snapshot's segment total", pol and pol["native"])
ok(pol and pol["native"]["segments"] == 3, "in as many segments", pol and pol["native"]["segments"])
text = subprocess.run([MEMTAP, "replay", path, "--policy", "native"], capture_output=True, text=True).stdout
ok("52.00 MiB in the trace, 52.00 MiB in the native replay (the same)" in text, "said in the text", text)

# The job's own empty_cache (a run of segment_free entries) is replayed: a 40 MiB segment
# freed and released, then 36 MiB asked for, gets a segment of its own (88 MiB at the end,
# 92 at the peak); without the release it would be split from the cached 40 (92 and 92).
R = S + 256 * MiB
released = ENTRIES + [{"action": a, "addr": addr, "size": size} for a, addr, size in (
    ("segment_alloc", R, 40 * MiB), ("alloc", R, 40 * MiB), ("free_requested", R, 40 * MiB),
    ("free_completed", R, 40 * MiB), ("segment_free", R, 40 * MiB),
    ("segment_alloc", R + 64 * MiB, 36 * MiB), ("alloc", R + 64 * MiB, 36 * MiB))]
rpath = os.path.join(TMP, "released.pickle")
with open(rpath, "wb") as f:
    pickle.dump(snapshot(released, [seg(S, 2 * MiB), seg(S + 64 * MiB, 20 * MiB), seg(S + 128 * MiB, 30 * MiB),
                                    seg(R + 64 * MiB, 36 * MiB)]), f)
p, pol, raw = replay(rpath, "--policy", "native,memtap-vmm")
ok(raw and raw["releases"] == 1 and raw["final_segments"] == 88 * MiB, "a release in the snapshot",
   raw and (raw["releases"], raw["final_segments"]))
ok(pol and pol["native"]["final_reserved"] == 88 * MiB and pol["native"]["peak_reserved"] == 92 * MiB,
   "native replay releases where the job did", pol and pol["native"])
ok(pol and pol["memtap-vmm"]["final_reserved"] <= 88 * MiB, "so does memtap-vmm", pol and pol["memtap-vmm"])
text = subprocess.run([MEMTAP, "replay", rpath, "--policy", "native"], capture_output=True, text=True).stdout
ok("released its cached segments once" in text and "88.00 MiB in the trace, 88.00 MiB in the native replay (the same)"
   in text, "said in the text", text)

# Ties go as in the job. A (60 MiB, made for a0) holds p (20) and q (40); B (40 MiB, made
# for b0) comes next, at a lower address (as CUDA gave it). q and b0 freed: two free 40 MiB
# blocks; x (20 MiB) takes the one at the lower address, B's. p freed, A is all free, so y
# (60 MiB) takes A: 100 MiB. With addresses of its own, counting up, the replay put x in
# A and needed a third segment for y (160 MiB): PyTorch's best fit breaks a tie by address.
A, B = S + (4 << 30), S + (2 << 30)
ties = [{"action": a, "addr": addr, "size": size} for a, addr, size in (
    ("segment_alloc", A, 60 * MiB), ("alloc", A, 60 * MiB), ("free_requested", A, 60 * MiB),
    ("free_completed", A, 60 * MiB), ("alloc", A, 20 * MiB), ("alloc", A + 20 * MiB, 40 * MiB),
    ("segment_alloc", B, 40 * MiB), ("alloc", B, 40 * MiB),
    ("free_requested", A + 20 * MiB, 40 * MiB), ("free_completed", A + 20 * MiB, 40 * MiB),
    ("free_requested", B, 40 * MiB), ("free_completed", B, 40 * MiB), ("alloc", B, 20 * MiB),
    ("free_requested", A, 20 * MiB), ("free_completed", A, 20 * MiB), ("alloc", A, 60 * MiB))]
tpath = os.path.join(TMP, "ties.pickle")
with open(tpath, "wb") as f:
    pickle.dump(snapshot(ties, [seg(B, 40 * MiB), seg(A, 60 * MiB)]), f)
p, pol, raw = replay(tpath, "--policy", "native,memtap-vmm")
ok(pol and pol["native"]["peak_reserved"] == 100 * MiB and pol["native"]["final_reserved"] == 100 * MiB and
   pol["memtap-vmm"]["peak_reserved"] <= 100 * MiB, "a tie between equal free blocks goes to the job's lowest "
   "address", pol and {k: v["peak_reserved"] >> 20 for k, v in pol.items()})

# The job's segments where the replay's own addresses would fall (at 1 TiB, where its
# counter began) or at 0 (the engine's empty key): none of them overlaps a segment of the
# replay's own, none is at 0. Each block counts: 512 B, 30 MiB and 512 B.
odd = [{"action": a, "addr": addr, "size": size} for a, addr, size in (
    ("segment_alloc", 1 << 40, 2 * MiB), ("alloc", 1 << 40, 512), ("segment_alloc", S, 40 * MiB),
    ("alloc", S, 30 * MiB), ("segment_alloc", 0, 2 * MiB), ("alloc", 0, 512))]
opath = os.path.join(TMP, "odd-places.pickle")
with open(opath, "wb") as f:
    pickle.dump(snapshot(odd, [seg(0, 2 * MiB), seg(S, 40 * MiB), seg(1 << 40, 2 * MiB)]), f)
p, pol, raw = replay(opath, "--policy", "native,memtap-vmm")
ok(pol and all(v["peak_allocated"] == 30 * MiB + 1024 for v in pol.values()),
   "the job's segments at the replay's own addresses or at 0: every block counted",
   pol and {k: v["peak_allocated"] for k, v in pol.items()})

# ---- a job with expandable_segments:True: memtap-vmm runs in it too, never above native ----
# (a CS336 model's forward passes: 294 parameters, each just over a multiple of 2 MiB, had
# memtap-vmm in native's own segments, each ending in a page partly used, above native)
r, ents, at = random.Random(3), [], S
for i in range(294):
    ents.append({"action": "alloc", "addr": at, "size": r.randrange(3, 40) * 2 * MiB + 4096})
    at += 1 << 30
for i in range(200):  # activations, freed as they go
    size = r.randrange(1, 200) * MiB + r.randrange(8) * 65536
    ents += [{"action": "alloc", "addr": at, "size": size}, {"action": "free_requested", "addr": at, "size": size},
             {"action": "free_completed", "addr": at, "size": size}][:1 if i % 3 else 3]
    at += 1 << 30
xsnap = snapshot(ents, [])
xsnap["allocator_settings"] = {"expandable_segments": True, "max_split_size": -1}
xpath = os.path.join(TMP, "expandable-params.pickle")
with open(xpath, "wb") as f:
    pickle.dump(xsnap, f)
p, pol, raw = replay(xpath, "--policy", "native,memtap-vmm")
ok(raw and raw["job_conf"] == "expandable_segments:True" and "memtap-vmm" in p.stdout and
   "native, memtap and memtap-vmm run with the job's own" in subprocess.run(
       [MEMTAP, "replay", xpath], capture_output=True, text=True).stdout,
   "expandable segments: every caching policy runs with the job's setting, and says so", raw and raw["job_conf"])
ok(pol and pol["memtap-vmm"]["peak_reserved"] <= pol["native"]["peak_reserved"],
   "parameters just over a page multiple in expandable segments: memtap-vmm reserves no more than native",
   pol and {k: v["peak_reserved"] / MiB for k, v in pol.items()})

# expandable_segments:True: one growing range of 20 MiB pages for the large pool
p, pol, _ = replay(path, "--policy", "native", "--conf", "expandable_segments:True")
ok(pol and pol["native"]["peak_reserved"] % (2 * MiB) == 0 and pol["native"]["peak_reserved"] <= 62 * MiB,
   "expandable segments: pages of the one range", pol and pol["native"]["peak_reserved"])

# ---- bad input: one line, a non-zero exit ----
for args, what in ((["--policy", "best"], "unknown policy"), (["--capacity", "lots"], "not a size"),
                   (["--conf", "max_split_size_mb:x"], "cannot use")):
    p = subprocess.run([MEMTAP, "replay", path, *args], capture_output=True, text=True)
    ok(p.returncode == 2 and what in p.stderr and len(p.stderr.splitlines()) == 1, "replay " + " ".join(args),
       p.stderr)
cut = os.path.join(TMP, "cut.pickle")
open(cut, "wb").write(open(path, "rb").read()[:100])
p = subprocess.run([MEMTAP, "replay", cut], capture_output=True, text=True)
ok(p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "cut short" in p.stderr,
   "a truncated snapshot: one line, exit 2 (a pickle cut short holds nothing usable)", p.stderr)

done()
