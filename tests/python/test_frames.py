"""Python frames: a Python program allocates device memory through ctypes calls into
simgpu's runtime from functions, a method, another module, a threading.Thread, an
exception handler and an exec'd python3 child, and once from a native thread with no
Python state. Every allocation made from Python must carry the call sites the program
saw itself with inspect (file, line, qualified function, innermost first), in place of
the interpreter's frames; the native thread's has none. Run plainly, with -X importtime,
and with MEMTAP_PYTHON_FRAMES=0 (no Python frames at all)."""
import json
import os
import pickle
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
NATIVE = os.path.join(B, "tests/python/.libs/libnative_thread.so")
TMP = scratch("frames")
if os.environ.get("MT_SANITIZERS", "no") != "no":
    print("1..0 # SKIP Python frames are tested in the plain build (a sanitized library cannot be preloaded "
          "into python)")
    sys.exit(0)

HELPERS = r'''
import ctypes, inspect, json, os
rt = ctypes.CDLL("libcudart.so.13")
SITES = {}

def alloc(n):
    p = ctypes.c_void_p()
    rc, here = rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), inspect.stack()
    assert rc == 0
    SITES[p.value] = [[os.path.abspath(f.filename), f.lineno, f.frame.f_code.co_qualname] for f in here]
    return p.value

def save(path):
    with open(path, "w") as f:
        json.dump({str(k): v for k, v in SITES.items()}, f)
'''

PROGRAM = r'''
import ctypes, subprocess, sys, threading
import helpers
from helpers import alloc

keep = [alloc(1 << 20)]

def layer(n):
    return alloc(n)

class Block:
    def forward(self, n):
        return layer(n)

keep.append(Block().forward(2 << 20))
t = threading.Thread(target=lambda: keep.append(layer(3 << 20)), name="worker")
t.start()
t.join()

def risky():
    keep.append(alloc(4 << 20))
    raise ValueError("while holding device memory")

from schätzen import größe
keep.append(größe(7 << 20))

try:
    risky()
except ValueError:
    keep.append(layer(5 << 20))

native = ctypes.CDLL(sys.argv[2]).alloc_on_native_thread
native.restype, native.argtypes = ctypes.c_size_t, [ctypes.c_size_t]
helpers.SITES[native(6 << 20)] = None
if sys.argv[3] == "child":
    subprocess.run([sys.executable, __file__, sys.argv[1] + ".child", sys.argv[2], "leaf"], check=True)
helpers.save(sys.argv[1])
'''

DUMP = r'''
for e in memtap.trace:events("alloc") do
  local frames = {}
  for _, f in ipairs(memtap.trace:stack(e.stack)) do
    if f.module == "python" then frames[#frames + 1] = string.format("%s:%d:%s", f.file, f.line, f["function"]) end
  end
  print(string.format("%d %s", e.addr, table.concat(frames, "|")))
end
'''

NON_ASCII = """
from helpers import alloc

def größe(n):
    return alloc(n)
"""

for name, text in (("helpers.py", HELPERS), ("prog.py", PROGRAM), ("dump.lua", DUMP), ("schätzen.py", NON_ASCII)):
    open(os.path.join(TMP, name), "w", encoding="utf-8").write(text)


def run(tag, python_args=(), frames="1", child=False, layout="0"):
    sites = os.path.join(TMP, tag + ".json")
    env = dict(os.environ, MEMTAP_PYTHON_FRAMES=frames, MEMTAP_PYTHON_LAYOUT=layout)
    p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, tag + "-%p.trace"), "--", sys.executable,
                        *python_args, os.path.join(TMP, "prog.py"), sites, NATIVE, "child" if child else "leaf"],
                       env=env, cwd=TMP, capture_output=True, text=True)
    return p, sites


def recorded(trace):
    p = subprocess.run([MEMTAP, "lua", os.path.join(TMP, "dump.lua"), trace], capture_output=True, text=True)
    got = {}
    for line in p.stdout.splitlines():
        addr, _, frames = line.partition(" ")
        got[int(addr)] = [f.rsplit(":", 2) for f in frames.split("|")] if frames else []
    return got


