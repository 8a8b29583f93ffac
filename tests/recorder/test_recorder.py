"""The recorder, end to end: memtap run over simtrain and over workloads that reach
device memory by every path, checked against what each program knows it did."""
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests", "recorder"))
from tap import done, ok  # noqa: E402
from recording import (B, LIB, MEMTAP, SIMTRAIN, TMP, TSAN, WORK, dump, one_trace, record,  # noqa: E402
                       report, sizes)

# ---- simtrain: counts and peak equal the ground truth; stacks name the allocating function ----
SIMTRAIN_FUNCS = {"alloc_params", "stash_debug_tensor", "embedding_forward", "layer_forward", "head_forward",
                  "gather_layer_params", "make_grads", "head_backward", "layer_backward", "optimizer_step"}
for args in (["--preset", "tiny"], ["--preset", "gpt2-small"], ["--preset", "gpt2-small", "--api", "async"],
             ["--preset", "gpt2-small", "--zero", "3", "--dp", "4", "--recompute", "full", "--leak", "1M"]):
    name = "simtrain " + " ".join(args)
    truth_path = os.path.join(TMP, "truth.json")
    p, traces = record("simtrain", [SIMTRAIN, *args, "--json", truth_path])
    if not one_trace(name, traces, p):
        continue
    truth = json.load(open(truth_path))
    _, rep = report(traces[0])
    ok(rep["events"]["allocs"] == truth["allocs"], name + ": allocations equal simtrain's",
       (rep["events"]["allocs"], truth["allocs"]))
    ok(rep["events"]["frees"] == truth["frees"], name + ": frees equal simtrain's")
    ok(rep["devices"][0]["peak_allocated_bytes"] == truth["peak"]["bytes"], name + ": peak equals simtrain's",
       (rep["devices"][0]["peak_allocated_bytes"], truth["peak"]["bytes"]))
    ok(rep["events"]["dropped"] == 0 and rep["complete"], name + ": complete, nothing dropped")
    ev = [e for e in dump(traces[0]) if e["kind"] == "alloc"]
    bad = [e for e in ev if "tensor_new" not in e["functions"] or not SIMTRAIN_FUNCS & set(e["functions"])]
    ok(ev and not bad, name + ": every allocation's stack names the simtrain function that made it",
       bad[:1])
    os.remove(traces[0])

# ---- every allocation path, each recorded exactly once ----
p, traces = record("runtime", [WORK, "runtime"])
if one_trace("runtime API", traces, p):
    ev = dump(traces[0])
    ok(sizes(ev, "alloc") == [102400, 1000001, 1000006, 1000007, 1000008, 1024000], "runtime API: device allocations",
       sizes(ev, "alloc"))
    ok(sizes(ev, "managed_alloc") == [1000003], "runtime API: managed memory")
    ok(sizes(ev, "host_alloc") == [1000004, 1000005], "runtime API: pinned host memory, a kind of its own")
    ok(all("runtime_paths" in e["functions"] for e in ev if e["kind"].endswith("alloc")),
       "runtime API: stacks start at the application's call site")
    ok(all(e["modules"][e["functions"].index("runtime_paths")] == "workload" for e in ev
           if e["kind"].endswith("alloc")), "memtap dump --json: each frame's library beside its function",
       [e["modules"] for e in ev][:2])
    _, rep = report(traces[0])
    ok(rep["events"]["frees"] == 9 and rep["live_at_exit"] == [], "runtime API: every free matched, nothing live")
    ok(any(e["kind"] == "free" and e["error"] for e in ev), "runtime API: the failed free is recorded with its error")

p, traces = record("driver", [WORK, "driver"])
if one_trace("driver API (-lcuda)", traces, p):
    ev = dump(traces[0])
    ok(sizes(ev, "alloc") == [2000003, 2000008, 2000009, 2000010, 2048000], "driver API: device allocations",
       sizes(ev, "alloc"))
    ok(sizes(ev, "managed_alloc") == [2000005], "driver API: managed")
    ok(sizes(ev, "host_alloc") == [2000006, 2000007], "driver API: pinned host")
    ok(sizes(ev, "vmm_create") == [2 << 20, 4 << 20], "driver API: cuMemCreate")
    ok(len([e for e in ev if e["kind"] == "vmm_map"]) == 2, "driver API: cuMemMap")
    kinds = [e["kind"] for e in ev]
    ok(all(k in kinds for k in ("pool_create", "pool_trim", "pool_destroy", "vmm_reserve", "vmm_unmap",
                                "vmm_release", "vmm_addr_free")), "driver API: pools and the VMM lifecycle")
    _, rep = report(traces[0])
    ok(rep["live_at_exit"] == [], "driver API: VMM memory released with its last mapping", rep["live_at_exit"])
    ok(rep["devices"][0]["peak_allocated_bytes"] >= 6 << 20, "driver API: VMM physical memory counts in the peak")
    # a handle released while mapped keeps its memory until the unmap (the second map comes after)
    script = os.path.join(TMP, "vmm_live.lua")
    open(script, "w").write("""
local last
for e in memtap.trace:events("vmm_map") do last = e end
local n = 0
for _, l in ipairs(memtap.trace:live_at(last.time)) do if l.kind == "vmm" then n = n + l.size end end
print(n)""")
    p = subprocess.run([MEMTAP, "lua", script, traces[0]], capture_output=True, text=True)
    ok(p.stdout.strip() == str(6 << 20), "driver API: a released handle's memory lives while it is mapped",
       p.stdout + p.stderr)

