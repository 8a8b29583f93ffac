"""memtap report's "what to change so that it fits", in a closed loop on simtrain: a job
runs out of memory under a cap; the report names the cause; each change it lists that
simtrain can make is made, and the job runs again under the same cap: where the report
said it fits, it runs through with its peak allocated within 5% of the prediction and
reserved within 10%; where it said it does not, it fails again."""
import json
import os
import pickle
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests/analyze"))
from tap import done, ok, scratch  # noqa: E402
import snapshots as snap  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
CAP = os.path.join(os.environ["MT_SRCDIR"], "lua/cap.lua")
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(B, "tools/simgpu/.libs"), SIMGPU_MEM="80GiB")
TMP = scratch("diagnose")
GiB = 2**30
GPT2 = ["--preset", "gpt2-small"]
# the same model and setup for the planner (report --plan)
PLAN = "--layers 12 --hidden 768 --heads 12 --ffn 3072 --vocab 50257 --seq 1024 --micro-batch 8 --optimizer adamw"
runs = 0


def job(cap, args, caching=None, iters=3, context="0", policy="native"):
    """simtrain under memtap with the cap; returns (failed, trace, report's JSON, the peak
    its caching allocator reserved)."""
    global runs
    runs += 1
    trace = os.path.join(TMP, "job%d.trace" % runs)
    cmd = [MEMTAP, "run", "-q", "-o", trace, "--policy", CAP]
    if caching is not None:
        cmd += ["--allocator", "caching", "-O", "alloc_policy=" + policy]
        cmd += ["-O", "alloc_conf=" + caching] if caching else []
    p = subprocess.run(cmd + ["--", SIMTRAIN] + GPT2 + ["--iters", str(iters)] + args, capture_output=True,
                       text=True, env=dict(ENV, MEMTAP_CAP=cap, SIMGPU_CONTEXT_MEM=context), timeout=300)
    rep = json.loads(subprocess.run([MEMTAP, "report", "--json", trace], capture_output=True, text=True).stdout)
    return p.returncode != 0, trace, rep, rep["devices"][0]["peak_reserved_bytes"]


def diagnosis(trace, plan=PLAN, extra=()):
    p = subprocess.run([MEMTAP, "report", "--json", trace] + (["--plan", plan] if plan else []) + list(extra),
                       capture_output=True, text=True)
    return json.loads(p.stdout)["diagnosis"] if p.returncode == 0 else p.stderr


def simtrain_args(remedy, args):
    """The change as simtrain's options, over the run's own; None where simtrain cannot make it."""
    words = remedy["options"].split()
    out = list(args)
    if remedy["kind"] in ("allocator", "fsdp", "lora"):  # simtrain has neither FSDP nor adapters
        return None
    for flag, value in zip(words[::2], words[1::2]):
        key = {"--micro-batch": "--batch", "--recompute": "--recompute", "--precision": "--precision",
               "--zero": "--zero", "--gpus-per-node": "--dp", "--seq": "--seq"}.get(flag)
        if not key or (key == "--precision" and value not in ("fp32", "bf16", "fp16")):  # simtrain has no autocast
            return None
        if key in out:
            del out[out.index(key):out.index(key) + 2]
        out += [key, value]
    return out


def close_loop(name, cap, args, d, caching=None, context="0", policy="native"):
    """Each change simtrain can make, made: 'fits' right, the peaks as predicted."""
    tried = 0
    for m in d["remedies"]:
        again = simtrain_args(m, args) if m["kind"] != "leak" else [a for a in args if a not in ("--leak", "300M")]
        conf = caching
        if m["kind"] == "allocator":  # the change's setting, or none ("nothing")
            again, conf = args, m["options"]
        if again is None:
            continue
        tried += 1
        failed, _, rep, reserved = job(cap, again, conf, iters=10 if m["kind"] == "leak" else 3, context=context,
                                       policy=policy)
        peak = rep["devices"][0]["peak_allocated_bytes"]
        if not m["fits"]:
            ok(failed, "%s: %s said not to fit, and does not" % (name, m["change"]), (m, peak))
            continue
        said = "%s: %s fits as said, peak %.2f GiB allocated (predicted %.2f)" % (
            name, m["change"], peak / GiB, m["allocated_bytes"] / GiB)
        close = abs(peak - m["allocated_bytes"]) <= 0.05 * peak
        if reserved:  # a caching allocator's
            close = close and abs(reserved - m["reserved_bytes"]) <= 0.10 * reserved
            said += ", %.2f GiB reserved (predicted %.2f)" % (reserved / GiB, m["reserved_bytes"] / GiB)
        ok(not failed and close, said, (m, peak, reserved, failed))
    return tried


