"""`memtap report` on a 10-million-event trace against the plain-Python replay people use
today (bench/memviz_replay.py, the way torch/cuda/_memory_viz.py walks a snapshot), on
the same events exported as a PyTorch snapshot, each measured in the same run; and the
report walking a trace from its file against reading it whole (MEMTAP_READ), on that
recording and on a harder one from bench/gen_trace (four threads interleaved, stragglers,
equal times: more to merge and more live).

  python3 bench/report.py BUILD_DIR [EVENTS]        (or: make bench)

The trace is a recording of tools/simtrain (GPT-2 small, enough iterations for EVENTS
events, parameters and optimizer state left live at exit so the snapshot has segments).
Wall-clock figures are medians of alternating runs; peak memory is each process's
maximum resident set.
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
EVENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
REPLAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memviz_replay.py")
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
REPEAT = 3
EVENTS_PER_ITERATION = 1099  # GPT-2 small under simtrain: allocations, frees and NVTX ranges


def measure(argv, read=None):
    """(seconds, peak resident KiB of this child alone, standard output) of one run; read:
    MEMTAP_READ, how memtap reads the trace (None: as it chooses)."""
    start = time.monotonic()
    env = dict(ENV, MEMTAP_READ=read) if read else ENV
    p = subprocess.Popen(argv, env=env, stdout=open(os.path.join(TMP, "out"), "wb"), stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.monotonic() - start
    if status:
        sys.exit("%s failed: %s" % (" ".join(argv), p.stderr.read().decode()))
    return seconds, usage.ru_maxrss, open(os.path.join(TMP, "out"), "rb").read()


def line(name, value, target, passed):
    print("%-52s %-40s target %-10s %s" % (name, value, target, "met" if passed else "NOT MET"))


trace = os.path.join(TMP, "train.trace")
pickle = os.path.join(TMP, "train.pickle")
iters = max(1, EVENTS // EVENTS_PER_ITERATION)
subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, "--preset", "gpt2-small", "--iters", str(iters),
                "--no-teardown"], env=ENV, check=True, stdout=subprocess.DEVNULL)
subprocess.run([MEMTAP, "export", "--format=memviz", "-o", pickle, trace], env=ENV, check=True)
print("memtap report benchmark (%s): simtrain gpt2-small, %d iterations; trace %.0f MB, snapshot %.0f MB; "
      "median of %d alternating runs" % (B, iters, os.path.getsize(trace) / 1e6, os.path.getsize(pickle) / 1e6, REPEAT))

ours, theirs = [], []
for _ in range(REPEAT):
    ours.append(measure([MEMTAP, "report", "--json", trace]))
    theirs.append(measure([sys.executable, REPLAY, pickle]))
report = json.loads(ours[0][2])
baseline = json.loads(theirs[0][2])["0"]
events = report["events"]["total"]
frag = report["devices"][0]
same = frag["peak_allocated_bytes"] == baseline["peak_allocated_bytes"]
print("events: %d; peak allocated: memtap %d, Python %d (%s)" % (
    events, frag["peak_allocated_bytes"], baseline["peak_allocated_bytes"], "the same" if same else "DIFFERENT"))
t_ours, t_theirs = statistics.median(s for s, _, _ in ours), statistics.median(s for s, _, _ in theirs)
m_ours, m_theirs = max(m for _, m, _ in ours), max(m for _, m, _ in theirs)
line("(1) speed: Python replay time / memtap report time", "%.1fx (%.2f s vs %.2f s)" % (t_theirs / t_ours, t_ours, t_theirs),
     ">= 50", same and t_theirs / t_ours >= 50)
line("(2) peak memory: memtap / Python", "%.3f (%.0f MiB vs %.0f MiB)" % (m_ours / m_theirs, m_ours / 1024, m_theirs / 1024),
     "<= 0.25", m_ours / m_theirs <= 0.25)
line("(3) memtap report's rate", "%.1f M events/s" % (events / t_ours / 1e6), ">= 10", events / t_ours >= 10e6)


def walked_and_whole(name, path):
    """report --json walking path from its file against reading it whole, alternating."""
    runs = {"file": [], "memory": []}
    for _ in range(REPEAT):
        for read in runs:
            runs[read].append(measure([MEMTAP, "report", "--json", path], read))
    same = runs["file"][0][2] == runs["memory"][0][2]
    n = json.loads(runs["file"][0][2])["events"]["total"]
    (t_file, t_mem) = (statistics.median(s for s, _, _ in runs[k]) for k in ("file", "memory"))
    (m_file, m_mem) = (max(m for _, m, _ in runs[k]) for k in ("file", "memory"))
    line("(4) %s walked: rate; time, memory / read whole" % name,
         "%.1f M/s; %.2fx, %.3f (%.0f/%.0f MiB)" % (n / t_file / 1e6, t_file / t_mem, m_file / m_mem, m_file / 1024,
                                                     m_mem / 1024), ">= 5 M/s", same and n / t_file >= 5e6)
    if not same:
        print("    the walked report differs from the one read whole")


walked_and_whole("simtrain", trace)
stress = os.path.join(TMP, "stress.trace")
subprocess.run([os.path.join(B, "bench/gen_trace"), stress, str(EVENTS * 8 // 5), "4", "1", "sbt"], check=True)
walked_and_whole("gen_trace %d sbt" % (EVENTS * 8 // 5), stress)
# not a target: memtap reading the very same pickle (its importer builds the whole object tree)
s, m, out = measure([MEMTAP, "report", "--json", pickle])
imported = json.loads(out)["devices"][0]
print("(info) memtap report on the snapshot itself: %.2f s, %.0f MiB, peak %s, free in segments at exit %d "
      "(Python: %d)" % (s, m / 1024, "the same" if imported["peak_allocated_bytes"] == baseline["peak_allocated_bytes"]
                        else "DIFFERENT", imported["fragmentation"]["at_exit"]["external_bytes"],
                        baseline["free_in_segments_bytes"]))
shutil.rmtree(TMP)
