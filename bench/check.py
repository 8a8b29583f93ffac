"""The regression guard (make bench-check): instruction counts, which do not move with the
machine's load, of four fixed runs, compared with the figures committed in
bench/figures. A figure more than 3% above its committed one fails the check; a change
that makes one grow on purpose updates bench/figures in the same commit, with the reason.
The figures are for the build ./quickstart makes (--enable-debug=1).

  python3 bench/check.py BUILD_DIR [--write] [--only NAME] [--figures FILE]
      --write: print the figures as measured, in bench/figures' layout

  recorder_app  instructions memtap adds per cudaMalloc+cudaFree pair, 24-frame stack, on
                the application's thread (bench/recorder_bench cuda 20000)
  recorder_all  the same, every thread (the writer's encoding and checksums too)
  report        `memtap report --json` per event of a 1M-event simtrain trace
  import        instructions per event made importing bench/make_snapshot.py's 11 MB snapshot
  cache_hit     the caching allocator's cache-hit alloc+free pair (bench/alloc_bench)
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = argparse.ArgumentParser(prog="bench/check.py")
ARGS.add_argument("build", nargs="?", default="build")
ARGS.add_argument("--write", action="store_true")
ARGS.add_argument("--only")
ARGS.add_argument("--figures", default=os.path.join(HERE, "figures"))
ARGS = ARGS.parse_args()
B = os.path.abspath(ARGS.build)
MEMTAP = os.path.join(B, "tools/memtap/memtap")
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"))
TMP = tempfile.mkdtemp(prefix="memtap-bench-check-")
PAIRS = 20000
GROWTH = 0.03


def callgrind(argv, env=ENV, *options):
    """Instructions per thread (the main thread first) of one run under callgrind."""
    out = os.path.join(TMP, "cg.out")
    for f in glob.glob(out + "*"):
        os.remove(f)
    p = subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out,
                        *options, *argv], env=env, capture_output=True, text=True)
    if p.returncode:
        sys.exit("bench-check: %s failed: %s" % (" ".join(argv), p.stderr.strip().splitlines()[-1:]))
    counts = []
    for f in sorted(glob.glob(out + "-*")):
        with open(f) as h:
            counts.append(int(re.search(r"^(?:summary|totals): (\d+)", h.read(), re.M).group(1)))
    return counts


def recorder():
    bench = [os.path.join(B, "bench/recorder_bench"), "cuda", str(PAIRS)]
    plain = callgrind(bench)
    traced = callgrind(bench, dict(ENV, LD_PRELOAD=os.path.join(B, "src/recorder/.libs/libmemtap.so"),
                                   MEMTAP_OUTPUT=os.path.join(TMP, "r.trace")))
    return (traced[0] - plain[0]) / PAIRS, (sum(traced) - sum(plain)) / PAIRS


def report():
    trace = os.path.join(TMP, "s.trace")
    subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", os.path.join(B, "tools/simtrain/simtrain"), "--preset",
                    "gpt2-small", "--iters", "910"], env=ENV, capture_output=True, check=True)
    events = int(re.search(r'"total": (\d+)', subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True,
                                                              text=True).stdout).group(1))
    return sum(callgrind([MEMTAP, "report", "--json", trace])) / events


def snapshot_import():
    snap = os.path.join(TMP, "snap.pickle")
    subprocess.run([sys.executable, os.path.join(HERE, "make_snapshot.py"), snap, "23"], check=True,
                   capture_output=True)
    bench = os.path.join(B, "bench/import_bench")
    events = int(re.search(r'"events": (\d+)', subprocess.run([bench, snap], capture_output=True,
                                                              text=True).stdout).group(1))
    return sum(callgrind([bench, snap])) / events


def cache_hit():
    # alloc_bench runs 5 rounds of PAIRS pairs; only the cache's own functions are counted
    return sum(callgrind([os.path.join(B, "bench/alloc_bench"), str(PAIRS)], ENV, "--toggle-collect=mt_cache_alloc",
                         "--toggle-collect=mt_cache_free")) / (5 * PAIRS)


# the figures are those of the build ./quickstart makes: --enable-debug=1 (cheap assertions)
with open(os.path.join(B, "Makefile")) as f:
    debug = int(re.search(r"-DMT_DEBUG=(\d+)", f.read()).group(1))
if debug != 1:
    print("bench-check: bench/figures are for builds configured with --enable-debug=1; %s has %d" % (B, debug),
          file=sys.stderr)
    sys.exit(2)

RUNS = {"recorder": recorder, "report": report, "import": snapshot_import, "cache_hit": cache_hit}
measured = {}
for name, run in RUNS.items():
    if ARGS.only and not name.startswith(ARGS.only) and not ARGS.only.startswith(name):
        continue
    value = run()
    if name == "recorder":
        measured["recorder_app"], measured["recorder_all"] = value
    else:
        measured[name] = value
if not measured:
    print("bench-check: no figure is named %s (%s)" % (ARGS.only, ", ".join(RUNS)), file=sys.stderr)
    sys.exit(2)

committed, reasons = {}, {}
with open(ARGS.figures) as f:
    for l in f:
        if l.strip() and not l.startswith("#"):
            name, value, reason = l.split(None, 2)
            committed[name], reasons[name] = float(value), reason.strip()
if ARGS.write:
    for name, value in measured.items():
        print("%-13s %8.0f  %s" % (name, value, reasons.get(name, "(say why it moved)")))
    sys.exit(0)
failed = 0
for name, value in measured.items():
    base = committed.get(name)
    if base is None:
        print("bench-check: %s measured %.0f, but bench/figures has no figure for it" % (name, value))
        failed += 1
        continue
    change = value / base - 1
    verdict = "ok" if change <= GROWTH else "GREW"
    print("%-13s %8.0f instructions (committed %.0f, %+.1f%%) %s" % (name, value, base, 100 * change, verdict))
    if change > GROWTH:
        failed += 1
    elif change < -GROWTH:
        print("  lower than committed by more than 3%%: put %.0f in bench/figures, with why" % value)
if failed:
    sys.exit("bench-check: %d figure%s grew by more than 3%% over bench/figures: find why, or update the figure "
             "there with the reason in the same change" % (failed, "" if failed == 1 else "s"))
