"""tests/gpu/run without a GPU. Its --sim mode on this build and on a build made as the GPU
machine will make it: from tests/gpu/carry's packages and a release tarball of this tree,
under tests/gpu/bare (the system's development packages, pkg-config, the autotools, make
and the loader's cache hidden); every row that needs no GPU must match. And what keeps a
run's results: rows written as they are known, a step past its bound or the deadline
cut and said, the artifacts packed into at most 8 files; the verdicts that read a
PyTorch trace (PyTorch's allocator's bytes by its frames, a cap's OOM where the uncapped
run says), fed made-up traces; the carried packages unpacked without dpkg."""
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
S = os.environ["MT_SRCDIR"]
RUN = os.path.join(S, "tests/gpu/run")
BARE = os.path.join(S, "tests/gpu/bare")
DEBS = os.path.join(S, "tests/gpu/carry/debs")
TMP = scratch("gpu")
MiB = 1 << 20

loader = importlib.machinery.SourceFileLoader("gpu_run", RUN)
spec = importlib.util.spec_from_loader("gpu_run", loader)
gpu_run = importlib.util.module_from_spec(spec)
loader.exec_module(gpu_run)

# nvcc's programs are not instrumented: in a sanitizer build they would need the sanitizer's
# runtime preloaded, as tests/simgpu/test_cuda.py does; here the toolkit is hidden from them
SANITIZED = any(w in os.environ.get("MT_SANITIZERS", "") for w in ("address", "thread", "undefined"))
SIM_ROWS = ("paths graph:", "paths entrypoints:", "paths lookups:", "CUPTI backend on simgpu (no GPU)",
            "Lua OOM policy under a 1 MiB cap (simtrain)", "memtap top with no argument on simgpu")
TORCH_ROWS = ("PyTorch step", "Lua cap inside the PyTorch step", "expandable segments", "cudaMallocAsync + graph",
              "NCCL all-reduce", "CUPTI backend beside preload", "memtap.use_allocator", "torch.compile")
RETURNED = re.compile(r"^[A-Za-z0-9._-]+$")


def rows_of(out):
    """The rows table.txt got as they were known: check -> verdict."""
    rows = {}
    for line in open(os.path.join(out, "table.txt")):
        m = re.match(r"^(match|differ|failed|skipped|info) +\| (.*?) \| expected: ", line)
        if m:
            rows[m.group(2)] = m.group(1)
    return rows


def verdict(rows, prefix):
    return [v for k, v in rows.items() if k.startswith(prefix)]


def sim(name, argv, timeout):
    work, out = os.path.join(TMP, name), os.path.join(TMP, name + "-out")
    p = subprocess.run([*argv, "--sim", "--work", work, "--out", out], capture_output=True, text=True,
                       timeout=timeout)
    return p, work, out


# ---- --sim on this build ----
cuda = ["--cuda", os.path.join(TMP, "no-cuda")] if SANITIZED else []
p, work, out = sim("sim", [sys.executable, RUN, "--build", B, *cuda], 900)
rows = rows_of(out) if os.path.exists(os.path.join(out, "table.txt")) else {}
ok(p.returncode == 0 and rows, "run --sim: its rows, exit 0", p.stdout[-2000:] + p.stderr[-1000:])
bad = {k: v for k, v in rows.items() if v not in ("match", "skipped")}
ok(rows and not bad, "run --sim: every row that needs no GPU matches", bad)
toolkit = ["skipped"] if SANITIZED else ["match"]
ok(all(verdict(rows, r) == ["match"] for r in SIM_ROWS[3:]) and
   all(verdict(rows, r) == toolkit for r in SIM_ROWS[:3] + ("an allocation in a library's constructor",))
   or SANITIZED and verdict(rows, "memtap's allocation paths") == ["skipped"],
   "run --sim: memtap's paths in programs built against the toolkit, the CUPTI refusal, a Lua OOM policy, an "
   "allocation in a library's constructor", rows)
