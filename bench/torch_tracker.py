"""What memtap's tracker of PyTorch's tensors adds to each tensor (issue 38), against the
same job without memtap in the same run: callgrind instruction counts, exact and
repeatable. The job is tests/torch's stand-in torch over simgpu: 20,000 tensors of 4 KiB
made and freed at a Python depth of 20 frames, each from the allocator's cache (no driver
call), so what memtap adds is its side of the tracker's entries: the block made (its
native and Python stack) and the block back in the cache. A real PyTorch's own cost per
tensor and what _record_memory_history(stacks="python") adds need a GPU: the GPU check
measures them (docs/TESTING.md); beside the figure PyTorch reports for its own Python-stack
capture, 2 us an allocation (pytorch/pytorch#86145), the issue's target is at most half.
Wall-clock: the medians of five alternating runs of 200,000 tensors, memtap and not.

  python3 bench/torch_tracker.py BUILD_DIR
"""
import glob
import statistics
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/torch"))
import standin  # noqa: E402

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
LIB = os.path.join(B, "src/recorder/.libs/libmemtap.so")
SIMGPU = os.path.join(B, "tools/simgpu/.libs")
TMP = tempfile.mkdtemp(prefix="memtap-bench-torch-")
PAIRS = 20000
JOB = os.path.join(TMP, "job.py")
with open(JOB, "w") as f:
    f.write("""import sys, torch
def deep(n, pairs):
    if n:
        return deep(n - 1, pairs)
    for _ in range(pairs):
        t = torch.empty(4096)
        del t
deep(20, int(sys.argv[1]))
""")
SITE = standin.build(TMP, "2.5.1", 205, SIMGPU)
ENV = dict(os.environ, LD_LIBRARY_PATH=SIMGPU, PYTHONPATH=SITE, MEMTAP_CACHE_DIR=os.path.join(TMP, "cache"))


def instructions(pairs, extra):
    """(main thread, every thread) instructions of the job under callgrind"""
    out = os.path.join(TMP, "cg.out")
    for f in glob.glob(out + "*"):
        os.remove(f)
    subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out,
                    sys.executable, JOB, str(pairs)], env=dict(ENV, **extra), capture_output=True, check=True)
    counts = []
    for f in sorted(glob.glob(out + "-*")):
        counts.append(int(re.search(r"^(?:summary|totals): (\d+)", open(f).read(), re.M).group(1)))
    return counts[0], sum(counts)


# memtap run builds the tracker (once) as it would for the job
subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, "build.trace"), "--", sys.executable, JOB, "1"],
               env=ENV, check=True, capture_output=True)
tracker = glob.glob(os.path.join(TMP, "cache", "torch-tracker-*.so"))[0]
memtap = dict(LD_PRELOAD=LIB, MEMTAP_OUTPUT=os.path.join(TMP, "t-%p.trace"), MEMTAP_TORCH_TRACKER=tracker)
rows = {}
for name, extra in (("alone", {}), ("memtap", memtap), ("torch=off", dict(memtap, MEMTAP_TORCH="0"))):
    small, big = instructions(1000, extra), instructions(1000 + PAIRS, extra)
    rows[name] = ((big[0] - small[0]) / PAIRS, (big[1] - small[1]) / PAIRS)
    print("%-10s %7.0f instructions a tensor made and freed (application thread), %7.0f (every thread)" % (
        name, *rows[name]))
added = [rows["memtap"][i] - rows["alone"][i] for i in (0, 1)]
print("memtap's tracker adds %.0f instructions a tensor on the job's thread (%.0f on every thread): %.2f of the "
      "stand-in job's own %.0f" % (added[0], added[1], added[0] / rows["alone"][0], rows["alone"][0]))


def run(pairs, extra):
    """(seconds, peak resident KiB) of one run of the job"""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, JOB, str(pairs)], env=dict(ENV, **extra), stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    if status:
        sys.exit("bench/torch_tracker.py: the job failed")
    return time.perf_counter() - t, usage.ru_maxrss


WALL = 200000
runs = {"alone": [], "memtap": []}
for _ in range(5):
    for name, extra in (("alone", {}), ("memtap", memtap)):
        runs[name].append(run(WALL, extra))
ns = {k: 1e9 * statistics.median(r[0] for r in v) / WALL for k, v in runs.items()}
rss = {k: statistics.median(r[1] for r in v) / 1024 for k, v in runs.items()}
print("wall clock: %.0f ns a tensor alone, %.0f with memtap: %.2f us added a tensor (PyTorch's Python-stack "
      "capture: 2 us an allocation, ratio %.2f, target <= 0.5)" % (
          ns["alone"], ns["memtap"], (ns["memtap"] - ns["alone"]) / 1e3, (ns["memtap"] - ns["alone"]) / 2000))
print("peak resident memory: %.1f MiB alone, %.1f with memtap (+%.1f MiB)" % (
    rss["alone"], rss["memtap"], rss["memtap"] - rss["alone"]))
shutil.rmtree(TMP)
