"""memtap run records PyTorch's tensors through its caching allocator's trace tracker.
There is no CUDA PyTorch here: a stand-in torch (a package per release, with
tests/torch's header and its libc10_cuda.so built against it) gives the entry points
memtap relies on, over simgpu. It checks memtap's plumbing, not PyTorch's behaviour:
- the tracker is built once per torch and attached at torch's first allocation: every
  tensor's block is recorded with its Python line, the segments as segments, and torch's
  own cudaMalloc/cudaFree not a second time; the report has blocks, reserve and
  fragmentation; the job's output is the same;
- torch before 2.2, -O torch=off, PYTORCH_NO_CUDA_MEMORY_CACHING, the cudaMallocAsync
  backend and a header that does not build each leave the driver-level record, said in
  one line where memtap cannot track;
- torch's out-of-memory error is recorded as such (not torch's first cudaMalloc failure,
  which it recovers from by emptying its cache), a job that forks after import torch and
  one that starts more Python processes work, each process with its own tensors."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/torch"))
from tap import done, ok, scratch, torch_python  # noqa: E402
import standin as standin_torch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMGPU = os.path.join(B, "tools/simgpu/.libs")
CXX = os.environ.get("CXX", "c++")

if os.environ.get("MT_SANITIZERS", "no") != "no":
    print("1..0 # SKIP tested in the plain build (a sanitized library cannot be preloaded into python3)")
    sys.exit(0)
if not shutil.which(CXX):
    print("1..0 # SKIP no C++ compiler: memtap run builds the tracker with one")
    sys.exit(0)
TMP = scratch("torch")
CACHE = os.path.join(TMP, "cache")

# each step a line of its own: the report groups by it
JOB = """import sys, torch
a = torch.empty(1000)
b = torch.empty(3 << 20)
c = torch.empty(100)
del a
d = torch.empty(20 << 20)
del b
torch.cuda.empty_cache()
print("job done", torch.cuda.is_initialized())
"""


def standin(version, code):
    return standin_torch.build(TMP, version, code, SIMGPU, CXX)


def run(name, site, script=JOB, options=(), env=None, argv=None):
    """memtap run of a Python job; (process, trace path, events)"""
    trace = os.path.join(TMP, name + ".trace")
    job = os.path.join(TMP, name + ".py")
    with open(job, "w") as f:
        f.write(script)
    e = dict(os.environ, LD_LIBRARY_PATH=SIMGPU, PYTHONPATH=site, MEMTAP_CACHE_DIR=CACHE)
    e.pop("MEMTAP_TORCH_TRACKER", None)
    e.update(env or {})
    p = subprocess.run([MEMTAP, "run", "-o", trace, *options, "--", *(argv or [sys.executable, job])],
                       capture_output=True, text=True, env=e, cwd=TMP)
    events = []
    if os.path.exists(trace):
        d = subprocess.run([MEMTAP, "dump", "--json", trace], capture_output=True, text=True)
        events = [json.loads(line) for line in d.stdout.splitlines()]
    return p, trace, events


def kinds(events, kind, api=None):
    return [e for e in events if e["kind"] == kind and (api is None or e["flags"] & 0x3f == api)]


BLOCK, RUNTIME = 9, 2
site25 = standin("2.5.1", 205)
plain = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True,
                       env=dict(os.environ, LD_LIBRARY_PATH=SIMGPU, PYTHONPATH=site25))
ok(plain.returncode == 0 and "job done True" in plain.stdout, "the stand-in torch runs a job on simgpu", plain.stderr)

# ---- the tracker: built once, attached at the first allocation ----
p, trace, ev = run("t25", site25)
ok(p.returncode == 0 and p.stdout == plain.stdout, "the job's output is the same under memtap", (p.stdout, p.stderr))
ok("building its tracker of PyTorch's tensors for torch 2.5.1+cu124" in p.stderr, "memtap run says it builds the "
   "tracker, once", p.stderr)
allocs, frees = kinds(ev, "alloc", BLOCK), kinds(ev, "free")
ok([e["size"] for e in allocs] == [1000, 3 << 20, 100, 20 << 20], "every tensor's block, the size asked for",
   [(e["size"], e["flags"]) for e in kinds(ev, "alloc")])
ok(not kinds(ev, "alloc", RUNTIME), "torch's own cudaMalloc is not recorded a second time",
   [e for e in kinds(ev, "alloc", RUNTIME)])
ok([e["size"] for e in kinds(ev, "segment_alloc")] == [2 << 20, 20 << 20, 20 << 20] and
   [e["size"] for e in kinds(ev, "segment_free")] == [20 << 20], "segments as segments, empty_cache's release too",
   [(e["kind"], e["size"]) for e in ev])
ok(len(frees) == 4 and {e["addr"] for e in frees} == {e["addr"] for e in allocs}, "each block's free",
   [(e["kind"], e["addr"]) for e in ev])
ok(all(e["functions"][0].startswith("c10::cuda::CUDACachingAllocator::(anonymous namespace)::Native::raw_alloc(")
       and "<module>" in e["functions"] for e in allocs),
   "a block's stack starts at torch's allocator (not memtap's tracker), its C++ name demangled, and has the Python "
   "frames",
   [e["functions"] for e in allocs])
rep = subprocess.run([MEMTAP, "report", trace], capture_output=True, text=True).stdout
ok("20.00 MiB in 1 allocation: <module> (t25.py:6)" in rep and "3.00 MiB in 1 allocation: <module> (t25.py:3)" in rep,
   "the report groups the live blocks by the job's line", rep)
j = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)
dev = j["devices"][0]
ok(dev["peak_allocated_bytes"] == 1000 + (3 << 20) + 100 + (20 << 20) - 1000 and
   dev["peak_reserved_bytes"] == 42 << 20, "peak allocated: the tensors; reserved: the segments",
   (dev["peak_allocated_bytes"], dev["peak_reserved_bytes"]))
frag = dev.get("fragmentation", {}).get("at_peak", {})
ok(frag.get("segments") == 3 and frag.get("largest_free_block_bytes") == 17 << 20,
   "fragmentation at the peak, from the blocks in their segments", frag)
p2, _, ev2 = run("t25b", site25)
ok("building" not in p2.stderr and len(kinds(ev2, "alloc", BLOCK)) == 4, "a second run uses the tracker built before",
   p2.stderr)
tracker25 = [os.path.join(CACHE, f) for f in os.listdir(CACHE) if f.endswith(".so")]
ok(len(tracker25) == 1, "one tracker kept per torch", os.listdir(CACHE))

# ---- the composition, from the frames of a training step ----
TRAIN = """import torch
from torch._tensor import backward
from torch.optim.adamw import AdamW


