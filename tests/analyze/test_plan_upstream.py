"""memtap plan against the estimators' and config readers' own outputs: vectors that
tests/analyze/upstream/make_vectors.py wrote by running Megatron-LM's
theoretical_memory_usage.py, DeepSpeed's estimators and config models and hjson-py, at the
commits each vector file records (numbers and outcomes only, no upstream code here)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
UP = os.path.join(os.environ["MT_SRCDIR"], "tests/analyze/upstream")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
HJSON_DUMP = os.path.join(B, "tests/analyze/hjson_dump")
TMP = scratch("plan-upstream")


def vectors(name):
    with open(os.path.join(UP, name)) as f:
        return json.load(f)


def plan(*args):
    return subprocess.run([MEMTAP, "plan", *map(str, args)], capture_output=True, text=True)


# Megatron-LM's report_theoretical_memory: the printed line, to the hundredth of a MB
mt = vectors("megatron.json")
bad = []
for case in mt["cases"]:
    p = plan("--estimator", "megatron", *case["options"])
    line = p.stdout.splitlines()[0] if p.returncode == 0 and p.stdout else p.stderr.strip()
    if line != case["line"]:
        bad.append("%s\n  memtap:   %s\n  megatron: %s" % (" ".join(case["options"]), line, case["line"]))
ok(not bad and len(mt["cases"]) == 200,
   "--estimator megatron prints Megatron-LM's line on %d random configurations (GQA, kv_channels, swiglu "
   "default, MoE with EP/ETP and dense layers, shared experts, MLA, MTP, CP, VPP; %s @ %s)"
   % (len(mt["cases"]), mt["file"], mt["commit"][:10]), "\n".join(bad))

# DeepSpeed's estimate_zero2/3_model_states_mem_needs_all_cold, additional_buffer_factor included
de = vectors("deepspeed_estimators.json")
bad = [" ".join(c["options"]) for c in de["cases"] if plan(*c["options"]).stdout != c["output"]]
ok(not bad and len(de["cases"]) == 200,
   "--estimator deepspeed-zero2/3 print DeepSpeed's tables byte for byte on %d random configurations "
   "(--buffer-factor; %s @ %s)" % (len(de["cases"]), de["upstream"], de["commit"][:10]), "\n".join(bad[:10]))
js = [c for c in de["cases"] if "deepspeed-zero3" in c["options"]][0]
p = plan(*js["options"], "--json")
rows = json.loads(p.stdout)["rows"] if p.returncode == 0 else []
text = [line for line in js["output"].splitlines() if "GB |" in line]
ok(len(rows) == len(text) and all("%7.2fGB" % (r["cpu_bytes"] / 2**30) in t and "%6.2fGB" % (r["gpu_bytes"] / 2**30)
                                  in t for r, t in zip(rows, text)),
   "--estimator deepspeed-zero3 --json: the same rows in bytes", p.stdout + p.stderr)

# DeepSpeed's config models: what each config is read as, or its refusal
dc = vectors("deepspeed_config.json")


def refused_alike(case, err):
    says = case["says"]
    if says.startswith("For further information"):  # pydantic's last line: the reason is above it
        return True
    if says.startswith("Input should be a valid dictionary"):
        return "Input should be a valid dictionary" in err
    if says == "Extra inputs are not permitted":
        return "given twice" in err or "Extra inputs are not permitted" in err
    return says.split("() ")[-1] in err or says in err


bad = []
for i, case in enumerate(dc["cases"]):
    path = os.path.join(TMP, "ds%d.json" % i)
    with open(path, "w") as f:
        json.dump(case["config"], f)
    p = plan("--params", "1B", "--gpus-per-node", 4, "--deepspeed", path, "--json")
    if not case["accepted"]:
        if p.returncode != 2 or not refused_alike(case, p.stderr):
            bad.append("%s: DeepSpeed refuses (%s), memtap: %d %s" % (json.dumps(case["config"]), case["says"],
                                                                      p.returncode, p.stderr.strip()))
        continue
    if p.returncode != 0:
        bad.append("%s: DeepSpeed accepts, memtap: %s" % (json.dumps(case["config"]), p.stderr.strip()))
        continue
    setup = json.loads(p.stdout)["setup"]
    section = case["config"].get("bf16", case["config"].get("bfloat16")) or {}
    # "auto" is dropped by DeepSpeed (disabled); memtap resolves it from the options or the
    # model, else its default bf16, and says so in a note
    auto = isinstance(section, dict) and section.get("enabled") == "auto"
    sixteen = case["bf16"] or case["fp16"] or auto
    want = {"zero": case["stage"], "precision": "bf16" if sixteen else "fp32",
            # offload_optimizer at stage 0 and offload_param below stage 3 are accepted and unused
            "offload_optimizer": case["offload_optimizer"] if case["stage"] > 0 else "none",
            "offload_params": case["offload_param"] if case["stage"] == 3 else "none",
            "tp": max(case["autotp_size"], 1)}
    got = {k: setup[k] for k in want}
    if got != want or (auto and '"auto"' not in p.stderr):
        bad.append("%s: DeepSpeed reads %s, memtap %s %s" % (json.dumps(case["config"]), want, got, p.stderr))
ok(not bad, "--deepspeed reads %d configs as DeepSpeed's config models do: stage spellings and coercions, "
   "offload sections and their old names, fp16/bf16/bfloat16, autotp_size, \"auto\"; refuses what they refuse "
   "(%s @ %s)" % (len(dc["cases"]), dc["upstream"], dc["commit"][:10]), "\n".join(bad))

# hjson-py, the reader DeepSpeed loads a config file with
hj = vectors("hjson.json")
bad = []


def same(a, b):
    """Equal values; numbers past 64 bits (which jansson keeps as reals) to a double's precision"""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    if type(a) in (int, float) and type(b) in (int, float) and abs(b) >= 2**63:
        return float(a) == float(b)
    return a == b and type(a) is type(b)



for i, case in enumerate(hj["cases"]):
    path = os.path.join(TMP, "h%d.hjson" % i)
    with open(path, "w", encoding="utf-8") as f:
        f.write(case["text"])
    p = subprocess.run([HJSON_DUMP, path], capture_output=True, text=True)
    if "error" in case:
        if p.returncode != 1 or not p.stdout.startswith("error "):
            bad.append("%r: hjson-py refuses (%s), memtap reads %s" % (case["text"], case["says"], p.stdout.strip()))
    elif p.returncode != 0 or not same(json.loads(p.stdout), case["value"]):
        bad.append("%r: hjson-py reads %s, memtap %s" % (case["text"], json.dumps(case["value"]), p.stdout.strip()))
ok(not bad, "the config reader reads %d texts as hjson-py does (comments, quoteless keys and values, missing and "
   "trailing commas, multi-line strings, duplicate keys refused; %s @ %s)"
   % (len(hj["cases"]), hj["upstream"], hj["commit"][:10]), "\n".join(bad))

done()
