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

# a registered string handle NVTX never handed out names nothing: the rest of the trace reads
p, traces = record("nvtxreg", [HARM, "nvtxreg"])
if one_trace("an NVTX handle nobody registered", traces, p):
    rp, rep = report(traces[0])
    ok(closed(rep) and rep["events"]["allocs"] == 200,
       "an NVTX handle nobody registered: the trace reads back whole, all 200 allocations",
       (rp.stderr, rep and rep["events"]))

# ---- main() ends with pthread_exit: the process ends when the job's threads have, and
# its exit handlers and buffered output go where they would have gone; also where main
# leaves before the process's first CUDA call, which starts memtap's writer thread after
# (that run hung for good) ----
# (not under ThreadSanitizer: its own background thread keeps such a program alive for good)
def pthread_exit_run(mode, with_memtap):
    d = os.path.join(TMP, "%s-%s" % (mode, "memtap" if with_memtap else "alone"))
    os.makedirs(d, exist_ok=True)
    argv = [HARM, mode, d]
    if with_memtap:
        p, traces = record(mode, argv, timeout=60, cwd=d)
    else:
        p, traces = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=d), []
    log = os.path.join(d, "job.log")
    return p, traces, (p.stdout, open(log).read() if os.path.exists(log) else None,
                       os.path.exists(os.path.join(d, "sub", "atexit.txt")))


for mode, allocs in () if TSAN else (("pthread_exit", 20), ("pthread_exit_first", 10)):
    p, traces, got = pthread_exit_run(mode, True)
    _, _, alone = pthread_exit_run(mode, False)
    ok(p.returncode == 0 and "killed" not in p.stderr, "%s: main ends with pthread_exit: the process exits 0" % mode,
       p.stderr[-1500:])
    ok(got == alone == ("main leavesatexit ran\n", "the job's own log line\n", True),
       "%s: the job's buffered log and output, and its exit handler's file, as without memtap" % mode,
       (got, alone))
    if traces:
        _, rep = report(traces[0])
        ok(closed(rep) and rep["events"]["allocs"] == allocs,
           "%s: all %d allocations, in a closed trace" % (mode, allocs), rep and rep["events"])

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

# where the kernel refuses the writer a table of its own (a container's seccomp profile):
# said, and the trace's descriptor checked before each write (not under ThreadSanitizer:
# the job's dup2 over the descriptor memtap's writer shares is the race it reports)
if not TSAN:
    d = os.path.join(TMP, "noshare-files")
    os.makedirs(d, exist_ok=True)
    p, traces = record("noshare", [HARM, "noshare", HARM, "dup2", d])
    ok(p.returncode == 0 and "log intact" in p.stdout and
       p.stderr.count("cannot have a descriptor table of its own") == 1 and "the job took memtap's descriptor" in p.stderr,
       "unshare refused: said once, and the job's log stays its own when it takes memtap's descriptor",
       (p.stdout, p.stderr[-500:]))

# a job that forbids opening files after start-up (seccomp, every thread): memtap opens
# nothing after it has its trace
p, traces = record("sandboxed", [HARM, "sandboxed"])
if one_trace("a job that forbids opening files", traces, p):
    _, rep = report(traces[0])
    ok(p.stdout == "sandboxed work done\n" and closed(rep) and rep["events"]["allocs"] == 150,
       "a job that forbids opening files after start-up: it ends as it would, all 150 allocations in a closed trace",
       (p.stdout, p.stderr[-300:], rep and rep["events"]))

# a process that never touches the GPU (a shell, a launcher, a sandbox's helper) gets no
# thread of memtap's: it stays single-threaded, as unshare(CLONE_NEWUSER) and Python's
# fork() want
# (not under ThreadSanitizer: its build of memtap cannot be loaded into an uninstrumented program)
if not TSAN:
    p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, "nogpu-%p.trace"), "--", sys.executable, "-c",
                        "import os; print(len(os.listdir('/proc/self/task')))"], capture_output=True, text=True)
    ok(p.returncode == 0 and p.stdout == "1\n", "a process that never touches the GPU: one thread, its own", p.stdout)

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

# ---- memtap run stands for the job: a launcher's signals reach the job once, memtap run
# ends as the job did, and a job whose memtap run is killed goes too ----
def job_of(q, trace):
    """The job memtap run started, once it has recorded (its trace is there)."""
    for _ in range(600):
        kids = open("/proc/%d/task/%d/children" % (q.pid, q.pid)).read().split()
        if kids and os.path.exists(trace):
            return int(kids[0])
        time.sleep(0.05)
    return None


