"""memtap diff, the multi-rank report and the exports, on simtrain runs whose numbers
are known: each checked against simtrain's own ground truth."""
import json
import os
import shutil
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, read_pty, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMTRAIN = os.path.join(B, "tools/simtrain/simtrain")
TMP = scratch("tools")


def record(name, args, env=None):
    trace, truth = os.path.join(TMP, name + ".trace"), os.path.join(TMP, name + ".json")
    subprocess.run([MEMTAP, "run", "-q", "-o", trace, "--", SIMTRAIN, *args, "--json", truth], check=True,
                   capture_output=True, env=dict(os.environ, **(env or {})))
    return trace, json.load(open(truth))


def size_text(n):
    """mt_format_size: bytes, else two decimals of the largest binary unit below it."""
    units, v, u = ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), float(n), 0
    while v >= 1024.0 and u + 1 < len(units):
        v, u = v / 1024.0, u + 1
    return "%d B" % n if u == 0 else "%.2f %s" % (v, units[u])


def run(*args):
    p = subprocess.run([MEMTAP, *args], capture_output=True, text=True)
    return p, (json.loads(p.stdout) if p.stdout.startswith("{") else None)


# ---- diff ----
a, ta = record("a", ["--preset", "gpt2-small"])
b, tb = record("b", ["--preset", "gpt2-small", "--recompute", "selective", "--leak", "1M"])
p, d = run("diff", "--json", a, b)
ok(p.returncode == 0 and d is not None, "memtap diff --json", p.stderr)
if d:
    dev = d["devices"][0]
    ok(dev["delta_peak_bytes"] == tb["peak"]["bytes"] - ta["peak"]["bytes"], "the peak's change is simtrain's",
       (dev["delta_peak_bytes"], tb["peak"]["bytes"] - ta["peak"]["bytes"]))
    cats = dev["composition_at_peak"]
    ok(all(cats[c]["delta"] == tb["peak"]["categories"][c] - ta["peak"]["categories"][c] for c in cats
           if c in tb["peak"]["categories"]), "each category's change is simtrain's", cats)
    ok(d["at_peak"] and d["at_peak"][0]["delta_bytes"] < 0 and any("layer_forward" in f for f in d["at_peak"][0]["frames"]),
       "the biggest change at the peak: layer_forward's activations shrank", d["at_peak"][:1])
    ok(d["at_exit"] and d["at_exit"][0]["delta_bytes"] == 3 << 20 and
       any("stash_debug_tensor" in f for f in d["at_exit"][0]["frames"]), "at exit: the leaked buffers are new",
       d["at_exit"][:1])
p, _ = run("diff", a)
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "diff with one trace: one line, exit 2", p.stderr)

# ---- several ranks ----
ranks = os.path.join(TMP, "ranks")
os.makedirs(ranks)
truths = {}
# ranks that differ in every column: batch sizes, two on memtap's caching allocator (segments
# known: their fragmentation), one leaking from its second iteration
for r in range(4):
    t = os.path.join(ranks, "r%d.json" % r)
    subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(ranks, "r%r.trace"),
                    *(["--allocator=caching", "-O", "alloc_policy=native"] if r % 2 else []), "--", SIMTRAIN,
                    "--preset", "tiny", "--batch", str({0: 2, 1: 3, 2: 8, 3: 4}[r]), "--json", t,
                    *(["--leak", "128K", "--iters", "4"] if r == 3 else [])], check=True, capture_output=True,
                   env=dict(os.environ, RANK=str(r)))
    truths[str(r)] = json.load(open(t))
    os.remove(t)