# ---- the step is bigger than the device, in the first iteration ----
failed, trace, rep, _ = job("10GiB", [])
truth = job("80GiB", [])[2]["devices"][0]["peak_allocated_bytes"]
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and len(d) == 1 else {}
ok(failed and d.get("cause") == "step" and not d["step_finished"] and d["need"] == "estimated"
   and abs(d["need_bytes"] - truth) <= 0.05 * truth,
   "an OOM in iteration 1 of gpt2-small on 10 GiB: the step is too big, its whole need estimated within 5%% "
   "(%.2f GiB, the uncapped run %.2f GiB)" % (d.get("need_bytes", 0) / GiB, truth / GiB), d)
kinds = {m["kind"] for m in d.get("remedies", []) if m["fits"]}
ORDER = ["allocator", "leak", "checkpoint", "graph_pools", "micro_batch", "recompute", "precision", "optimizer",
         "offload", "zero", "fsdp", "lora", "sequence", "gpus"]
ok({"micro_batch", "recompute"} <= kinds and [m["kind"] for m in d["remedies"]] == sorted(
    [m["kind"] for m in d["remedies"]], key=ORDER.index),
   "...the changes that fit: a smaller micro-batch and recomputation, cheapest first", d.get("remedies"))
ok(close_loop("iteration 1", "10GiB", [], d) >= 3, "...each made, three at least")
text = subprocess.run([MEMTAP, "report", trace, "--plan", PLAN], capture_output=True, text=True).stdout
ok("the step needs more than the device" in text and "micro-batch 4 instead of 8" in text,
   "the text says the cause and the change", text.split("what to change")[-1])
plain = diagnosis(trace, plan=None)
text = subprocess.run([MEMTAP, "report", trace], capture_output=True, text=True).stdout
ok(plain and plain[0]["cause"] == "step" and plain[0]["need"] == "at_least" and not plain[0]["remedies"]
   and "give the model and the run's setup" in text,
   "without the model: the cause, a lower bound of the need, and what memtap needs to say more", plain)

# ---- the same under PyTorch's allocator (memtap's, native policy): a change is said to
# fit only where the planner's step replayed through the allocator in the room serves
# every allocation, with the room its rounding and order need to spare (sequences of
# 768 tokens were said to fit in 9.93 of 10 GiB, and failed) ----
failed, trace, rep, _ = job("10GiB", [], caching="")
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
ok(failed and d.get("cause") == "step", "gpt2-small on 10 GiB under the native allocator: the step", d)
close_loop("native allocator", "10GiB", [], d, caching="")

# ---- the same under memtap's own policy (memtap-vmm, --allocator=caching's default): the
# changes are replayed through it, as its trace noted it, not through PyTorch's ----
failed, trace, rep, _ = job("10GiB", [], caching="", policy="memtap-vmm")
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
ok(failed and d.get("cause") == "step", "gpt2-small on 10 GiB under memtap-vmm: the step", d)
ok(close_loop("memtap-vmm", "10GiB", [], d, caching="", policy="memtap-vmm") >= 3, "...each change made, three at least")

# ---- a failure in the middle of the first forward: what the step had not made yet is the
# model's, whole (a third of the activations measured would scale the rest down) ----
failed, trace, rep, _ = job("6GiB", [])
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
plan = json.loads(subprocess.run([MEMTAP, "report", "--json", trace, "--plan", PLAN], capture_output=True,
                                 text=True).stdout)["plan"]
ok(failed and d.get("need") == "estimated" and abs(d["need_bytes"] - truth) <= 0.05 * truth
   and plan and abs(plan["table"][0]["none"] - d["need_bytes"]) < 2**20,
   "an OOM in the first forward (6 GiB): the whole step's need estimated within 5%% (%.2f GiB), the capacity plan's "
   "ZeRO-0 total the same" % (d.get("need_bytes", 0) / GiB), (d, plan and plan["table"][0]))