def gone(pid):
    for _ in range(200):
        if not pid or not os.path.exists("/proc/%d" % pid):
            return pid is not None
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return False


def ended(q):
    try:
        return q.wait(timeout=60)
    except subprocess.TimeoutExpired:
        q.kill()
        return q.wait()


for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGKILL):
    d = os.path.join(TMP, "forward-%d" % sig)
    os.makedirs(d, exist_ok=True)
    # a launcher's job takes SIGINT, SIGQUIT and SIGHUP: a suite started in the background of
    # a non-interactive shell has the first two ignored, and one started under nohup the
    # third, which the job would inherit and never end
    q = subprocess.Popen([MEMTAP, "run", "-q", "-o", os.path.join(d, "t.trace"), "--", WORK, "sleep", "600000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL)
                                             for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)])
    child = job_of(q, os.path.join(d, "t.trace"))
    q.send_signal(sig)
    rc = ended(q)
    ok(gone(child) and rc == -sig, "memtap run given %s: the job gets it and ends, and so does memtap run (got %s)" %
       (signal.Signals(sig).name, rc), q.stderr.read()[-300:])

# a launcher that signals memtap run's whole process group, as timeout(1) and shells do
for how in ("group", "timeout"):
    d = os.path.join(TMP, "term2-" + how)
    os.makedirs(d, exist_ok=True)
    argv = [MEMTAP, "run", "-q", "-o", os.path.join(d, "t.trace"), "--", HARM, "term2"]
    if how == "timeout":
        argv = ["timeout", "1", *argv]
    q = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if how == "group":
        q.stdout.readline()  # ready
        os.killpg(q.pid, signal.SIGTERM)
    out, err = q.communicate(timeout=120)
    ok("one SIGTERM" in out, "a SIGTERM to memtap run's whole process group (%s) reaches the job once" % how,
       (out, err[-300:]))

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

# ---- a trace into a pipe whose reader stops reading: a bounded wait, said, and the job
# runs on and exits as it would ----
fifo = os.path.join(TMP, "stalled.fifo")
os.mkfifo(fifo)
reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open, and never read
try:
    q = subprocess.run([MEMTAP, "run", "-o", fifo, "--", HARM, "fastexit", "_exit"], capture_output=True, text=True,
                       timeout=120)
    ok(q.returncode == 0 and "its reader stopped reading" in q.stderr,
       "a trace into a pipe nobody reads from: the job ends as it would, and memtap says why the trace stopped",
       q.stderr[-400:])
except subprocess.TimeoutExpired:
    ok(False, "a trace into a pipe nobody reads from: the job ends as it would (it hung)")
os.close(reader)

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


# ---- memtap_snapshot's path, as the job means it: from the asking thread's own working
# directory, never past the job's root ----
d = os.path.join(TMP, "snapat")
os.makedirs(d, exist_ok=True)
p, traces = record("snapat", [HARM, "snapat", d], env={"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
                                                      ":detect_leaks=0"})
if "jailed" not in p.stdout:
    print("# snapshots in a chroot: neither root nor a user namespace here: not checked")
else:
    want = [os.path.join(d, "own", "own.trace"), os.path.join(d, "jail", "jailed.trace"),
            os.path.join(d, "jail", "abs.trace")]
    ok(p.stdout == "own 0\njailed 0\nabs 0\n" and all(os.path.exists(f) for f in want) and
       not os.path.exists(os.path.join(TMP, "jailed.trace")) and not os.path.exists("/abs.trace"),
       "snapshots land where the job means: a thread's own directory, and inside its chroot", (p.stdout, p.stderr[-300:]))

# ---- a policy reads the stack of a failure in a function no symbol exports: named from
# the program's own file, which is closed again before the failure returns to the job ----
d = os.path.join(TMP, "oomstack-policy")
os.makedirs(d, exist_ok=True)
policy = os.path.join(d, "frames.lua")
open(policy, "w").write('memtap.on_oom(function(ev) for _, f in ipairs(ev.stack) do '
                        'if f:find("harm%.c") then memtap.log("frame " .. f) end end end)\n')
p, traces = record("oomstack", [HARM, "oomstack"], opts=["--policy", policy])
said = re.findall(r"policy: frame (.*)", p.stderr)
fds = re.search(r"fds (\d+) (\d+) maps (\d+) (\d+)", p.stdout)
ok(said and re.fullmatch(r"fail_here(\.\w+)* \(harm\.c:\d+\)", said[0]),  # GCC's clones: fail_here.isra.0
   "a policy's stack names a program's static functions, file and line, read from the program's file", p.stderr[-600:])