p, rep = run("report", "--json", ranks)
ok(p.returncode == 0 and rep and len(rep["ranks"]) == 4, "memtap report DIRECTORY: one row per rank", p.stderr)
if rep:
    ok(all(row["peak_allocated_bytes"] == truths[row["rank"]]["peak"]["bytes"] for row in rep["ranks"]),
       "each rank's peak is its simtrain's", rep["ranks"])
    peaks = [truths[r]["peak"]["bytes"] for r in truths]
    imb = rep["imbalance"]
    ok(imb["max_rank"] == "2" and imb["max_peak_bytes"] == max(peaks) and imb["min_peak_bytes"] == min(peaks) and
       imb["mean_peak_bytes"] == sum(peaks) // 4, "the imbalance names the largest rank, the smallest and the mean",
       imb)
    ok(abs(imb["spread"] - (max(peaks) - min(peaks)) / (sum(peaks) / 4)) < 1e-3, "spread = (max - min) / mean")
    # every column of a rank's row is what the report of that rank's trace alone says
    for row in rep["ranks"]:
        _, one = run("report", "--json", row["trace"])
        dev = one["devices"][0]
        fr = (dev.get("fragmentation") or {}).get("at_peak")
        want = {"device": dev["device"], "peak_allocated_bytes": dev["peak_allocated_bytes"],
                "composition_at_peak": {c: v for c, v in dev["composition_at_peak"].items()
                                        if c in row["composition_at_peak"]},
                "fragmentation_at_peak": fr and {"reserved_bytes": fr["reserved_bytes"],
                                                 "external_bytes": fr["reserved_bytes"] - fr["allocated_bytes"],
                                                 "largest_free_block_bytes": fr["largest_free_block_bytes"]},
                "leaks": len(one["leaks"]), "dropped": one["events"]["dropped"], "complete": one["complete"]}
        got = {k: row[k] for k in want}
        ok(got == want and set(row["composition_at_peak"]) >= {"params", "activations"},
           "rank %s's row: each column as the report of its trace alone says" % row["rank"], (got, want))
    ok(len({row["leaks"] for row in rep["ranks"]}) == 2 and
       len({json.dumps(row["fragmentation_at_peak"]) for row in rep["ranks"]}) == 3 and
       len({row["composition_at_peak"]["activations"] for row in rep["ranks"]}) == 4,
       "the ranks differ in leaks, fragmentation and composition (a column read from another rank shows)",
       rep["ranks"])
p, _ = run("report", *[os.path.join(ranks, f) for f in sorted(os.listdir(ranks))])
ok(p.returncode == 0 and p.stdout.count("\n") == 6 and "largest is rank 2" in p.stdout, "the text table", p.stdout)
if rep:
    head = p.stdout.splitlines()[0].split()
    for row in rep["ranks"]:
        line = next((x for x in p.stdout.splitlines() if x.split()[0] == row["rank"]), "")
        fr = row["fragmentation_at_peak"]
        want = [size_text(row["peak_allocated_bytes"])] + \
            [size_text(row["composition_at_peak"][c]) for c in head[4:-3]] + \
            [size_text(fr["external_bytes"]) if fr else "-", str(row["leaks"])]
        ok(all(w in line for w in want) and re.sub(r"\s+", " ", line).find(" ".join(want)) > 0,
           "the text table's row of rank %s: the same columns in the same order" % row["rank"], (want, line))
# one rank's trace cut short: every rank still reported, the damaged one marked, exit 3
damaged = os.path.join(TMP, "damaged")
shutil.copytree(ranks, damaged)
cut = os.path.join(damaged, sorted(f for f in os.listdir(damaged) if f.endswith(".trace"))[1])
data = open(cut, "rb").read()
open(cut, "wb").write(data[:len(data) * 2 // 3])
for args in ((damaged,), ("--json", damaged)):
    p, rep = run("report", *args)
    ok(p.returncode == 3 and p.stderr.count("\n") == 1 and "cut short" in p.stderr
       and ("(cut short)" in p.stdout if rep is None else len(rep["ranks"]) == 4),
       "memtap report %s with one rank's trace cut short: all ranks, that one marked, one line, exit 3"
       % " ".join(a if a != damaged else "DIR" for a in args), (p.returncode, p.stderr, p.stdout[-600:]))
# a trace and the snapshot its oom_snapshot policy wrote beside it: one process, one rank
own = os.path.join(TMP, "own")
os.mkdir(own)
subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(own, "train.trace"), "--policy", "cap", "--policy",
                "oom_snapshot", "--", SIMTRAIN, "--preset", "gpt2-small"], capture_output=True,
               env=dict(os.environ, SIMGPU_MEM="16GiB", MEMTAP_CAP="3GiB"))
snap = [f for f in os.listdir(own) if f.startswith("memtap-oom-")]
p, rep = run("report", "--json", own)
ok(len(snap) == 1 and p.returncode == 0 and rep and [r["trace"] for r in rep["ranks"]] == [own + "/train.trace"]
   and rep["snapshots"] == [{"trace": own + "/" + snap[0], "snapshot_of": own + "/train.trace"}],
   "memtap report DIR: the OOM snapshot a process took beside its trace is that trace's, not a second rank",
   (snap, p.stderr, rep))
p, _ = run("report", own)
ok(p.returncode == 0 and p.stdout.count("\n") == 3 and "imbalance" not in p.stdout
   and p.stdout.splitlines()[2].startswith("rank 0 ran out of memory: ")
   and "%s is a snapshot taken in the process that wrote %s/train.trace" % (os.path.join(own, snap[0] if snap else ""), own)
   in p.stderr, "the text: one row, no imbalance of one rank, its failure's cause, a line saying whose snapshot it is",
   (p.stdout, p.stderr))