# ---- the optimizer's state, made at the first step, leaves the second no room ----
failed, trace, rep, _ = job("12GiB", [])
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
ok(failed and d.get("cause") == "optimizer_state" and d["step_finished"]
   and abs(d["cause_bytes"] - 1493277696) < 2**20,
   "an OOM in iteration 2 on 12 GiB: the optimizer's state (1.39 GiB) made at the first step", d)
close_loop("the optimizer's state", "12GiB", [], d)

# ---- data-parallel ranks without ZeRO: sharding is a change ----
dp = ["--zero", "0", "--dp", "4"]
failed, trace, rep, _ = job("12GiB", dp)
d = diagnosis(trace, PLAN + " --gpus-per-node 4")
d = d[0] if isinstance(d, list) and d else {}
zero = [m for m in d.get("remedies", []) if m["kind"] == "zero"]
ok(failed and zero, "one of 4 data-parallel ranks: ZeRO is among the changes", d)
kinds = {m["kind"]: m for m in d.get("remedies", [])}
ok("fsdp" in kinds and kinds["fsdp"]["options"] == "--fsdp" and "lora" in kinds
   and kinds.get("gpus", {}).get("change", "").startswith("5 GPUs with ZeRO stage 1: the global batch 1.25 times"),
   "...FSDP and LoRA too, and more GPUs with the cheapest ZeRO stage that fits, saying the global batch grows", d)
fsdp = diagnosis(trace, PLAN + " --gpus-per-node 4 --fsdp")
fsdp = fsdp[0] if isinstance(fsdp, list) and fsdp else {}
ok([m["options"] for m in fsdp.get("remedies", []) if m["kind"] == "offload"] == ["--offload-params cpu"],
   "...and where the run is FSDP's, its own CPU offload is the offload offered", fsdp)
close_loop("4 ranks", "12GiB", dp, d)
# a rank of a launched job: its trace's world_size gives --plan its GPUs
rank = os.path.join(TMP, "rank0.trace")
subprocess.run([MEMTAP, "run", "-q", "-o", rank, "--policy", CAP, "--", SIMTRAIN] + GPT2 + dp, capture_output=True,
               env=dict(ENV, MEMTAP_CAP="12GiB", WORLD_SIZE="4", RANK="0"), timeout=300)
p = subprocess.run([MEMTAP, "report", "--json", rank, "--plan", PLAN], capture_output=True, text=True)
d = json.loads(p.stdout)["diagnosis"] if p.returncode == 0 else []
ok(d and any(m["kind"] == "zero" for m in d[0]["remedies"])
   and "memtap: --plan: 4 GPUs, the trace's world_size (--gpus-per-node says otherwise)" in p.stderr,
   "a rank of a 4-rank job: --plan takes its GPUs from the trace's world_size, says so, and ZeRO is a change",
   (p.stderr, d))

# ---- fp32: 16-bit is a change ----
fp32 = ["--precision", "fp32"]
failed, trace, rep, _ = job("16GiB", fp32)
d = diagnosis(trace, PLAN + " --precision fp32")
d = d[0] if isinstance(d, list) and d else {}
ok(failed and any(m["kind"] == "precision" and m["fits"] for m in d.get("remedies", [])),
   "an fp32 run: bf16 is among the changes that fit", d)
close_loop("fp32", "16GiB", fp32, d)

# ---- a leak ----
leak = ["--leak", "300M"]
failed, trace, rep, _ = job("14GiB", leak, iters=10)
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
ok(failed and d.get("cause") == "growth" and "stash_debug_tensor" in json.dumps(rep["leaks"])
   and [m["kind"] for m in d["remedies"]] == ["leak"],
   "a 300 MiB leak per iteration on 14 GiB: growth, and giving it back is the change", d)
close_loop("the leak", "14GiB", leak, d)
ok(d.get("growth") == "output_kept" and ".detach()" in d.get("what_grew", ""),
   "...made in the forward and kept after its backward: an output or a loss kept", d)