p, traces = record("procaddr", [WORK, "procaddr"])
if one_trace("dlopen + cuGetProcAddress", traces, p):
    ev = dump(traces[0])
    ok(sizes(ev, "alloc") == [3000001, 3000002, 3000003, 3000004, 3000005, 3000006],
       "cuGetProcAddress_v2 at 3020 and 12000, async with and without the per-thread flag, v1, dlsym",
       sizes(ev, "alloc"))
    _, rep = report(traces[0])
    ok(rep["events"]["frees"] == 6, "cuGetProcAddress: frees recorded")

p, traces = record("entrypoint", [WORK, "entrypoint"])
if one_trace("cudaGetDriverEntryPointByVersion", traces, p):
    ev = dump(traces[0])
    ok(sizes(ev, "vmm_create") == [2 << 20, 4 << 20], "entry points: cuMemCreate recorded once each")
    ok(len([e for e in ev if e["kind"] == "vmm_map"]) == 2, "entry points: cuMemMap recorded")
    maps = [e for e in ev if e["kind"] == "vmm_map"]
    ok(all("vmm_paths" in e["functions"] for e in maps), "entry points: mappings carry the mapper's stack")
    _, rep = report(traces[0])
    ok(rep["devices"][0]["peak_allocated_bytes"] == 6 << 20 and rep["live_at_exit"] == [],
       "entry points: 6 MiB at the peak, all released", rep["devices"])

p, traces = record("plugin", [WORK, "plugin", os.path.join(B, "tests/recorder/.libs/libplugin.so")])
if one_trace("a library loaded with dlopen after start", traces, p):
    ev = [e for e in dump(traces[0]) if e["kind"] == "alloc"]
    ok(ev and ev[0]["size"] == 12000006 and "plugin_alloc" in ev[0]["functions"],
       "its allocation's stack is symbolized from the module map written after the load", ev)

p, traces = record("lifetime", [WORK, "lifetime"], env={"WORKLOAD_LIFETIME": "1"})
if one_trace("before main and after exit", traces, p):
    ev = dump(traces[0])
    ok(sizes(ev, "alloc") == [12000007, 12000008], "allocations before main and after exit began are recorded",
       sizes(ev, "alloc"))
    _, rep = report(traces[0])
    ok([g["bytes"] for g in rep["live_at_exit"]] == [12000008] and rep["events"]["frees"] == 1,
       "the free in an atexit handler is matched; the late allocation is live at exit", rep["live_at_exit"])

p, traces = record("abort", [WORK, "abort"])
ok(p.returncode == -6 and len(traces) == 1, "abort(): memtap run ends by SIGABRT as the job did, a trace left", p.stderr)
if traces:
    rp, rep = report(traces[0])
    ok(rp.returncode == 3 and rep and not rep["complete"], "abort(): the trace reads back, cut short", rp.stderr)

# ---- a library's constructor that allocates before memtap's own runs ----
p, traces = record("early", [os.path.join(B, "tests/recorder/early")])
if one_trace("an allocation in a library's constructor", traces, p):
    ev = [e for e in dump(traces[0]) if e["kind"] == "alloc"]
    ok([(e["size"], e["flags"] >> 7) for e in ev] == [(22000040, 1), (22000041, 0)] and
       "allocate_early" in ev[0]["functions"], "an allocation made before memtap's constructor ran is recorded, "
       "with its stack, marked early; the next one is not", ev)
    _, rep = report(traces[0])
    ok(rep["events"]["unmatched_frees"] == 0 and rep["events"]["early_allocs"] == 1 and
       rep["events"]["early_alloc_bytes"] == 22000040, "its free matches it; the report counts it", rep["events"])
    text = subprocess.run([MEMTAP, "report", traces[0]], capture_output=True, text=True).stdout
    ok("1 of them (20.98 MiB) made in constructors of libraries loaded after memtap" in text,
       "and says so", text[:400])

# ---- NVTX phases, tags, marks, snapshots, OOM ----
p, traces = record("nvtx", [WORK, "nvtx"])
if one_trace("NVTX", traces, p):
    phase = {e["size"]: e["phase"] for e in dump(traces[0]) if e["kind"] == "alloc"}
    ok(phase == {10000001: "forward", 10000002: "layer.0", 10000003: "optimizer"},
       "NVTX push/pop and start/end ranges name each allocation's phase", phase)

