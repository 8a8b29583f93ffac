"""What a `memtap top` attached to a running job costs the job, against the same job
without one, measured in the same run.

  python3 bench/top.py BUILD_DIR        (or: make bench)

simtrain (gpt2-small) under memtap run, twice over: 10,000 iterations without simulated
compute (the worst case: about 7 million events, flowing all the time), and 150
iterations where each layer's forward and backward take 2 ms (events in bursts, as in a
job whose GPU computes); each alone and with `memtap top --interval 1` following its
trace from a moment after it starts to its end
(plain lines to /dev/null: the same reading, replay and frame as the terminal view, less
the drawing). Alternating runs, medians of each; the ratios of the job's wall-clock time
and of its CPU time (the job's and its children's: simtrain and memtap's writer thread),
and what top itself used, in CPU seconds per second of the job. The job does nothing for
top (top reads the trace file the writer writes anyway), so any difference is top
competing for the machine's cores.
"""
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
WORKLOADS = [("no compute, 10000 iterations", ["--iters", "10000"]),
             ("2 ms per layer, 150 iterations", ["--iters", "150", "--compute-ms", "2"])]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
TMP = tempfile.mkdtemp(prefix="memtap-bench-top-")
REPEAT = 5


def cpu(ru):
    return ru.ru_utime + ru.ru_stime


def run(args, with_top):
    trace = os.path.join(TMP, "job.trace")
    if os.path.exists(trace):
        os.unlink(trace)
    t0 = time.monotonic()
    job = subprocess.Popen([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "gpt2-small", *args],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    top = None
    if with_top:
        while not (os.path.exists(trace) and os.path.getsize(trace) > 0) and job.poll() is None:
            time.sleep(0.01)
        top = subprocess.Popen([MEMTAP, "top", "--interval", "1", trace], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    _, status, ru = os.wait4(job.pid, 0)
    wall = time.monotonic() - t0
    job.returncode = status
    top_cpu = 0.0
    if top:
        _, _, tru = os.wait4(top.pid, 0)
        top.returncode = 0
        top_cpu = cpu(tru)
    return wall, cpu(ru), top_cpu


def main():
    subprocess.run([SIMTRAIN, "--preset", "gpt2-small", "--iters", "1"], env=ENV, capture_output=True, check=True)
    for label, args in WORKLOADS:
        alone, attached = [], []
        for i in range(REPEAT):
            alone.append(run(args, False))
            attached.append(run(args, True))
            print("  run %d: alone %.2f s (cpu %.2f s), with top %.2f s (cpu %.2f s; top's own %.2f s)" %
                  (i + 1, *alone[-1][:2], *attached[-1]), flush=True)
        wall0, wall1 = statistics.median(a[0] for a in alone), statistics.median(a[0] for a in attached)
        cpu0, cpu1 = statistics.median(a[1] for a in alone), statistics.median(a[1] for a in attached)
        top_rate = statistics.median(a[2] / a[0] for a in attached)
        print("simtrain gpt2-small, %s, under memtap run; medians of %d alternating runs" % (label, REPEAT))
        print("  job wall-clock: %.2f s alone, %.2f s with memtap top attached: ratio %.3f" %
              (wall0, wall1, wall1 / wall0))
        print("  job CPU time:   %.2f s alone, %.2f s with memtap top attached: ratio %.3f" %
              (cpu0, cpu1, cpu1 / cpu0))
        print("  memtap top itself: %.3f CPU seconds per second of the job" % top_rate, flush=True)
    shutil.rmtree(TMP, ignore_errors=True)


main()