class Linear:
    def __init__(self, n):
        self.weight = torch.empty(n)

    def forward(self, x):
        return torch.empty(x.nbytes)


class Model:
    def __init__(self):
        self.layers = [Linear(1 << 20) for _ in range(2)]

    def forward(self, x):
        return [layer.forward(x) for layer in self.layers]


model = Model()
opt = AdamW([layer.weight for layer in model.layers])
x = torch.empty(3 << 20)
for step in range(3):
    acts = model.forward(x)
    grads = backward(lambda: [torch.empty(layer.weight.nbytes) for layer in model.layers])
    del acts
    opt.step(grads)
    del grads
"""
p, trace, ev = run("train", site25, TRAIN)
j = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)
comp = j["devices"][0]["composition_at_peak"] if p.returncode == 0 and j["devices"] else {}
src = j["devices"][0]["composition_source"] if comp else {}
ok((comp.get("params"), comp.get("grads"), comp.get("optimizer"), comp.get("activations"), comp.get("other")) ==
   (2 << 20, 2 << 20, 4 << 20, 6 << 20, 3 << 20) and src.get("params") == "frames",
   "the peak's composition from the blocks' frames: the model's parameters, the gradients, AdamW's state, the "
   "activations; 'other' only the input, which no frame says", (p.stderr, comp, src))

# ---- the layout of 2.9 on (size_t fields, strings after them) ----
p, _, ev = run("t210", standin("2.10.0", 210))
ok(p.returncode == 0 and [e["size"] for e in kinds(ev, "alloc", BLOCK)] == [1000, 3 << 20, 100, 20 << 20],
   "torch 2.10's TraceEntry: the same blocks", (p.stderr, [e["kind"] for e in ev]))

# ---- where memtap does not track: segments only, and why in one line ----
p, _, ev = run("t21", standin("2.1.2", 201))
ok(p.returncode == 0 and "torch 2.1.2+cu124 has no allocator trace tracker (2.2 and later do)" in p.stderr and
   not kinds(ev, "alloc", BLOCK) and len(kinds(ev, "alloc", RUNTIME)) == 3,
   "torch 2.1: one line, then torch's segments as device allocations", (p.stderr, [e["kind"] for e in ev]))
script = os.path.join(TMP, "with-shebang")
with open(script, "w") as f:
    f.write("#!%s -Wignore::DeprecationWarning:a/b\n%s" % (sys.executable, JOB))
os.chmod(script, 0o755)
p, _, ev = run("shebang", standin("2.1.2", 201), argv=[script])
ok(p.returncode == 0 and "torch 2.1.2+cu124 has no allocator trace tracker" in p.stderr,
   "a script whose #! line names a Python with an argument holding a /: that Python is the job's (and says so)",
   p.stderr)
for name, options, env, why in (("off", ["-O", "torch=off"], {}, "-O torch=off"),
                                ("nocache", [], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "0"},
                                 "PYTORCH_NO_CUDA_MEMORY_CACHING=0 (torch 2.2 to 2.5 take any value for set)")):
    p, _, ev = run(name, site25, options=options, env=env)
    ok(p.returncode == 0 and "building" not in p.stderr and not kinds(ev, "alloc", BLOCK) and
       len(kinds(ev, "alloc", RUNTIME)) == 3, why + ": torch's device calls only, recorded", p.stderr)
p, _, ev = run("async", site25, env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
ok(p.returncode == 0 and "has no trace tracker (its cudaMallocAsync backend" in p.stderr and
   len(kinds(ev, "alloc", RUNTIME)) == 4, "the cudaMallocAsync backend: said, and each tensor recorded as the "
   "allocation it is", (p.stderr, [(e["kind"], e["size"]) for e in ev]))
broken = standin("2.6.0", 206)
with open(os.path.join(broken, "torch/include/c10/cuda/CUDACachingAllocator.h"), "a") as f:
    f.write("#error a header this memtap cannot build against\n")
p, _, ev = run("broken", broken)
ok(p.returncode == 0 and "job done True" in p.stdout and "cannot build its tracker of torch 2.6.0+cu124" in p.stderr and
   "a header this memtap cannot build against" in p.stderr and len(kinds(ev, "alloc", RUNTIME)) == 3,
   "a tracker that does not build: the compiler's line, and the job runs as before", p.stderr)
p, _, ev = run("broken2", broken)
ok(p.returncode == 0 and "building" not in p.stderr and "a header this memtap cannot build against; remove " in
   p.stderr, "a build that failed is not tried again at each run: its error is said, and how to try again", p.stderr)
p, _, ev = run("other", standin("2.10.0", 210), env={"MEMTAP_TORCH_TRACKER": tracker25[0]})
ok(p.returncode == 0 and "is not the one memtap run built its tracker for" in p.stderr and
   not kinds(ev, "alloc", BLOCK) and len(kinds(ev, "alloc", RUNTIME)) == 3,
   "a tracker built for another torch is never attached (its allocator's methods are not the same)",
   p.stderr)

bindir = os.path.join(TMP, "bin")
os.makedirs(bindir, exist_ok=True)
if not os.path.exists(os.path.join(bindir, "python3")):
    os.symlink(sys.executable, os.path.join(bindir, "python3"))
p, _, ev = run("shell", site25, argv=["sh", "-c", "python3 %s" % os.path.join(TMP, "t25.py")],
               env={"PATH": bindir + ":" + os.environ["PATH"]})
ok(p.returncode == 0 and len(kinds(ev, "alloc", BLOCK)) == 4, "a job a shell starts: the tracker of the Python on "
   "the PATH", (p.stderr, [e["kind"] for e in ev]))

# ---- what else the job allocates, beside torch's tracked allocator, is recorded as before ----
MIXED = """import ctypes, torch
a = torch.empty(1000)
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), 3 << 20) == 0
assert rt.cudaFree(p) == 0
print("done")
"""
p, _, ev = run("mixed", site25, MIXED)
own = [e for e in kinds(ev, "alloc") if e["flags"] & 0x3f != BLOCK]  # the runtime's, through its handle: driver
ok(p.returncode == 0 and [e["size"] for e in own] == [3 << 20] and len(kinds(ev, "alloc", BLOCK)) == 1 and
   [e["addr"] for e in kinds(ev, "free")].count(own[0]["addr"]) == 1,
   "a cudaMalloc of the job's own after the tracker is attached: recorded, with its free",
   (p.stderr, [(e["kind"], e["size"]) for e in ev]))

# ---- how memtap run finds torch: through a noisy start-up, a relative cache, not for a program ----
noisy = os.path.join(TMP, "noisy")
os.makedirs(noisy, exist_ok=True)
with open(os.path.join(noisy, "sitecustomize.py"), "w") as f:
    f.write("import sys\nprint('a site that talks')\nprint('and warns', file=sys.stderr)\n")
CHDIR = "import os\nos.chdir('/')\n" + JOB
p, _, ev = run("noisy", site25 + ":" + noisy, CHDIR, env={"MEMTAP_CACHE_DIR": "relcache"})
ok(p.returncode == 0 and len(kinds(ev, "alloc", BLOCK)) == 4 and os.path.isdir(os.path.join(TMP, "relcache")),
   "a Python whose start-up prints, a relative MEMTAP_CACHE_DIR and a job that changes directory: tracked",
   (p.stderr, [e["kind"] for e in ev]))
fresh = os.path.join(TMP, "fresh-cache")
p, _, ev = run("program", site25, argv=[os.path.join(B, "tools/simtrain/simtrain"), "--preset", "gpt2-small",
                                         "--iters", "1"], env={"MEMTAP_CACHE_DIR": fresh})
ok(p.returncode == 0 and "building" not in p.stderr and not os.path.exists(fresh) and kinds(ev, "alloc"),
   "a program that is not Python (nor a script or launcher): no Python asked, nothing built", p.stderr)
p, _, ev = run("nocxx", site25, env={"MEMTAP_CACHE_DIR": fresh, "CXX": "/nonexistent/c++"})
ok(p.returncode == 0 and "memtap: no C++ compiler (/nonexistent/c++; set CXX)" in p.stderr and "building" not in
   p.stderr and not [f for f in os.listdir(fresh) if f.endswith(".failed")] and len(kinds(ev, "alloc", RUNTIME)) == 3,
   "no C++ compiler: one line (not kept as a failed build), and the job recorded as before", p.stderr)

# ---- expandable segments: one reserved range, mapped as it grows ----
EXPAND = """import torch
a = torch.empty(3 << 20)
b = torch.empty(30 << 20)
del b
torch.cuda.empty_cache()
c = torch.empty(100)
print("done")
"""
p, trace, ev = run("expandable", site25, EXPAND, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
j = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)
dev = j["devices"][0] if j["devices"] else {}
got = [(e["kind"], e["size"], e["flags"] & 1) for e in ev if e["kind"] in ("segment_alloc", "segment_free", "alloc")]
ok(p.returncode == 0 and got == [("segment_alloc", 20 << 20, 1), ("alloc", 3 << 20, 1), ("segment_alloc", 20 << 20, 1),
                                 ("alloc", 30 << 20, 1), ("segment_free", 20 << 20, 1), ("segment_alloc", 2 << 20, 0),
                                 ("alloc", 100, 1)] and not [e for e in ev if e["kind"].startswith("vmm_")] and
   dev.get("peak_reserved_bytes") == 40 << 20 and dev.get("fragmentation", {}).get("at_exit", {}).get(
       "reserved_bytes") == 22 << 20,
   "expandable_segments:True: each range mapped or unmapped a segment of its own, torch's cuMem calls not recorded "
   "again, the reserve from them", (p.stderr, got, [e["kind"] for e in ev], dev.get("fragmentation")))

# ---- torch's out-of-memory error ----
OOM = """import torch
keep = [torch.empty(20 << 20) for _ in range(2)]
spare = torch.empty(20 << 20)
del spare
try:
    torch.empty(100 << 20)
