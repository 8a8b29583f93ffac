"""memtap top: the live view of a running simtrain job, read from the trace its recorder
is writing. Plain lines and JSON frames while it runs and after, a trace cut in the middle
of a chunk, a directory of ranks, a PID, bad input; and the terminal view driven in tmux
(send-keys, capture-pane), skipped when tmux is absent."""
import json
import os
import pickle
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("top")
LEAK = 65536  # bytes simtrain keeps every iteration
# a small device, so the bars show; simtrain's tiny model uses about 2.5 MiB of it
ENV = dict(os.environ, SIMGPU_MEM="8M")


def job(trace, iters, compute_ms, extra=(), env=ENV):
    """simtrain under memtap run, in the background."""
    return subprocess.Popen([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "tiny", "--tag",
                             "--leak", str(LEAK), "--iters", str(iters), *(["--compute-ms", str(compute_ms)] if compute_ms else []),
                             *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def wait_for(path, timeout=30):
    end = time.time() + timeout
    while time.time() < end and not (os.path.exists(path) and os.path.getsize(path) > 4096):
        time.sleep(0.05)


def top(*args, timeout=120, env=None):
    p = subprocess.run([MEMTAP, "top", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, env=env)
    frames = []
    if "--json" in args:
        for line in p.stdout.splitlines():
            try:
                frames.append(json.loads(line))
            except ValueError:
                frames.append(None)
    return p, frames


def report(trace):
    p = subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True)
    return json.loads(p.stdout) if p.stdout.startswith("{") else None


# ---- a job followed to its end, frame by frame (plain output: not a terminal) ----
trace = os.path.join(TMP, "job.trace")
j = job(trace, 60, 5)
wait_for(trace)
p, frames = top("--json", "--interval", "0.2", trace)
j.wait()
ok(p.returncode == 0 and frames and None not in frames, "top --json follows a running job to its end, a frame a line",
   p.stderr + p.stdout[-2000:])
ranks = [f["ranks"][0] for f in frames if f]
events = [r["events"] for r in ranks]
ok(len(ranks) >= 3 and events == sorted(events) and events[0] < events[-1],
   "each frame holds the events read since the last (%d frames)" % len(ranks), events)
ok(ranks and ranks[0]["state"] == "running" and ranks[-1]["state"] == "finished",
   "the job is running in the first frame, finished in the last", [r["state"] for r in ranks])
rep = report(trace)
if ok(rep is not None and ranks, "memtap report reads the same trace"):
    last, dev = ranks[-1], rep["devices"][0]
    ok(last["events"] == rep["events"]["total"], "the last frame applied every event of the trace",
       (last["events"], rep["events"]["total"]))
    d = last["devices"][0]
    ok(d["allocated_bytes"] == dev["allocated_at_exit_bytes"] and d["peak_bytes"] == dev["peak_allocated_bytes"],
       "the last frame's allocated and peak bytes are the report's (at exit, the peak)",
       (d["allocated_bytes"], d["peak_bytes"], dev.get("allocated_at_exit_bytes"), dev.get("peak_allocated_bytes")))
    ok(d["capacity_bytes"] == 8 << 20, "the device's capacity is simgpu's", d["capacity_bytes"])
    ok(d["tags"]["other"] == 60 * LEAK, "what is live by tag: simtrain's leak, tagged other, at exit",
       d["tags"])
    ok(last["iterations"] >= 58, "iteration boundaries: each push of the repeating top-level range",
       last["iterations"])
    grew = [s for s in last["stacks"] if s["grew_bytes"]]
    ok(len(grew) == 1 and grew[0]["grew_bytes"] == LEAK and "stash_debug_tensor" in grew[0]["where"],
       "what grew over the last iteration: the leaking stack, by its size", last["stacks"])
# while it ran: the leak, the phases and the stacks
mid = ranks[len(ranks) // 2] if ranks else None
ok(mid and mid["devices"][0]["phases"] and mid["stacks"] and mid["stacks"][0]["where"].startswith("tensor_new"),
   "a frame mid-run has the live bytes by phase and the stacks by where in the code", mid)

# ---- --once, and a trace cut in the middle of a chunk ----
p, frames = top("--once", trace)
ok(p.returncode == 0 and p.stdout.startswith("memtap top: ") and "GPU0" in p.stdout and "[|" in p.stdout,
   "top --once: one frame of plain lines, with the device's bar", p.stdout + p.stderr)
data = open(trace, "rb").read()
cut = os.path.join(TMP, "cut.trace")
for k in (17, 100, len(data) // 2 + 7, len(data) - 3):
    open(cut, "wb").write(data[:k])
    p, frames = top("--once", "--json", cut)
    d = subprocess.run([MEMTAP, "dump", cut], capture_output=True, text=True)
    n = len(d.stdout.splitlines())
    ok(p.returncode == 0 and frames and frames[0] and frames[0]["ranks"][0]["events"] == n and not p.stderr,
       "a trace cut at byte %d of %d: its whole chunks are read (%d events), the rest waits, nothing said" %
       (k, len(data), n), p.stderr + p.stdout[:500])

# ---- a finished trace far larger than a window (16 MiB), read a window at a time ----
# bench/gen_trace: 4M events of four threads over 4.4 s, 62 MB; read whole they are 256 MB
big = os.path.join(TMP, "big.trace")
subprocess.run([os.path.join(B, "bench/gen_trace"), big, "4000000", "4", "7", "sbt"], check=True)
measure = ("import resource, subprocess, sys\n"
           "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
           "print(p.stdout.splitlines()[0] if p.returncode == 0 and p.stdout else p.stderr)\n")
m = subprocess.run([sys.executable, "-c", measure, MEMTAP, "top", "--once", "--json", big], capture_output=True,
                   text=True, timeout=300).stdout.splitlines()
frame = json.loads(m[1]) if len(m) == 2 and m[1].startswith("{") else None
big_rep = report(big)
if ok(frame and big_rep, "top --once and report --json read a 4M-event trace", m):
    r, dev = frame["ranks"][0], big_rep["devices"][0]
    d = r["devices"][0]
    ok(r["events"] == 4000000 and r["state"] == "finished", "every event applied, the trace finished",
       (r["events"], r["state"]))
    ok(d["allocated_bytes"] == dev["allocated_at_exit_bytes"] and d["peak_bytes"] == dev["peak_allocated_bytes"],
       "read a window at a time, allocated and peak are the report's, which sorts the whole trace",
       (d["allocated_bytes"], d["peak_bytes"], dev["allocated_at_exit_bytes"], dev["peak_allocated_bytes"]))
    if os.environ.get("MT_SANITIZERS", "no") in ("", "no"):  # sanitizers' own memory aside
        ok(int(m[0]) < 200000, "top held %s KB at most: a window's events and the 300 ms held back, not the "
           "trace's 256 MB" % m[0])

# ---- a trace growing in pieces cut inside chunks, followed from offset to offset ----
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def with_pid(data, pid):
    """The trace with its INFO chunk (the first) saying another pid."""
    import struct
    magic, kind, _, length, _ = struct.unpack_from("<IB3sII", data, 16)
    info = b"".join(b"pid=%d" % pid if l.startswith(b"pid=") else l
                    for l in data[32:32 + length].splitlines(True))
    return data[:16] + struct.pack("<IB3sII", magic, kind, b"\0\0\0", len(info), crc32c(info)) + info + \
        data[32 + length:]


holder = subprocess.Popen(["sleep", "120"])
grown = os.path.join(TMP, "grown.trace")
whole = with_pid(data, holder.pid)
open(grown, "wb").close()
t = subprocess.Popen([MEMTAP, "top", "--json", "--interval", "0.05", grown], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
cuts = [17 + (len(whole) - 17) * k // 23 + 5 * k for k in range(23)] + [len(whole)]
done_at = 0
for c in cuts:
    with open(grown, "ab") as f:
        f.write(whole[done_at:c])
    done_at = c
    time.sleep(0.12)
try:
    out, err = t.communicate(timeout=30)
except subprocess.TimeoutExpired:
    t.kill()
    out, err = t.communicate()
holder.kill()
holder.wait()
frames = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
states = [f["ranks"][0]["state"] for f in frames]
counts = [f["ranks"][0]["events"] for f in frames]
ok(t.returncode == 0 and len(set(counts)) >= 10 and counts == sorted(counts) and states[-1] == "finished",
   "a trace written in %d pieces cut inside chunks: read on from each piece's last whole chunk, to its end" %
   len(cuts), (t.returncode, err, counts, states[-3:]))
if rep and frames:
    last = frames[-1]["ranks"][0]
    ok(last["events"] == rep["events"]["total"] and
       last["devices"][0]["peak_bytes"] == rep["devices"][0]["peak_allocated_bytes"] and
       last["devices"][0]["allocated_bytes"] == rep["devices"][0]["allocated_at_exit_bytes"],
       "... and what it shows at the end is what the whole trace holds", (last["events"], rep["events"]["total"]))

# ---- the last OOM, and what a policy left in the trace ----
oomdir = os.path.join(TMP, "oom")
os.makedirs(oomdir)
oom_trace, truth = os.path.join(oomdir, "oom.trace"), os.path.join(oomdir, "truth.json")
subprocess.run([MEMTAP, "run", "-q", "-o", oom_trace, "--policy", "oom_snapshot", "--", SIMTRAIN, "--preset", "tiny",
                "--tag", "--leak", str(LEAK), "--iters", "100", "--json", truth], capture_output=True,
               env=dict(ENV, SIMGPU_MEM="4M"))
want = json.load(open(truth))["oom"]
p, frames = top("--once", "--json", oom_trace)
r = frames[0]["ranks"][0] if frames and frames[0] else None
ok(r and r["ooms"] == 1 and r["last_oom"]["bytes"] == want["size"] and r["last_oom"]["device"] == 0 and
   r["last_oom"]["where"].startswith("tensor_new"), "the last OOM: simtrain's, its size and where", (r, want))
kinds = [e["kind"] for e in r["recent_events"]] if r else []
ok(kinds[-2:] == ["oom", "snapshot"] and r["recent_events"][-1]["text"].endswith(".trace"),
   "the policy's snapshot at the OOM, after it", r and r["recent_events"])
p, _ = top("--once", oom_trace)
ok("OOMs: 1; the last at" in p.stdout and "snapshot  " in p.stdout, "the plain form says both", p.stdout[-600:])

# ---- a directory of ranks: one row each, and the spread ----
ranks_dir = os.path.join(TMP, "ranks")
os.makedirs(ranks_dir)
for r, iters in ((0, 10), (1, 30)):
    e = dict(ENV, RANK=str(r), WORLD_SIZE="2")
    job(os.path.join(ranks_dir, "rank%d.trace" % r), iters, 0, env=e).wait()
p, frames = top("--once", "--json", ranks_dir)
f = frames[0] if frames else None
ok(p.returncode == 0 and f and [r["rank"] for r in f["ranks"]] == ["0", "1"], "a directory: a row per rank",
   p.stdout[:500] + p.stderr)
if f:
    a = [r["devices"][0]["allocated_bytes"] for r in f["ranks"]]
    s = f["spread"]
    ok(a[1] - a[0] == 20 * LEAK and s["max_allocated_bytes"] == a[1] and s["min_allocated_bytes"] == a[0] and
       abs(s["spread"] - (a[1] - a[0]) / ((a[0] + a[1]) / 2)) < 1e-3,
       "the spread between ranks: the longer rank holds 20 more iterations' leak", (a, s))
p, _ = top("--once", ranks_dir)
lines = p.stdout.splitlines()
ok(p.returncode == 0 and lines[0].split()[:3] == ["rank", "host", "dev"] and lines[1].startswith("0 ") and
   lines[2].startswith("1 ") and lines[3].startswith("spread: "), "the plain form: rank rows, then the spread",
   p.stdout[:800])

# ---- a PID: the trace memtap run's child has open ----
trace2 = os.path.join(TMP, "pid.trace")
j = job(trace2, 100000, 5)
wait_for(trace2)
p, frames = top("--once", "--json", str(j.pid))
ok(p.returncode == 0 and frames and frames[0] and frames[0]["ranks"][0]["trace"] == trace2 and
   frames[0]["ranks"][0]["state"] == "running",
   "top PID (memtap run's): the trace its child has open, running", p.stdout[:300] + p.stderr)

# ---- no argument: every GPU as the driver counts it (NVML) and every job under memtap;
# a stand-in NVML lists the job and a process not under memtap ----
FAKE = os.path.join(B, "tests/analyze/.libs/libfake_nvml.so")
outsider = subprocess.Popen(["sleep", "60"])
# a trace open read-only (as memtap report keeps one it walks) is no job's
read = os.path.join(TMP, "read.trace")
subprocess.run([MEMTAP, "run", "-q", "-o", read, "--", SIMTRAIN, "--iters", "1"], env=ENV, check=True,
               capture_output=True)
reader = subprocess.Popen(["sleep", "60"], stdin=open(read, "rb"))
p, frames = top("--once", "--json", env=dict(os.environ, MEMTAP_NVML="/nowhere/libnvidia-ml.so.1"))
reader.kill()
reader.wait()
ok(not any(r["trace"] == read for r in (frames[0]["ranks"] if frames and frames[0] else [])),
   "top with no argument: a trace a process only reads is not a job", p.stdout[:600])
mine = [r for r in (frames[0]["ranks"] if frames and frames[0] else []) if r["trace"] == trace2]
ok(p.returncode == 0 and mine and frames[0]["gpus"] == [] and "no NVIDIA driver's NVML here" in frames[0]["gpus_unknown"],
   "top with no argument and no driver: the jobs under memtap this user can see (the PID's job among them), and "
   "why the GPUs are not listed", p.stdout[:600] + p.stderr)
env = dict(os.environ, MEMTAP_NVML=FAKE, FAKE_NVML_USED=str(3 << 30),
           FAKE_NVML_PROCS="%d:%d %d:%d" % (mine[0]["pid"] if mine else 0, 2 << 30, outsider.pid, 1 << 30))
p, _ = top("--once", env=env)
lines = p.stdout.splitlines()
ok(p.returncode == 0 and lines and lines[0].startswith("GPU0  Test GPU") and
   any(("pid %-7d" % mine[0]["pid"]) in l and "under memtap: " + trace2 in l for l in lines) and
   any(("pid %-7d sleep" % outsider.pid) in l and "1.00 GiB, not under memtap" in l for l in lines),
   "...with the driver's view: each GPU, the job under memtap by its trace, another process by what the driver "
   "says", p.stdout[:1500] + p.stderr)
p, frames = top("--once", "--json", env=env)
g = frames[0]["gpus"] if frames and frames[0] else []
ok(g and g[0]["total_bytes"] == 80 << 30 and g[0]["used_bytes"] == 3 << 30 and
   [q["trace"] for q in g[0]["processes"]] == [trace2, None],
   "...and in JSON: the GPUs, their processes, each one's trace where it is under memtap", frames[:1])
outsider.kill()
outsider.wait()

# ---- the terminal view, in tmux ----
TMUX = shutil.which("tmux")


SERVER = ["memtap-test-%d" % os.getpid()]  # a server of the test's own; a new one per session


def tmux(*args):
    return subprocess.run(["tmux", "-L", SERVER[0], *args], capture_output=True, text=True,
                          env=dict(os.environ, TMUX=""))


def screen_until(want, timeout=20):
    end, text = time.time() + timeout, ""
    while time.time() < end:
        text = tmux("capture-pane", "-p", "-t", "top").stdout
        if want(text):
            return text
        time.sleep(0.1)
    return text


if not TMUX:
    print("ok - # SKIP tmux is not installed (quickstart check installs it)")
else:
    status = os.path.join(TMP, "status")
    # a job of its own, on a device that its leak fills only after a thousand iterations:
    # trace2's may have run out of memory and ended by now on a slow machine (under TSan)
    view = os.path.join(TMP, "view.trace")
    jv = job(view, 100000, 5, env=dict(ENV, SIMGPU_MEM="64M"))
    wait_for(view)
    cmd = "%s top %s; echo $? > %s; sleep 60" % (MEMTAP, view, status)
    r = tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "45", cmd)
    ok(r.returncode == 0, "tmux starts memtap top on a running job", r.stderr)
    text = screen_until(lambda t: "where in the code" in t and "< stash_debug_tensor" in t)
    ok(text.startswith("memtap top: ") and "running" in text.splitlines()[0] and "GPU0" in text and
       "[|" in text and "tags" in text and "phases" in text and "(sort: live bytes)" in text,
       "the view: the job, the device's bar, the composition now, the stacks sorted by live bytes", text)
    first = int(text.split(" events")[0].split()[-1]) if " events" in text else 0
    text = screen_until(lambda t: " events" in t and int(t.split(" events")[0].split()[-1]) > first)
    ok(int(text.split(" events")[0].split()[-1]) > first, "it refreshes: more events a second later", text[:200])
    tmux("send-keys", "-t", "top", "s")
    text = screen_until(lambda t: "(sort: growth)" in t)
    rows = [l for l in text.splitlines() if "tensor_new" in l]
    ok("(sort: growth)" in text and rows and "< stash_debug_tensor" in rows[0], "s sorts by growth: the leak comes first", text)
    tmux("send-keys", "-t", "top", "Enter")
    text = screen_until(lambda t: "        stash_debug_tensor (simtrain.c" in t)
    ok("        stash_debug_tensor (simtrain.c" in text, "Enter expands the chosen stack into its frames", text)
    tmux("send-keys", "-t", "top", "p")
    text = screen_until(lambda t: "(paused)" in t)
    n1 = text.split(" events")[0].split()[-1] if " events" in text else ""
    time.sleep(2.5)
    text = tmux("capture-pane", "-p", "-t", "top").stdout
    ok("(paused)" in text and text.split(" events")[0].split()[-1] == n1, "p pauses: the frame holds", text[:200])
    tmux("send-keys", "-t", "top", "q")
    end = time.time() + 10
    while time.time() < end and not (os.path.exists(status) and open(status).read().strip()):
        time.sleep(0.1)
    ok(os.path.exists(status) and open(status).read().strip() == "0", "q quits, exit status 0")
    tmux("kill-server")
    jv.kill()
    jv.wait()
    # a directory of ranks: the rows, the details of the rank holding the most, Tab for the next
    # (a new server: the old one may still be exiting, and would take a new session with it)
    SERVER[0] += "-ranks"
    r = tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "45", "%s top %s; sleep 60" % (MEMTAP, ranks_dir))
    text = screen_until(lambda t: t.startswith("rank ") and "spread: " in t)
    head = [l for l in text.splitlines() if l.startswith("memtap top: ")]
    ok(text.startswith("rank ") and "spread: " in text and head and " rank 1 " in head[0],
       "ranks in the terminal: a row each, the spread, the details of the rank holding the most", text)
    tmux("send-keys", "-t", "top", "Tab")
    text = screen_until(lambda t: "memtap top: %s/rank0.trace  rank 0 " % ranks_dir in t)
    ok("memtap top: %s/rank0.trace  rank 0 " % ranks_dir in text, "Tab shows the next rank's details", text)
    tmux("send-keys", "-t", "top", "q")
    tmux("kill-server")
j.kill()
j.wait()

# ---- bad input: one line, exit 2 ----
notes = os.path.join(TMP, "notes.txt")
open(notes, "w").write("not a trace\n")
dead = subprocess.Popen(["true"])
dead.wait()
empty = os.path.join(TMP, "empty")
os.makedirs(empty)
snap = os.path.join(TMP, "snapshot.pickle")  # what torch.cuda.memory._dump_snapshot writes
pickle.dump({"segments": [], "device_traces": [[]]}, open(snap, "wb"), protocol=2)
for args, says in (((notes,), "not a memtap trace"),
                   ((snap,), "a PyTorch snapshot, not a trace being written: memtap report"),
                   ((os.path.join(TMP, "absent.trace"),), "cannot read"),
                   ((str(os.getpid()),), "has no memtap trace open"),
                   ((str(dead.pid),), "no process %d" % dead.pid),
                   ((empty,), "no .trace files"),
                   ((notes, trace), "one trace, directory or process at a time"),
                   (("--interval", "0", trace), "--interval"),
                   (("--bogus", trace), "memtap top: unknown option --bogus (see memtap top --help)")):
    p, _ = top("--once", *args)
    lines = p.stderr.strip().splitlines()
    ok(p.returncode == 2 and says in p.stderr and len(lines) == 1 and not p.stdout,
       "top %s: one line, exit 2" % " ".join(args), p.stderr + p.stdout)
done()