snap = os.path.join(TMP, "snapshot.trace")
p, traces = record("api", [WORK, "api", snap])
if one_trace("public API", traces, p):
    ev = dump(traces[0])
    tags = {e["size"]: e["tag"] for e in ev if e["kind"] == "alloc"}
    ok(tags.get(9000001) == "params" and tags.get(9000002) == "none", "memtap_tag_push tags what follows", tags)
    ok(any(e["kind"] == "tag_range" and e["tag"] == "activations" and e["size"] == 9000002 for e in ev),
       "memtap_tag_range is recorded")
    ok(any(e["kind"] == "mark" and e["phase"] == "" for e in ev), "memtap_mark is recorded")
    sp, srep = report(snap)
    live = sorted(g["bytes"] for g in (srep or {}).get("live_at_exit", []))
    ok(sp.returncode == 0 and live == [9000001, 9000002, 9000003], "memtap_snapshot: a closed trace of the moment",
       (sp.returncode, live, sp.stderr))

p, traces = record("oom", [WORK, "oom"], env={"SIMGPU_MEM": "1GiB"})
if one_trace("OOM", traces, p):
    _, rep = report(traces[0])
    o = rep["oom"]
    ok(len(o) == 1 and o[0]["out_of_memory"] and o[0]["size"] == (1 << 30) + 1 and o[0]["total_bytes"] == 1 << 30
       and o[0]["free_bytes"] == 1 << 30, "an OOM event carries size, device, free and total", o)
    ok(o and any(f["function"] == "oom" for f in o[0]["frames"]), "and the stack of the failing call")

# ---- threads, fork, exec, signals, exceptions, another RTLD_NEXT preload ----
p, traces = record("threads", [WORK, "threads", "64"])
if one_trace("64 threads", traces, p):
    _, rep = report(traces[0])
    ok(rep["events"]["allocs"] == 64000 and rep["events"]["frees"] == 64000 and rep["events"]["dropped"] == 0,
       "64 threads: every allocation and free recorded, none dropped", rep["events"])
    # read back thread by thread: each thread's events under its own index, named once by its own id
    per, tids = {}, {}
    for e in dump(traces[0]):
        if e["kind"] == "thread":
            tids.setdefault(e["thread"], []).append(e["aux"])
        elif e["kind"] in ("alloc", "free"):
            per.setdefault(e["thread"], {"alloc": 0, "free": 0})[e["kind"]] += 1
    ok(len(per) == 64 and all(n == {"alloc": 1000, "free": 1000} for n in per.values()) and
       all(len(tids.get(t, [])) == 1 for t in per) and len({tids[t][0] for t in per if t in tids}) == 64 and
       all(tids[t][0] != int(rep["process"]["pid"]) for t in per if t in tids),
       "64 threads read back: each thread's 1000 allocations and frees under its own index, each thread named once, "
       "by its own thread id", (len(per), len(tids)))

# ---- every event made is in the trace or counted as dropped, with its reason ----
def accounting(name, rep, made):
    """made = in the trace + dropped; the END chunk's count is what the file holds; every drop has a reason.
    memtap makes events of its own beside the program's: its readings of the driver's count at the
    device's first use, and at exit when the exiting thread's context still answers (1 or 2)."""
    e = rep["events"]
    ok(e["total"] + e["dropped"] - made in (1, 2) and e["written"] == e["total"] and
       sum(e["dropped_by"].values()) == e["dropped"] and rep["complete"],
       name + ": every event made is written or counted as dropped with its reason", (made, e, rep["complete"]))
    return e


def drop_line(p):
    return ([l for l in p.stderr.splitlines() if "dropped" in l] or [""])[-1]


# a thread makes 2000 events and a THREAD event; the process a DEVICE, the main thread's THREAD and EXIT
for opts, n, env, what in ((["-O", "ring=65536"], 64, None, "ring=65536, 64 threads"),
                           (["-O", "ring=8192"], 1000, None, "1000 threads, the default ring (8192)"),
                           (["-O", "ring=16777216"], 4, None, "ring=16777216, 4 threads"),
                           (["-O", "max_memory=90M"], 200, {"WORKLOAD_BARRIER": "1"},
                            "max_memory=90M, 200 threads alive at once")):
    if TSAN and n > 200:
        continue  # ThreadSanitizer: 1000 threads take minutes
    p, traces = record("account", [WORK, "threads", str(n)], opts=opts, env=env)
    if not one_trace(what, traces, p):
        continue
    _, rep = report(traces[0])
    e = accounting(what, rep, n * 2001 + 3)
    line = drop_line(p)
    ok(("raise -O ring" in line) == ("ring_full" in e["dropped_by"]),
       what + ": the summary advises a bigger ring only when full rings dropped events", line)
    if "max_memory" in what:
        ok(e["dropped_by"].get("memory", 0) > 0 and "max_memory" in line,
           what + ": events past the memory cap are counted as such, and the summary names max_memory", (e, line))
    if "16777216" in what:
        ok("ring=16777216" in p.stderr and "raise -O max_memory" in p.stderr and e["dropped"] == 0,
           what + ": the options are checked against max_memory when read, with what to change", p.stderr)
    os.remove(traces[0])