except torch.OutOfMemoryError as e:
    print("raised")
"""
p, trace, ev = run("oom", site25, OOM, env={"SIMGPU_MEM": str(100 << 20)})
failed = kinds(ev, "alloc_failed")
ok(p.returncode == 0 and "raised" in p.stdout and len(failed) == 1 and failed[0]["flags"] & 0x3f == BLOCK and
   failed[0]["size"] == 100 << 20, "torch's OOM recorded once, as the block it could not make (its retry after "
   "emptying the cache not an OOM of its own)", (p.stdout, p.stderr, [(e["kind"], e["size"], e["flags"]) for e in ev]))
rep = subprocess.run([MEMTAP, "report", trace], capture_output=True, text=True).stdout
ok("out-of-memory events: none" not in rep and "oom.py:6" in rep, "the report's OOM has the job's line", rep)

p, trace, ev = run("oomsnap", site25, OOM, options=["--policy", "oom_snapshot"],
                  env={"SIMGPU_MEM": str(100 << 20), "MEMTAP_OOM_SNAPSHOT": os.path.join(TMP, "oom-snap.trace")})
snap = os.path.join(TMP, "oom-snap.trace")
rep = subprocess.run([MEMTAP, "report", snap], capture_output=True, text=True).stdout if os.path.exists(snap) else ""
ok(p.returncode == 0 and "raised" in p.stdout and "40.00 MiB in 2 allocations" in rep and "oomsnap.py:2)" in rep,
   "oom_snapshot's on_oom runs at torch's OOM (under its allocator's lock): the snapshot holds its blocks and lines",
   (p.stderr, rep))

# ---- a job that forks after import torch, and one of several processes ----
FORK = """import os, torch
pid = os.fork()
if pid == 0:
    os._exit(0 if not torch.cuda.is_initialized() else 1)
