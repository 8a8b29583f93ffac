"""Whole jobs with plain environment variables: 8 ranks on simgpu, each under its own
`memtap run --dir RUN` with RANK and WORLD_SIZE set as a launcher sets them. Rank 7
dies first (SIGKILL after its trace is written), rank 5 runs out of memory against a
cap; the bundled oom_snapshot policy then has every live rank take a snapshot of that
moment, a policy's on_peer_oom runs once in each other live rank, and `memtap report
RUN` shows every rank at the OOM (what it held then, from its snapshot) next to its own
peak, rank 7 as dead. Each rank's figures differ: every rank made and freed a larger
allocation before the OOM (its peak so far is not what it held at the OOM), and each
live rank allocates more once its snapshot is taken (its own peak over the run is
neither), so a column that shows another figure fails. Then: a rank whose first allocation fails, a run directory named by the launcher's job id when no
--dir is given (SLURM_JOB_ID, TORCHELASTIC_RUN_ID), snapshot_all outside a run
directory, and --dir's bad input."""
import glob
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
RANK = os.path.join(B, "tests/job/rank")
TMP = scratch("job")
MiB = 1 << 20
WORLD, OOM_RANK, DEAD_RANK = 8, 5, 7

PEER = os.path.join(TMP, "peer.lua")
open(PEER, "w").write("""
memtap.on_peer_oom(function(ev)
  assert(memtap.append("peer-" .. memtap.rank .. ".jsonl", memtap.json({rank = ev.rank, id = ev.id, pid = ev.pid,
    host = ev.host, me = memtap.rank, world = memtap.world_size, run_dir = memtap.run_dir}) .. "\\n"))
end)
""")


def env(rank, **extra):
    e = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), SIMGPU_MEM="16GiB",
             MEMTAP_CAP="2GiB")
    for k in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "MEMTAP_DIR", "MEMTAP_OUTPUT"):
        e.pop(k, None)
    e.update(extra)
    return e


