"""PyTorch snapshots as real ones are (tests/analyze/snapshots.py: expandable segments with
maps, unmaps and an OOM; several devices; stacks="all" stacks of C++ and Python frames;
blocks from before recording; AdamW and autograd's engine; external annotations; no
time_us), each figure worked out by hand from PyTorch's own rules: the end as
torch/cuda/_memory_viz.py's segsum counts it, the OOM's verdict, the composition from the
snapshot alone, stacks a person can read, folded stacks root first with file:line."""
import json
import os
import pickle
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/analyze"))
from tap import done, ok, scratch  # noqa: E402
from snapshots import (ALLOCATOR, LOOP, MODULE, RECORDER, T0, TORCH, MiB, Trace, backward_stack, block, jit_dumps,  # noqa: E402
                       expandable_oom, forward_stack, frame, grad_stack, inference, later_step, op, optimizer_stack,
                       python_only, python_stack, segment, settings, training, warm_step)

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
TMP = scratch("torch-snapshot")


def write(name, snap):
    path = os.path.join(TMP, name + ".pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    return path


def run(*args):
    p = subprocess.run([MEMTAP, *args], capture_output=True, text=True)
    return p, (json.loads(p.stdout) if "--json" in args and p.stdout.startswith("{") else None)


def segsum(snap, device):
    """torch/cuda/_memory_viz.py's segsum, by its rules: reserved is every segment's
    total_size; allocated the requested bytes of active_allocated blocks; their rounding
    free internal; every other block (inactive, active_pending_free) free external."""
    reserved = allocated = internal = external = n = 0
    for s in snap["segments"]:
        if s["device"] != device:
            continue
        n += 1
        reserved += s["total_size"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                allocated += b["requested_size"]
                internal += b["size"] - b["requested_size"]
            else:
                external += b["size"]
    assert internal + external + allocated == reserved
    return {"segments": n, "total_reserved": reserved, "total_allocated": allocated, "free_internal": internal,
            "free_external": external}


# ---- 1. expandable segments ----
snap = expandable_oom()
path = write("expandable", snap)
p, rep = run("report", "--json", path)
ok(p.returncode == 0 and rep, "expandable: read", p.stderr)
for d in (0, 1):
    dev = [x for x in (rep or {}).get("devices", []) if x["device"] == d]
    end = dev[0]["fragmentation"]["at_exit"] if dev else {}
    want = segsum(snap, d)
    got = {"segments": end.get("segments"), "total_reserved": end.get("reserved_bytes"),
           "total_allocated": end.get("requested_bytes"), "free_internal": end.get("internal_bytes"),
           "free_external": end.get("external_bytes")}
    ok(got == want, "expandable, device %d: the end is what PyTorch's segsum counts" % d, (got, want))
dev = rep["devices"][0] if rep else {}
fr = dev.get("fragmentation") or {}
# at the peak (the 4000-byte alloc): 30 + 10 MiB from before recording, 50 MiB - 1000, 4000; mapped
# then: 40 MiB before recording + 60 MiB + 2 MiB
ok(dev and dev["peak_allocated_bytes"] == 90 * MiB - 1000 + 4000 and
   dev["peak_allocated_bytes"] + dev["composition_at_peak"]["reserved_unallocated"] == 102 * MiB and
   fr["at_peak"]["reserved_bytes"] == 102 * MiB and fr["at_peak"]["segments"] == 2,
   "expandable: reserved at the peak is what was mapped then (pages from before the trace, the maps)", dev)
tl = fr.get("timeline", [])
ok(tl and max(x["reserved_bytes"] for x in tl) == 102 * MiB and
   all(0 <= x["allocated_bytes"] <= x["reserved_bytes"] < (1 << 40) for x in tl),
   "expandable: reserved never above what was mapped, nothing underflows", tl)
oom = rep["oom"][0] if rep and rep["oom"] else {}
ok(oom.get("fits_without_fragmentation") is False and oom.get("free_bytes") == 91 * MiB and
   oom["fragmentation"]["reserved_bytes"] == 62 * MiB,
   "expandable: the OOM was not fragmentation's (39 of 62 MiB allocated, 200 MiB asked, 91 MiB free)", oom)
p, _ = run("report", path)
ok("(not fragmentation: 39.00 MiB of 62.00 MiB reserved was allocated, 23.00 MiB free in segments)" in p.stdout
   and "would have fit" not in p.stdout, "expandable: the text's verdict", p.stdout[-1500:])
ok("as PyTorch's segsum counts the end: total_reserved 62.00 MiB, total_allocated 39.00 MiB, total_free 23.00 MiB"
   in p.stdout, "expandable: segsum's figures in the text", p.stdout)
both = [segsum(snap, d) for d in (0, 1)]
line = "every device, as PyTorch's segsum sums the file: total_reserved %.2f MiB, total_allocated %.2f MiB" % (
    sum(x["total_reserved"] for x in both) / MiB, sum(x["total_allocated"] for x in both) / MiB)
ok(line in p.stdout, "expandable: segsum's sum over both devices, as it sums the whole file", (line, p.stdout[-800:]))
ok(rep and rep["devices"][1]["peak_allocated_bytes"] == 12 * MiB, "expandable: the second device on its own")
# replay: native with the job's own settings; the snapshot's end summed page by page
p, rp = run("replay", "--json", "--policy=native", path)
ok(rp and rp["job_conf"] == "expandable_segments:True" and rp["final_segments"] == segsum(snap, 0)["total_reserved"],
   "expandable: replay's native runs with the job's settings, the end is segsum's (maps and unmaps by pages)",
   rp and (rp["job_conf"], rp["final_segments"], segsum(snap, 0)["total_reserved"]))
for divisions, want in (({"1": 4, "2": 4, "4": 4}, "max_split_size_mb:200,roundup_power2_divisions:4"),
                        ({"1": 4, "2": 8}, "max_split_size_mb:200")):
    tuned = training()
    tuned["allocator_settings"].update(max_split_size=200 * MiB, roundup_power2_divisions=divisions)
    p, rp = run("replay", "--json", "--policy=native", write("tuned", tuned))
    ok(rp and rp["job_conf"] == want, "replay takes max_split_size, and roundup_power2_divisions where one value "
       "holds for every interval", rp and rp["job_conf"])
# CUDA graphs' private pools (segment_pool_id (1, 0), (0, 2)): one reserved before the
# trace, one by a segment_alloc in it, beside the default pool's; the memviz export keeps
# each segment's pool (PyTorch's viewer draws private pools apart)
X, Y, Z = 0x7f1000000000, 0x7f2000000000, 0x7f3000000000
d = Trace(Y)
d.add("segment_alloc", Y, 20 * MiB, LOOP)
d.alloc(4 * MiB, forward_stack(0, "mm"))
pools = {"segments": [
    segment(0, X, [block(X, 2 * MiB, 2 * MiB, "active_allocated", []),
                   block(X + 2 * MiB, 18 * MiB, 0, "inactive", [])], expandable=False),
    dict(segment(0, Y, [block(Y, 4 * MiB, 4 * MiB, "active_allocated", forward_stack(0, "mm")),
                        block(Y + 4 * MiB, 16 * MiB, 0, "inactive", [])], expandable=False), segment_pool_id=(1, 0)),
    dict(segment(0, Z, [block(Z, 2 * MiB, 2 * MiB, "active_allocated", [])], small=True, expandable=False),
         segment_pool_id=(0, 2))],
    "device_traces": [d.entries], "allocator_settings": settings(False), "external_annotations": []}
out = os.path.join(TMP, "pools.viz.pickle")
p, _ = run("export", "--format=memviz", "-o", out, write("pools", pools))
viz = pickle.load(open(out, "rb")) if p.returncode == 0 else {"segments": []}
got = {s["address"]: tuple(s["segment_pool_id"]) for s in viz["segments"]}
ok(got == {X: (0, 0), Y: (1, 0), Z: (0, 2)} and segsum(viz, 0) == segsum(pools, 0),
   "memviz export: each segment in its own pool, a private pool's as the snapshot had it", (got, p.stderr))
# a job on cuda:1 alone (device_traces [[], [...]], every segment on device 1): replay
# replays device 1 unless told otherwise, not an empty device 0
one = training()
one["device_traces"] = [[]] + one["device_traces"][:1]
for s in one["segments"]:
    s["device"] = 1
p, rp = run("replay", "--json", "--policy=native", write("cuda1", one))
ok(rp and rp["device"] == 1 and rp["ops"] > 0 and rp["final_segments"] == segsum(one, 1)["total_reserved"],
   "replay of a job on cuda:1 alone: device 1 by default", rp and (rp["device"], rp["ops"], p.stderr))
p, rp = run("replay", "--json", "--policy=native", "--device=0", write("cuda1", one))
ok(rp and rp["device"] == 0 and rp["ops"] == 0 and "no device allocations on device 0" in p.stderr,
   "replay --device=0 of it: device 0, which has nothing, and says so", rp and (rp["device"], p.stderr))
out = os.path.join(TMP, "expandable.viz.pickle")
p, _ = run("export", "--format=memviz", "-o", out, path)
viz = pickle.load(open(out, "rb")) if p.returncode == 0 else {"segments": []}
ok([segsum(viz, d) for d in (0, 1)] == [segsum(snap, d) for d in (0, 1)] and
   viz.get("allocator_settings") == snap["allocator_settings"] and
   viz.get("external_annotations") == snap["external_annotations"],
   "expandable: the memviz export sums as the snapshot does, its settings and annotations as they were",
   ([segsum(viz, d) for d in (0, 1)], viz.get("allocator_settings")))

# ---- 2. composition from the snapshot alone ----
for name, kw in (("training", {}), ("training, no annotations", {"annotated": False}),
                 ("training, no times", {"timed": False}), ("training, stacks=python", {"python": True}),
                 ("training, stacks=python, no annotations", {"python": True, "annotated": False})):
    py = kw.pop("python", False)
    snap = python_only(training(**kw)) if py else training(**kw)
    p, rep = run("report", "--json", write(name.replace(" ", "").replace(",", "-").replace("=", ""), snap))
    dev = rep["devices"][0] if rep else {}
    comp = dev.get("composition_at_peak", {})
    # at the peak, in the first optimizer step: worked out from the frames by hand
    want = {"params": 128 * MiB, "grads": 128 * MiB, "optimizer": 256 * MiB, "temporaries": 64 * MiB}
    ok(dev.get("peak_allocated_bytes") == 576 * MiB and all(comp.get(k) == v for k, v in want.items()),
       "%s: parameters, gradients, optimizer state and temporaries at the peak, read by frames" % name, comp)
    ok(dev and all(dev["composition_source"][k] == "frames" for k in want) and
       all(0 < dev["composition_confidence"][k] <= 1 for k in want) and
       dev["composition_confidence"]["optimizer"] == 1.0 and
       (dev["composition_confidence"]["grads"] < 0.9 if py else dev["composition_confidence"]["grads"] == 1.0),
       "%s: the source is frames, with how sure each figure is (gradients made where no frames were recorded: "
       "likely, not sure)" % name,
       (dev.get("composition_source"), dev.get("composition_confidence")))
p, rep = run("report", "--json", write("forward", training(iterations=1, backward=False, optimizer=False)))
comp = rep["devices"][0]["composition_at_peak"] if rep else {}
rest = sum(v for k, v in comp.items() if k not in ("params", "reserved_unallocated"))
ok(comp and comp["params"] == 128 * MiB and comp["activations"] >= 0.9 * rest and comp["activations"] >= 96 * MiB,
   "forward only: the parameters, and activations at least 90% of the rest", comp)


def side_by_side(timed):
    """Two devices stepping side by side (DataParallel's replicas), device 0 a little ahead:
    it is in backward when device 1, still in forward, makes the loss (a stack that says
    no phase: 100 MiB), which device 1's backward frees."""
    d0, d1 = Trace(0x7e0000000000, timed=timed, device=0), Trace(0x7f0000000000, timed=timed, device=1)
    d1.t += 3  # device 1's entries fall between device 0's
    loss = python_stack([frame("train_step", "/home/me/train.py", 95)] + LOOP[1:], RECORDER + ALLOCATOR + op("cat"))
    d0.alloc(16 * MiB, forward_stack(0, "mm"))
    d1.alloc(16 * MiB, forward_stack(0, "mm"))
    d0.alloc(8 * MiB, backward_stack("MmBackward0", "mm"))
    kept = d1.alloc(100 * MiB, loss)
    d1.alloc(32 * MiB, grad_stack())
    d1.free(kept)
    return {"segments": [], "device_traces": [d0.entries, d1.entries], "allocator_settings": settings(False),
            "external_annotations": []}


for timed in (True, False):
    p, rep = run("report", "--json", write("side-by-side-%s" % timed, side_by_side(timed)))
    comp = rep["devices"][1]["composition_at_peak"] if rep and len(rep["devices"]) == 2 else {}
    ok(comp.get("activations") == 116 * MiB and comp.get("grads") == 32 * MiB,
       "two devices side by side (%s): device 1's loss, made in its forward while device 0 was in backward and "
       "freed in its own backward, is an activation (phases per device)" % ("timed" if timed else "no times"), comp)

# recorded after warm-up steps, under an optimizer that writes new state tensors: the old
# states, made before recording and freed in its step, are optimizer state, not gradients
p, rep = run("report", "--json", write("warm-step", warm_step()))
dev = rep["devices"][0] if rep else {}
comp = {k: v for k, v in dev.get("composition_at_peak", {}).items() if v and k != "reserved_unallocated"}
ok(dev.get("peak_allocated_bytes") == 544 * MiB and comp == {"params": 128 * MiB, "grads": 128 * MiB,
                                                             "optimizer": 288 * MiB},
   "warm step: old optimizer states freed in the step are optimizer state", comp)
p, _ = run("report", write("warm-step", warm_step()))
ok("256.00 MiB in 8 allocations: allocated before recording started, read as optimizer state" in p.stdout and
   "128.00 MiB in 4 allocations: allocated before recording started (the model's parameters" in p.stdout,
   "warm step: the stacks' rows of blocks made before recording say what each was read as", p.stdout[:1500])

# recorded after warm-up under an in-place optimizer: the state, made before recording,
# keeps its frames in the snapshot's blocks; gradients kept across steps (set_to_none=False)
# have none, but backward made none and the optimizer stepped: of each size the optimizer
# keeps state for, half the frameless blocks are gradients; a cuBLAS workspace is neither
for kept in (True, False):
    p, rep = run("report", "--json", write("later-step-%s" % kept, later_step(grads_kept=kept)))
    dev = rep["devices"][0] if rep else {}
    comp = {k: v for k, v in dev.get("composition_at_peak", {}).items() if v and k != "reserved_unallocated"}
    want = {"params": 128 * MiB, "optimizer": 256 * MiB, "activations": 96 * MiB, "temporaries": 8 * MiB,
            "other": 32 * MiB}
    if kept:
        want["grads"] = 128 * MiB
    ok(comp == want, "later step, %s: state made before recording is optimizer state by its own frames; %s; a "
       "cuBLAS workspace is other" % ("gradients kept across steps" if kept else "no gradients kept",
                                      "the kept gradients paired with the parameters by size" if kept else
                                      "the parameters stay parameters"), comp)

# The same step where the warm-up's AdamW state has no frames either (recording began after
# it, as in a public CS336 step of torch's Adam, which read 38.09 GiB of parameters for a
# model of 12.70 GiB), and two buffers of sizes of their own (1 and 3 MiB): of the 32 MiB
# blocks, four copies per parameter (parameter, gradient kept, two states), two of each
# four are the state, then the gradients pair off. With one state fewer the counts are no
# multiple of four, and nothing is guessed.
for states, optim in ((8, "adamw"), (7, "adamw"), (8, "nadam")):
    snap = later_step()
    for e in snap["device_traces"][0]:  # NAdam's step: the same two states per parameter
        for f in e["frames"]:
            f["filename"] = f["filename"].replace("optim/adamw.py", "optim/%s.py" % optim)
    blocks = snap["segments"][0]["blocks"]
    for b in blocks:
        if b["frames"] and "_init_group" in str(b["frames"]):
            b["frames"] = []
    if states == 7:
        gone = [b for b in blocks if b["frames"] == []][5]
        gone.update(state="inactive", requested_size=0)
    end = blocks[-1]["address"] + blocks[-1]["size"]
    blocks += [block(end, MiB, MiB, "active_allocated", []), block(end + MiB, 3 * MiB, 3 * MiB, "active_allocated", [])]
    snap["segments"][0] = segment(0, snap["segments"][0]["address"], blocks, expandable=False)
    p, rep = run("report", "--json", write("later-step-mute-%d-%s" % (states, optim), snap))
    dev = rep["devices"][0] if rep else {}
    comp = {k: v for k, v in dev.get("composition_at_peak", {}).items() if v and k != "reserved_unallocated"}
    want = {"params": 132 * MiB, "grads": 128 * MiB, "optimizer": 256 * MiB, "activations": 96 * MiB,
            "temporaries": 8 * MiB, "other": 32 * MiB}
    if states == 7:
        want = dict(want, params=(4 + 7 + 4) * 32 * MiB + 4 * MiB, grads=0, optimizer=0)
        want = {k: v for k, v in want.items() if v}
    ok(comp == want, "later step, %d states of torch's %s made before recording with no frames: %s" %
       (states, optim, "two of each four copies of a size are the state, the kept gradients pair off" if states == 8 else
        "the counts are no multiple of four copies, all parameters as before"), comp)

# the loop keeps each step's loss for logging (train_step, train.py:95: no model frames):
# not an activation, as backward does not free it (the peak, in the second step, holds two)
p, rep = run("report", "--json", write("loss-history", training(leak=4 * MiB)))
comp = rep["devices"][0]["composition_at_peak"] if rep else {}
ok(comp.get("other") == 8 * MiB and comp.get("activations") == 0, "a loss kept by the loop past backward is other",
   comp)

p, _ = run("report", write("later-step-text", later_step()))
ok("128.00 MiB in 4 allocations: allocated before recording started (the model's parameters" in p.stdout and
   "128.00 MiB in 4 allocations: allocated before recording started, read as gradients" in p.stdout and
   re.search(r"256\.00 MiB in 8 allocations: train_step \(train\.py:88\) \(made before the trace's first entry\)\n"
             r" +_init_group \(adamw\.py:160\)", p.stdout),
   "blocks made before recording with frames are shown by their stacks; the frameless ones a row per category",
   p.stdout)

# a Windows job's paths: torch's plumbing (module.py's _call_impl) is left out there too
win = training()
for e in win["device_traces"][0]:
    for f in e["frames"]:
        f["filename"] = "C:" + f["filename"].replace("/", "\\") if f["filename"].startswith("/") else f["filename"]
p, _ = run("report", write("windows", win))
ok(re.search(r"step \(adamw\.py:220\)\n +train_step \(train\.py:88\)", p.stdout) and "_use_grad" not in p.stdout,
   "Windows paths: the same plumbing left out (the optimizer's wrapper and _use_grad)", p.stdout[:1500])

p, _ = run("report", write("python-text", python_only(training())))
ok("128.00 MiB in 4 allocations: (no frames: a thread without Python, autograd's engine thread likely)" in p.stdout
   and "(no stack)" not in p.stdout, "stacks=\"python\": the gradients' empty stacks say whose thread they were on",
   p.stdout)
p, rep = run("report", "--json", write("inference", inference()))
comp = rep["devices"][0]["composition_at_peak"] if rep else {}
ok(comp and comp["params"] == 128 * MiB and comp["activations"] == 32 * MiB and comp["temporaries"] == 0,
   "inference (forward passes that free each layer's output): the parameters and two layers' outputs, activations",
   comp)
# the same passes recorded after an earlier one made a KV cache (64 MiB, a module's forward
# in its frames) and kept it: made before recording and live to the end, yet its own
# frames say a forward made it, not the model's building (real ones: a Llama's cache, a
# diffusion model's kept attention outputs, 2.7 and 7.9 GiB read as parameters)
kv = inference()
kv["segments"].append(segment(0, 0x7d0000000000, [block(0x7d0000000000, 64 * MiB, 64 * MiB, "active_allocated",
                                                        forward_stack(3, "cat"))], expandable=False))
p, rep = run("report", "--json", write("inference-kv", kv))
comp = rep["devices"][0]["composition_at_peak"] if rep else {}
ok(comp and comp["params"] == 128 * MiB and comp["activations"] == 96 * MiB,
   "a block made before recording whose frames say a module's forward made it is an activation, not a parameter",
   comp)
# an inference engine's KV cache, made up front by its cache engine's __init__ (vLLM's
# CacheEngine._allocate_kv_cache under the worker's __init__, no forward): what the passes
# keep, not the model (a public verl job's 20.3 GiB were read as parameters)
vllm = inference()
kv_py = [frame("_allocate_kv_cache", "/usr/lib/python3/site-packages/vllm/worker/cache_engine.py", 83),
         frame("__init__", "/usr/lib/python3/site-packages/vllm/worker/cache_engine.py", 64),
         frame("_init_cache_engine", "/usr/lib/python3/site-packages/vllm/worker/worker.py", 312),
         frame("__init__", "/home/me/rollout.py", 114), frame("main", "/home/me/run.py", 9)]
vllm["segments"].append(segment(0, 0x7d0000000000, [block(0x7d0000000000, 64 * MiB, 64 * MiB, "active_allocated",
                                                          python_stack(kv_py, RECORDER + ALLOCATOR + op("zeros")))],
                                expandable=False))
p, rep = run("report", "--json", write("inference-vllm-kv", vllm))
comp = rep["devices"][0]["composition_at_peak"] if rep else {}
ok(comp and comp["params"] == 128 * MiB and comp["activations"] == 96 * MiB,
   "an inference engine's KV cache, made in its cache engine's __init__, is an activation, not a parameter", comp)
# the model built while recording, of the user's own modules (a hand-written Linear's
# __init__ under its Block's under the model's, torch.empty: no torch.nn frame), then two
# forward passes as above: the four 32 MiB weights are parameters, not "other"
BASE, SEG = 0x7f0000000000, 4 << 30
d = Trace(BASE)
d.add("segment_alloc", BASE, SEG, LOOP)
for k in range(4):
    py = [frame("__init__", "/home/me/layers.py", 19), frame("__init__", "/home/me/block.py", 30),
          frame("__init__", "/home/me/model.py", 37), frame("main", "/home/me/run.py", 11),
          frame("<module>", "/home/me/run.py", 58)]
    d.alloc(32 * MiB, python_stack(py, RECORDER + ALLOCATOR + op("empty")))
for _ in range(2):
    prev = None
    for k in range(6):
        out = d.alloc(16 * MiB, forward_stack(k, ["mm", "gelu", "softmax"][k % 3]))
        if prev is not None:
            d.free(prev)
        prev = out
    d.free(prev)
blocks = [block(a, size, size, "active_allocated", frames) for a, (size, frames) in sorted(d.live.items())]
blocks.append(block(BASE + 128 * MiB, SEG - 128 * MiB, 0, "inactive", []))
built = {"segments": [segment(0, BASE, blocks, expandable=False)], "device_traces": [d.entries],
         "allocator_settings": settings(False), "external_annotations": []}
p, rep = run("report", "--json", write("built-own-modules", built))
comp = rep["devices"][0]["composition_at_peak"] if rep else {}
ok(comp and comp["params"] == 128 * MiB and comp["activations"] == 32 * MiB and comp["other"] == 0,
   "a model of the user's own modules built while recording (__init__ under __init__): parameters", comp)
# a hand-written AdamW (optimizer.py, no torch.optim frame) that makes its two states per
# parameter in its __init__ and writes each parameter anew in its step (p.data = p.data -
# lr * ...: the new value made, then the old freed); a step, then a longer forward: at the
# peak, the parameters are the step's new values (128 MiB), not optimizer state; the
# states (256 MiB) made in __init__ are optimizer state, not other; gradients 128 MiB,
# the second forward's seven outputs 112 MiB
d = Trace(BASE)
d.add("segment_alloc", BASE, SEG, LOOP)
own = [frame("main", "/home/me/run.py", 11), frame("<module>", "/home/me/run.py", 58)]
params = [d.alloc(32 * MiB, python_stack([frame("__init__", "/home/me/layers.py", 19),
                                          frame("__init__", "/home/me/model.py", 37)] + own,
                                         RECORDER + ALLOCATOR + op("empty"))) for _ in range(4)]
for k in range(8):
    d.alloc(32 * MiB, python_stack([frame("__init__", "/home/me/optimizer.py", 27 + k % 2)] + own,
                                   RECORDER + ALLOCATOR + op("zeros_like")))
acts = [d.alloc(16 * MiB, forward_stack(k, "mm")) for k in range(6)]
for k in range(4):
    d.alloc(32 * MiB, grad_stack())
for a in acts:
    d.free(a)
for old in params:
    d.alloc(32 * MiB, python_stack([frame("step", "/home/me/optimizer.py", 64)] + own,
                                   RECORDER + ALLOCATOR + op("sub")))
    d.free(old)
for k in range(7):
    d.alloc(16 * MiB, forward_stack(k, "mm"))
own_adamw = {"segments": [segment(0, BASE, d.blocks(SEG), expandable=False)], "device_traces": [d.entries],
             "allocator_settings": settings(False), "external_annotations": []}
p, rep = run("report", "--json", write("own-adamw", own_adamw))
dev = rep["devices"][0] if rep else {}
comp = {k: v for k, v in dev.get("composition_at_peak", {}).items() if v and k != "reserved_unallocated"}
ok(dev.get("peak_allocated_bytes") == 624 * MiB and
   comp == {"params": 128 * MiB, "optimizer": 256 * MiB, "grads": 128 * MiB, "activations": 112 * MiB},
   "a hand-written optimizer: states made in its __init__ are optimizer state, a parameter it writes anew in "
   "its step stays a parameter", (dev.get("peak_allocated_bytes"), comp))

# Megatron's DistributedDataParallel with the distributed optimizer (frames as in
# megatron/core/distributed/param_and_grad_buffer.py): _ParamAndGradBuffer.__init__ makes
# param_data (bf16, the parameters are then views of it: their own storage goes) and,
# 6 lines later, grad_data (fp32): backward accumulates into it, nothing allocated. The
# two are made on neighbouring lines of one __init__ under the model's setup; grad_data,
# the last, is gradients. At the peak, in the first step: params 64 MiB, grads 128 MiB,
# the optimizer's fp32 state 256 MiB. Recorded from the start, or its trace rolled over
# (max_entries) so that the buffers are blocks from before it, with their frames.
def megatron(recorded):
    MEG = "/workspace/Megatron-LM/megatron/"
    setup = [frame("get_model", MEG + "training/training.py", 1020),
             frame("setup_model_and_optimizer", MEG + "training/training.py", 1170),
             frame("pretrain", MEG + "training/training.py", 640), frame("<module>", "/workspace/pretrain_gpt.py", 310)]
    def buffer(line):
        return python_stack([frame("__init__", MEG + "core/distributed/param_and_grad_buffer.py", line),
                             frame("_allocate_buffers_for_parameters", MEG +
                                   "core/distributed/distributed_data_parallel.py", 280),
                             frame("__init__", MEG + "core/distributed/distributed_data_parallel.py", 330)] + setup,
                            RECORDER + ALLOCATOR + op("zeros"))
    d = Trace(BASE)
    d.add("segment_alloc", BASE, SEG, LOOP)
    weights = [d.alloc(16 * MiB, python_stack([frame("__init__", MEG + "core/tensor_parallel/layers.py", 760),
                                               frame("__init__", MEG + "core/transformer/mlp.py", 90),
                                               frame("__init__", MEG + "core/models/gpt/gpt_model.py", 120),
                                               frame("model_provider", "/workspace/pretrain_gpt.py", 80)] + setup,
                                              RECORDER + ALLOCATOR + op("empty"))) for _ in range(4)]
    d.alloc(64 * MiB, buffer(1184))
    d.alloc(128 * MiB, buffer(1190))
    for w in weights:  # the old storage goes at `del old_param_data`, a later line (context="all" records it)
        size, _ = d.live.pop(w)
        for action in ("free_requested", "free_completed"):
            d.add(action, w, size, buffer(1225))
    made = len(d.entries)
    acts = [d.alloc(16 * MiB, forward_stack(k, "mm")) for k in range(6)]
    for a in acts:
        tmp = d.alloc(8 * MiB, backward_stack("MmBackward0", "mm"))
        d.free(a)
        d.free(tmp)
    for k in range(8):
        d.alloc(32 * MiB, optimizer_stack(True))
    blocks = d.blocks(SEG)
    entries = d.entries if recorded else d.entries[made:]
    return {"segments": [segment(0, BASE, blocks, expandable=False)], "device_traces": [entries],
            "allocator_settings": settings(False), "external_annotations": []}


for recorded in (True, False):
    p, rep = run("report", "--json", write("megatron-%d" % recorded, megatron(recorded)))
    dev = rep["devices"][0] if rep else {}
    comp = {k: v for k, v in dev.get("composition_at_peak", {}).items() if v and k != "reserved_unallocated"}
    ok(comp == {"params": 64 * MiB, "grads": 128 * MiB, "optimizer": 256 * MiB},
       "Megatron's flat buffers (%s): grad_data is gradients, param_data parameters" %
       ("made while recording" if recorded else "made before the trace, their frames kept"), comp)
# PyTorch's DistributedDataParallel: as it wraps the model, its Reducer makes a flat
# bucket for the gradients (torch/csrc/distributed/c10d/reducer.cpp's initialize_buckets,
# under _ddp_init_helper in torch/nn/parallel/distributed.py), kept for the whole run:
# gradients, though made before the first forward and never freed
def ddp(frames):
    setup = [frame("__init__", TORCH + "nn/parallel/distributed.py", 870),
             frame("main", "/home/me/train.py", 40), frame("<module>", "/home/me/train.py", 151)]
    d = Trace(BASE)
    d.add("segment_alloc", BASE, SEG, LOOP)
    for _ in range(4):
        d.alloc(16 * MiB, python_stack([frame("__init__", TORCH + "nn/modules/linear.py", 106),
                                        frame("__init__", "/home/me/model.py", 12),
                                        frame("main", "/home/me/train.py", 30)], RECORDER + ALLOCATOR + op("empty")))
    py = [frame("_ddp_init_helper", TORCH + "nn/parallel/distributed.py", 1180)] + setup
    cpp = [frame("c10d::Reducer::initialize_buckets(std::vector<std::vector<unsigned long, "
                 "std::allocator<unsigned long> >, std::allocator<std::vector<unsigned long, "
                 "std::allocator<unsigned long> > > >)"),
           frame("c10d::Reducer::Reducer(std::vector<at::Tensor, std::allocator<at::Tensor> >, ...)")]
    d.alloc(64 * MiB, python_stack(py if "python" in frames else [], RECORDER + ALLOCATOR + op("empty") +
                                   (cpp if "cpp" in frames else [])))
    acts = [d.alloc(16 * MiB, forward_stack(k, "mm")) for k in range(4)]
    for a in acts:
        tmp = d.alloc(8 * MiB, backward_stack("MmBackward0", "mm"))
        d.free(a)
        d.free(tmp)
    return {"segments": [segment(0, BASE, d.blocks(SEG), expandable=False)], "device_traces": [d.entries],
            "allocator_settings": settings(False), "external_annotations": []}


for frames in ("python+cpp", "python", "cpp"):
    p, rep = run("report", "--json", write("ddp-" + frames, ddp(frames)))
    comp = {k: v for k, v in (rep["devices"][0] if rep else {}).get("composition_at_peak", {}).items()
            if v and k != "reserved_unallocated"}
    ok(comp.get("grads") == 64 * MiB and comp.get("params") == 64 * MiB,
       "PyTorch DDP's gradient bucket (%s frames): gradients, the model's weights parameters" % frames, comp)

p, _ = run("report", write("training-text", training()))
ok(re.search(r"grads +128\.00 MiB +\(frames, sure\)", p.stdout) and
   re.search(r"optimizer +256\.00 MiB +\(frames, sure\)", p.stdout),
   "the text says the source and how sure", p.stdout[:800])

# ---- 3. stacks a person can read ----
lines = p.stdout.splitlines()
plumbing = ("torch::unwind", "CapturedTraceback", "gather_with_cpp", "DeviceCachingAllocator", "_PyEval_EvalFrameDefault",
            "wrap_kernel_functor_unboxed_", "c10::StorageImpl", "__libc_start_main", "Py_BytesMain", "at::_ops::")
ok(not [l for l in lines if any(x in l for x in plumbing)] and max(len(l) for l in lines) < 160,
   "text: no recorder, allocator, dispatcher or interpreter frames; no line longer than 160",
   [l for l in lines if any(x in l for x in plumbing) or len(l) >= 160][:5])
i = next((k for k, l in enumerate(lines) if "in 9 allocations from 2 stacks: train_step (train.py:88)" in l), None)
ok(i is not None and [l.strip() for l in lines[i + 1:i + 9]] == [
    "_init_group (adamw.py:160)", "step (adamw.py:220)", "train_step (train.py:88)", "train (train.py:120)",
    "main (train.py:140)", "<module> (train.py:151)", "at::native::zeros_like_out_cuda",
    "torch::autograd::THPVariable_zeros_like"],
   "text: the optimizer state's row, grouped by the first frame of the user's code: the Python frames innermost "
   "first with file:line (the ones after _start included), then the operation", lines[i:i + 10] if i else lines)
ok(any(l.endswith("128.00 MiB in 4 allocations: allocated before recording started (the model's parameters and "
                  "buffers, typically)") for l in lines), "text: blocks from before recording say so")
ok(any("(no Python frames: autograd's engine thread)" in l for l in lines) and
   any(l.endswith(": torch::autograd::AccumulateGrad::apply") for l in lines),
   "text: a gradient's stack says autograd's engine made it, and which node")
ok(len(lines) < 80, "text: the whole report in fewer than 80 lines", len(lines))
p, _ = run("report", "--frames=all", write("training-all", training()))
ok("torch::unwind::unwind()" in p.stdout and "wrap_kernel_functor_unboxed_<c10::impl::detail::" in p.stdout and
   "/opt/conda/lib/python3.11/site-packages/torch/optim/adamw.py:160" in p.stdout,
   "--frames=all: every frame, names and paths in full")
deep = write("deep", training(iterations=1, deep=300, backward=False, optimizer=False))
p, rep = run("report", "--json", deep)
g = [x for x in (rep or {}).get("top_at_peak", []) if x["where"] == "recurse (model.py:77)"]
ok(g and len(g[0]["frames"]) > 300 and g[0]["frames"][-1]["function"] == "<module>" and
   g[0]["view"][:2] == ["recurse (model.py:77) \u00d7300", "forward (model.py:120)"] and
   g[0]["view"][-3:-2] == ["<module> (train.py:151)"],
   "a stack of 330 frames keeps its outermost (train, main, <module>); a recursion reads as one line",
   g and (len(g[0]["frames"]), g[0]["view"]))
# a torch.compile'd forward: its buffers are made by Inductor's generated wrapper (call in
# /tmp/torchinductor_<user>/<xx>/c<hash>.py, buf3 = empty_strided_cuda(...)) under AOTAutograd
# and dynamo, or by an FX GraphModule's generated forward (<eval_with_key>.N): neither is the
# user's code, which is the model's forward that was compiled and the loop that called it
GEN = "/tmp/torchinductor_me/xk/cxkq3b7yzr6o2ahbd4xv5fbmrpj5t3b6kc6cw4ztx2ddhq4uy5l3q.py"
AOT = [frame("run", TORCH + "_inductor/output_code.py", 460), frame("__call__", TORCH + "_inductor/output_code.py", 584),
       frame("call_func_at_runtime_with_args", TORCH + "_functorch/_aot_autograd/utils.py", 126),
       frame("runtime_wrapper", TORCH + "_functorch/_aot_autograd/runtime_wrappers.py", 343),
       frame("forward", TORCH + "_functorch/_aot_autograd/runtime_wrappers.py", 1790),
       frame("apply", TORCH + "autograd/function.py", 575), frame("_fn", TORCH + "_dynamo/eval_frame.py", 838)]
d = Trace(BASE)
for k in range(4):
    d.alloc(24 * MiB, python_stack([frame("call", GEN, 412 + 9 * k)] + AOT + [frame("forward", "/home/me/model.py", 120)]
                                   + MODULE + LOOP, RECORDER + ALLOCATOR + op("empty_strided")))
for k in range(2):
    d.alloc(8 * MiB, python_stack([frame("forward", "<eval_with_key>.12", 33 + k), frame("_call_impl", TORCH +
                                   "fx/graph_module.py", 393)] + [frame("forward", "/home/me/model.py", 120)] + MODULE
                                  + LOOP, RECORDER + ALLOCATOR + op("mm")))
compiled = {"segments": [segment(0, BASE, d.blocks(SEG), expandable=False)], "device_traces": [d.entries],
            "allocator_settings": settings(False)}
p, rep = run("report", "--json", write("compiled", compiled))
g = (rep or {}).get("top_at_peak", [])
ok(len(g) == 6 and {x["where"] for x in g} == {"forward (model.py:120)"} and
   all(x["view"][2] == "forward (model.py:120)" and
       (x["view"][:2] == ["call (cxkq3b7yzr6o2ahbd4xv5fbmrpj5t3b6kc6cw4ztx2ddhq4uy5l3q.py:%d)" % (412 + 9 * k),
                          "apply (function.py:575)"] or
        x["view"][:2] == ["forward (<eval_with_key>.12:%d)" % (29 + k), "_call_impl (graph_module.py:393)"])
       for k, x in enumerate(sorted(g, key=lambda x: x["view"][0]))),
   "torch.compile: buffers made by Inductor's generated code or an FX graph read as the model's forward that was "
   "compiled (the generated line shown first in the stack)", [(x["where"], x["view"][:3]) for x in g])
p, _ = run("report", write("compiled-text", compiled))
ok("112.00 MiB in 6 allocations from 6 stacks: forward (model.py:120)" in p.stdout,
   "torch.compile: the text groups the compiled forward's buffers by the model's line", p.stdout[:1500])
p, _ = run("export", "--format=folded", write("training-folded", training()))
ok("<module> (train.py:151);main (train.py:140);train (train.py:120);train_step (train.py:88);step (adamw.py:220);"
   "_init_group (adamw.py:160);torch::autograd::THPVariable_zeros_like;at::native::zeros_like_out_cuda 268435456"
   in p.stdout.splitlines() and "[allocated before recording] 134217728" in p.stdout.splitlines(),
   "folded: root first, file:line kept, the plumbing left out", p.stdout)

# ---- 5. iterations from the external annotations; Perfetto ----
path = write("leak", training(iterations=5, leak=MiB))
p, rep = run("report", "--json", path)
ok(rep and rep["iterations"] == {"boundary": "range Optimizer.step#AdamW.step", "count": 5} and
   [(l["growth_bytes_per_iteration"], l["where"]) for l in rep["leaks"]] == [(MiB, "train_step (train.py:95)")],
   "growth per iteration: the optimizer step's annotation marks the iterations; the loop's 1 MiB a step found",
   rep and (rep["iterations"], rep["leaks"]))
# the leaking stack held 3 MiB before it began to grow: a leak's bytes are what it holds at
# the last boundary (3 MiB and five steps' 1 MiB), not its growth (4 MiB over four boundaries)
held = training(iterations=5, leak=MiB)
first = dict(next(e for e in held["device_traces"][0] if e["action"] == "alloc" and e["size"] == MiB),
             addr=0x7f00f0000000 - 4 * MiB, size=3 * MiB)
held["device_traces"][0].insert(1, dict(first, time_us=held["device_traces"][0][0]["time_us"]))
for action in ("free_requested", "free_completed"):
    held["device_traces"][0].append(dict(first, action=action, time_us=held["device_traces"][0][-1]["time_us"] + 1))
p, rep = run("report", "--json", write("leak-held", held))
ok(rep and [(l["growth_bytes_per_iteration"], l["iterations"], l["bytes"], l["where"]) for l in rep["leaks"]] ==
   [(MiB, 4, 8 * MiB, "train_step (train.py:95)")],
   "a leak whose stack held memory before it grew: its growth, its run and what it held at the last boundary",
   rep and rep["leaks"])
p, rep = run("report", "--json", write("leak-plain", training(iterations=5, leak=MiB, annotated=False)))
ok(rep and rep["iterations"] == {"boundary": "the optimizer's step (from the stacks)", "count": 5} and
   [l["growth_bytes_per_iteration"] for l in rep["leaks"]] == [MiB],
   "growth per iteration without annotations: the optimizer's step, read from the stacks, marks the iterations",
   rep and (rep["iterations"], rep["leaks"]))
p, rep = run("report", "--json", write("two-steps", training(iterations=2, annotated=False)))
ok(rep and rep["iterations"] == {"boundary": "none found: the stacks show 2 optimizer steps, growth needs 3",
                                 "count": 0}, "two steps: too few for growth, said", rep and rep["iterations"])
out = os.path.join(TMP, "training.json")
p, _ = run("export", "--format=perfetto", "-o", out, write("perfetto", training()))
ev = json.load(open(out))["traceEvents"] if p.returncode == 0 else []
counters = [e for e in ev if e.get("ph") == "C"]
changes = sum(1 for e in training()["device_traces"][0] if e["action"] in ("alloc", "free_completed")) + 4
ok(len(counters) >= changes and counters[0]["args"]["params"] > 0 and
   max(sum(c["args"].values()) for c in counters) == 576 * MiB,
   "perfetto: a sample at every change, the blocks from before recording included, the peak exact",
   (len(counters), changes, counters[:1]))
ends = [e for e in ev if e.get("ph") in ("E", "e")]
ok(ends and all(e.get("name") for e in ends), "perfetto: every end event named", ends[:2])

# ---- 5. no time_us: event order, said ----
path = write("untimed", training(timed=False))
p, rep = run("report", "--json", path)
ok(rep and rep["times"] == "order", "no time_us: the JSON says times are entries' order", rep and rep["times"])
p, _ = run("report", path)
ok("it has no times, so entries are numbered in order" in p.stdout and re.search(r"peak 576\.00 MiB allocated at "
   r"entry \d+;", p.stdout) and " s;" not in p.stdout.splitlines()[3], "no time_us: the text says so",
   p.stdout[:400])
out = os.path.join(TMP, "untimed.viz.pickle")
p, _ = run("export", "--format=memviz", "-o", out, path)
viz = pickle.load(open(out, "rb")) if p.returncode == 0 else {"device_traces": [[{"time_us": 0}]]}
ok(not any("time_us" in e for e in viz["device_traces"][0]), "no time_us: the memviz export makes none up")

# a snapshot taken without _record_memory_history: no entries, blocks without frames (as
# torch.cuda.memory._snapshot() gives then; segments made while it was on keep theirs);
# one moment, not a timeline, and no composition to infer
bare = training(timed=False)
bare["segments"][0]["frames"] = next(e["frames"] for e in bare["device_traces"][0] if e["action"] == "alloc")
bare["device_traces"] = [[] for _ in bare["device_traces"]]
for s in bare["segments"]:
    for b in s["blocks"]:
        b["frames"] = []
path = write("no-history", bare)
p, rep = run("report", "--json", path)
ok(rep and rep["times"] == "none", "no history: the JSON says there are no times", rep and rep["times"])
comp = rep and {k: v for k, v in rep["devices"][0]["composition_at_peak"].items() if v and k != "reserved_unallocated"}
ok(comp and list(comp) == ["other"], "no history: nothing to infer a composition from", comp)
p, _ = run("report", path)
ok("with no trace: taken without memory history" in p.stdout and re.search(r"allocated at the snapshot;", p.stdout)
   and "taken without torch.cuda.memory._record_memory_history" in p.stdout
   and "allocated before recording started" not in p.stdout, "no history: the text says so", p.stdout[:900])

# What the import holds while it reads: a real snapshot's stacks are lists of 80 to 110
# frame dicts that the whole file shares (pickle's memo), one list per allocation (its
# free shares it), and the pickler appends entries in batches of a thousand. A batch must
# not hold every entry's frames: with a new value for each frame fetched from the memo,
# that made a real 3.2 MB snapshot's import peak at 17 MiB.
def batch_snapshot(allocations):
    stacks = [forward_stack(k, ["mm", "gelu", "softmax", "add"][k % 4], depth=8 + k % 6) for k in range(40)]
    base, entries = 0x7f0000000000, []
    for i in range(allocations):
        frames, a = list(stacks[i % 40]), base + (i % 64) * MiB
        for t, action in enumerate(("alloc", "free_requested", "free_completed")):
            entries.append({"action": action, "addr": a, "size": MiB, "stream": 0, "time_us": 3 * i + t,
                            "frames": frames})
    blocks = [block(base + k * MiB, MiB, MiB, "active_allocated", list(stacks[k % 40])) for k in range(64)]
    return {"segments": [segment(0, base, blocks, expandable=False)], "device_traces": [entries],
            "allocator_settings": settings(False), "external_annotations": []}


held = []
for n in (40, 1000):
    p = subprocess.run([os.path.join(B, "bench/import_bench"), write("batch-%d" % n, batch_snapshot(n))],
                       capture_output=True, text=True)
    held.append(json.loads(p.stdout)["held_peak"] if p.returncode == 0 else None)
per = (held[1] - held[0]) / 1000 if None not in held else None  # pickle appends a thousand at a time
ok(per is not None and per < 420, "the import holds under 420 bytes per trace entry of a batch (339 measured; each "
   "entry's frames kept as a list until its batch is read: 542)", (held, per))


# A snapshot written by torch::cuda::_memory_snapshot_pickled (C++ libtorch, R's torch) puts
# a device's whole trace in one APPENDS: its entries are read a thousand at a time all the
# same, not held to the end of the list (561 bytes an entry, 13 times a Python-written one's)
held = []
for n in (40, 3000):
    path = os.path.join(TMP, "jit-%d.pickle" % n)
    with open(path, "wb") as f:
        f.write(jit_dumps(batch_snapshot(n)))
    p = subprocess.run([os.path.join(B, "bench/import_bench"), path], capture_output=True, text=True)
    held.append(json.loads(p.stdout)["held_peak"] if p.returncode == 0 else None)
per = (held[1] - held[0]) / 2960 if None not in held else None
_, want = run("report", "--json", write("jit-python", batch_snapshot(3000)))
_, got = run("report", "--json", os.path.join(TMP, "jit-3000.pickle"))
ok(per is not None and per < 200 and want and got and got["devices"] == want["devices"],
   "a snapshot written by C++ (one APPENDS per list) reads as the same file written by Python, its entries not held "
   "to the end of their list", (held, per))


def held_peak(name, snap):
    p = subprocess.run([os.path.join(B, "bench/import_bench"), write(name, snap)], capture_output=True, text=True)
    return json.loads(p.stdout)["held_peak"] if p.returncode == 0 else None


def per_item(name, make, counts=(40, 1000)):
    held = [held_peak("%s-%d" % (name, n), make(n)) for n in counts]
    return None if None in held else (held[1] - held[0]) / (counts[1] - counts[0])


# A batch of a thousand segments: each is read when its dict is, not when the batch is,
# and its blocks, list of blocks and pool id become tokens: the memo keeps every value of
# the file to its end (a real snapshot of 1,722 segments held 2.6 MB, now 0.55 MB).
def segments_snapshot(n):
    base, segs = 0x7f0000000000, []
    for i in range(n):
        a = base + i * 4 * MiB
        segs.append(segment(0, a, [block(a, MiB, MiB - 512, "active_allocated", []),
                                   block(a + MiB, MiB, 0, "inactive", []),
                                   block(a + 2 * MiB, 2 * MiB, 2 * MiB, "active_allocated", [])], expandable=False))
    return {"segments": segs, "device_traces": [[]], "allocator_settings": settings(False)}


per = per_item("segments", segments_snapshot)
ok(per is not None and per < 200, "the import holds under 200 bytes per segment of three blocks (48 measured; "
   "1,952 when a batch held its segments' dicts and the memo every block, list and pool id)", per)


# A real snapshot writes each frame's file name and function anew, not through the memo
# (one file name 4,089 times in 3 MB), and the memo keeps every copy to the end of the
# file: equal strings are one value.
def fresh_strings(n):
    def fresh(s):
        return "".join(list(s))  # a new object: pickle's memo goes by identity
    entries = []
    for i in range(n):
        frames = [{"name": fresh("forward"), "filename": fresh("/home/me/model.py"), "line": 30 + i % 3},
                  {"name": fresh("train_step"), "filename": fresh("/home/me/train.py"), "line": 7}]
        a = 0x7f0000000000 + (i % 64) * MiB
        entries += [{"action": "alloc", "addr": a, "size": MiB, "stream": 0, "time_us": 2 * i, "frames": frames},
                    {"action": "free_completed", "addr": a, "size": MiB, "stream": 0, "time_us": 2 * i + 1,
                     "frames": frames}]
    return {"segments": [], "device_traces": [entries], "allocator_settings": settings(False)}


per = per_item("fresh-strings", fresh_strings, (1000, 3000))
ok(per is not None and per < 100, "the import holds under 100 bytes per allocation whose frames' strings are all "
   "written anew (0 measured; 288 when the memo kept each copy)", per)

# The segments read as their dicts are: a dict elsewhere with a segment's keys is not one
# (nor refused for them), and one block dict in two segments counts in both, as segsum
# counts it (an older block gives no address: it is where the segment's blocks before it end).
S, pool = 0x7f6000000000, (1, 5)
shared = {"size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated", "frames": []}
segs = [segment(0, S + k * 64 * MiB, [shared], expandable=False) for k in range(3)]
segs[2]["blocks"] = segs[0]["blocks"]
for g in segs:
    g["segment_pool_id"] = pool
snap = {"segments": segs, "device_traces": [[]], "allocator_settings": settings(False),
        "user_metadata": {"total_size": "not a number", "blocks": "none"}}
path = write("shared-block", snap)
p, rep = run("report", "--json", path)
fe = rep and rep["devices"][0]["fragmentation"]["at_exit"]
ok(p.returncode == 0 and fe and (fe["reserved_bytes"], fe["requested_bytes"], fe["segments"]) ==
   (segsum(snap, 0)["total_reserved"], segsum(snap, 0)["total_allocated"], 3) == (6 * MiB, 6 * MiB, 3),
   "a block, a list of blocks in several segments count in each; a dict elsewhere with a segment's keys is left alone",
   (p.stderr, fe))
out = os.path.join(TMP, "shared-block.viz.pickle")
p, _ = run("export", "--format=memviz", "-o", out, path)
viz = pickle.load(open(out, "rb")) if p.returncode == 0 else {"segments": []}
ok([(g["address"], g["segment_pool_id"]) for g in viz["segments"]] == [(S + k * 64 * MiB, pool) for k in range(3)],
   "one pool id in several segments: each keeps it", viz["segments"])

# A segment dict made by MARK ... DICT (hand-written; Python's own pickler writes
# EMPTY_DICT and SETITEMS): read as its dict is, it became a token before the reader
# held it, was given back and lost (no segment, nothing allocated)
raw = (b"\x80\x04}(\x8c\x08segments]((\x8c\x06deviceK\x00\x8c\x07addressJ\x00\x00\x00\x10\x8c\x0atotal_size"
       b"J\x00\x00\x20\x00\x8c\x06blocks](\x8c\x04sizeJ\x00\x00\x20\x00\x8c\x0erequested_sizeJ\x00\x00\x20\x00"
       b"\x8c\x05state\x8c\x10active_allocateddadeu.")
path = os.path.join(TMP, "dict-opcode.pickle")
with open(path, "wb") as f:
    f.write(raw)
p, rep = run("report", "--json", path)
fe = rep and rep["devices"] and rep["devices"][0]["fragmentation"]["at_exit"]
ok(fe and (fe["reserved_bytes"], fe["requested_bytes"], fe["segments"]) ==
   tuple(segsum(pickle.loads(raw), 0)[k] for k in ("total_reserved", "total_allocated", "segments")) == (2 * MiB,) * 2 +
   (1,), "a segment made by the DICT opcode is read", (p.stderr, fe))

# torch.cuda.memory_snapshot() (a bare list of segments, never a trace) taken with memory
# history on: the blocks made while it was on keep their frames (a layer's outputs a
# module's forward made, 48 MiB), the model's weights made before it have none (128
# MiB); no entries, yet not "taken without memory history": the frames are read, the
# frameless blocks are the model's as in any snapshot
S = 0x7f6000000000
blocks = [block(S + k * 32 * MiB, 32 * MiB, 32 * MiB, "active_allocated", []) for k in range(4)]
blocks += [block(S + 128 * MiB + k * 16 * MiB, 16 * MiB, 16 * MiB, "active_allocated", forward_stack(k, "mm"))
           for k in range(3)]
blocks.append(block(S + 176 * MiB, 16 * MiB, 0, "inactive", []))
path = write("bare-list-history", [segment(0, S, blocks, expandable=False)])
p, rep = run("report", "--json", path)
comp = rep and {k: v for k, v in rep["devices"][0]["composition_at_peak"].items() if v and k != "reserved_unallocated"}
ok(rep and rep["times"] == "none" and comp == {"params": 128 * MiB, "activations": 48 * MiB},
   "a bare list taken with history on: its blocks' frames read, the frameless ones the model's", comp)
p, _ = run("report", path)
ok("taken without memory history" not in p.stdout and "taken without torch.cuda.memory._record_memory_history"
   not in p.stdout and "allocated before recording started (the model's parameters" in p.stdout,
   "a bare list taken with history on: the text does not say it was taken without", p.stdout[:900])
# A job on cuda:1 whose device_traces hold a list for cuda:0 with only a snapshot entry
# (as a public diffusion job's does): cuda:0 had nothing allocated, and the text says so
# in one line rather than a peak of 0 B and an empty composition.
one = inference()
one["segments"] = [dict(s, device=1) for s in one["segments"]]
one["device_traces"] = [[{"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": T0}],
                        one["device_traces"][0]]
p, _ = run("report", write("cuda1", one))
ok("device 0 (cuda:0 (PyTorch snapshot), capacity unknown): nothing allocated\n\ndevice 1" in p.stdout and
   "peak 0 B" not in p.stdout, "a device with nothing allocated: one line", p.stdout[:600])
# Several ranks' snapshots (torchtitan writes rank{N}_memory_snapshot.pickle into one
# folder): a directory of them is read (it asked for .trace files), and each row's rank is
# the one its file name gives, not its place in the arguments (a shell's rank0, rank1,
# rank10 order, or rank0, rank10, rank1, made rank10's snapshot rank 1 or 2)
ranks = os.path.join(TMP, "ranks")
os.makedirs(ranks, exist_ok=True)
for r, snap in ((0, inference(passes=1)), (1, training()), (10, expandable_oom())):
    with open(os.path.join(ranks, "rank%d_memory_snapshot.pickle" % r), "wb") as f:
        pickle.dump(snap, f, protocol=4)
_, one = run("report", "--json", os.path.join(ranks, "rank10_memory_snapshot.pickle"))
want = {"0": "rank0_memory_snapshot.pickle", "1": "rank1_memory_snapshot.pickle", "10": "rank10_memory_snapshot.pickle"}
for args in ([ranks], [os.path.join(ranks, "rank%d_memory_snapshot.pickle" % r) for r in (0, 10, 1)]):
    p, rep = run("report", "--json", *args)
    got = rep and {r["rank"]: os.path.basename(r["trace"]) for r in rep["ranks"]}
    peak10 = rep and [r["peak_allocated_bytes"] for r in rep["ranks"] if r["rank"] == "10"]
    ok(p.returncode == 0 and got == want and one and peak10 == [max(d["peak_allocated_bytes"] for d in one["devices"])],
       "several snapshots (%s): each rank from its file's name" % ("a directory" if len(args) == 1 else "files"),
       (p.stderr, got, peak10))

# memtap diff of two snapshots reads its stacks as the report does: the user's frames first,
# the recorder's and allocator's plumbing left out (it printed every frame in full, 600
# characters of a kernel's template name among them); --frames=all prints them all
a, b = write("diff-a", training()), write("diff-b", training(leak=4 * MiB))
p, _ = run("diff", a, b)
rows = p.stdout.split("live at the peak, by stack, biggest changes first:\n")[-1]
ok(p.returncode == 0 and re.match(r"  \+8\.00 MiB  \(0 B -> 8\.00 MiB\)\n      train_step \(train\.py:95\)\n", rows) and
   "torch::unwind" not in p.stdout and "+ " in rows and "frames of the allocator" in rows,
   "memtap diff: a stack reads as in the report", p.stdout[-1500:])
p, _ = run("diff", "--frames=all", a, b)
ok(p.returncode == 0 and "      torch::unwind::unwind() (??:0)" in p.stdout, "memtap diff --frames=all: every frame",
   p.stdout[-800:])
# blocks made before recording say what they are, as in the report (two public compiled
# forwards' diff led with '+12.21 GiB (no frames)': the bigger model's parameters)
bigger = training()
bigger["segments"].append(segment(0, 0x7c0000000000, [block(0x7c0000000000, 32 * MiB, 32 * MiB, "active_allocated",
                                                            [])], expandable=False))
b = write("diff-bigger", bigger)
p, _ = run("diff", a, b)
rows = p.stdout.split("live at the peak, by stack, biggest changes first:\n")[-1]
ok(p.returncode == 0 and rows.startswith("  +32.00 MiB  (128.00 MiB -> 160.00 MiB)\n      allocated before recording "
                                         "started (the model's parameters and buffers, typically)\n") and
   "(no frames)" not in p.stdout, "memtap diff: blocks made before recording say so, in the report's words", rows[:400])
p, d = run("diff", "--json", a, b)
row = (d or {}).get("at_peak", [{}])[0]
ok(row.get("delta_bytes") == 32 * MiB and row.get("frames") == [] and
   row.get("before_recording") == "allocated before recording started (the model's parameters and buffers, typically)",
   "memtap diff --json: such a row says it too", row)

# PyTorch keeps external annotations in a ring buffer of their own, which outlasts the
# entries': a public training snapshot held ten optimizer steps' ranges from 5.65 s before
# its 0.13 s of entries. Ranges that ended before the first entry cover nothing the trace
# holds: the report is the one without them (it had the peak 5 s late, the time axis drawn
# flat before it, and their zero_grads as iterations with nothing in them), and the
# Perfetto export leaves them out.
snap = training(iterations=2)
first = snap["device_traces"][0][0]["time_us"]
early = []
for k in range(4):
    at = first - 5000000 + k * 400000
    early += [{"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": at},
              {"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": at + 200000},
              {"stage": "START", "name": "Optimizer.zero_grad#AdamW.zero_grad", "device": 0, "time_us": at + 210000},
              {"stage": "END", "name": "Optimizer.zero_grad#AdamW.zero_grad", "device": 0, "time_us": at + 220000}]
_, plain = run("report", "--json", write("notes-plain", snap))
p, kept = run("report", "--json", write("notes-early", dict(snap, external_annotations=early +
                                                             snap["external_annotations"])))
same = plain and kept and all(plain[k] == kept[k] for k in ("devices", "iterations", "leaks", "top_at_peak"))
ok(same and kept["devices"][0]["peak_time_ns"] < 10 ** 6, "annotation ranges that ended before the first entry are "
   "left out: the report is the one without them, the peak within the entries' millisecond",
   (kept and kept["devices"][0]["peak_time_ns"], kept and kept["iterations"], plain and plain["iterations"]))
out = os.path.join(TMP, "notes-early.pf.json")
p, _ = run("export", "--format=perfetto", "-o", out, os.path.join(TMP, "notes-early.pickle"))
slices = p.returncode == 0 and [e for e in json.load(open(out))["traceEvents"] if e.get("ph") in ("b", "e", "B", "E")]
ok(slices is not False and len(slices) == len(snap["external_annotations"]),
   "the Perfetto export has the ranges inside the trace only", slices and len(slices))
done()