_, status = os.waitpid(pid, 0)
x = torch.empty(4096)
print("child", status)
"""
p, _, ev = run("fork", site25, FORK)
ok(p.returncode == 0 and "child 0" in p.stdout and len(kinds(ev, "alloc", BLOCK)) == 1,
   "a child forked after import torch works (memtap starts no CUDA), the parent's tensor is recorded", p.stderr)
job = os.path.join(TMP, "t25.py")
LAUNCH = "import subprocess, sys\nfor r in range(2):\n    subprocess.run([sys.executable, %r], check=True)\n" % job
p = subprocess.run([MEMTAP, "run", "-o", os.path.join(TMP, "rank-%p.trace"), "--", sys.executable, "-c", LAUNCH],
                   capture_output=True, text=True, cwd=TMP,
                   env=dict(os.environ, LD_LIBRARY_PATH=SIMGPU, PYTHONPATH=site25, MEMTAP_CACHE_DIR=CACHE))
ranks = sorted(f for f in os.listdir(TMP) if f.startswith("rank-"))
counts = []
for r in ranks:
    d = subprocess.run([MEMTAP, "dump", "--json", os.path.join(TMP, r)], capture_output=True, text=True).stdout
    counts.append(len(kinds([json.loads(x) for x in d.splitlines()], "alloc", BLOCK)))
ok(p.returncode == 0 and counts == [4, 4], "each Python process a job starts records its own tensors",
   (counts, p.stderr))

# ---- a real PyTorch, its CPU build (Debian's python3-torch): no CUDA to start, none started ----
REAL = """import os, torch
x = torch.ones(256, 256)
pid = os.fork()
if pid == 0:
    os._exit(int((x @ x).sum().item() != 256 ** 3))
_, status = os.waitpid(pid, 0)
print(torch.__version__, float((x @ x).sum()), status, torch.cuda.is_initialized())
"""
py = torch_python()
if not py:
    ok(True, "# SKIP no Python with PyTorch (Debian's python3-torch)")
else:
    alone = subprocess.run([py, "-c", REAL], capture_output=True, text=True)
    p, _, ev = run("cpu", "", REAL, argv=[py, os.path.join(TMP, "cpu.py")])
    major_minor = tuple(int(v) for v in alone.stdout.split(".")[:2]) if alone.stdout[:1].isdigit() else (0, 0)
    said = "has no allocator trace tracker" in p.stderr if major_minor < (2, 2) else "building" in p.stderr
    ok(alone.returncode == 0 and p.returncode == 0 and p.stdout == alone.stdout and p.stdout.strip().endswith(
        "0 False") and said and not ev, "a CPU-only PyTorch (%s) runs as without memtap: CUDA not started, the fork "
       "fine, the tracker's absence said" % alone.stdout.split(" ")[0], (alone.stdout, p.stdout, p.stderr))

done()
