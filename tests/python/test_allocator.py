"""memtap.use_allocator() hands PyTorch memtap's entry points, as CUDAPluggableAllocator
and its optional hook setters take them. Debian's torch has no CUDA, so a stand-in for
torch.cuda.memory records the calls; the function pointers must be the loaded library's."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
LIB = os.path.join(B, "src/recorder/.libs/libmemtap.so")
SCRIPT = r"""
import ctypes, json, sys, types, memtap
calls = []
class Inner:
    def __getattr__(self, name):
        return lambda fn: calls.append([name, fn])
class Pluggable:
    def __init__(self, path, alloc, free):
        calls.append(["new", path, alloc, free])
    def allocator(self):
        return Inner()
memory = types.SimpleNamespace(CUDAPluggableAllocator=Pluggable,
                               change_current_allocator=lambda a: calls.append(["change"]))
torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
try:
    memtap.use_allocator(torch)
except RuntimeError as e:
    calls.append(["error", str(e)])
lib = ctypes.CDLL(None)
want = {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value if hasattr(lib, n) else None
        for n in ("memtap_init", "memtap_reset", "memtap_memory_fraction", "memtap_record_stream")}
print(json.dumps({"calls": calls, "want": want}))
"""
import json  # noqa: E402

if os.environ.get("MT_SANITIZERS", "no") != "no":
    print("1..0 # SKIP tested in the plain build (a sanitized library cannot be preloaded into python3)")
    sys.exit(0)
env = dict(os.environ, PYTHONPATH=os.path.join(S, "python"))
for preload in (True, False):
    e = dict(env, LD_PRELOAD=LIB, MEMTAP_ENABLED="0") if preload else env
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=e)
    r = json.loads(p.stdout) if p.stdout.startswith("{") else None
    if not ok(r, "the script ran", p.stderr):
        continue
    calls = r["calls"]
    if preload:
        ok(calls[0] == ["new", os.path.realpath(LIB), "memtap_alloc", "memtap_free"] or
           calls[0][1:] == [LIB, "memtap_alloc", "memtap_free"], "CUDAPluggableAllocator(libmemtap.so, alloc, free)",
           calls[:1])
        hooks = {c[0]: c[1] for c in calls[1:-1]}
        ok(hooks == {"set_init_fn": r["want"]["memtap_init"], "set_reset_fn": r["want"]["memtap_reset"],
                     "set_memory_fraction_fn": r["want"]["memtap_memory_fraction"],
                     "set_record_stream_fn": r["want"]["memtap_record_stream"]} and all(hooks.values()),
           "the optional hooks get the library's own entry points", (hooks, r["want"]))
        ok(calls[-1] == ["change"], "then it becomes the current allocator")
    else:
        ok(calls == [["error", "memtap is not loaded: run the job with `memtap run -- python ...`"]],
           "without memtap: a clear error, nothing changed", calls)
done()