p, traces = record("fork", [WORK, "fork"])
if one_trace("fork", traces, p):
    ok(sizes(dump(traces[0]), "alloc") == [5000001, 5000003], "a forked child is not recorded into the parent's trace")
# forked just after the writer thread was made: 2-3% of such children hung for good under
# ASan (the thread's start-up held the sanitizer's allocator lock at the fork); a run of
# them, each killed after a minute, catches that most of the time
stuck = []
for i in range(20):
    p, _ = record("fork-%d" % i, [WORK, "fork"], timeout=60)
    if p.returncode:
        stuck.append(p.stderr[-200:])
ok(not stuck, "fork, 20 times: no child hangs or fails", stuck)
p, traces = record("follow", [WORK, "fork"], opts=["--follow-fork"])
if TSAN:  # ThreadSanitizer cannot start threads in the child of a multi-threaded fork
    traces = []
else:
    ok(p.returncode == 0 and len(traces) == 2, "--follow-fork: the child gets its own trace", traces)
if len(traces) == 2:
    got = sorted(tuple(sizes(dump(t), "alloc")) for t in traces)
    ok(got == [(5000001, 5000003), (5000002,)], "--follow-fork: each process's own allocations", got)

# a child that goes on recording after fork() writes a trace that reads back by itself:
# each string and stack its events name, and its device and thread, are in its own file,
# though the parent had interned them (and written them) before the fork
p, traces = record("forkshare", [WORK, "forkshare", os.path.join(TMP, "forkshare.snapshot")], opts=["--follow-fork"])
if not TSAN and ok(p.returncode == 0 and len(traces) == 2, "--follow-fork from a second thread: a trace each",
                   (traces, p.stderr)):
    alone = {}
    for t in traces:
        ev = dump(t)
        alone[18000012 in sizes(ev, "alloc")] = (t, ev, report(t)[1])
    (ct, cev, crep), (pt, pev, prep) = alone.get(True, ("", [], None)), alone.get(False, ("", [], None))
    ok(crep and crep["complete"] and crep["problem"] is None and sizes(cev, "alloc") == [18000012, 18000013],
       "the child's trace read alone: closed, whole, its own two allocations", crep and (crep["problem"], cev))
    by = {e["size"]: e for e in pev + cev if e["kind"] == "alloc"}
    ok(18000012 in by and 18000002 in by and by[18000012]["functions"] == by[18000002]["functions"] and
       by[18000012]["functions"][:2] == ["shared_site", "fork_share"],
       "the child's allocation from the parent's call site has the parent's stack, from the child's file alone",
       [by.get(k, {}).get("functions") for k in (18000002, 18000012)])
    ok(by.get(18000013, {}).get("functions", [""])[0].startswith("child_site"),
       "and its own call site its own stack", by.get(18000013))
    ok(all(e["phase"] == "forkshare step" for e in cev if e["kind"] in ("alloc", "mark")),
       "the NVTX range the parent opened names the child's events in the child's file",
       [(e["kind"], e["phase"]) for e in cev])
    script = os.path.join(TMP, "names.lua")
    open(script, "w").write('for e in memtap.trace:events() do if e.name then print(e.kind .. "=" .. e.name) end '
                            'if e.kind == "thread" then print("thread=" .. e.aux) end end\n')
    names = subprocess.run([MEMTAP, "lua", script, ct], capture_output=True, text=True).stdout.split("\n") \
        if ct else []
    ok("mark=forkshare mark" in names, "the mark's name the parent interned, read from the child's file", names)
    pdev, cdev = (prep or {}).get("devices", [{}])[0], (crep or {}).get("devices", [{}])[0]
    ok(cdev.get("name") and cdev.get("name") == pdev.get("name") and cdev.get("capacity_bytes") ==
       pdev.get("capacity_bytes") > 0 and "device=" + cdev["name"] in names,
       "the child's file names the device and its capacity itself", (cdev, pdev))
    threads = [n for n in names if n.startswith("thread=")]
    ok(crep and threads == ["thread=" + crep["process"]["pid"]],
       "the child's file names its one thread, by the child's own id", (threads, crep and crep["process"]))

