"""Leaks across iterations on simtrain: no finding on any preset without leak
injection; with it, the injected stack is the top finding at the injected rate."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests", "hostile"))
from tap import done, ok, scratch  # noqa: E402
from mtrace import PYFRAME, Trace  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("leaks")


def report(args, *opts):
    trace = os.path.join(TMP, "t.trace")
    if os.path.exists(trace):
        os.remove(trace)
    p = subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, *args], capture_output=True, text=True)
    if p.returncode:
        return None
    p = subprocess.run([MEMTAP, "report", "--json", *opts, trace], capture_output=True, text=True)
    return json.loads(p.stdout) if p.returncode == 0 else None


for args in (["--preset", "tiny"], ["--preset", "gpt2-small"], ["--preset", "gpt2-small", "--recompute", "full"],
             ["--preset", "gpt2-small", "--zero", "3", "--dp", "4", "--api", "async"],
             ["--preset", "gpt-1.3b", "--zero", "1", "--dp", "8", "--optimizer", "sgd"],
             ["--preset", "gpt-7b", "--zero", "3", "--dp", "8", "--recompute", "selective"]):
    rep = report(args + ["--iters", "5"])
    ok(rep is not None and rep["iterations"]["count"] == 5 and rep["leaks"] == [],
       "no leak found: " + " ".join(args), rep and (rep["iterations"], rep["leaks"][:1]))

for leak, iters in ((1 << 20, 5), (4 << 20, 6), (12345, 8)):
    args = ["--preset", "gpt2-small", "--leak", str(leak), "--iters", str(iters)]
    rep = report(args)
    top = rep["leaks"][0] if rep and rep["leaks"] else None
    ok(top is not None and any(f["function"] == "stash_debug_tensor" for f in top["frames"]),
       "leak of %d bytes x %d iterations: the injected stack is the top finding" % (leak, iters), rep and rep["leaks"])
    ok(top is not None and top["growth_bytes_per_iteration"] == leak and top["iterations"] == iters - 1,
       "... growing %d bytes per iteration" % leak, top and {k: top[k] for k in top if k != "frames"})
    # what it held at the last boundary (the start of the last iteration: one buffer fewer than at exit)
    ok(top is not None and top["bytes"] == leak * (iters - 1) and top["device"] == 0,
       "... holding %d bytes at the last boundary" % (leak * (iters - 1)), top and top["bytes"])
    ok(rep is not None and len(rep["leaks"]) == 1, "... and the only finding", rep and len(rep["leaks"]))

rep = report(["--preset", "tiny", "--leak", "1M", "--iters", "3"])
ok(rep is not None and rep["leaks"] == [], "two growths are not yet a leak (default: three in a row)")
# A leak that starts late: it grows at the last 2 of 8 boundaries only, so the check runs
# (more boundaries than K) and must count the run exactly.
late = ["--preset", "tiny", "--leak", "1M", "--leak-from", "6", "--iters", "8"]
for k, want in ((None, 0), ("3", 0), ("2", 1), ("1", 1)):
    rep = report(late, *(["--leak-iterations", k] if k else []))
    found = rep["leaks"] if rep else None
    ok(found is not None and len(found) == want and all(l["iterations"] == 2 and l["growth_bytes_per_iteration"] == 1 << 20
                                                      and l["bytes"] == 2 << 20
                                                      and l["frames"][0]["function"] == "tensor_new" for l in found),
       "a leak from iteration 6 of 8, K=%s: %s" % (k or "3 (default)", "found, 2 growths of 1 MiB" if want else "not yet"),
       found)
rep = report(["--preset", "tiny", "--leak", "1M", "--iters", "3"], "--leak-iterations", "2")
ok(rep is not None and len(rep["leaks"]) == 1, "--leak-iterations 2 finds it")
rep = report(["--preset", "tiny", "--leak", "1M", "--iters", "5"], "--iteration", "forward")
ok(rep is not None and rep["iterations"]["boundary"] == "NVTX range forward" and len(rep["leaks"]) == 1,
   "--iteration chooses the boundary range by name", rep and rep["iterations"])
# a job that ran out of memory in its second iteration has pushed its range twice: that is
# enough to say which iteration it failed in (a leak still needs more boundaries than K)
rep = report(["--preset", "tiny", "--leak", "1M", "--iters", "2"])
ok(rep is not None and rep["iterations"] == {"boundary": "NVTX range iteration", "count": 2} and not rep["leaks"],
   "a range pushed twice is the iteration boundary; no leak from two", rep and rep["iterations"])


# A PyTorch job without marks whose only NVTX range came once, at its start: the iterations
# are where its Python frames say the optimizer's step begins, after the range as before it.
def recorded_steps(setup_ranges):
    events, t = [dict(kind="thread", time=10, aux=7), dict(kind="device", time=11, device=0, size=80 << 30)], 100
    for _ in range(setup_ranges):
        events += [dict(kind="range_push", time=t, aux=3), dict(kind="range_pop", time=t + 1)]
        t += 2
    for it in range(5):
        for stack, addr in ((1, 0x7f0000000000 + it * 0x100000), (2, 0x7f0000800000 + it * 0x100000)):
            events.append(dict(kind="alloc", time=t, device=0, addr=addr, size=1 << 20, stack=stack))
            t += 1
        events.append(dict(kind="free", time=t, device=0, addr=0x7f0000800000 + it * 0x100000))
        t += 1
    trace = os.path.join(TMP, "steps.trace")
    with open(trace, "wb") as f:
        f.write(Trace().strings([(1, "Block.forward\tmodel.py\t10"),
                                 (2, "AdamW.step\t/usr/lib/python3/torch/optim/adamw.py\t200"), (3, "setup")])
                .stacks([(1, [PYFRAME | 1]), (2, [PYFRAME | 2])]).events(events).end().bytes())
    p = subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True)
    return json.loads(p.stdout)["iterations"] if p.returncode == 0 else p.stderr


for setup in (0, 1):
    got = recorded_steps(setup)
    ok(got == {"boundary": "the optimizer's step (from the stacks)", "count": 5},
       "no marks, %d range: the optimizer's steps from the frames are the iterations" % setup, got)
done()