def start(run, rank, args, before=None, after=None, **extra):
    if before:
        extra["RANK_BEFORE_MIB"] = str(before // MiB)
    if after:
        extra["RANK_AFTER_MIB"] = str(after // MiB)
    cmd = [MEMTAP, "run", "--dir", run, "--policy", "cap", "--policy", "oom_snapshot", "--policy", PEER,
           "--", RANK] + args
    return subprocess.Popen(cmd, env=env(rank, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(paths, limit=300):
    """The files exist; False after `limit` seconds (a hung test, not a timing check)."""
    end = time.monotonic() + limit
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


run, sync = os.path.join(TMP, "run"), os.path.join(TMP, "sync")
os.mkdir(sync)
# what each rank held at the OOM, its peak before it (a larger allocation, made and freed
# first) and its own peak over the run (live ranks allocate AFTER more once their snapshot
# of the OOM is taken)
AFTER = 96 * MiB
held = {r: (r + 1) * 64 * MiB for r in range(WORLD)}
held[OOM_RANK], held[DEAD_RANK] = 1024 * MiB, 64 * MiB
before = {r: held[r] + 40 * MiB for r in range(WORLD)}
before[OOM_RANK] = 1536 * MiB
dead = start(run, DEAD_RANK, ["64", "die", sync], before=before[DEAD_RANK])
_, err = dead.communicate(timeout=300)
ok(dead.returncode == -9, "rank %d ended itself with SIGKILL before anything else" % DEAD_RANK, err)

live = [r for r in range(WORLD) if r not in (OOM_RANK, DEAD_RANK)]
waiters = {r: start(run, r, [str(held[r] // MiB), "wait", sync], before=before[r], after=AFTER) for r in live}
ready = wait_for([os.path.join(sync, "ready-%d" % r) for r in live])
ok(ready, "the %d waiting ranks are up and count as ranks (.memtap/rank-R)" % len(live),
   sorted(os.listdir(sync)))
failing = start(run, OOM_RANK, ["1024", "oom", "4096"], before=before[OOM_RANK])
_, err = failing.communicate(timeout=300)
ok(failing.returncode == 1, "rank %d's allocation past its cap failed" % OOM_RANK, err)
ok("every rank takes one of this moment" in err, "its oom_snapshot asked every rank for a snapshot", err)
if not wait_for([], 0) or not all(p.poll() is not None for p in waiters.values()):
    end = time.monotonic() + 300
    while time.monotonic() < end and any(p.poll() is None for p in waiters.values()):
        time.sleep(0.05)
hung = [r for r, p in waiters.items() if p.poll() is None]
if hung:
    open(os.path.join(sync, "stop"), "w").close()
outs = {r: p.communicate(timeout=60) for r, p in waiters.items()}
ok(not hung and all(p.returncode == 0 for p in waiters.values()),
   "every live rank saw its snapshot of the OOM appear and finished", "hung: %s; %s" % (hung, outs))

traces = sorted(os.path.basename(p) for p in glob.glob(os.path.join(run, "*.trace")))
ok(traces == ["rank-%d.trace" % r for r in range(WORLD)], "one run directory holds every rank's trace, by rank",
   traces)
events = open(os.path.join(run, ".memtap/events")).read().split("\n")
ooms = [line.split() for line in events if line.startswith("oom ")]
ok(len(ooms) == 1 and ooms[0][2] == str(OOM_RANK), "the event log holds rank %d's OOM once" % OOM_RANK, events)
oom_id = ooms[0][1] if ooms else "?"
snaps = sorted(os.listdir(os.path.join(run, "snapshots", oom_id))) if ooms else []
ok(snaps == sorted("rank-%d.trace" % r for r in live + [OOM_RANK]),
   "every live rank, and only those, took a snapshot under snapshots/%s/" % oom_id, snaps)

peers = {}
for r in range(WORLD):
    path = os.path.join(run, "peer-%d.jsonl" % r)
    peers[r] = [json.loads(x) for x in open(path)] if os.path.exists(path) else []
ok(all(len(peers[r]) == 1 and peers[r][0]["rank"] == OOM_RANK and peers[r][0]["id"] == oom_id for r in live),
   "on_peer_oom ran exactly once in every other live rank, told which rank failed", peers)
ok(not peers[OOM_RANK] and not peers[DEAD_RANK], "not in the rank that failed, nor in the dead one", peers)
ok(all(peers[r][0]["me"] == r and peers[r][0]["world"] == WORLD and peers[r][0]["run_dir"] == os.path.realpath(run)
       for r in live if peers[r]), "memtap.rank, memtap.world_size and memtap.run_dir are the rank's", peers)

# exit status 3: rank 7's trace was cut short, which the report says on stderr
p = subprocess.run([MEMTAP, "report", "--json", run], capture_output=True, text=True)
rep = json.loads(p.stdout) if p.returncode == 3 else {}
at = {x["rank"]: x for x in rep["ooms"][0]["ranks"]} if rep.get("ooms") else {}
ok(len(rep.get("ooms", [])) == 1 and rep["ooms"][0]["rank"] == OOM_RANK and sorted(at) == list(range(WORLD)),
   "memtap report RUN --json: the OOM, and every rank of the job at it", p.stdout[-2000:] + p.stderr)
# each rank's own peak over the run: what it held then the larger of its peak before and
# what it allocated after its snapshot; at the OOM it held `held` (neither of its peaks)
peak = {r: max(before[r], held[r] + (AFTER if r in live else 0)) for r in range(WORLD)}
assert all(len({held[r], before[r], peak[r]}) == 3 for r in live) and held[OOM_RANK] != peak[OOM_RANK]
ok(all(at[r]["state"] == "snapshot" and os.path.exists(at[r]["snapshot"]) for r in live if r in at),
   "each live rank: its snapshot of that moment", at)
# the same with every trace walked from its file, as a long one is, and read whole
walked, whole = (subprocess.run([MEMTAP, "report", "--json", run], capture_output=True, text=True,
                                env=dict(os.environ, MEMTAP_READ=how)) for how in ("file", "memory"))
ok(walked.returncode == whole.returncode == 3 and walked.stdout == whole.stdout == p.stdout,
   "memtap report RUN --json: the same walking each rank's trace from its file as reading it whole",
   walked.stderr + whole.stderr)
for r in range(WORLD):
    x = at.get(r, {})
    ok(x.get("allocated_bytes") == held[r], "rank %d: what it held at the OOM (%d MiB), not its peak before it "
       "(%d MiB) nor its own peak (%d MiB)" % (r, held[r] // MiB, before[r] // MiB, peak[r] // MiB), x)
    ok(x.get("peak_allocated_bytes") == peak[r], "rank %d: its own peak over the run beside it" % r, x)
ok(at.get(OOM_RANK, {}).get("state") == "out of memory", "the failing rank: what it held when its allocation failed",
   at.get(OOM_RANK))
ok(at.get(DEAD_RANK, {}).get("state") == "died before" and at[DEAD_RANK]["snapshot"] is None,
   "the rank that died first is reported as dead, with what it held", at.get(DEAD_RANK))
# the OOM's own columns and each snapshot's, as the event log has them
oom_line = ooms[0] if ooms else ["?"] * 6
took = {int(x[2]): x for x in (line.split() for line in events if line.startswith("took "))}
o = rep["ooms"][0] if rep.get("ooms") else {}
ok((o.get("id"), o.get("rank"), o.get("pid"), o.get("realtime_ns"), o.get("host")) ==
   (oom_line[1], int(oom_line[2]), int(oom_line[3]), int(oom_line[4]), oom_line[5]),
   "the OOM's id, rank, pid, moment and host, as its line in the event log", (o, oom_line))
for r in live + [OOM_RANK]:
    x, t = at.get(r, {}), took.get(r)
    after = int(t[4]) - int(oom_line[4]) if t else None
    ok(t and x.get("snapshot") == os.path.join(run, t[6]) and x.get("snapshot_after_ns") == after and
       (r == OOM_RANK or x.get("why") == "taken %.0f ms after the OOM" % (after / 1e6)),
       "rank %d: its snapshot, and how long after the OOM it was taken, as its line in the event log" % r, (x, t))
rows = {int(x["rank"]): x for x in rep.get("ranks", [])}
ok({r: rows.get(r, {}).get("peak_allocated_bytes") for r in range(WORLD)} == peak,
   "the table of ranks: each rank's own peak", rows)


def size_text(n):
    """mt_format_size's words for n bytes (two decimals, binary units)."""
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return "%.2f %s" % (n / (1 << k), unit)
    return "%d B" % n


text = subprocess.run([MEMTAP, "report", run], capture_output=True, text=True).stdout
table = text.split("every rank at that moment:\n", 1)[-1].splitlines()[1:WORLD + 1]
cells = {int(line.split()[0]): line for line in table if line.split() and line.split()[0].isdigit()}
for r in range(WORLD):
    line = cells.get(r, "")
    want = "%-6d %12s %12s  %-14s" % (r, size_text(held[r]), size_text(peak[r]), at.get(r, {}).get("state", "?"))
    ok(line.startswith(want), "the text report's row of rank %d: at the OOM, own peak, state" % r, (want, line))
page = os.path.join(TMP, "job.html")
p = subprocess.run([MEMTAP, "report", "--html", page, run], capture_output=True, text=True)
html = open(page).read() if os.path.exists(page) else ""
ok(p.returncode == 3 and "rank %d ran out of memory" % OOM_RANK in html and "died before" in html,
   "and the HTML page", p.stderr)
top = max(peak.values())
for r in range(WORLD):
    cls = "oom" if r == OOM_RANK else "now" if r in live else "gone"
    want = ("<tr><td>%d</td><td class=n>%s</td><td class=n>%s</td><td><div class=bar><div class='%s' "
            "style='width:%.1f%%'></div><div class=peak style='left:%.1f%%'>" %
            (r, size_text(held[r]), size_text(peak[r]), cls, 100.0 * held[r] / top, 100.0 * peak[r] / top))
    ok(want in html, "the page's row of rank %d at the OOM: its bytes then and its own peak, each bar's length" % r,
       (want, [x for x in html.split("\n") if x.startswith("<tr><td>%d</td>" % r)]))
# every rank's memory over time, side by side on one scale and one clock
figures = {int(m.group(2)): m for m in re.finditer(
    r"<figure class='(rank(?: failed)?)' data-rank=(\d+) data-peak=(\d+)>(.*?)</figure>", html)}
job_oom_x = set()
for r in range(WORLD):
    m = figures.get(r)
    path = re.search(r"<path class=line d='([^']*)'", m.group(4)) if m else None
    ys = [float(y) for y in re.findall(r"[ML][\d.]+,([\d.]+)", path.group(1))] if path else []
    ok(m and (m.group(1) == "rank failed") == (r == OOM_RANK) and int(m.group(3)) == peak[r] and ys and
       abs(min(ys) - (90 - 90 * peak[r] / top)) < 0.1,
       "the page's chart of rank %d over time: its own peak the highest point on the job's scale, the rank that "
       "failed outlined" % r, m and (m.group(1), m.group(3), min(ys) if ys else None))
    job_oom_x |= set(re.findall(r"<line class=job-oom x1='([\d.]+)'", m.group(4))) if m else {"none"}
own = re.findall(r"<line class=oom x1='([\d.]+)'", figures[OOM_RANK].group(4)) if OOM_RANK in figures else []
# the event log's line is written by the policy after the failure: a little later, never before
ok(len(job_oom_x) == 1 and len(own) == 1 and 0 <= float(min(job_oom_x)) - float(own[0]) <= 42,
   "the OOM drawn at the same moment on every rank's chart, just after the failed rank's own failure (one clock)",
   (job_oom_x, own))

# ---- a rank whose very first allocation fails still counts as a rank and asks ----
run2, sync2 = os.path.join(TMP, "run-first"), os.path.join(TMP, "sync-first")
os.mkdir(sync2)
waiter = start(run2, 0, ["64", "wait", sync2])
if not wait_for([os.path.join(sync2, "ready-0")]):
    open(os.path.join(sync2, "stop"), "w").close()
first = start(run2, 1, ["0", "oom", "4096"])
_, err = first.communicate(timeout=300)
try:
    waiter.communicate(timeout=300)
except subprocess.TimeoutExpired:
    open(os.path.join(sync2, "stop"), "w").close()
    waiter.communicate(timeout=60)
told = [x.split()[:3] for x in open(os.path.join(run2, ".memtap/events")) if x.startswith("oom ")]
ok(first.returncode == 1 and [x[2] for x in told] == ["1"] and
   glob.glob(os.path.join(run2, "snapshots", told[0][1], "rank-0.trace")),
   "a rank whose first allocation fails tells the others of its OOM, and they take their snapshots", err)

# ---- a run directory from the launcher's job id, when no --dir and no -o are given ----
for var, value, name in (("SLURM_JOB_ID", "4242", "memtap-slurm-4242"),
                         ("TORCHELASTIC_RUN_ID", "ab/c", "memtap-torchrun-ab_c")):
    where = os.path.join(TMP, "cwd-" + var)
    os.mkdir(where)
    extra = {var: value, "SLURM_PROCID": "3"} if var == "SLURM_JOB_ID" else {var: value}
    e = env(3, **extra)
    if var == "SLURM_JOB_ID":
        del e["RANK"]
    p = subprocess.run([MEMTAP, "run", "--", RANK, "16", "oom", "4096"], env=e, cwd=where, capture_output=True,
                       text=True, timeout=300)
    want = os.path.join(where, name, "rank-3.trace")
    ok(os.path.exists(want) and want in p.stderr, "%s=%s: the rank's trace is %s/rank-3.trace, and said" %
       (var, value, name), p.stderr + str(os.listdir(where)))

# ---- snapshot_all outside a run directory; --dir's bad input ----
pol = os.path.join(TMP, "alone.lua")
open(pol, "w").write("""
memtap.on_oom(function(ev)
  local path, err = memtap.snapshot_all()
  memtap.append("alone.txt", tostring(path) .. "|" .. tostring(err) .. "|" .. tostring(memtap.rank))
end)
""")
alone = os.path.join(TMP, "alone")
os.mkdir(alone)
e = env(0)
del e["RANK"]
p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(alone, "t.trace"), "--policy", "cap", "--policy", pol,
                    "--", RANK, "16", "oom", "4096"], env=e, capture_output=True, text=True, timeout=300)
said = open(os.path.join(alone, "alone.txt")).read() if os.path.exists(os.path.join(alone, "alone.txt")) else ""
ok(said.startswith("nil|not in a run directory") and said.endswith("|nil"),
   "snapshot_all outside a run directory: nil and why; memtap.rank is nil", said + p.stderr)
p = subprocess.run([MEMTAP, "run", "--dir", run, "-o", "x.trace", "--", "true"], capture_output=True, text=True)
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "not both" in p.stderr, "--dir with -o: one line, status 2",
   p.stderr)
p = subprocess.run([MEMTAP, "run", "--dir", os.path.join(TMP, "no/such/folder"), "--", "true"], capture_output=True,
                   text=True)
ok(p.returncode == 2 and p.stderr.count("\n") == 1 and "run directory" in p.stderr,
   "--dir whose parent is missing: one line, status 2", p.stderr)
done()
