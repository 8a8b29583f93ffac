"""The code's layout is .clang-format's: every C file of src/, tools/, tests/, bench/
and include/ is as clang-format leaves it (the version Debian 12 ships, 14). The tree's
own files (tests/tree.py): what a build in the source tree generates is not checked."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402
from tree import source_files  # noqa: E402

S = os.environ["MT_SRCDIR"]
if not shutil.which("clang-format"):
    print("1..0 # SKIP clang-format is not installed (./quickstart check installs it)")
    sys.exit(0)
files = [os.path.join(S, f)
         for f in source_files(S, ("src", "tools", "tests", "bench", "include"), (".c", ".h", ".cc"))]
bad = [f[len(S) + 1:] for f in files
       if subprocess.run(["clang-format", "--dry-run", "-Werror", f], capture_output=True).returncode]
ok(files and not bad, "%d C files laid out as .clang-format says" % len(files),
   "clang-format -i would change:\n" + "\n".join(bad))
done()