nvcc = verdict(rows, "nvcc program")
ok(nvcc and all(v == "match" for v in nvcc) or verdict(rows, "nvcc-built programs") == ["skipped"],
   "run --sim: the nvcc-built programs' allocations each recorded once (or skipped without nvcc)", rows)
ok(all(verdict(rows, r) == ["skipped"] for r in TORCH_ROWS), "run --sim: PyTorch's rows say skipped, not passed",
   rows)

files = sorted(os.listdir(out)) if os.path.isdir(out) else []
ok(len(files) <= 8 and {"table.txt", "run.log", "rows.json", "artifacts.tar.xz"} <= set(files) and
   all(RETURNED.match(f) and os.path.getsize(os.path.join(out, f)) <= 16 * MiB for f in files),
   "the results: table, log, rows and artifacts, at most 8 files of 16 MiB, named as the device tool returns them",
   files)
log = open(os.path.join(out, "run.log")).read().splitlines() if files else []
first_row = next((i for i, ln in enumerate(log) if ln.startswith("row: ")), len(log))
env = [ln for ln in log[:first_row] if ln.startswith("env: ")]
ok(log and log[0].startswith("tests/gpu/run:") and
   all(any(ln.startswith("env: " + k) for ln in env) for k in ("command -v make", "command -v pkg-config",
                                                                "command -v xz", "/usr/local/nvidia", "toolkit",
                                                                "torch", "LD_LIBRARY_PATH")),
   "run.log: the environment first (tools, toolkit, torch, the driver's folder), before any row", log[:30])
packed = set()
for f in files:
    if f.startswith("artifacts"):
        with tarfile.open(os.path.join(out, f)) as t:
            packed |= set(t.getnames())
traces = {os.path.join("traces", f) for f in os.listdir(os.path.join(work, "traces"))} if os.path.isdir(work) else set()
ok(traces and traces <= packed and any(n.startswith("reports/") and n.endswith(".html") for n in packed) and
   any(n.startswith("reports/") and n.endswith(".json") for n in packed) and "traces/capped-oom.trace" in packed,
   "artifacts: every trace, the OOM snapshot, --json and --html reports, the logs", sorted(traces - packed)[:5])

# ---- the same from the carried packages alone, as the GPU machine will build it ----
if SANITIZED:
    ok(True, "bare build: # SKIP the carried build is a plain one: the plain suite makes it")
elif not os.path.isdir(DEBS):
    ok(True, "bare build: # SKIP no tests/gpu/carry: run tests/gpu/fetch")
else:
    # this tree's release tarball, beside the fetched packages
    carry = os.path.join(TMP, "carry")
    dist = os.path.join(TMP, "dist")
    os.makedirs(dist)
    d = subprocess.run("'%s/configure' -q && make -s dist" % S, shell=True, cwd=dist, capture_output=True, text=True)
    os.makedirs(carry)
    os.symlink(DEBS, os.path.join(carry, "debs"))
    for t in os.listdir(dist):
        if t.startswith("memtap-") and t.endswith(".tar.gz"):
            shutil.move(os.path.join(dist, t), carry)
    p, work, out = sim("bare", [BARE, "--", sys.executable, RUN, "--carry", carry, "--deadline", "1200"], 1500)
    if p.returncode == 3:
        ok(True, "bare build: # SKIP " + p.stderr.strip())
    else:
        rows = rows_of(out) if os.path.exists(os.path.join(out, "table.txt")) else {}
        ok(d.returncode == 0 and rows.get("memtap builds from the carried packages") == "match",
           "bare build: memtap builds from the carried packages alone", d.stderr[-500:] + p.stdout[-1500:])
        ok(rows.get("the built tree runs as it is (no LD_LIBRARY_PATH)") == "match",
           "bare build: the command, the CUPTI backend and the policy engine find their libraries by rpath", rows)
        bad = {k: v for k, v in rows.items() if v not in ("match", "skipped")}
        ok(rows and p.returncode == 0 and not bad, "bare build: every row that needs no GPU matches", bad)