def traces(tag):
    return sorted(os.path.join(TMP, f) for f in os.listdir(TMP) if f.startswith(tag + "-") and f.endswith(".trace"))


def check(tag, sites_file, trace, frames_on=True):
    sites = json.load(open(sites_file))
    got = recorded(trace)
    bad = []
    for addr, want in sites.items():
        have = got.get(int(addr))
        if have is None:
            bad.append("%s: not recorded" % addr)
        elif want is None or not frames_on:
            if have:
                bad.append("%s: Python frames where none should be: %s" % (addr, have))
        else:
            want = [[f, str(line), fn] for f, line, fn in want]
            if have != want:
                bad.append("%s: recorded %s, inspect saw %s" % (addr, have, want))
    return bad, len(sites)


p, sites = run("plain", child=True)
ok(p.returncode == 0, "the program runs under memtap", p.stderr)
parent = [t for t in traces("plain")]
bad, n = check("plain", sites, parent[0])
ok(n == 7 and not bad, "every allocation from Python carries the call sites inspect saw, "
   "from functions, a method, another module, a thread, an exception handler and non-ASCII "
   "names; the native "
   "thread's has no Python frames", "\n".join(bad))
bad, n = check("plain", sites + ".child", parent[1]) if len(parent) == 2 else (["no child trace"], 0)
ok(n == 7 and not bad, "an exec'd python3 child's allocations carry its own frames", "\n".join(bad))

p, sites = run("importtime", ["-X", "importtime"])
bad, n = check("importtime", sites, traces("importtime")[0]) if p.returncode == 0 else ([p.stderr], 0)
ok(n == 7 and not bad, "the same with python3 -X importtime", "\n".join(bad))

p, sites = run("off", frames="0")
bad, n = check("off", sites, traces("off")[0], frames_on=False) if p.returncode == 0 else ([p.stderr], 0)
ok(n == 7 and not bad, "MEMTAP_PYTHON_FRAMES=0: native stacks only", "\n".join(bad))

# another CPython version's layout does not match this interpreter's objects: the first
# stack is read with every access checked, so frames are turned off instead of crashing
mine = "%d" % sys.version_info.minor
bad = []
for other in ("9", "10", "11", "12", "13"):
    if other == mine:
        continue
    p, sites = run("layout" + other, layout=other)
    found, n = check("layout", sites, traces("layout" + other)[0], frames_on=False) if p.returncode == 0 else ([], 0)
    said = [l for l in p.stderr.splitlines() if l.startswith("memtap:")]
    if p.returncode != 0 or n != 7 or found or len(said) > 1:
        bad.append("3.%s's layout: exit %d, %s %s" % (other, p.returncode, found, p.stderr[-500:]))
ok(not bad, "another version's layout is refused on this interpreter, without a crash or a wrong frame",
   "\n".join(bad))

# the report reads from the user's line down to the CUDA call, and says which stack is a
# thread without Python
# (grouped by the first frame of the user's code; --frames=all shows each stack in full)
p = subprocess.run([MEMTAP, "report", parent[0]], capture_output=True, text=True)
lines = [l.strip() for l in p.stdout.splitlines()]
ok(p.returncode == 0 and any(": alloc (helpers.py:" in l for l in lines)
   and any(l.startswith("<module> (prog.py:") for l in lines)
   and not any("_PyEval_EvalFrameDefault" in l for l in lines)
   and "(no Python frames: a thread without Python)" in lines,
   "memtap report shows Python frames in place of the interpreter's eval loop, grouped by the user's "
   "innermost frame, and says which stack has none", p.stdout[-3000:])
p = subprocess.run([MEMTAP, "report", "--frames=all", parent[0]], capture_output=True, text=True)
lines = [l.strip() for l in p.stdout.splitlines()]
ok(p.returncode == 0 and any(l.startswith("Block.forward (%s:" % os.path.join(TMP, "prog.py")) for l in lines),
   "--frames=all: every stack of a group, with full paths", p.stdout[-3000:])
p = subprocess.run([MEMTAP, "report", "--json", parent[0]], capture_output=True, text=True)
doc = json.loads(p.stdout) if p.returncode == 0 else {}
forward = [g for g in doc.get("top_at_peak", []) if any(f["function"] == "Block.forward" for f in g["frames"])]
py = [(f["function"], os.path.basename(f["file"])) for f in forward[0]["frames"] if f["module"] == "python"] \
    if forward else []