# ---- exports ----
p, _ = run("export", "--format=folded", a)
lines = p.stdout.splitlines()
ok(p.returncode == 0 and lines and all(re.fullmatch(r"[^ ].*;.* \d+", l) for l in lines), "folded: frame;frame bytes",
   lines[:2])
ok(sum(int(l.rsplit(" ", 1)[1]) for l in lines) == ta["peak"]["bytes"], "folded at the peak adds up to the peak")
# stack by stack, not only in sum: each line's bytes are the report's for that stack at the peak
_, whole = run("report", "--json", "--top", "1000000", a)
want, got = {}, {}
for g in (whole or {}).get("top_at_peak", []):
    k = ";".join(reversed(g["view"]))
    want[k] = want.get(k, 0) + g["bytes"]
for l in lines:
    k, _, n = l.rpartition(" ")
    got[k] = got.get(k, 0) + int(n)
ok(got and got == want and len(set(got.values())) > 3, "folded at the peak: each stack's bytes are the report's",
   (got, want))
ok(all(l.startswith("main (simtrain.c:") and l.rsplit(";", 1)[1].startswith("tensor_new (simtrain.c:") for l in lines),
   "outermost frame first, with file:line, start-up and memtap's frames left out", lines[:2])
p, _ = run("export", "--format=folded", "--what", "leaks", b)
ok(p.stdout.count("\n") == 0, "folded leaks: none in three iterations (growth needs three in a row)")
p, _ = run("export", "--format=folded", "--what", "exit", b)
ok(p.stdout.strip().endswith(str(3 << 20)) and "stash_debug_tensor" in p.stdout, "folded at exit: the leak", p.stdout)

out = os.path.join(TMP, "a.json")
p, _ = run("export", "--format=perfetto", "-o", out, a)
ev = json.load(open(out))["traceEvents"] if p.returncode == 0 else []
counters = [e for e in ev if e["ph"] == "C" and e["name"] == "device 0"]
ok(counters and max(sum(e["args"].values()) for e in counters) == ta["peak"]["bytes"],
   "perfetto: the device counter reaches simtrain's peak", p.stderr)
top = max(counters, key=lambda e: sum(e["args"].values())) if counters else {"args": {}}
ok(all(top["args"].get(c) == ta["peak"]["categories"][c] for c in ta["peak"]["categories"]),
   "perfetto: split by category at the peak as simtrain says", top["args"])
begins = sum(1 for e in ev if e["ph"] == "B")
ok(begins > 0 and begins == sum(1 for e in ev if e["ph"] == "E"), "perfetto: NVTX ranges as balanced slices")
names = [e["name"] for e in ev if e["ph"] == "B"], [e.get("name") for e in ev if e["ph"] == "E"]
ok(sorted(names[0]) == sorted(names[1]), "perfetto: each E event named as its B (speedscope closes the slice)")

p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, "oom.trace"), "--", SIMTRAIN, "--preset", "gpt-7b"],
                   capture_output=True, env=dict(os.environ, SIMGPU_MEM="80GiB"))
p, _ = run("export", "--format=perfetto", os.path.join(TMP, "oom.trace"))
ok(p.returncode == 0 and '"out of memory:' in p.stdout, "perfetto: an OOM is an instant event")
p, _ = run("export", "--format=pdf", a)
ok(p.returncode == 2 and p.stderr.count("\n") == 1, "an unknown format: one line, exit 2", p.stderr)


# ---- the progress bar: on a terminal only (the delay set to 0 so a short report shows it) ----
def stderr_of(args, tty):
    env = dict(os.environ, MEMTAP_PROGRESS_DELAY="0")
    if not tty:
        return subprocess.run([MEMTAP, *args], capture_output=True, env=env).stderr.decode()
    master, slave = os.openpty()
    p = subprocess.Popen([MEMTAP, *args], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    out = p.communicate()[0]
    got = read_pty(master)
    return got.decode(errors="replace") if json.loads(out) else ""


err = stderr_of(["report", "--json", a], True)
ok("\rmemtap: reading" in err and "\rmemtap: replaying" in err and err.endswith("\r\033[K"),
   "on a terminal: a progress bar, erased before the report", repr(err[-200:]))
ok(stderr_of(["report", "--json", a], False) == "", "not a terminal: quiet")
done()