# ---- a run's results cannot be lost ----
r = gpu_run.Run(os.path.join(TMP, "unit-out"), os.path.join(TMP, "unit"), 600)
r.row("a row", 1, 1, "match")
ok("match   | a row | expected: 1 | memtap: 1" in open(os.path.join(TMP, "unit-out", "table.txt")).read() and
   json.load(open(os.path.join(TMP, "unit-out", "rows.json")))["rows"] == [["a row", "1", "1", "match"]],
   "a row is in table.txt and rows.json as soon as it is known")
s = r.step("sleeper", ["sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"], bound=1)
ok(s.timed_out and not s.ok and "timed out" in s.why(), "a step past its bound is cut, even one deaf to SIGTERM, "
   "and says so", s.why())
late = gpu_run.Run(os.path.join(TMP, "late-out"), os.path.join(TMP, "late"), gpu_run.RESERVE)
s = late.step("late", ["true"], bound=100)
ok(s.skipped and "out of time" in s.why() and s.rc is None, "a step the deadline leaves no room for is not started",
   s.why())
big = os.path.join(TMP, "unit", "traces")
for i in range(12):
    with open(os.path.join(big, "t%02d.trace" % i), "wb") as f:
        f.write(os.urandom(100 << 10))
limit, gpu_run.PACK_LIMIT = gpu_run.PACK_LIMIT, 256 << 10
r.pack()
gpu_run.PACK_LIMIT = limit
parts = sorted(f for f in os.listdir(os.path.join(TMP, "unit-out")) if f.startswith("artifacts"))
names = set()
for f in parts:
    with tarfile.open(os.path.join(TMP, "unit-out", f)) as t:
        names |= set(t.getnames())
said = open(os.path.join(TMP, "unit-out", "run.log")).read()
ok(len(parts) == gpu_run.PARTS and all(os.path.getsize(os.path.join(TMP, "unit-out", f)) <= 16 * MiB for f in parts)
   and 0 < len(names & {"traces/t%02d.trace" % i for i in range(12)}) < 12 and "left out of the artifacts" in said,
   "artifacts past a part's size go into further parts, a few, each small enough to come back; what does not fit "
   "is named", (parts, sorted(names)))


# ---- the verdicts that read a PyTorch trace, on made-up traces ----
def ev(kind, size, phase="", api=2, modules=("libc10_cuda.so",), t=0, addr=0):
    return {"kind": kind, "size": size, "phase": phase, "flags": api, "modules": list(modules), "time_ns": t,
            "addr": addr or t + 1, "error": 0, "device": 0}


TORCH = [ev("alloc", 20 * MiB, "setup", t=1), ev("alloc", 8 * MiB, "forward", api=1, modules=["libcublasLt.so.13"],
                                                 t=2), ev("alloc", 64 * MiB, "forward", t=3),
         ev("alloc", 1 * MiB, "forward", modules=["libtorch_cuda.so"], t=4), ev("free", 0, t=5, addr=5),
         ev("meminfo", 0, t=6)]
ok(gpu_run.live_at(TORCH, gpu_run.moment(TORCH), gpu_run.torch_segment) == (84 * MiB, 84 * MiB),
   "like with like: PyTorch's allocator's bytes are its runtime calls from libc10_cuda.so, not cuBLAS's workspace "
   "nor others'", gpu_run.live_at(TORCH, gpu_run.moment(TORCH), gpu_run.torch_segment))
UNCAPPED = [(2 * MiB, "setup"), (20 * MiB, "setup"), (64 * MiB, "forward"), (64 * MiB, "forward"),
            (32 * MiB, "backward")]
made = [ev("alloc", s, p, t=i + 1) for i, (s, p) in enumerate(UNCAPPED[:3])]
capped = made + [ev("alloc_failed", 64 * MiB, "forward", t=10)]
ok(gpu_run.oom_verdict(capped, made, UNCAPPED)[2] == "match",
   "the cap: an OOM at the request and in the phase the uncapped run says, a snapshot of the blocks before it",
   gpu_run.oom_verdict(capped, made, UNCAPPED))