# where the growth was made tells what grew: the optimizer's step keeps a buffer; an
# evaluation's forward, no backward after it, keeps its graph
for where, kind, words in (("optimizer", "kept", "something the code keeps"),
                           ("eval", "graph_kept", "without torch.no_grad()")):
    failed, trace, rep, _ = job("14GiB", leak + ["--leak-in", where], iters=10)
    d = diagnosis(trace)
    d = d[0] if isinstance(d, list) and d else {}
    ok(failed and d.get("cause") == "growth" and d.get("growth") == kind and words in d.get("what_grew", ""),
       "a leak made in the %s: growth, what grew read as %s" % (where, kind), d)

# ---- memory no hook saw: a 3 GiB context ----
failed, trace, rep, _ = job("12GiB", [], context="3GiB")
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
ok(failed and d.get("cause") == "outside_allocator" and abs(d["outside_bytes"] - 3 * GiB) < 2**20,
   "a 3 GiB CUDA context under a 12 GiB cap: memory outside what memtap saw, 3 GiB", d)
close_loop("a 3 GiB context", "12GiB", [], d, context="3GiB")

# ---- fragmentation, under PyTorch's allocator (memtap's, native policy) ----
failed, trace, rep, _ = job("13GiB", [], caching="")
d = diagnosis(trace)
d = d[0] if isinstance(d, list) and d else {}
alloc = [m for m in d.get("remedies", []) if m["kind"] == "allocator"]
ok(failed and d.get("cause") == "fragmentation" and any(m["fits"] for m in alloc)
   and any(not m["fits"] for m in alloc),
   "an OOM with the request free in segments but not in one block: fragmentation; expandable segments fit, "
   "max_split_size does not", d)
count = rep["devices"][0]["driver_count"]
ok(count and count["reading"] == "oom" and count["unseen_bytes"] == 0 and d.get("outside_bytes") == 0,
   "...and the driver's count at the failure is what memtap saw: the allocator's segments whole, nothing unseen",
   (count, d.get("outside_bytes")))
close_loop("fragmentation", "13GiB", [], d, caching="")
live = d.get("live", {})
ok(abs(live.get("temporaries", 0) - 1.53 * GiB) < 0.01 * GiB and live.get("grads", GiB) < 2**20,
   "...in use then: the logits' gradient, cut short by the failure, a temporary as in the step before (simtrain's "
   "ledger), not a gradient", live)

# ---- the peak against a capacity (--gpu-mem), no failure ----
failed, trace, rep, _ = job("80GiB", [])
d = diagnosis(trace, PLAN, ["--gpu-mem", "10GiB"])
ok(not failed and len(d) == 1 and d[0]["of"] == "peak" and d[0]["cause"] == "step"
   and any(m["fits"] for m in d[0]["remedies"]),
   "--gpu-mem 10GiB: the peak of a run that fitted 80 GiB, diagnosed against 10 GiB", d)
close_loop("--gpu-mem", "10GiB", [], d[0] if d else {"remedies": []})
ok(diagnosis(trace, PLAN, ["--gpu-mem", "20GiB"]) == [], "...and nothing under a capacity it fits in")

# ---- a peak whose tensors fit and whose allocator's reserve does not ----
failed, trace, rep, reserved = job("80GiB", [], caching="")
allocated = rep["devices"][0]["peak_allocated_bytes"]
target = (allocated + reserved) // 2
d = diagnosis(trace, None, ["--gpu-mem", str(target)])
d = d[0] if isinstance(d, list) and d else {}
fits = [m for m in d.get("remedies", []) if m["fits"]]
ok(not failed and allocated < target < reserved and d.get("cause") == "cache" and fits
   and all(m["kind"] == "allocator" for m in d["remedies"]),
   "--gpu-mem between the peak allocated and reserved: the allocator's cache; allocator settings replayed", d)
close_loop("the cache", str(target), [], d, caching="")

# ---- --gpu-mem where there is nothing to diagnose: a peak that fits, a device that failed ----
failed, trace, rep, _ = job("80GiB", [])
text = subprocess.run([MEMTAP, "report", trace, "--gpu-mem", "20GiB"], capture_output=True, text=True).stdout
ok(not failed and "--gpu-mem 20.00 GiB: device 0's peak, 12.81 GiB allocated, fits; nothing to change" in text,
   "--gpu-mem over the peak: says it fits", text.split("what to change")[-1])
