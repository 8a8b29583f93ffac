"""Traces older memtaps wrote (tests/golden/*.trace, made by make_golden.sh from the
commits their names give) read by this memtap: `memtap report --json` must equal the
report kept beside each (*.json), so a reader change that breaks an old trace fails
here. Frames are compared by address (a stack's view and where, made of their names, not
at all): what they symbolize to depends on the machine.
MT_GOLDEN_WRITE=1 rewrites the expected reports (look at the diff before committing)."""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
HERE = os.path.join(S, "tests/golden")


def addresses_only(x):
    if isinstance(x, dict):
        if "address" in x and "function" in x:
            return {"address": x["address"]}
        # a stack's view and where are its frames' names: left out with them
        return {k: addresses_only(v) for k, v in x.items() if k not in ("view", "where")}
    if isinstance(x, list):
        return [addresses_only(v) for v in x]
    return x


for trace in sorted(glob.glob(os.path.join(HERE, "*.trace"))):
    name = os.path.basename(trace)
    p = subprocess.run([MEMTAP, "report", "--json", name], capture_output=True, text=True, cwd=HERE)
    got = json.dumps(addresses_only(json.loads(p.stdout)), indent=1, sort_keys=True) + "\n" if p.stdout else ""
    expected = trace[:-len(".trace")] + ".json"
    if os.environ.get("MT_GOLDEN_WRITE"):
        open(expected, "w").write(got)
    want = open(expected).read() if os.path.exists(expected) else None
    ok(p.returncode == 0 and got == want, "%s: read as its golden report says" % name,
       "\n".join(l for l in __import__("difflib").unified_diff((want or "").splitlines(), got.splitlines(),
                                                                "expected", "got", lineterm=""))[:3000]
       or p.stderr)
    d = subprocess.run([MEMTAP, "dump", name], capture_output=True, text=True, cwd=HERE)
    ok(d.returncode == 0 and d.stdout.count("\n") > 10, "%s: memtap dump reads every chunk" % name, d.stderr)
done()
