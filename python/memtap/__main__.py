"""python3 -m memtap ARGS: the memtap command with ARGS (memtap run, report, ...).

The command is the one installed with this package: `make install` writes where it put
it into memtap/_installed.py, relative to the package first so that a tree installed
with DESTDIR or moved elsewhere still finds its own. Else $MEMTAP_COMMAND, else memtap
on PATH (a package installed with pip).
"""
import os
import shutil
import sys


def command():
    """The memtap command to run, or None."""
    named = os.environ.get("MEMTAP_COMMAND")
    if named:
        return named
    try:
        from memtap import _installed
    except ImportError:
        _installed = None
    if _installed:
        here = os.path.dirname(os.path.abspath(__file__))
        for folder in (os.path.join(here, _installed.BINDIR_FROM_PACKAGE), _installed.BINDIR):
            path = os.path.normpath(os.path.join(folder, "memtap"))
            if os.access(path, os.X_OK):
                return path
    return shutil.which("memtap")


def main():
    path = command()
    if not path:
        sys.stderr.write("memtap: the memtap command is neither installed beside this Python package nor on "
                         "PATH (install memtap, or set MEMTAP_COMMAND)\n")
        sys.exit(2)
    try:
        os.execv(path, [path] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("memtap: cannot run %s: %s\n" % (path, e.strerror))
        sys.exit(2)


if __name__ == "__main__":
    main()
