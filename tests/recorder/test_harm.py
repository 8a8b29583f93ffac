"""Never harm the job: what real jobs do to themselves (unbalanced NVTX ranges, pthread_exit
from main, exit from a signal handler, small stacks, closing or replacing descriptors, fast
exits, absurd sizes, chroot, deleting files, exiting while threads allocate, a launcher's
SIGTERM) must end as it ends without memtap, with every event kept or counted."""
import os
import random
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests", "recorder"))
from tap import done, ok  # noqa: E402
from recording import B, MEMTAP, TMP, TSAN, WORK, dump, one_trace, record, report, sizes  # noqa: E402

HARM = os.path.join(B, "tests/recorder/harm")
SANITIZED = os.environ.get("MT_SANITIZERS", "").strip() not in ("", "no")


def closed(rep):
    return rep is not None and rep["complete"] and not rep["problem"]


def ended_like_alone(name, argv, p, timeout=120):
    alone = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return ok(p.returncode == alone.returncode == 0 and p.stdout == alone.stdout,
              name + ": the job ends as it does without memtap (status %d, alone %d)" % (p.returncode, alone.returncode),
              (p.stdout, alone.stdout, p.stderr[-600:]))


# ---- NVTX ranges pushed and never popped: any depth is safe, and the phase stays true ----
for n in (700, 1000000):
    p, traces = record("nvtx%d" % n, [HARM, "nvtx", str(n)], timeout=300)
    if not one_trace("%d NVTX ranges never popped" % n, traces, p):
        continue
    rp, rep = report(traces[0])
    ok(closed(rep), "%d unbalanced NVTX ranges: the trace reads back whole" % n, rp.stdout[:300] + rp.stderr)
    phase = {e["size"]: e["phase"] for e in dump(traces[0]) if e["kind"] == "alloc"}
    want = {9000001: "d0", 9000002: "d63", 9000003: "d64", 9000004: "d599", 9000005: "d%d" % ((n - 1) % 1000),
            9000007: "after"}
    ok(all(phase.get(k) == v for k, v in want.items()),
       "%d unbalanced NVTX ranges: each allocation's phase is its innermost range, at depth 1, 64, 65, 600, %d" % (n, n),
       (phase, want))
    ok("not kept" in phase.get(9000006, ""),
       "%d unbalanced NVTX ranges: popped back to depth 10, whose name a deeper push took, the phase says so" % n,
       phase.get(9000006))

# ---- main() ends with pthread_exit: the process ends when the job's threads have ----
# (not under ThreadSanitizer: its own background thread keeps such a program alive for good)
p, traces = record("pthread_exit", [HARM, "pthread_exit"], timeout=60) if not TSAN else (None, [])
if p:
    ok(p.returncode == 0 and "killed" not in p.stderr, "main ends with pthread_exit: the process exits 0",
       p.stderr[-500:])
if traces:
    _, rep = report(traces[0])
    ok(closed(rep) and rep["events"]["allocs"] == 20, "pthread_exit: all 20 allocations, in a closed trace",
       rep and rep["events"])

# ---- exit() from a signal handler, whatever the handler interrupted ----
# (not under sanitizers: their allocator, interrupted by the handler, hangs such a program
# without memtap too, about one run in 40)
stuck, open_ended = [], []
rng = random.Random(36)
for i in range(0 if SANITIZED else 20):
    p, traces = record("sigexit-%d" % i, [HARM, "sigexit", str(rng.randint(2000, 40000))], timeout=30)
    if p.returncode != 0:
        stuck.append((p.returncode, p.stderr[-200:]))
    elif traces and not closed(report(traces[0])[1]):
        open_ended.append(traces[0])
ok(not stuck, "exit() from a signal handler during CUDA calls, 20 times: no hang, status 0", stuck)
ok(not open_ended, "exit() from a signal handler: every trace is closed", open_ended)

# ---- 64 threads with 16 KiB stacks make their first CUDA call at once, 8 KiB left ----
# (without memtap the call needs about 6 KiB; before, memtap's first lookups needed more
# than 8 KiB of it when another thread's lookup held the shared stack: 3 runs in 10 crashed)
if SANITIZED:
    print("# small stacks: not checked under sanitizers (their own instrumentation needs more)")
else:
    crashed = []
    for i in range(30):
        p, traces = record("smallstacks-%d" % i, [HARM, "smallstacks", "8192"], timeout=60)
        if p.returncode != 0 or "threads done" not in p.stdout:
            crashed.append((p.returncode, p.stderr[-200:]))
    ok(not crashed, "64 threads of 16 KiB (8 KiB left) make their first CUDA call at once, 30 times: none crashes",
       crashed)

# ---- the job's descriptors: closed all and reopened, or put over memtap's ----
# (check_stacks=1 unwinds every stack in full: that is where an unwinder's own descriptors
# would be used)
for mode, says, allocs, env in (("closefds", "files intact", 402, None), ("dup2", "log intact", 401, None),
                                ("closefds", "files intact", 402, {"MEMTAP_CHECK_STACKS": "1"})):
    what = mode + (" (full unwinds)" if env else "")
    d = os.path.join(TMP, what.replace(" ", "-") + "-files")
    os.makedirs(d, exist_ok=True)
    p, traces = record(what.replace(" ", "-"), [HARM, mode, d], env=env)
    ok(p.returncode == 0 and says in p.stdout,
       "%s: the job's files hold exactly what it wrote, and its writes all succeed" % what, (p.stdout, p.stderr[-400:]))
    if one_trace(what, traces, p):
        _, rep = report(traces[0])
        ok(closed(rep) and rep["events"]["allocs"] == allocs and rep["events"]["dropped"] == 0,
           "%s: every allocation in memtap's own trace, closed" % what, rep and rep["events"])