p, traces = record("exec", [WORK, "exec"])
ok(p.returncode == 0 and len(traces) == 2, "an exec'd child records into its own file", (traces, p.stderr))
if len(traces) == 2:
    got = sorted(len(sizes(dump(t), "alloc")) for t in traces)
    ok(got == [1, 6], "parent and exec'd child each hold their own allocations", got)
    # the exec'd child's file read by itself: closed, its device named, its thread by its own id
    child = max(traces, key=lambda t: len(sizes(dump(t), "alloc")))
    _, crep = report(child)
    cev = dump(child)
    dev = (crep or {}).get("devices", [{}])[0]
    ok(crep and crep["complete"] and crep["problem"] is None and dev.get("name", "").startswith("simgpu") and
       dev.get("capacity_bytes", 0) > 0 and [e["aux"] for e in cev if e["kind"] == "thread"] ==
       [int(crep["process"]["pid"])] and all(e["functions"] for e in cev if e["kind"] == "alloc"),
       "the exec'd child's trace read alone: closed, its device and thread named, every allocation's stack there",
       crep and (crep["problem"], dev, [e for e in cev if e["kind"] == "thread"]))

p, traces = record("forkidle", [WORK, "forkidle"], opts=["--follow-fork"])
if not TSAN:
    ok(p.returncode == 0 and len(traces) == 1,
       "--follow-fork: a child that never touches the GPU writes no file, and no thread was made inside fork()",
       traces)

# an image that execs itself: its events are all in its trace, closed, before the kernel replaces it
p, traces = record("execself", [WORK, "execself", "250"])
ok(p.returncode == 0 and len(traces) == 2, "exec of itself: a trace per image", (traces, p.stderr))
if len(traces) == 2:
    reps = {}
    for t in traces:
        _, rep = report(t)
        reps[tuple(sorted(set(sizes(dump(t), "alloc"))))] = rep
    first, second = reps.get((16000001, 16000002)), reps.get((11000001,))
    ok(first and first["events"]["allocs"] == 500 and first["complete"] and first["events"]["dropped"] == 0,
       "exec of itself: the first image's 500 allocations, around a failed exec, in a closed trace",
       first and first["events"])
    ok(second and second["events"]["allocs"] == 250 and second["complete"], "exec of itself: the new image's own")
    ok(p.stderr.count("no events dropped") == 2, "memtap run sums up both images' traces", p.stderr)

# two devices, one of them from a second thread: each device's own peak, exit and stacks
p, traces = record("devices", [WORK, "devices"], env={"SIMGPU_DEVICES": "2"})
if one_trace("two devices", traces, p):
    _, rep = report(traces[0])
    devs = {d["device"]: d for d in rep["devices"]} if rep else {}
    ok(set(devs) == {0, 1} and devs[0]["peak_allocated_bytes"] == 30000000 and devs[0]["allocated_at_exit_bytes"]
       == 10000000 and devs[1]["peak_allocated_bytes"] == 7000000 and devs[1]["allocated_at_exit_bytes"] == 0,
       "two devices: 30 MB peak and 10 MB at exit on device 0, 7 MB and 0 on device 1", devs)
    live = [(g["device"], g["bytes"]) for g in rep["live_at_exit"]] if rep else None
    peaks = sorted((g["device"], g["bytes"]) for g in rep["top_at_peak"]) if rep else None
    ok(live == [(0, 10000000)] and peaks == [(0, 10000000), (0, 20000000), (1, 7000000)],
       "two devices: what was live at each device's peak and at exit, by device", (live, peaks))

# a signal handler that allocates while its thread is inside memtap's hooks (not the GPU's)
# (a handler that calls CUDA is the program's own signal-unsafe call: ThreadSanitizer is told so)
p, traces = record("nested", [WORK, "nested", "200000"], opts=["-O", "ring=262144"],
                   env={"TSAN_OPTIONS": os.environ.get("TSAN_OPTIONS", "") + ":report_signal_unsafe=0"})
if one_trace("allocations in a signal handler", traces, p):
    m = re.search(r"handler allocations (\d+)", p.stdout)
    made = int(m.group(1)) if m else -1
    _, rep = report(traces[0])
    # 200000 x (push, mark, pop); two events per handler allocation; 2 pairs and the handler's
    # own 2 before the timer, THREAD, DEVICE, EXIT
    e = accounting("allocations in a signal handler", rep, 600011 + 2 * made)
    # (under ThreadSanitizer memtap's own recording is so slow that more handler calls than
    # the nested slots hold can land inside one record: those are counted, as check 88 holds)
    ok(made > 0 and e["allocs"] + e["dropped_by"].get("ring_full", 0) + e["dropped_by"].get("nested", 0) >= made + 2
       and (TSAN or "nested" not in e["dropped_by"]),
       "a signal handler's allocations during hooks are all recorded%s" % (" or counted" if TSAN else ""), (made, e))

# small stacks: a 4 KiB fiber (the thread's first event and a later one) and a 4 KiB sigaltstack
# (not under sanitizers: their instrumentation of the program itself needs more than 4 KiB)
def stack_use(out):
    m = re.search(r"fiber first (\d+) later (\d+) results (.*)\nsigaltstack (\d+) results (.*)", out)
    return m and (int(m.group(1)), int(m.group(2)), int(m.group(4)), m.group(3) + " " + m.group(5))


if os.environ.get("MT_SANITIZERS", "").strip() not in ("", "no"):
    print("# small stacks: not checked under sanitizers")
