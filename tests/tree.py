"""The source tree's own files, for the checks that read the code (test_style.py,
test_layering.py): git's tracked files where the tree is a git work tree, else every
file less what the build makes there (Makefile.am's BUILT_SOURCES). A build in the
source tree itself (./configure && make check) writes generated code beside the
sources (src/analyze/html_assets.c), which is not the house's to lay out."""
import os
import re
import subprocess


def built(top):
    """What the build writes into the tree: Makefile.am's BUILT_SOURCES."""
    text = open(os.path.join(top, "Makefile.am")).read().replace("\\\n", " ")
    return {w for line in re.findall(r"(?m)^BUILT_SOURCES\s*\+?=(.*)$", text) for w in line.split()}


def source_files(top, folders, extensions):
    """The files under `folders` (paths relative to top) whose names end with one of
    `extensions`, relative to top, sorted."""
    root = subprocess.run(["git", "-C", top, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if root.returncode == 0 and os.path.realpath(root.stdout.strip()) == os.path.realpath(top):
        names = subprocess.run(["git", "-C", top, "ls-files", "-z", "--", *folders], capture_output=True,
                               text=True, check=True).stdout.split("\0")
    else:
        skip = built(top)
        names = [os.path.relpath(os.path.join(d, n), top) for f in folders
                 for d, _, ns in os.walk(os.path.join(top, f)) for n in ns]
        names = [n for n in names if n not in skip]
    return sorted(n for n in names if n.endswith(tuple(extensions)) and os.path.isfile(os.path.join(top, n)))