failed, trace, rep, _ = job("10GiB", [])
text = subprocess.run([MEMTAP, "report", trace, "--gpu-mem", "30GiB"], capture_output=True, text=True).stdout
ok(failed and "--gpu-mem 30.00 GiB: not applied to device 0, which ran out of memory" in text,
   "--gpu-mem on a device that ran out of memory: says the failure's diagnosis stands", text.split("what to change")[-1])

# ---- PyTorch snapshots written by the tests' own pickler, one per cause ----
MiB, BASE, F = 2**20, 0x7f0000000000, snap.LOOP


def write(name, entries, segments, notes=()):
    path = os.path.join(TMP, name + ".pickle")
    with open(path, "wb") as f:
        pickle.dump({"segments": segments, "device_traces": [entries], "allocator_settings": snap.settings(False),
                     "external_annotations": list(notes)}, f, protocol=4)
    return path


def oom(d, request, free=10 * MiB):
    d.entries.append({"action": "oom", "device_free": free, "size": request, "stream": 0, "time_us": d.t + 5,
                      "frames": F, "compile_context": "N/A"})


def snapshot(name, build, request):
    """A snapshot whose one segment holds exactly what the trace allocated (so the request
    is free in it only where the trace left holes), `build` filling its trace, then an OOM
    for `request` with 10 MiB free on the device."""
    d = snap.Trace(BASE)
    d.add("segment_alloc", BASE, 0, F)
    notes = build(d)
    d.entries[0]["size"] = d.at - BASE
    oom(d, request)
    path = write(name, d.entries, [snap.segment(0, BASE, d.blocks(d.at - BASE), expandable=False)], notes)
    d = diagnosis(path, plan=None)
    return d[0] if isinstance(d, list) and d else {}


def user(fn, line, cpp):
    return snap.python_stack([snap.frame(fn, "/home/me/train.py", line)] + snap.LOOP[1:],
                             snap.RECORDER + snap.ALLOCATOR + snap.op(cpp))


LOAD = snap.python_stack([snap.frame("_load", snap.TORCH + "serialization.py", 1500),
                          snap.frame("load", snap.TORCH + "serialization.py", 1025),
                          snap.frame("resume", "/home/me/train.py", 12)] + snap.LOOP[1:],
                         snap.RECORDER + snap.ALLOCATOR + snap.op("empty"))


def checkpoint(d):
    """The model's parameters; the same again from torch.load onto the device; a forward."""
    for k in range(4):
        d.alloc(64 * MiB, user("build_model", 30, "empty"))
    for k in range(4):
        d.alloc(64 * MiB, LOAD)
    for k in range(6):
        d.alloc(64 * MiB, snap.forward_stack(k, "mm"))
    return []


def steps(d, reuse, backward=False):
    """Five steps, each keeping a 64 MiB loss with its graph (train.py:95) past the step,
    then a sixth's activations; with `reuse`, each step's activations go where the last
    step's were (no hole is left), else at new addresses (holes of 128 MiB); with
    `backward`, a backward (a gradient made and freed) follows each forward."""
    notes, hole, end = [], d.at, d.at + 128 * MiB
    for it in range(6):
        if reuse:
            d.at = hole
        acts = [d.alloc(32 * MiB, snap.forward_stack(k, "mm")) for k in range(4)]
        if reuse:
            d.at = max(d.at, end)
        if it == 5:
            break
        d.alloc(64 * MiB, user("train_step", 95, "add"))
        if backward:
            d.free(d.alloc(1 * MiB, snap.grad_stack()))
        end = d.at
        for a in acts:
            d.free(a)
        notes.append({"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": d.t + 1})
        notes.append({"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": d.t + 2})
    return notes


d = snapshot("checkpoint", checkpoint, 256 * MiB)
fix = [m for m in d.get("remedies", []) if m["kind"] == "checkpoint"]
ok(d.get("cause") == "checkpoint" and d["cause_bytes"] == 256 * MiB and "resume (train.py:12)" in d["cause_where"]
   and fix and fix[0]["fits"] and fix[0]["allocated_bytes"] == 896 * MiB,
   "a snapshot with a checkpoint loaded beside the model: its 256 MiB from resume (train.py:12), and loading it "
   "to the CPU fits", d)