else:
    plain = subprocess.run([WORK, "fiber"], capture_output=True, text=True, timeout=120)
    p, traces = record("fiber", [WORK, "fiber"])
    ok(p.returncode == plain.returncode == 0, "4 KiB stacks: the program runs as it does alone", p.stderr)
    a, b = stack_use(plain.stdout), stack_use(p.stdout)
    if a and b:
        ok(a[3] == b[3], "4 KiB stacks: the same CUDA results", (a, b))
        print("# memtap's own stack use: thread's first event %d bytes, later %d, on a sigaltstack %d" %
              (b[0] - a[0], b[1] - a[1], b[2] - a[2]))
        ok(b[0] - a[0] <= 2048 and b[1] - a[1] <= 1024 and b[2] - a[2] <= 1024,
           "4 KiB stacks: memtap's hooks use at most 2 KiB on a thread's first event, 1 KiB later", (a, b))
    else:
        ok(False, "4 KiB stacks: both runs report their stack use", (plain.stdout, p.stdout, p.stderr))
    if traces:
        ok(sorted(set(sizes(dump(traces[0]), "alloc"))) == [14000001], "4 KiB stacks: their allocations are recorded")

p, traces = record("signals", [WORK, "signals"])
if one_trace("signals during hooks", traces, p):
    ev = dump(traces[0])
    ok(len(sizes(ev, "alloc")) == 20000, "signals: every allocation recorded")
    if not TSAN:  # ThreadSanitizer delays signals to its own safe points, inside the hooks
        ok(any(e["kind"] == "mark" for e in ev), "signals: marks recorded from the handler")

p, traces = record("exceptions", [os.path.join(B, "tests/recorder/exceptions")])
ok(p.returncode == 0 and p.stdout.strip() == "1000", "1000 C++ exceptions under memtap", p.stderr)

nxt = os.path.join(B, "tests/recorder/.libs/libnext.so")
for order in ([LIB, nxt], [nxt, LIB]):
    env = dict(os.environ, LD_PRELOAD=":".join(order), MEMTAP_OUTPUT=os.path.join(TMP, "next-%p.trace"))
    p = subprocess.run([WORK, "runtime"], capture_output=True, text=True, env=env)
    ok(p.returncode == 0 and "passed through" in p.stderr,
       "another preload's dlsym(RTLD_NEXT) still works (%s first)" % os.path.basename(order[0]), p.stderr)

# ---- unloading the runtime: what stays loaded is what glibc keeps, and no pointer into an unloaded
# library is called (the second load is kept off the first one's address) ----
RT = os.path.join(B, "tools/simgpu/.libs/libcudart.so.13")
copy_dir = os.path.join(TMP, "elsewhere")
os.makedirs(copy_dir, exist_ok=True)
shutil.copy(RT, os.path.join(copy_dir, "libcudart.so.13"))
for mode, lib in (("default", "libplugin"), ("handle", "libplugin"), ("local", "libplugin"), ("plugin", "libplugin"),
                  ("caller", "libcaller")):
    argv = [os.path.join(B, "tests/recorder/reload"), mode, RT, os.path.join(copy_dir, "libcudart.so.13"),
            os.path.join(B, "tests/recorder/.libs/%s.so" % lib)]
    alone = subprocess.run(argv, capture_output=True, text=True)
    env = dict(os.environ, LD_PRELOAD=LIB, MEMTAP_OUTPUT=os.path.join(TMP, "reload-%p.trace"))
    under = subprocess.run(argv, capture_output=True, text=True, env=env)
    ok(alone.returncode == 0 and under.returncode == alone.returncode and under.stdout == alone.stdout,
       "dlclose and load again (%s): the same results and the same libraries loaded as without memtap" % mode,
       (alone.stdout, under.returncode, under.stdout, under.stderr[-300:]))

# ---- kill -9 in the middle: what was flushed reads back, and the reader says it was cut short ----
env = dict(os.environ, LD_PRELOAD=LIB, NVTX_INJECTION64_PATH=LIB, MEMTAP_OUTPUT=os.path.join(TMP, "killed-%p.trace"))
proc = subprocess.Popen([WORK, "forever"], env=env)
time.sleep(1.0)
proc.send_signal(signal.SIGKILL)
proc.wait()
killed = os.path.join(TMP, "killed-%d.trace" % proc.pid)
p, rep = report(killed)
ok(p.returncode == 3 and rep and not rep["complete"] and "cut short" in rep["problem"],
   "kill -9: the report says the trace was cut short and exits 3", p.stderr)
ok(rep and rep["events"]["allocs"] > 100, "kill -9: the events flushed before it read back",
   rep and rep["events"])

# ---- a full disk: the job runs on, the loss is said and counted ----
def small_files():
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


