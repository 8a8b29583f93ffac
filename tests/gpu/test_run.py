"""tests/gpu/run without a GPU: its --sim mode against simgpu (the CUPTI backend refused,
the Lua OOM policy under a cap with simtrain, the nvcc-built programs where nvcc is), one
table, exit 0; its unpacking of carried Debian packages (a package built here with
dpkg-deb: files out, pkg-config files pointed at the unpacked tree); and what it says
when nothing was carried. The PyTorch rows need a GPU: they say skipped here."""
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
S = os.environ["MT_SRCDIR"]
RUN = os.path.join(S, "tests/gpu/run")
TMP = scratch("gpu")

# nvcc's programs are not instrumented: in a sanitizer build they would need the sanitizer's
# runtime preloaded, as tests/simgpu/test_cuda.py does; here their rows are skipped (no CUDA)
SANITIZED = any(w in os.environ.get("MT_SANITIZERS", "") for w in ("address", "thread", "undefined"))
NO_CUDA = ["--cuda", os.path.join(TMP, "no-cuda")] if SANITIZED else []
p = subprocess.run([sys.executable, RUN, "--sim", "--build", B, "--work", os.path.join(TMP, "sim"), *NO_CUDA],
                   capture_output=True, text=True, timeout=600)
rows = {}
for line in p.stdout.splitlines():
    cells = [c for c in line.split("  ") if c.strip()]
    if len(cells) >= 2 and cells[-1].strip() in ("match", "differ", "failed", "skipped"):
        rows[cells[0].strip()] = cells[-1].strip()
ok(p.returncode == 0 and rows, "run --sim: one table, exit 0", p.stdout[-2000:] + p.stderr[-1000:])
ok(rows.get("CUPTI backend on simgpu (no GPU)") == "match", "run --sim: the CUPTI backend refused in one line", rows)
ok(any(k.startswith("Lua OOM policy under a") and v == "match" for k, v in rows.items()),
   "run --sim: the Lua OOM policy under a cap: the failure recorded, its snapshot written", rows)
ok(rows.get("PyTorch step under memtap run") == "skipped", "run --sim: PyTorch's rows say skipped, not passed", rows)
nvcc = [v for k, v in rows.items() if k.startswith("nvcc program")]
ok(nvcc and all(v == "match" for v in nvcc) or rows.get("nvcc-built programs") == "skipped",
   "run --sim: the nvcc-built programs' allocations each recorded once (or skipped without nvcc)", rows)

# the unpacking side, with a package made here
if shutil.which("dpkg-deb"):
    loader = importlib.machinery.SourceFileLoader("gpu_run", RUN)
    spec = importlib.util.spec_from_loader("gpu_run", loader)
    gpu_run = importlib.util.module_from_spec(spec)
    loader.exec_module(gpu_run)
    pkg = os.path.join(TMP, "pkg")
    pcdir = os.path.join(pkg, "usr/lib/x86_64-linux-gnu/pkgconfig")
    os.makedirs(os.path.join(pkg, "DEBIAN"))
    os.makedirs(pcdir)
    with open(os.path.join(pkg, "DEBIAN/control"), "w") as f:
        f.write("Package: memtap-test-dep\nVersion: 1\nArchitecture: amd64\nMaintainer: memtap\nDescription: t\n")
    with open(os.path.join(pcdir, "dep.pc"), "w") as f:
        f.write("prefix=/usr\nlibdir=${prefix}/lib\nName: dep\nVersion: 1\nDescription: t\nLibs: -L${libdir}\n")
    carry = os.path.join(TMP, "carry")
    os.makedirs(os.path.join(carry, "debs"))
    b = subprocess.run(["dpkg-deb", "-b", pkg, os.path.join(carry, "debs", "dep.deb")], capture_output=True, text=True)
    work = os.path.join(TMP, "work")
    os.makedirs(work)
    root, libdir = gpu_run.unpack(carry, work)
    pc = open(os.path.join(libdir, "pkgconfig/dep.pc")).read()
    ok(b.returncode == 0 and pc.startswith("prefix=" + os.path.join(root, "usr") + "\n"),
       "unpack: a carried package's files unpacked without root, its pkg-config file pointed at them", pc)
else:
    ok(True, "unpack: # SKIP no dpkg-deb to make a package with")

p = subprocess.run([sys.executable, RUN, "--carry", os.path.join(TMP, "nothing"), "--work", os.path.join(TMP, "w2")],
                   capture_output=True, text=True)
ok(p.returncode == 1 and p.stderr.count("\n") == 1 and "tests/gpu/fetch" in p.stderr,
   "nothing carried: one line naming tests/gpu/fetch, exit 1", p.stderr)
p = subprocess.run([sys.executable, RUN, "--sim"], capture_output=True, text=True)
ok(p.returncode == 2, "--sim without --build: a usage error, exit 2", p.stderr)
p = subprocess.run(["sh", "-n", os.path.join(S, "tests/gpu/fetch")], capture_output=True, text=True)
ok(p.returncode == 0, "tests/gpu/fetch is a well-formed shell script", p.stderr)
done()
