"""memtap replay on PyTorch snapshots from real jobs: memtap and memtap-vmm against native.

  python3 bench/replay_snapshots.py BUILD_DIR SNAPSHOT.pickle...

Real snapshots are not in the repo (third-party files); docs/PERFORMANCE.md names the
public repositories the measured ones came from. Per snapshot: peak requested, each
policy's peak reserved over it, memtap's and memtap-vmm's over native's, and whether
native's replay ends with the snapshot's own segments. Then the targets: memtap-vmm never
above native and within 1.02 where the peak is above 1 GiB; memtap never above native.
A snapshot taken without history (no trace entries), or whose entries are one moment (one
entry, or all within a microsecond), has no sequence to replay: skipped.
"""
import json
import os
import subprocess
import sys

B = os.path.abspath(sys.argv[1])
MEMTAP = os.path.join(B, "tools/memtap/memtap")
rows = []
print("%-52s %9s %8s %8s %8s %8s %8s %5s" % ("snapshot", "requested", "native", "memtap", "vmm", "memtap/n", "vmm/n",
                                             "end"))
for path in sys.argv[2:]:
    p = subprocess.run([MEMTAP, "replay", "--json", "--policy=native,memtap,memtap-vmm", path], capture_output=True,
                       text=True)
    if p.returncode:
        print("%-52s %s" % (os.path.basename(path)[:52], p.stderr.strip()))
        continue
    d = json.loads(p.stdout)
    pol = {x["policy"]: x for x in d["policies"]}
    req = pol["native"]["peak_requested"]
    rep = subprocess.run([MEMTAP, "report", "--json", path], capture_output=True, text=True)
    if not req or json.loads(rep.stdout).get("times") == "none":
        print("%-52s no sequence (no trace entries, or one moment): skipped" % os.path.basename(path)[:52])
        continue
    n, m, v = (pol[k]["peak_reserved"] for k in ("native", "memtap", "memtap-vmm"))
    same = d["final_segments"] == pol["native"]["final_reserved"]
    rows.append((req, n, m, v))
    print("%-52s %7.2f G %8.4f %8.4f %8.4f %8.4f %8.4f %5s" % (
        os.path.basename(path)[:52], req / (1 << 30), n / req, m / req, v / req, m / n, v / n,
        "same" if same else "%.3f" % (pol["native"]["final_reserved"] / max(1, d["final_segments"]))))
big = [r for r in rows if r[0] > 1 << 30]
print("%d snapshots; memtap-vmm above native on %d, above 1.02 of requested on %d of the %d above 1 GiB; "
      "memtap above native on %d (largest %.4f of native)" % (
          len(rows), sum(v > n for _, n, _, v in rows), sum(v > 1.02 * q for q, _, _, v in big), len(big),
          sum(m > n for _, n, m, _ in rows), max((m / n for _, n, m, _ in rows), default=0)))