p, traces = record("full", [WORK, "many", "400000"], preexec_fn=small_files)
ok(p.returncode == 0, "a full disk does not stop the job", p.stderr)
ok("cannot write" in p.stderr and p.stderr.count("cannot write") == 1, "the write failure is said once", p.stderr)
if traces:
    rp, rep = report(traces[0])
    ok(rep is not None and rep["events"]["allocs"] > 0, "what was written before reads back", rp.stderr)
    if rep:
        e = accounting("a full disk", rep, 800003)
        ok(e["dropped_by"].get("write", 0) > 600000 and "could not be written" in drop_line(p),
           "a full disk: the lost events are counted as lost to the write", (e, p.stderr))

# a full disk before the first write: said, with the file's name; the job runs on
p = subprocess.run([MEMTAP, "run", "-o", "/dev/full", "--", WORK, "runtime"], capture_output=True, text=True)
ok(p.returncode == 0 and p.stderr.count("cannot write /dev/full: No space left on device") == 1,
   "a full disk before the first write: said once, with where", p.stderr)


def no_room():
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


p, traces = record("nofile", [WORK, "runtime"], preexec_fn=no_room)
ok(p.returncode == 0 and p.stderr.count("cannot write") == 1 and "File too large" in p.stderr and
   "is empty: memtap could not write" in p.stderr, "a file size limit of 0: the recorder and memtap run say why",
   p.stderr)

# a device as the output is written as it is: no /dev/null.1
before = set(os.listdir("/dev"))
p = subprocess.run([MEMTAP, "run", "-o", "/dev/null", "--", WORK, "runtime"], capture_output=True, text=True)
ok(p.returncode == 0 and set(os.listdir("/dev")) == before and "not a file" in p.stderr,
   "-o /dev/null writes to /dev/null, and no /dev/null.N", p.stderr)
fifo, folder = os.path.join(TMP, "fifo"), os.path.join(TMP, "folder")
os.mkfifo(fifo)
os.makedirs(folder)
for out, why in ((fifo, "No such device or address"), (folder, "Is a directory")):
    p = subprocess.run([MEMTAP, "run", "-o", out, "--", WORK, "runtime"], capture_output=True, text=True, timeout=60)
    ok(p.returncode == 0 and p.stderr.count("cannot create trace %s: %s" % (out, why)) == 1 and
       not os.path.exists(out + ".1"), "-o to a pipe nobody reads, or to a folder: said once, the job runs", p.stderr)

# ---- options, output files, exit status ----
p, traces = record("badopt", [WORK, "nvtx"], env={"MEMTAP_DEPTH": "lots", "MEMTAP_OPTIONS": "ring=abc,nope=1"})
ok(p.returncode == 0 and len(traces) == 1, "bad option values: the job runs and is recorded", p.stderr)
ok(len(re.findall(r"^memtap: ignoring", p.stderr, re.M)) == 3, "one warning line per bad value", p.stderr)
p, traces = record("depth", [WORK, "runtime"], opts=["-O", "depth=5"])
if one_trace("depth=5", traces, p):
    script = os.path.join(TMP, "depth.lua")
    open(script, "w").write("""
local n = {}
for e in memtap.trace:events("alloc") do n[#n + 1] = #memtap.trace:stack(e.stack) end
print(table.concat(n, " "))""")
    q = subprocess.run([MEMTAP, "lua", script, traces[0]], capture_output=True, text=True)
    ok(q.stdout.split() and set(q.stdout.split()) == {"5"}, "depth=5: each stack holds exactly 5 frames",
       q.stdout + q.stderr)
p, traces = record("tinymem", [WORK, "nvtx"], opts=["-O", "max_memory=1M"])
ok(p.returncode == 0 and len(traces) == 1 and p.stderr.count("is less than memtap needs") == 1
   and report(traces[0])[1]["events"]["dropped"] == 0,
   "max_memory below what memtap needs: raised to that, said once, nothing lost", p.stderr)

fixed = os.path.join(TMP, "fixed.trace")
for i in range(2):
    p = subprocess.run([MEMTAP, "run", "-q", "-o", fixed, "--", WORK, "nvtx"], capture_output=True, text=True)
ok(p.returncode == 0 and os.path.exists(fixed) and os.path.exists(fixed + ".1") and "exists" in p.stderr,
   "an existing trace is never overwritten: the next is .1, and it says so", p.stderr)
ok(oct(os.stat(fixed).st_mode & 0o777) == "0o600", "traces are created 0600")

p = subprocess.run([MEMTAP, "run", "-q", "--", WORK, "exit", "7"], capture_output=True, text=True, cwd=TMP)
ok(p.returncode == 7, "memtap run passes the exit status through")
p = subprocess.run([MEMTAP, "run", "-q", "--", WORK, "kill"], capture_output=True, text=True, cwd=TMP)
ok(p.returncode == -9, "a command killed by a signal: memtap run ends by the same signal")
p = subprocess.run([MEMTAP, "run", "--", "/nonexistent/cmd"], capture_output=True, text=True, cwd=TMP)
ok(p.returncode == 127 and p.stderr.count("\n") == 1, "a command that cannot start: one line, 127", p.stderr)
p = subprocess.run([MEMTAP, "run", "--bogus"], capture_output=True, text=True)
ok(p.returncode == 2, "a wrong flag exits 2")

