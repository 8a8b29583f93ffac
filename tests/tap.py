"""TAP for the Python tests: ok() for each check, then done() to print the plan and exit;
scratch() for a temporary directory that goes away when the test passes; read_pty() for
what a program wrote to a terminal; torch_python() for a Python with PyTorch."""
import os
import shutil
import subprocess
import sys
import tempfile

count = failed = 0


def ok(cond, what, detail=""):
    """One test line; on failure, up to 20 lines of detail as TAP comments."""
    global count, failed
    count += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (count, what))
    if not cond:
        failed += 1
        for line in str(detail).splitlines()[:20]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


_scratch = []


def scratch(name):
    """A new temporary directory, removed by done() unless a check failed."""
    _scratch.append(tempfile.mkdtemp(prefix="memtap-%s-" % name))
    return _scratch[-1]


def torch_python():
    """$PYTHON3, else Debian's python3, where it imports torch (python3-torch); else None"""
    for py in (os.environ.get("PYTHON3"), "/usr/bin/python3"):
        if py and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


def done():
    print("1..%d" % count)
    if not failed:
        for d in _scratch:
            shutil.rmtree(d, ignore_errors=True)
    sys.exit(1 if failed else 0)


def read_pty(master):
    """Everything written to a pseudo-terminal until its other side closed; closes master."""
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return got
