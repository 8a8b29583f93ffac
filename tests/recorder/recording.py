"""What the recorder's tests share: memtap run on simgpu, and reading what it wrote."""
import glob
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
S = os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
WORK = os.path.join(B, "tests/recorder/workload")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
LIB = os.path.join(B, "src/recorder/.libs/libmemtap.so")
TMP = scratch("test")
TSAN = "thread" in os.environ.get("MT_SANITIZERS", "")



def threads_of(root):
    """Each thread of process root and of its descendants, as /proc shows it: its name,
    state, wait channel and the system call it is in. A hung run says where it hung
    before it is killed."""
    parent, lines = {}, []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[int(pid)] = int(open("/proc/%s/stat" % pid).read().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree = [root]
    for pid in tree:
        tree += sorted(p for p, pp in parent.items() if pp == pid)
    for pid in tree:
        try:
            for tid in sorted(os.listdir("/proc/%s/task" % pid), key=int):
                at = "/proc/%s/task/%s/" % (pid, tid)
                state = open(at + "stat").read().rsplit(") ", 1)[1].split()[0]
                wchan, call = open(at + "wchan").read(), open(at + "syscall").read().split()[0]
                lines.append("%s/%s %s %s %s syscall %s" % (pid, tid, open(at + "comm").read().strip(), state,
                                                           wchan or "-", call))
        except (OSError, IndexError):
            continue
    return "\n".join(lines)


def record(name, argv, opts=(), env=None, **kw):
    """memtap run ARGV on simgpu; returns (process, [trace paths])."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    # simgpu's libraries come from LD_LIBRARY_PATH (set by the test environment), not simgpu-run:
    # a shell would load memtap too, which a ThreadSanitizer build of memtap cannot be loaded into
    # in its own process group, killed whole after 15 minutes (the signals workload takes 4
    # under ThreadSanitizer on two busy cores): a hung child fails this test instead of the
    # whole suite
    kw.setdefault("timeout", 900)
    with subprocess.Popen([MEMTAP, "run", "-o", os.path.join(d, "t-%p.trace"), *opts, "--", *argv],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          env=dict(os.environ, **(env or {})), **{k: v for k, v in kw.items() if k != "timeout"}) as q:
        try:
            out, err = q.communicate(timeout=kw["timeout"])
        except subprocess.TimeoutExpired:
            where = threads_of(q.pid)
            os.killpg(q.pid, signal.SIGKILL)
            out, err = q.communicate()
            err += "\n(killed: still running after %d s; its threads then:\n%s)" % (kw["timeout"], where)
    p = subprocess.CompletedProcess(q.args, q.returncode, out, err)
    return p, sorted(glob.glob(os.path.join(d, "*.trace*")))


def dump(path):
    p = subprocess.run([MEMTAP, "dump", "--json", path], capture_output=True, text=True)
    return [json.loads(line) for line in p.stdout.splitlines()]


def report(path):
    p = subprocess.run([MEMTAP, "report", "--json", "--top", "1000", path], capture_output=True, text=True)
    return p, (json.loads(p.stdout) if p.stdout.startswith("{") else None)


def sizes(events, kind):
    return sorted(e["size"] for e in events if e["kind"] == kind and not e["error"])


def one_trace(name, traces, p):
    return ok(len(traces) == 1 and p.returncode == 0, name + ": ran, one trace", p.stderr)
