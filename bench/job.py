"""A whole job's coordinated snapshot: how long after one rank's OOM every other live
rank has its snapshot of that moment, with 8 ranks on one machine.

  python3 bench/job.py BUILD_DIR        (or: make bench)

Each trial starts 8 ranks (tests/job/rank on simgpu, each under `memtap run --dir RUN
--policy cap --policy oom_snapshot` with RANK and WORLD_SIZE set): rank 7 dies first
(SIGKILL), six ranks wait holding memory, then rank 5 runs out of memory against a cap.
From the run directory's event log: for each live rank, the time from the OOM line to
its "took" line (wall clock, which the ranks share). Target: every live rank within
200 ms. The baseline in the same run is the failing rank's own snapshot, taken inside
its on_oom handler; the others' latency is the poll interval (flush_ms, 100 ms) plus
their own snapshot. Also checked each time: `memtap report RUN` calls rank 7 dead.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
RANK = [os.path.join(B, "tools/simgpu/simgpu-run"), os.path.join(B, "tests/job/rank")]
TMP = tempfile.mkdtemp(prefix="memtap-bench-job-")
WORLD, OOM_RANK, DEAD_RANK, TRIALS, TARGET_MS = 8, 5, 7, 10, 200


def start(run, rank, args):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD), SIMGPU_MEM="16GiB", MEMTAP_CAP="2GiB")
    cmd = [MEMTAP, "run", "-q", "--dir", run, "--policy", "cap", "--policy", "oom_snapshot", "--"] + RANK + args
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def trial(n):
    run, sync = os.path.join(TMP, "run%d" % n), os.path.join(TMP, "sync%d" % n)
    os.mkdir(sync)
    start(run, DEAD_RANK, ["64", "die", sync]).wait()
    live = [r for r in range(WORLD) if r not in (OOM_RANK, DEAD_RANK)]
    waiters = [start(run, r, [str(64 * (r + 1)), "wait", sync]) for r in live]
    while not all(os.path.exists(os.path.join(sync, "ready-%d" % r)) for r in live):
        if any(p.poll() is not None for p in waiters):
            sys.exit("bench/job.py: a rank ended before it was ready (tests/job/rank on simgpu)")
        time.sleep(0.01)
    start(run, OOM_RANK, ["1024", "oom", "4096"]).wait()
    for p in waiters:
        p.wait()
    lines = [x.split() for x in open(os.path.join(run, ".memtap/events"))]
    oom = [x for x in lines if x[0] == "oom"][0]
    took = {int(x[2]): (int(x[4]) - int(oom[4])) / 1e6 for x in lines if x[0] == "took" and x[1] == oom[1]}
    rep = json.loads(subprocess.run([MEMTAP, "report", "--json", run], capture_output=True, text=True).stdout)
    states = {x["rank"]: x["state"] for x in rep["ooms"][0]["ranks"]}
    return took, live, states


def main():
    own, others, worst, missing, dead_ok = [], [], [], 0, 0
    for n in range(TRIALS):
        took, live, states = trial(n)
        own.append(took.get(OOM_RANK, float("nan")))
        got = [took[r] for r in live if r in took]
        missing += len(live) - len(got)
        others += got
        worst.append(max(got) if got else float("inf"))
        dead_ok += states.get(DEAD_RANK) == "died before"
    print("coordinated snapshot, %d ranks (%d live, rank %d dead first), %d trials:" % (WORLD, len(live) + 1,
                                                                                         DEAD_RANK, TRIALS))
    print("  the failing rank's own snapshot (baseline): median %.1f ms after the OOM" % statistics.median(own))
    print("  each other live rank's snapshot: median %.1f ms, max %.1f ms; the last rank's per trial: median %.1f ms, "
          "max %.1f ms (target <= %d ms: ratio %.2f)" % (statistics.median(others), max(others),
                                                         statistics.median(worst), max(worst), TARGET_MS,
                                                         max(worst) / TARGET_MS))
    print("  live ranks without a snapshot: %d; trials whose report calls rank %d dead: %d of %d" %
          (missing, DEAD_RANK, dead_ok, TRIALS))
    shutil.rmtree(TMP, ignore_errors=True)


main()
