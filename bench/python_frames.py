"""What Python frames add to each allocation, against frames off in the same run.

  python3 bench/python_frames.py BUILD_DIR        (or: make bench)

A Python program 20 calls deep allocates and frees through ctypes calls into simgpu's
cudaMalloc/cudaFree, under memtap with Python frames on and with MEMTAP_PYTHON_FRAMES=0
(native stacks in both). The difference per allocation is the cost of reading the
Python stack, merging it and interning the result. Target: at most 1 us, and at most one
third of the 2 us PyTorch reports for its own Python-stack capture (pytorch/pytorch#86145).
Medians of alternating runs (the machine is noisy).
"""
import os
import statistics
import subprocess
import sys
import tempfile

B = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMLIBS = os.path.join(B, "tools/simgpu/.libs")
TMP = tempfile.mkdtemp(prefix="memtap-bench-")
N = 100000
PROGRAM = """
import ctypes, sys, time
rt = ctypes.CDLL("libcudart.so.13")
malloc, free = rt.cudaMalloc, rt.cudaFree
def loop(n):
    p = ctypes.c_void_p()
    ref, size = ctypes.byref(p), ctypes.c_size_t(4096)
    t = time.perf_counter()
    for _ in range(n):
        malloc(ref, size)
        free(p)
    return time.perf_counter() - t
def deep(k, n):
    return deep(k - 1, n) if k > 1 else loop(n)
print(deep(20 - 2, int(sys.argv[1])) / int(sys.argv[1]) * 1e9)  # 20 frames with <module> and loop
"""
SCRIPT = os.path.join(TMP, "deep.py")
open(SCRIPT, "w").write(PROGRAM)


def ns(frames):
    e = dict(os.environ, LD_LIBRARY_PATH=SIMLIBS, MEMTAP_PYTHON_FRAMES=frames)
    out = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, "t-%p.trace"), "--", sys.executable, SCRIPT,
                          str(N)], env=e, check=True, capture_output=True, text=True).stdout
    for f in os.listdir(TMP):
        if f.startswith("t-"):
            os.remove(os.path.join(TMP, f))
    return float(out.split()[-1])


on, off = [], []
for _ in range(7):
    off.append(ns("0"))
    on.append(ns("1"))
on, off = statistics.median(on), statistics.median(off)
print("python frames: %.0f ns per cudaMalloc+cudaFree pair from 20 Python frames deep with frames on, %.0f with "
      "them off: %.2f us added per allocation (target <= 1 us; PyTorch: 2 us, ratio %.2f, target <= 0.33); "
      "ratio on/off %.3f" % (on, off, (on - off) / 1e3, (on - off) / 2000, on / off))
