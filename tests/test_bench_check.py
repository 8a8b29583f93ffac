"""make bench-check, the regression guard (bench/check.py): it passes on the figures
committed in bench/figures and fails, naming the figure, when one grew by more than 3%.
One figure (the cache-hit pair) keeps it quick."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

S, B = os.environ["MT_SRCDIR"], os.environ["MT_BUILDDIR"]
if not shutil.which("valgrind"):
    print("1..0 # SKIP valgrind is not installed (./quickstart check installs it)")
    sys.exit(0)
if os.environ.get("MT_SANITIZERS", "").replace("no", ""):
    print("1..0 # SKIP a sanitizer build's instruction counts are not the committed ones")
    sys.exit(0)
with open(os.path.join(B, "Makefile")) as f:
    if not re.search(r"-DMT_DEBUG=1\b", f.read()):
        print("1..0 # SKIP bench/figures are for builds configured with --enable-debug=1 (./quickstart's)")
        sys.exit(0)
CHECK = [sys.executable, os.path.join(S, "bench/check.py"), B, "--only", "cache_hit"]
figures = open(os.path.join(S, "bench/figures")).read()
committed = float(next(l.split()[1] for l in figures.splitlines() if l.startswith("cache_hit")))

p = subprocess.run(CHECK, capture_output=True, text=True)
ok(p.returncode == 0 and "cache_hit" in p.stdout and " ok" in p.stdout,
   "the build's cache-hit pair is within 3% of the committed figure", p.stdout + p.stderr)

lower = os.path.join(scratch("bench-check"), "figures")
with open(lower, "w") as f:
    f.write(re.sub(r"(?m)^cache_hit +\d+", "cache_hit %.0f" % (committed * 0.95), figures))
p = subprocess.run(CHECK + ["--figures", lower], capture_output=True, text=True)
ok(p.returncode == 1 and "GREW" in p.stdout and "1 figure grew" in p.stderr,
   "a figure 5% over its committed one fails the guard, named", p.stdout + p.stderr)

p = subprocess.run(CHECK[:-1] + ["nosuch"], capture_output=True, text=True)
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "an unknown figure: one line, exit 2", p.stderr)
done()
