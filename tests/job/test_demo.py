"""The demo (./quickstart demo, which is make demo): its existing parts still run (the
single-process report and page), and it ends with the HTML report of a two-rank job
where rank 1 runs out of memory and both ranks have a snapshot of that moment."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
if os.environ.get("MT_SANITIZERS", "no") != "no":
    print("1..0 # SKIP the demo is run in the plain build")
    sys.exit(0)

env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k not in ("MFLAGS", "RANK", "WORLD_SIZE")}
p = subprocess.run(["make", "-s", "demo"], cwd=B, env=env, capture_output=True, text=True, timeout=600)
out = p.stdout + p.stderr
ok(p.returncode == 0, "make demo runs", out[-3000:])
demo = os.path.join(B, "demo")
ok(all(os.path.exists(os.path.join(demo, f)) for f in ("train.trace", "oom.trace", "report.html")),
   "its single-process part: the trace, the OOM snapshot and the page", os.listdir(demo) if os.path.isdir(demo) else out)
ok("what to change so that it fits:" in out and "micro-batch 4 instead of 8" in out,
   "the report says what to change so that it fits", out[-3000:])
lines = [x for x in out.strip().split("\n") if x]
ok(lines and "demo/job.html" in lines[-1], "it ends with the whole job's page", lines[-3:])
said = [x for x in p.stdout.strip().split("\n") if x]
where = os.path.join(os.path.abspath(B), "tools/memtap/memtap")
ok(len(said) > 2 and said[-2].startswith("demo: memtap is %s; " % where) and "export PATH=" in said[-2]
   and os.access(where, os.X_OK) and "simgpu-run PROGRAM" in said[-1],
   "its last words: where the memtap command is, how to put it on PATH, and how to run a program on simgpu",
   said[-3:])
q = subprocess.run([MEMTAP, "report", "--json", os.path.join(demo, "job")], capture_output=True, text=True)
rep = json.loads(q.stdout) if q.returncode == 0 else {}
oom = [o for o in rep.get("ooms", []) if o["rank"] == 1]
states = {x["rank"]: x["state"] for x in oom[0]["ranks"]} if oom else {}
ok(states == {0: "snapshot", 1: "out of memory"} and all(x["snapshot"] and os.path.exists(x["snapshot"])
                                                        for x in oom[0]["ranks"]),
   "two ranks: rank 1 ran out of memory, and both have a snapshot of that moment", q.stdout[-2000:] + q.stderr)
causes = {r["rank"]: r["oom_cause"] for r in rep.get("ranks", [])}
ok(causes == {"0": None, "1": "step"} and "rank 1 ran out of memory: the step needs more than the device (what to "
   "change: memtap report demo/job/rank-1.trace)" in out,
   "the job's report names the failed rank's cause and the report that says what to change", (causes, out[-1500:]))
html = open(os.path.join(demo, "job.html")).read() if os.path.exists(os.path.join(demo, "job.html")) else ""
ok("rank 1 ran out of memory" in html and html.count("snapshots/") >= 2, "the page shows it", html[:500])
done()