d = snapshot("accumulated", lambda d: steps(d, True), 256 * MiB)
ok(d.get("cause") == "growth" and "train_step (train.py:95)" in d.get("cause_where", "")
   and d["allocated_bytes"] == 448 * MiB and [m["kind"] for m in d["remedies"]] == ["leak"]
   and d["remedies"][0]["fits"],
   "a snapshot whose steps each keep a loss with its graph: growth, at train_step (train.py:95)", d)
ok(d.get("growth") == "graph_kept", "...no backward after the forward that made it: its graph kept", d)
d = snapshot("accumulated-trained", lambda d: steps(d, True, backward=True), 256 * MiB)
ok(d.get("cause") == "growth" and d.get("growth") == "output_kept",
   "...the same with a backward after each forward: an output or loss kept past its backward", d)
d = snapshot("scattered", lambda d: steps(d, False), 256 * MiB)
ok(d.get("cause") == "fragmentation",
   "...the same growth where the request was free in segments but not in one block: fragmentation", d)

# ---- every rank loaded a copy of the checkpoint onto device 0 (torch.load without
# map_location): rank 0 runs out there; memtap report DIR names the others ----
ranks = os.path.join(TMP, "ranks")
os.makedirs(ranks, exist_ok=True)
for k in range(4):
    traces, segments = [[] for _ in range(k + 1)], []
    train = snap.Trace(BASE + (k << 34), device=k)
    train.add("segment_alloc", train.base, 0, F)
    for i in range(4):
        train.alloc(64 * MiB, snap.forward_stack(i, "mm"))
    if k == 0:
        oom(train, 256 * MiB)
    train.entries[0]["size"] = train.at - train.base
    traces[k] = train.entries
    segments.append(snap.segment(k, train.base, train.blocks(train.at - train.base), expandable=False))
    if k:
        load = snap.Trace(BASE + (8 << 34) + (k << 32))
        load.add("segment_alloc", load.base, 128 * MiB, F)
        for i in range(2):
            load.alloc(64 * MiB, LOAD)
        traces[0] = load.entries
        segments.append(snap.segment(0, load.base, load.blocks(load.at - load.base), expandable=False))
    with open(os.path.join(ranks, "rank%d_memory_snapshot.pickle" % k), "wb") as f:
        pickle.dump({"segments": segments, "device_traces": traces, "allocator_settings": snap.settings(False)}, f,
                    protocol=4)
p = subprocess.run([MEMTAP, "report", ranks], capture_output=True, text=True)
j = subprocess.run([MEMTAP, "report", "--json", ranks], capture_output=True, text=True)
r0 = [r for r in json.loads(j.stdout)["ranks"] if r["rank"] == "0"] if j.returncode == 0 else []
others = r0[0].get("others_on_oom_device", []) if r0 else []
ok(r0 and r0[0]["oom_cause"] and sorted(o["rank"] for o in others) == ["1", "2", "3"]
   and all(o["loaded"] and o["bytes"] == 128 * MiB for o in others)
   and "every rank loaded a copy onto this one" in p.stdout and "rank 3" in p.stdout,
   "four ranks' snapshots, ranks 1-3 each loading a checkpoint onto device 0: report DIR names them at "
   "rank 0's failure, and says why", (p.stdout, others))

# CUDA graphs' private pool (segment_pool_id (1, 0)) holding 512 MiB beside 256 MiB of the default pool's
G = BASE + (2 << 30)
graphs = snap.Trace(BASE)
graphs.add("segment_alloc", G, 512 * MiB, F)
graphs.add("alloc", G, 512 * MiB, F)
graphs.add("segment_alloc", BASE, 256 * MiB, F)
graphs.add("alloc", BASE, 256 * MiB, F)
oom(graphs, 256 * MiB)
pooled = snap.segment(0, G, [snap.block(G, 512 * MiB, 512 * MiB, "active_allocated", F)], expandable=False)
pooled["segment_pool_id"] = (1, 0)
d = diagnosis(write("graphs", graphs.entries, [pooled, snap.segment(0, BASE, [snap.block(
    BASE, 256 * MiB, 256 * MiB, "active_allocated", F)], expandable=False)]), None)