ok(fds and fds.group(1) == fds.group(2) and fds.group(3) == fds.group(4), "and the file is closed before the "
   "failure returns: no descriptor and no mapping of it left in the job", p.stdout)

# ---- a policy's snapshots past its quota are refused before they are written: the process
# writes the trace and the quota, not a snapshot after snapshot that is then removed ----
d = os.path.join(TMP, "quota-policy")
os.makedirs(d, exist_ok=True)
policy = os.path.join(d, "snap_every.lua")
open(policy, "w").write("memtap.every(0.01, function() memtap.snapshot() end)\n")
p, traces = record("quota", [HARM, "written", "200000"], opts=["--policy", policy, "-O", "policy_output=1M",
                                                             "-O", "policy_dir=" + d])
m = re.search(r"wchar (\d+)", p.stdout)
if one_trace("snapshots past a quota", traces, p) and m:
    ok(int(m.group(1)) < os.path.getsize(traces[0]) + (3 << 20),
       "snapshots past policy_output: the process wrote %.1f MB, the trace %.1f MB and the 1 MiB quota" %
       (int(m.group(1)) / 1e6, os.path.getsize(traces[0]) / 1e6), p.stderr[-300:])

# ---- exit while 64 threads allocate (and a destructor frees after exit began): the trace
# is closed, whatever the process's end cut of what other threads made after the END ----
p, traces = record("busyexit", [HARM, "busyexit"])
if one_trace("exit while 64 threads allocate", traces, p):
    _, rep = report(traces[0])
    ok(closed(rep), "exit while 64 threads allocate: the trace is closed", rep and rep["problem"])

# ---- odd process shapes at exit: a vfork child's exit(), a child made without fork, two
# threads calling exit() at once ----
# (the child's exit() runs, in the memory it shares, the exit handlers of its parent, which
# then has none at its own exit: memtap's END among them, docs/RECORDER.md)
p, traces = record("vforkexit", [HARM, "vforkexit"])
if one_trace("a vfork child that calls exit()", traces, p):
    _, rep = report(traces[0])
    kinds = [e["kind"] for e in dump(traces[0])]
    # ThreadSanitizer makes vfork a fork: the child exits with a copy of the handlers, and
    # the parent's END and exit come at its own end
    ended = kinds.count("exit") == 1 and kinds[-1] == "exit" if TSAN else "exit" not in kinds
    ok(rep and rep["events"]["allocs"] == 2001 and ended and (rep["events"]["written"] == 0) != TSAN,
       "a vfork child's exit() does not end its parent's recording: no END and no exit of the child's, all 2001 "
       "allocations of the parent's after it", (rep and rep["events"], kinds[-3:]))
for how in ("syscall", "clone"):
    p, traces = record("rawfork-" + how, [HARM, "rawfork", how], timeout=60)
    ok(p.returncode == 0 and p.stdout == "child 3\n",
       "a child made by %s, not fork(), ends with exit() as without memtap (status 3)" % how,
       (p.stdout, p.stderr[-300:]))
open_ended = []
for i in range(10):
    p, traces = record("exit2-%d" % i, [HARM, "exit2"], timeout=60)
    rep = report(traces[0])[1] if traces else None
    if p.returncode != 0 or not closed(rep) or rep["events"]["allocs"] != 1000:
        open_ended.append((p.returncode, rep and rep["problem"], rep and rep["events"]["allocs"]))
ok(not open_ended, "two threads call exit() at once, 10 times: every trace closed, with all 1000 allocations",
   open_ended)

# ---- exec and fork from signal handlers that interrupted memtap's own work: a snapshot
# being asked for, a new name being interned ----
stuck = []
snaps = os.path.join(TMP, "snapexec")
os.makedirs(snaps, exist_ok=True)
for i in range(10):
    p, _ = record("snapexec-%d" % i, [HARM, "snapexec", snaps, str(rng.randint(20000, 200000))], timeout=60)
    if p.returncode != 0 or p.stdout != "exec'd from a handler\n":
        stuck.append((p.returncode, p.stdout[-100:], p.stderr[-200:]))
ok(not stuck, "exec from a signal handler while the job takes snapshots, 10 times: the new image runs", stuck)
# (not under ThreadSanitizer, which calls a fork from a handler signal-unsafe in the job alone)
if not TSAN:
    stuck = []
    for i in range(3):
        p, _ = record("forkhandler-%d" % i, [HARM, "forkhandler", "500"], timeout=120)
        if p.returncode != 0 or p.stdout != "forked\n":
            stuck.append((p.returncode, p.stdout[-100:], p.stderr[-200:]))
    ok(not stuck, "fork from a signal handler while new NVTX names are interned, 3 times: the job goes on", stuck)

done()
