"""include/memtap.h as users compile it: every function called, in C99 and C11 with
-pedantic -Wall -Wextra -Werror, as C++ (98 to 20, -pedantic, old-style casts warned) and
with clang where it is installed; the program says ENOSYS without memtap and finds
memtap's functions under memtap run."""
import errno
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
TMP = scratch("header")
PROGRAM = """#include <memtap.h>
#include <stdio.h>

int main(void)
{
	int a = memtap_active(), m = memtap_mark("step"), p = memtap_tag_push(MEMTAP_PARAMS);
	int r = memtap_tag_range(&a, sizeof a, MEMTAP_OTHER), q = memtap_tag_pop();

	printf("%d %d %d %d %d\\n", a, m, p, r, q);
	return 0;
}
"""
WARN = ["-pedantic", "-Wall", "-Wextra", "-Werror"]
BUILDS = [("gcc", "c", ["-std=c99"]), ("gcc", "c", ["-std=c11"]), ("gcc", "c", ["-std=gnu11", "-O2"]),
          ("g++", "cc", ["-std=c++98", "-Wold-style-cast"]), ("g++", "cc", ["-std=c++11", "-Wold-style-cast"]),
          ("g++", "cc", ["-Wold-style-cast", "-O2"]), ("g++", "cc", ["-std=c++20"]),
          ("clang", "c", ["-std=c99"]), ("clang++", "cc", ["-std=c++11"])]
built = None
for n, (cc, ext, flags) in enumerate(BUILDS):
    what = "%s %s" % (cc, " ".join(flags + WARN))
    if not shutil.which(cc):
        ok(True, "# SKIP %s is not installed: %s not tried" % (cc, what))
        continue
    src, exe = os.path.join(TMP, "app%d.%s" % (n, ext)), os.path.join(TMP, "app%d" % n)
    open(src, "w").write(PROGRAM)
    p = subprocess.run([cc, *flags, *WARN, "-I" + os.path.join(S, "include"), "-o", exe, src, "-ldl"],
                       capture_output=True, text=True)
    ok(p.returncode == 0 and p.stderr == "", "memtap.h under %s: no warning" % what, p.stderr)
    if p.returncode == 0 and not built:
        built, built_cc, built_src = exe, cc, src
if built:
    nosys = str(errno.ENOSYS)
    p = subprocess.run([built], capture_output=True, text=True)
    ok(p.stdout.split() == ["0", nosys, nosys, nosys, nosys], "without memtap: not active, each call ENOSYS",
       p.stdout + p.stderr)
    if "thread" in os.environ.get("MT_SANITIZERS", ""):
        # a ThreadSanitizer build of memtap loads only into a program built with it
        built += "-tsan"
        subprocess.run([built_cc, "-fsanitize=thread", "-I" + os.path.join(S, "include"), "-o", built, built_src,
                        "-ldl"], check=True)
    p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, "app.trace"), "--", built], capture_output=True,
                       text=True)
    ok(p.returncode == 0 and p.stdout.split() == ["1", "0", "0", "0", "0"],
       "under memtap run: active, and every call reaches memtap (0)", p.stdout + p.stderr)
done()
