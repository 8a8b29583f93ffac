"""Importing a PyTorch memory snapshot: memtap's reader (bench/import_bench: the import
alone) and `memtap report --json` against Python's own pickle.load of the same file,
each measured in the same run (medians of alternating runs; memory is each process's
peak resident set). The snapshot is bench/make_snapshot.py's (a stacks="all" training
trace) of the size asked for, or a file given.

  python3 bench/snapshot_import.py BUILD_DIR [MEGABYTES | SNAPSHOT.pickle]   (or: make bench)

Targets (issue 20): the import's peak memory at most 2x the file and at most half of
Python's; its time at most half of Python's.
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
ARG = sys.argv[2] if len(sys.argv) > 2 else "100"
HERE = os.path.dirname(os.path.abspath(__file__))
MEMTAP = os.path.join(B, "tools/memtap/memtap")
IMPORT = os.path.join(B, "bench/import_bench")
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
REPEAT = 3

subprocess.run(["make", "-C", B, "bench/import_bench"], check=True, capture_output=True)
if os.path.exists(ARG):
    snap = ARG
else:
    snap = os.path.join(TMP, "snapshot.pickle")
    subprocess.run([sys.executable, os.path.join(HERE, "make_snapshot.py"), snap, ARG], check=True)
size = os.path.getsize(snap)


def measure(argv, own=None):
    """(seconds, peak resident bytes, standard output). The peak is the child's own (own:
    reads it from the output) where it says it: the kernel's count for a child (wait4)
    starts at this script's own size, as the child was forked from it."""
    out = os.path.join(TMP, "out")
    start = time.monotonic()
    p = subprocess.Popen(argv, stdout=open(out, "wb"), stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.monotonic() - start
    if status:
        sys.exit("%s failed: %s" % (" ".join(argv), p.stderr.read().decode()))
    text = open(out, "rb").read()
    return seconds, own(text) if own else usage.ru_maxrss * 1024, text


PYTHON = [sys.executable, "-c", "import pickle, sys; d = pickle.load(open(sys.argv[1], 'rb')); "
          "print(sum(len(t) for t in d['device_traces'])); "
          "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])", snap]
ours, report, theirs = [], [], []
for _ in range(REPEAT):
    ours.append(measure([IMPORT, snap], lambda text: json.loads(text)["max_rss_kib"] * 1024))
    report.append(measure([MEMTAP, "report", "--json", snap]))
    theirs.append(measure(PYTHON, lambda text: int(text.split()[1]) * 1024))
floor = measure(["true"])[1]
t_ours, t_report, t_py = (statistics.median(s for s, _, _ in x) for x in (ours, report, theirs))
m_ours, m_report, m_py = (max(m for _, m, _ in x) for x in (ours, report, theirs))
events = json.loads(ours[0][2])["events"]
entries = int(theirs[0][2].split()[0])


def line(name, value, target, passed):
    print("%-48s %-44s target %-8s %s" % (name, value, target, "met" if passed else "NOT MET"))


print("snapshot import (%s): %s, %.1f MB, %d trace entries -> %d events; median of %d alternating runs" % (
    B, os.path.basename(snap) if os.path.exists(ARG) else "bench/make_snapshot.py", size / 1e6, entries, events,
    REPEAT))
line("(1) import peak memory / file size", "%.2f (%.0f MiB for %.0f MiB)" % (m_ours / size, m_ours / 2**20,
     size / 2**20), "<= 2", m_ours <= 2 * size)
line("(2) import peak memory / Python pickle.load's", "%.3f (%.0f MiB vs %.0f MiB)" % (m_ours / m_py, m_ours / 2**20,
     m_py / 2**20), "<= 0.5", m_ours <= m_py / 2)
line("(3) import time / Python pickle.load's", "%.3f (%.2f s vs %.2f s)" % (t_ours / t_py, t_ours, t_py), "<= 0.5",
     t_ours <= t_py / 2)
print("(info) memtap report --json, import included: %.2f s (%.3f of Python's load), %s%.0f MiB (%.2f of the file, "
      "%.3f of Python's; the kernel's count for a child of this script, which starts at %.0f MiB)"
      % (t_report, t_report / t_py, "at most " if m_report <= floor else "", m_report / 2**20, m_report / size,
         m_report / m_py, floor / 2**20))
shutil.rmtree(TMP)