first = [ev("alloc_failed", 2 * MiB, "setup", t=1)]
ok(gpu_run.oom_verdict(first, [], UNCAPPED)[2] == "differ",
   "the cap: a first allocation that fails (the context took the cap) is no match", gpu_run.oom_verdict(first, [],
                                                                                                       UNCAPPED))
ok(gpu_run.oom_verdict(capped, made[:2], UNCAPPED)[2] == "differ" and
   gpu_run.oom_verdict(capped, None, UNCAPPED)[2] == "differ",
   "the cap: a snapshot without the step's blocks, or none, is no match")

# ---- the carried packages, unpacked with Python alone ----
if shutil.which("dpkg-deb"):
    pkg = os.path.join(TMP, "pkg")
    libdir = os.path.join(pkg, "usr/lib/x86_64-linux-gnu")
    os.makedirs(os.path.join(pkg, "DEBIAN"))
    os.makedirs(os.path.join(libdir, "pkgconfig"))
    os.makedirs(os.path.join(pkg, "lib/x86_64-linux-gnu"))
    with open(os.path.join(pkg, "DEBIAN/control"), "w") as f:
        f.write("Package: memtap-test-dep\nVersion: 1\nArchitecture: amd64\nMaintainer: memtap\nDescription: t\n")
    with open(os.path.join(libdir, "pkgconfig/dep.pc"), "w") as f:
        f.write("prefix=/usr\nincludedir=/usr/include/dep\nName: dep\nVersion: 1\nDescription: t\nLibs: -ldep\n")
    open(os.path.join(pkg, "lib/x86_64-linux-gnu/libdep.so.1"), "w").close()
    os.symlink("/lib/x86_64-linux-gnu/libdep.so.1", os.path.join(libdir, "libdep.so"))
    carry = os.path.join(TMP, "carry-unit")
    os.makedirs(os.path.join(carry, "debs"))
    b = subprocess.run(["dpkg-deb", "-Zxz", "-b", pkg, os.path.join(carry, "debs", "dep.deb")], capture_output=True,
                       text=True)
    unit = os.path.join(TMP, "unpack")
    os.makedirs(unit)
    root, libdirs = gpu_run.unpack(carry, unit)
    pc = open(os.path.join(root, "usr/lib/x86_64-linux-gnu/pkgconfig/dep.pc")).read()
    link = os.path.join(root, "usr/lib/x86_64-linux-gnu/libdep.so")
    ok(b.returncode == 0 and pc.startswith("prefix=%s/usr\nincludedir=%s/usr/include/dep\n" % (root, root)) and
       os.path.exists(link) and not os.readlink(link).startswith("/") and len(libdirs) == 2,
       "unpack: a .deb's files out without dpkg, its pkg-config file and absolute links pointed inside the root, "
       "both library folders", (pc, os.readlink(link) if os.path.islink(link) else None, libdirs))
else:
    ok(True, "unpack: # SKIP no dpkg-deb to make a package with")

p = subprocess.run([sys.executable, RUN, "--carry", os.path.join(TMP, "nothing"), "--work", os.path.join(TMP, "w2"),
                    "--out", os.path.join(TMP, "w2-out")], capture_output=True, text=True, timeout=300)
ok(p.returncode == 1 and p.stderr.count("\n") == 1 and "tests/gpu/fetch" in p.stderr,
   "nothing carried: one line naming tests/gpu/fetch, exit 1", p.stderr)
p = subprocess.run([sys.executable, RUN, "--deadline", "soon"], capture_output=True, text=True)
ok(p.returncode == 2, "bad usage: exit 2", p.stderr)
p = subprocess.run(["sh", "-n", os.path.join(S, "tests/gpu/fetch")], capture_output=True, text=True)
q = subprocess.run([sys.executable, "-m", "py_compile", BARE, os.path.join(S, "tests/gpu/torch_step.py")],
                   capture_output=True, text=True)
ok(p.returncode == 0 and q.returncode == 0, "tests/gpu/fetch, bare and torch_step.py are well-formed",
   p.stderr + q.stderr)
done()