ok(doc.get("python_frames") is True and py[:3] == [("alloc", "helpers.py"), ("layer", "prog.py"),
                                                   ("Block.forward", "prog.py")],
   "the JSON report carries the Python frames (module python) and says the trace has them", p.stdout[-2000:])

# exports: folded stacks and PyTorch's snapshot layout name the Python functions
p = subprocess.run([MEMTAP, "export", "--format=folded", parent[0]], capture_output=True, text=True)
ok(p.returncode == 0 and any("Block.forward" in l and "layer" in l and "_PyEval_EvalFrameDefault" not in l
                             for l in p.stdout.splitlines()),
   "folded stacks hold the Python frames in place of the eval loop", p.stdout[-2000:])
viz = os.path.join(TMP, "viz.pickle")
p = subprocess.run([MEMTAP, "export", "--format=memviz", "-o", viz, parent[0]], capture_output=True, text=True)
names = set()
if p.returncode == 0:
    snap = pickle.load(open(viz, "rb"))
    for trace in snap.get("device_traces", []):
        for e in trace:
            names.update((os.path.basename(f["filename"]), f["name"]) for f in e.get("frames", []))
ok(("prog.py", "Block.forward") in names and ("helpers.py", "alloc") in names,
   "the memviz export's frames are the Python frames, as PyTorch writes them", p.stderr + str(sorted(names))[:2000])
# a policy's event table: the same frames as "function (file:line)"
policy = os.path.join(TMP, "stack.lua")
open(policy, "w").write('memtap.on_threshold("2MiB", function(ev) memtap.log(table.concat(ev.stack, " | ")) end)\n')
p = subprocess.run([MEMTAP, "run", "-o", os.path.join(TMP, "policy-%p.trace"), "--policy", policy, "--", sys.executable,
                    os.path.join(TMP, "prog.py"), os.path.join(TMP, "policy.json"), NATIVE, "leaf"],
                   cwd=TMP, capture_output=True, text=True)
logged = [l for l in p.stderr.splitlines() if "policy:" in l]
ok(p.returncode == 0 and len(logged) == 1 and "Block.forward (%s:" % os.path.join(TMP, "prog.py") in logged[0],
   "a policy handler's ev.stack holds the Python frames", p.stderr)
# the bundled oom_snapshot shows each top stack by the job's own Python frame: here the
# stacks differ first in the runtime's entry point (cudaMalloc, cudaMallocAsync), as a
# PyTorch job's differ first in its operators
OOM = r'''
import ctypes
rt = ctypes.CDLL("libcudart.so.13")
keep = []
def weights():
    for _ in range(4):
        p = ctypes.c_void_p()
        assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(256 << 20)) == 0
        keep.append(p)
def activations():
    for _ in range(8):
        p = ctypes.c_void_p()
        assert rt.cudaMallocAsync(ctypes.byref(p), ctypes.c_size_t(64 << 20), None) == 0
        keep.append(p)
weights()
activations()
print("rc", rt.cudaMalloc(ctypes.byref(ctypes.c_void_p()), ctypes.c_size_t(2 << 30)))
'''
open(os.path.join(TMP, "oom.py"), "w").write(OOM)
p = subprocess.run([MEMTAP, "run", "-o", os.path.join(TMP, "oom.trace"), "--policy", "cap", "--policy", "oom_snapshot",
                    "--", sys.executable, os.path.join(TMP, "oom.py")], cwd=TMP, capture_output=True, text=True,
                   env=dict(os.environ, SIMGPU_MEM="16GiB", MEMTAP_CAP="2GiB"))
tops = re.findall(r" \d\. .* allocations? from (.*)", p.stderr)
ok(tops == ["weights (%s:8)" % os.path.join(TMP, "oom.py"), "activations (%s:13)" % os.path.join(TMP, "oom.py")],
   "oom_snapshot under Python: each top stack by the job's own frame, not the runtime's (cudaMalloc+0x39)", p.stderr)
done()