d = d[0] if isinstance(d, list) and d else {}
ok(d.get("cause") == "graph_pools" and d["cause_bytes"] == 512 * MiB
   and any(m["kind"] == "graph_pools" and m["fits"] for m in d["remedies"]),
   "a snapshot whose CUDA graphs' private pool holds 512 MiB: the graphs' pools, and freeing them fits", d)

# AdamW's state, made at the first step (_init_group), leaves the second step's forward no
# room: the second step's activations fill the first's hole, the request is more than the
# gradients' hole
step = snap.Trace(BASE)
step.add("segment_alloc", BASE, 608 * MiB, F)
for k in range(4):
    step.alloc(32 * MiB, user("build_model", 30, "empty"))
hole = step.at
acts = [step.alloc(16 * MiB, snap.forward_stack(k, "mm")) for k in range(6)]
grads = [step.alloc(32 * MiB, snap.grad_stack()) for k in range(4)]
for a in acts:
    step.free(a)
notes = [{"stage": "START", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": step.t + 1}]
for k in range(8):
    step.alloc(32 * MiB, snap.optimizer_stack(True))
end, step.at = step.at, hole
step.free(step.alloc(64 * MiB, snap.optimizer_stack(False)))
notes.append({"stage": "END", "name": "Optimizer.step#AdamW.step", "device": 0, "time_us": step.t + 1})
for g in grads:
    step.free(g)
step.at = hole
for k in range(6):
    step.alloc(16 * MiB, snap.forward_stack(k, "mm"))
step.at = end
oom(step, 160 * MiB)
d = diagnosis(write("optimizer", step.entries, [snap.segment(0, BASE, step.blocks(608 * MiB), expandable=False)],
                    notes), None)
d = d[0] if isinstance(d, list) and d else {}
ok(d.get("cause") == "optimizer_state" and d["cause_bytes"] == 256 * MiB,
   "a snapshot whose second step runs out after AdamW made its state at the first: the optimizer's state", d)

# a job that caught its out-of-memory error and tried again, 40 times: the first 16 are
# diagnosed (each replays the trace up to it), and the text says how many there were
retries = snap.Trace(BASE)
retries.add("segment_alloc", BASE, 512 * MiB, F)
retries.add("alloc", BASE, 512 * MiB, F)
for k in range(40):
    oom(retries, 256 * MiB)
path = write("retries", retries.entries, [snap.segment(0, BASE, [snap.block(BASE, 512 * MiB, 512 * MiB,
                                                                          "active_allocated", F)], expandable=False)])
d = diagnosis(path, None)
text = subprocess.run([MEMTAP, "report", path], capture_output=True, text=True).stdout
ok(isinstance(d, list) and len(d) == 16 and "the first 16 failures (of 40):" in text,
   "40 failures: the first 16 diagnosed, and said so", (len(d), text[-600:]))

# a cache the allocator frees at the limit: a 100 MiB segment freed whole, then a 150 MiB
# one; 250 MiB reserved at the peak, 150 allocated
A, B = BASE, BASE + (1 << 30)
cached = snap.Trace(A)
cached.add("segment_alloc", A, 100 * MiB, F)
cached.add("alloc", A, 100 * MiB, F)
cached.add("free_requested", A, 100 * MiB, F)
cached.add("free_completed", A, 100 * MiB, F)
cached.add("segment_alloc", B, 150 * MiB, F)
cached.add("alloc", B, 150 * MiB, F)
d = diagnosis(write("cached", cached.entries, [
    snap.segment(0, A, [snap.block(A, 100 * MiB, 0, "inactive", [])], expandable=False),
    snap.segment(0, B, [snap.block(B, 150 * MiB, 150 * MiB, "active_allocated", F)], expandable=False)]),
    None, ["--gpu-mem", "200MiB"])
d = d[0] if isinstance(d, list) and d else {}
ok(d.get("cause") == "cache" and d["remedies"] and d["remedies"][0]["change"].startswith("nothing")
   and d["remedies"][0]["fits"] and d["remedies"][0]["reserved_bytes"] == 150 * MiB,
   "a peak of 250 MiB reserved, 150 allocated, on 200 MiB: the allocator frees its cached segment at the limit, "
   "nothing to change", d)

done()
