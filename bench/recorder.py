"""The recorder's speed and size, each against a baseline measured in the same run.

  python3 bench/recorder.py BUILD_DIR        (or: make bench)

Prints one line per target of the recorder issue, with the ratio or figure and the
target. Wall-clock figures are medians of alternating runs (the machine is noisy);
callgrind instruction counts are exact and repeatable.
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
BENCH = os.path.join(B, "bench/recorder_bench")
LIB = os.path.join(B, "src/recorder/.libs/libmemtap.so")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMLIBS = os.path.join(B, "tools/simgpu/.libs")
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
PAIRS = 200000
REPEAT = 5


def env(with_memtap, **extra):
    e = dict(os.environ, LD_LIBRARY_PATH=SIMLIBS)
    if with_memtap:
        e.update(LD_PRELOAD=LIB, MEMTAP_OUTPUT=os.path.join(TMP, "b-%p.trace"))
    e.update(extra)
    return e


def ns_per_pair(argv, e):
    out = subprocess.run(argv, env=e, capture_output=True, text=True, check=True).stdout
    return float([l for l in out.splitlines() if re.fullmatch(r"[0-9.]+", l.strip())][-1])


def clean():
    for f in glob.glob(os.path.join(TMP, "*")):
        os.remove(f)


def line(name, value, target, passed):
    print("%-58s %-30s target %-14s %s" % (name, value, target, "met" if passed else "NOT MET"))


print("memtap recorder benchmarks (%s, %d pairs, median of %d alternating runs)" % (B, PAIRS, REPEAT))

# (1) added cost per recorded cudaMalloc + cudaFree pair, 24-frame stack
base, mt = [], []
for _ in range(REPEAT):
    base.append(ns_per_pair([BENCH, "cuda", str(PAIRS)], env(False)))
    mt.append(ns_per_pair([BENCH, "cuda", str(PAIRS)], env(True)))
    clean()
b, m = statistics.median(base), statistics.median(mt)
added = m - b
line("(1) ns added per alloc+free pair, 24 frames", "%.0f ns (%.0f -> %.0f, x%.2f)" % (added, b, m, m / b),
     "<= 300 ns", added <= 300)

# (2) the same against heaptrack recording malloc+free at the same depth
if shutil.which("heaptrack"):
    hb, ht = [], []
    for _ in range(REPEAT):
        hb.append(ns_per_pair([BENCH, "malloc", str(PAIRS)], env(False)))
        ht.append(ns_per_pair(["heaptrack", "-o", os.path.join(TMP, "ht"), BENCH, "malloc", str(PAIRS)], env(False)))
        clean()
    h_added = statistics.median(ht) - statistics.median(hb)
    line("(2) memtap's added cost / heaptrack's", "%.2f (%.0f ns / %.0f ns)" % (added / h_added, added, h_added),
         "<= 0.33", added / h_added <= 1 / 3)
else:
    print("(2) heaptrack is not installed: no comparison")

# (3) sustained events per second from 2 threads, with zero drops
runs = []
for _ in range(REPEAT):
    clean()
    per = ns_per_pair([BENCH, "cuda", str(PAIRS), "2"], env(True))
    trace = glob.glob(os.path.join(TMP, "b-*.trace"))[0]
    rep = subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout
    dropped = int(re.search(r'"dropped": (\d+)', rep).group(1))
    # PAIRS pairs per thread, two events a pair, two threads, in per * PAIRS ns
    runs.append((4 * PAIRS / (per * PAIRS) * 1e9, dropped))
rate = statistics.median(r[0] for r in runs)
drops = max(r[1] for r in runs)
line("(3) events/s recorded from 2 threads, drops", "%.2f M/s, %d dropped" % (rate / 1e6, drops), ">= 2 M/s, 0",
     rate >= 2e6 and drops == 0)

# (4) trace bytes per event on simtrain
clean()
subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, "s.trace"), "--",
                os.path.join(B, "tools/simtrain/simtrain"), "--preset", "gpt2-small"],
               env=env(False), capture_output=True, check=True)
events = sum(1 for _ in subprocess.run([MEMTAP, "dump", os.path.join(TMP, "s.trace")], capture_output=True,
                                       text=True).stdout.splitlines())
size = os.path.getsize(os.path.join(TMP, "s.trace"))
line("(4) trace bytes per event, simtrain gpt2-small", "%.1f (%d bytes, %d events)" % (size / events, size, events),
     "<= 24", size / events <= 24)


# (5) resident memory added by memtap: peak RSS of the same job with and without it
def max_rss_kib(argv, e):
    out = subprocess.run(argv, env=e, capture_output=True, text=True, check=True).stdout
    return int(re.search(r"peak_rss_kib (\d+)", out).group(1))


job = [BENCH, "cuda", str(PAIRS), "8"]
clean()
plain = max_rss_kib(job, env(False))
clean()
rec = max_rss_kib(job, env(True))
added_mib = (rec - plain) / 1024
line("(5) resident memory added, 8 recording threads", "%.1f MiB (%.1f -> %.1f MiB)" % (added_mib, plain / 1024,
                                                                                           rec / 1024),
     "<= 64 MiB", added_mib <= 64)
clean()


# (6) no event lost at the defaults on a loaded machine: a 10M-event simtrain recording while
# two other processes keep both cores busy, against the same recording on an idle machine
def simtrain_10m(busy):
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        clean()
        trace = os.path.join(TMP, "l.trace")
        subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", os.path.join(B, "tools/simtrain/simtrain"),
                        "--preset", "gpt2-small", "--iters", "9000"], env=env(False), capture_output=True, check=True)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    e = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)["events"]
    w = e.get("waited_for_writer", {"times": 0, "ns": 0})
    return e["total"], e["dropped"], w["times"], w["ns"] / 1e9


for busy in (0, 2):
    events, lost, waits, waited = simtrain_10m(busy)
    line("(6) simtrain 10M events, %d other busy processes" % busy,
         "%d dropped of %.1fM; waited %d times, %.2f s" % (lost, events / 1e6, waits, waited), "0 dropped", lost == 0)
clean()

# instructions, for a figure that does not move with the machine's load: bench/check.py's
# (make bench-check), the application's thread and every thread
if shutil.which("valgrind"):
    out = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "check.py"), B,
                          "--only", "recorder", "--write"], capture_output=True, text=True).stdout
    for name, value in re.findall(r"^(recorder_\w+) +(\d+)", out, re.M):
        print("callgrind: %s instructions added per pair (%s, 20000 pairs)" % (value, name))
