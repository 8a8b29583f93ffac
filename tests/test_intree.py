"""The house's checks on a tree the build ran in (./configure && make check in the source
tree itself): test_style.py and test_layering.py read the tree's own files (tests/tree.py),
not the build's generated code beside them (src/analyze/html_assets.c), both in a git work
tree (its tracked files) and in an unpacked tarball (less Makefile.am's BUILT_SOURCES);
and a file of the tree's own laid out badly is still found."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
GENERATED = "src/analyze/html_assets.c"
if not shutil.which("clang-format"):
    print("1..0 # SKIP clang-format is not installed (./quickstart check installs it)")
    sys.exit(0)
if not os.path.exists(os.path.join(B, GENERATED)):
    print("1..0 # SKIP no %s in the build" % GENERATED)
    sys.exit(0)
OWN = ["Makefile.am", ".clang-format", "tests/tap.py", "tests/tree.py", "tests/test_style.py", "src/core/text.c",
       "src/core/text.h", "src/analyze/export.h"]


def tree(name, git):
    """A small source tree as a build in it leaves it: some of its own files, the generated one."""
    top = os.path.join(scratch("intree"), name)
    for f in OWN:
        os.makedirs(os.path.dirname(os.path.join(top, f)), exist_ok=True)
        shutil.copy(os.path.join(S, f), os.path.join(top, f))
    if git:
        env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                   GIT_COMMITTER_EMAIL="t@t")
        for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "tree"]):
            subprocess.run(["git", "-C", top, *cmd], check=True, capture_output=True, env=env)
    shutil.copy(os.path.join(B, GENERATED), os.path.join(top, GENERATED))
    return top


def style(top):
    return subprocess.run([sys.executable, os.path.join(S, "tests/test_style.py")], capture_output=True, text=True,
                          env=dict(os.environ, MT_SRCDIR=top))


for kind, git in (("a git work tree", True), ("an unpacked tarball", False)):
    if git and not shutil.which("git"):
        ok(True, "# SKIP git is not installed: %s not tried" % kind)
        continue
    top = tree(kind.split()[-1], git)
    p = style(top)
    ok(p.returncode == 0 and "ok 1 - 3 C files" in p.stdout, "test_style.py in %s a build ran in: %s left out"
       % (kind, GENERATED), p.stdout + p.stderr)
    with open(os.path.join(top, "src/core/text.c"), "a") as f:
        f.write("int  badly_laid_out ;\n")
    p = style(top)
    ok(p.returncode == 1 and "src/core/text.c" in p.stdout and GENERATED not in p.stdout,
       "in %s: a file of its own laid out badly is still found" % kind, p.stdout + p.stderr)
done()
