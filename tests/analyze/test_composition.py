"""Peak composition against simtrain's ground truth: untagged (inferred from NVTX phases
and lifetimes) within 1% per category on every preset and configuration; tagged
(simtrain --tag through memtap's API) exact."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("comp")
CATS = ("params", "grads", "optimizer", "activations", "temporaries", "other")


def run(args, tag=False, env=None, fails=False):
    trace, truth = os.path.join(TMP, "t.trace"), os.path.join(TMP, "truth.json")
    for f in (trace, truth):
        if os.path.exists(f):
            os.remove(f)
    p = subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, *args, "--json", truth] +
                       (["--tag"] if tag else []), capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if (p.returncode != 0) != fails:
        return None, None, p.stderr
    rep = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)
    return rep, json.load(open(truth)), ""


CONFIGS = [
    ["--preset", "tiny"],
    ["--preset", "gpt2-small"],
    ["--preset", "gpt2-small", "--precision", "fp32", "--optimizer", "adam"],
    ["--preset", "gpt2-small", "--optimizer", "sgd", "--recompute", "selective"],
    ["--preset", "gpt2-small", "--recompute", "full", "--leak", "4M"],
    ["--preset", "gpt2-small", "--zero", "1", "--dp", "8"],
    ["--preset", "gpt2-small", "--zero", "2", "--dp", "8", "--api", "async"],
    ["--preset", "gpt2-small", "--zero", "3", "--dp", "8", "--recompute", "selective"],
    ["--preset", "gpt-1.3b", "--zero", "2", "--dp", "4"],
    ["--preset", "gpt-7b", "--zero", "3", "--dp", "8", "--recompute", "full", "--iters", "2"],
]
for args in CONFIGS:
    name = " ".join(args)
    for tag in (False, True):
        rep, truth, err = run(args, tag)
        label = "%s%s" % (name, " --tag" if tag else "")
        if not ok(rep is not None and rep["events"]["dropped"] == 0, label + ": recorded, no event dropped",
                  err or rep["events"]["dropped_by"]):
            continue
        got = rep["devices"][0]["composition_at_peak"]
        want = truth["peak"]["categories"]
        if tag:
            ok(all(got[c] == want[c] for c in CATS), label + ": composition at the peak is exact", (got, want))
            ok(all(rep["devices"][0]["composition_source"][c] in ("tags", "none") for c in CATS),
               label + ": and comes from the tags", rep["devices"][0]["composition_source"])
        else:
            peak = truth["peak"]["bytes"]
            off = {c: (got[c] - want[c]) / peak for c in CATS if abs(got[c] - want[c]) > 0.01 * max(want[c], 1)}
            ok(not off, label + ": every category within 1% of simtrain's", (off, got, want))
# a step that runs out of memory before its backward is done (issue 39: gpt2-small on a 10 GiB
# device fails in iteration 1's backward, in the head; on 6 GiB, in the forward): what its forward
# made and still holds is activations, waiting for a backward that never ends; it read as other
for mem in ("10GiB", "6GiB"):
    rep, truth, err = run(["--preset", "gpt2-small"], env={"SIMGPU_MEM": mem}, fails=True)
    label = "gpt2-small out of memory on a %s device, untagged" % mem
    if not ok(rep is not None and truth.get("oom"), label + ": recorded, the job failed", err):
        continue
    got, want, peak = rep["devices"][0]["composition_at_peak"], truth["peak"]["categories"], truth["peak"]["bytes"]
    off = {c: (got[c] - want[c]) / peak for c in CATS if abs(got[c] - want[c]) > 0.01 * max(want[c], 1)}
    ok(not off and want["activations"] > 0, label + ": every category within 1% of simtrain's, activations as "
       "such", (off, got, want))
done()