# ---- fast exits: _exit, _Exit, quick_exit, Python's os._exit ----
pyexit = [sys.executable, "-c", """
import ctypes, os
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
for _ in range(5000):
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(17000002))
    rt.cudaFree(p)
os._exit(0)
"""]
for name, argv in (("_exit", [HARM, "fastexit", "_exit"]), ("_Exit", [HARM, "fastexit", "_Exit"]),
                   ("quick_exit", [HARM, "fastexit", "quick_exit"]), ("os._exit", pyexit)):
    if TSAN and name != "quick_exit":
        print("# %s: ThreadSanitizer's own _exit comes first" % name)
        continue
    p, traces = record("fast" + name, argv)
    if one_trace(name, traces, p):
        _, rep = report(traces[0])
        ok(closed(rep) and rep["events"]["allocs"] == 5000 and rep["events"]["frees"] == 5000 and
           rep["events"]["dropped"] == 0 and "killed" not in p.stderr,
           "%s right after 5000 pairs: all of them in a closed trace" % name, (rep and rep["events"], p.stderr[-300:]))

# ---- sizes no device has: recorded as the job passed them, and nothing after them lost ----
p, traces = record("huge", [HARM, "huge"])
ok(p.returncode == 0 and "tag_range 22" in p.stdout,
   "a tag range past the end of the address space is refused with EINVAL", p.stdout + p.stderr[-300:])
if one_trace("huge sizes", traces, p):
    rp, rep = report(traces[0])
    ev = dump(traces[0])
    failed = sorted(e["size"] for e in ev if e["kind"] == "alloc_failed")
    attrs = [e["size"] for e in ev if e["kind"] == "pool_attr"]
    ok(closed(rep) and sizes(ev, "alloc").count(11000001) == 60,
       "after absurd sizes, every later event reads back: 60 of 60 allocations", (rp.stderr, rep and rep["events"]))
    ok(failed == [1 << 62, 2 ** 64 - 1] and attrs == [2 ** 64 - 1],
       "the failed requests of 2^64-1 and 2^62 bytes and a threshold of UINT64_MAX read back as passed",
       (failed, attrs))

# ---- memtap run passes a launcher's signals on, and ends as the job does ----
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    d = os.path.join(TMP, "forward-%d" % sig)
    os.makedirs(d, exist_ok=True)
    # a launcher's job takes SIGINT and SIGQUIT: a suite started in the background of a
    # non-interactive shell has them ignored, which the job would inherit and never end
    q = subprocess.Popen([MEMTAP, "run", "-q", "-o", os.path.join(d, "t.trace"), "--", WORK, "sleep", "600000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGQUIT)])
    child = None
    for _ in range(600):  # the job has started once its trace is there
        kids = open("/proc/%d/task/%d/children" % (q.pid, q.pid)).read().split()
        if kids and os.path.exists(os.path.join(d, "t.trace")):
            child = int(kids[0])
            break
        time.sleep(0.05)
    q.send_signal(sig)
    try:
        rc = q.wait(timeout=60)
    except subprocess.TimeoutExpired:
        q.kill()
        rc = q.wait()
    gone = child is not None
    for _ in range(200):
        if not child or not os.path.exists("/proc/%d" % child):
            break
        time.sleep(0.05)
    else:
        gone = False
        os.kill(child, signal.SIGKILL)
    ok(gone and rc == 128 + sig, "memtap run given %s: the job gets it and ends, and memtap run exits %d (got %s)" %
       (signal.Signals(sig).name, 128 + sig, rc), q.stderr.read()[-300:])

# ---- a trace that cannot be made, or is deleted: memtap run says so, not "no GPU allocation" ----
p = subprocess.run([MEMTAP, "run", "-o", "/nonexistent/dir/t.trace", "--", WORK, "runtime"], capture_output=True,
                   text=True)
last = p.stderr.strip().splitlines()[-1:]
ok(p.returncode == 0 and last and "no GPU allocation" not in last[0] and "could not be created" in last[0],
   "a trace that cannot be created: memtap run's last line says so", p.stderr)
path = os.path.join(TMP, "deleted.trace")
p = subprocess.run([MEMTAP, "run", "-o", path, "--", HARM, "unlink", path], capture_output=True, text=True)
last = p.stderr.strip().splitlines()[-1:]
made = re.search(r"(\d+) events", last[0]) if last else None
ok(p.returncode == 0 and "no GPU allocation" not in last[0] and "deleted" in last[0] and made and int(made.group(1)) >= 400,
   "a trace deleted while written: memtap run's last line says so, with its 400 and more events", p.stderr)

# ---- a chroot right after the first allocation: the trace stays where it was going ----
root = os.path.join(TMP, "newroot")
os.makedirs(root, exist_ok=True)
p, traces = record("chroot", [HARM, "chroot", root],  # LeakSanitizer needs /proc at exit
                   env={"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"})
if "chrooted" not in p.stdout:
    print("# chroot: neither root nor a user namespace here: not checked")
elif one_trace("chroot", traces, p):
    _, rep = report(traces[0])
    ok(closed(rep) and rep["events"]["allocs"] == 101, "chroot after the first allocation: all 101 in the trace",
       rep and rep["events"])


# ---- exit while 64 threads allocate (and a destructor frees after exit began): the trace
# is closed, whatever the process's end cut of what other threads made after the END ----
p, traces = record("busyexit", [HARM, "busyexit"])
if one_trace("exit while 64 threads allocate", traces, p):
    _, rep = report(traces[0])
    ok(closed(rep), "exit while 64 threads allocate: the trace is closed", rep and rep["problem"])

done()