p, traces = record("summary", [WORK, "nvtx"], opts=[])
lines = [l for l in p.stderr.splitlines() if l.startswith("memtap:")]
ok(len(lines) == 3 and "peak" in lines[0] and traces and traces[0] in lines[1] and "dropped" in lines[2],
   "memtap run ends with three lines: peak, trace, drops", p.stderr)

# ---- a writer kept from its core: the job waits for room, it does not lose events ----
# On a busy machine the writer thread may get no core for a while (issue 42: a 10M-event
# run with both cores busy lost 12 events). ptrace stops exactly that thread, as long as
# the test says: 0.5 s, a starved writer; 5 s, one that is stuck.
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT, WALL = 17, 0x4206, 0x4207, 0x40000000


def writer_of(parent):
    """The writer thread of a process parent started: its id, or None while there is none."""
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % pid) as f:
                if not pid.isdigit() or int(f.read().rsplit(")", 1)[1].split()[1]) != parent:
                    continue
            for tid in os.listdir("/proc/%s/task" % pid):
                with open("/proc/%s/task/%s/comm" % (pid, tid)) as f:
                    if f.read().strip() == "memtap-writer":
                        return int(tid)
        except (OSError, ValueError, IndexError):
            continue
    return None


def writer_stopped(name, pairs, seconds):
    """memtap run of PAIRS allocations whose writer is stopped for SECONDS once it has begun;
    None when this machine does not allow stopping it (ptrace)."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    q = subprocess.Popen([MEMTAP, "run", "-o", os.path.join(d, "t.trace"), "--", WORK, "many", str(pairs)],
                         stderr=subprocess.PIPE, text=True)
    tid, trace = None, os.path.join(d, "t.trace")
    while tid is None and q.poll() is None:
        tid = writer_of(q.pid)
    # the writer in its loop, the job recording: the trace is begun (stopped as it starts, the
    # writer would hold back the job's start rather than its events)
    while q.poll() is None and not (os.path.exists(trace) and os.path.getsize(trace)):
        time.sleep(0.001)
    if tid is None or libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        q.communicate()
        return None
    libc.ptrace(PTRACE_INTERRUPT, tid, None, None)
    os.waitpid(tid, WALL)
    time.sleep(seconds)
    libc.ptrace(PTRACE_DETACH, tid, None, None)
    _, err = q.communicate(timeout=600)
    return q.returncode, err, report(trace)[1]


PAIRS = 2000000
run = writer_stopped("starved", PAIRS, 0.5)
if run is None:
    ok(True, "# SKIP this machine does not let the test stop the writer thread (ptrace)")
else:
    code, err, rep = run
    e = accounting("a writer stopped for 0.5 s", rep, 2 * PAIRS + 3)
    if TSAN:
        # the writer stopped inside ThreadSanitizer's runtime holds its locks: the job waits
        # there, not for room in its ring
        ok(True, "# SKIP a writer kept from its core, under ThreadSanitizer")
        ok(True, "# SKIP the summary of the waits, under ThreadSanitizer")
    else:
        ok(code == 0 and e["dropped"] == 0 and e.get("waited_for_writer", {}).get("times", 0) > 0,
           "a writer kept from its core for 0.5 s: the job waits for room and loses nothing", (e, err))
        ok("waited" in err and "for memtap's writer" in err,
           "memtap run's summary says that the job waited for the writer, and how long", err)
    code, err, rep = writer_stopped("stuck", PAIRS, 5)
    e = accounting("a writer stopped for 5 s", rep, 2 * PAIRS + 3)
    if TSAN:
        # stopped inside ThreadSanitizer's runtime (now and then: where the stop lands), the
        # writer holds the locks the job waits on, and the job never finds its ring full
        ok(code == 0, "a writer stuck for 5 s under ThreadSanitizer: the job goes on", (e, err))
    else:
        ok(code == 0 and e["dropped_by"].get("ring_full", 0) > 0 and "made no progress" in err,
           "a writer stuck for longer than 3 s: the job goes on, its events are counted as lost, and why", (e, err))

# ---- the stack cache agrees with a full unwind, allocation by allocation ----
for argv in ([SIMTRAIN, "--preset", "gpt2-small", "--zero", "3", "--dp", "4", "--recompute", "selective"],
             [WORK, "threads", "8"], [WORK, "signals"], [WORK, "procaddr"], [WORK, "paths"]):
    p, traces = record("check", argv, env={"MEMTAP_CHECK_STACKS": "1"})
    m = re.search(r"check_stacks: (\d+) of (\d+)", p.stderr)
    ok(p.returncode == 0 and m and m.group(1) == "0" and int(m.group(2)) > 0,
       "cached stacks equal full unwinds: " + os.path.basename(argv[0]) + " " + argv[1], p.stderr)


done()
