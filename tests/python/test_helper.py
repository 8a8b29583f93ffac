"""python/memtap with Debian's python3-torch, on CPU tensors: under memtap's library,
tag_model records each parameter, gradient and optimizer state tensor once, with its
data pointer, size and category, and mark records the boundary; without memtap every
call is a harmless no-op. (The tagging logic is what is tested: on CPU memtap sees no
device memory.)"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch, torch_python  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
LIB = os.path.join(B, "src/recorder/.libs/libmemtap.so")
TMP = scratch("python")

SCRIPT = r"""
import json, sys, torch, memtap
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
model[2].weight = torch.nn.Parameter(torch.randn(8, 32))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
before = memtap.tag_model(model)          # parameters only: no grads, no state yet
model(torch.randn(4, 64)).sum().backward()
opt.step()
n = memtap.tag_model(model, opt)
marked = memtap.mark("step")
want = []
for p in model.parameters():
    want.append([p.data_ptr(), p.numel() * p.element_size(), memtap.PARAMS])
    want.append([p.grad.data_ptr(), p.grad.numel() * p.grad.element_size(), memtap.GRADS])
for st in opt.state.values():
    for k in ("exp_avg", "exp_avg_sq", "step"):
        t = st[k]
        if t.numel():
            want.append([t.data_ptr(), t.numel() * t.element_size(), memtap.OPTIMIZER])
print(json.dumps({"active": memtap.active(), "before": before, "count": n, "marked": marked, "want": want}))
"""


PY = torch_python()
if os.environ.get("MT_SANITIZERS", "no") != "no":
    print("1..0 # SKIP the Python helper is tested in the plain build (a sanitized library cannot be preloaded "
          "into python)")
    sys.exit(0)
if not PY:
    print("1..0 # SKIP python3-torch is not installed (./quickstart check installs it)")
    sys.exit(0)

script = os.path.join(TMP, "tagging.py")
open(script, "w").write(SCRIPT)
env = dict(os.environ, PYTHONPATH=os.path.join(S, "python"))
trace = os.path.join(TMP, "python.trace")
p = subprocess.run([PY, script], capture_output=True, text=True,
                   env=dict(env, LD_PRELOAD=LIB, MEMTAP_OUTPUT=trace))
got = json.loads(p.stdout) if p.returncode == 0 else None
ok(got is not None, "a PyTorch script tags under memtap's library", p.stderr[-2000:])
if got:
    want = {tuple(w) for w in got["want"]}
    ok(got["active"] and got["marked"], "memtap is active; the mark is recorded")
    ok(got["before"] == 4, "before backward: the four parameters", got["before"])
    ok(got["count"] == len(want) == 4 + 4 + 12,
       "after a step: parameters, grads and Adam's state, each once", (got["count"], len(want)))
    d = subprocess.run([MEMTAP, "dump", "--json", trace], capture_output=True, text=True)
    events = [json.loads(line) for line in d.stdout.splitlines()]
    names = {"params": 1, "grads": 2, "optimizer": 3, "activations": 4, "temporaries": 5, "other": 6}
    tags = [(e["addr"], e["size"], names.get(e["tag"])) for e in events if e["kind"] == "tag_range"]
    ok(set(tags) == want and len(tags) == 4 + len(want),
       "the trace holds each call's tags: pointer, size, category", sorted(set(tags) ^ want)[:10])
    ok(any(e["kind"] == "mark" for e in events), "the trace holds the mark")

p = subprocess.run([PY, script], capture_output=True, text=True, env=env)
got = json.loads(p.stdout) if p.returncode == 0 else None
ok(got is not None and not got["active"] and got["count"] == 0 and got["before"] == 0 and not got["marked"],
   "without memtap: every call does nothing", p.stderr[-2000:])
done()
