"""memtap replay on random RMM logs: memtap-vmm and memtap against native (issue 20).

  python3 bench/replay_fuzz.py BUILD_DIR [FROM TO] [--conf=K:V,...]   (default: seeds 0 to 119)

Each seed writes a log of 3,000 calls: sizes log-uniform from 512 B to 512 MiB, or
multiples of 1 MiB plus 0, 512 B, 4 KiB or 1.5 MiB; frees at random or nearly last-in
first-out (the seed picks which of the four). Prints, per policy, peak reserved over peak
requested (median, largest, how many above 1.02), on how many logs it reserved more
than native, and replay's ns per operation (median and largest, against native's on the
same log); the targets: memtap-vmm never above native, and within 1.02 where the peak
is above 1 GiB. --conf goes to every policy (e.g. --conf=expandable_segments:True: native
in expandable segments, memtap-vmm in native's expandable layout, mapped lazily).
"""
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

CONF = [a for a in sys.argv[1:] if a.startswith("--conf=")]
ARGS = [a for a in sys.argv[1:] if not a.startswith("--conf=")]
B = os.path.abspath(ARGS[0] if ARGS else "build")
FIRST, LAST = (int(ARGS[1]), int(ARGS[2])) if len(ARGS) > 2 else (0, 119)
MEMTAP = os.path.join(B, "tools/memtap/memtap")
TMP = tempfile.mkdtemp(prefix="memtap-fuzz-")


def log(seed, n=3000):
    r = random.Random(seed)
    kind = seed % 4
    live, out, addr = [], ["Thread,Time,Action,Pointer,Size,Stream"], 0x10000000
    for t in range(1, n + 1):
        ts = "%02d:%02d:%02d.%06d" % (t // 3600000000 % 24, t // 60000000 % 60, t // 1000000 % 60, t % 1000000)
        if live and r.random() < (0.5 if len(live) > 20 else 0.3):
            j = r.randrange(len(live)) if kind % 2 else len(live) - 1 - min(len(live) - 1, int(r.expovariate(0.5)))
            a, s = live.pop(j)
            out.append("1,%s,free,0x%x,%d,0x0" % (ts, a, s))
        else:
            if kind < 2:
                s = int(2 ** r.uniform(9, 29))
            else:
                s = r.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]) * (1 << 20) + \
                    r.choice([0, 512, 4096, 3 << 19])
            addr += 1 << 30
            live.append((addr, s))
            out.append("1,%s,allocate,0x%x,%d,0x0" % (ts, addr, s))
    return "\n".join(out) + "\n"


ratios = {"native": [], "memtap": [], "memtap-vmm": []}
above = {"memtap": 0, "memtap-vmm": 0}
ns = {k: [] for k in ratios}
big = 0
for seed in range(FIRST, LAST + 1):
    path = os.path.join(TMP, "%d.csv" % seed)
    open(path, "w").write(log(seed))
    p = subprocess.run([MEMTAP, "replay", "--json", "--policy=native,memtap,memtap-vmm", path] + CONF,
                       capture_output=True, text=True)
    pol = {x["policy"]: x for x in json.loads(p.stdout)["policies"]}
    req = pol["native"]["peak_requested"]
    big += req > 1 << 30
    for k in ratios:
        ratios[k].append(pol[k]["peak_reserved"] / req)
        ns[k].append(pol[k]["ns_per_op"])
    for k in above:
        above[k] += pol[k]["peak_reserved"] > pol["native"]["peak_reserved"]
    os.unlink(path)
print("%d random RMM logs (seeds %d-%d%s), %d with a peak above 1 GiB; peak reserved / peak requested:"
      % (LAST - FIRST + 1, FIRST, LAST, "".join(", " + c for c in CONF), big))
for k, v in ratios.items():
    print("  %-10s median %.4f, largest %.4f, above 1.02 on %d%s" % (
        k, statistics.median(v), max(v), sum(x > 1.02 for x in v),
        "" if k == "native" else "; more than native on %d" % above[k]))
print("ns per operation (replay's own timing):")
for k, v in ns.items():
    print("  %-10s median %.0f, largest %.0f%s" % (
        k, statistics.median(v), max(v),
        "" if k == "native" else ", median of its ratio to native's %.2f" %
        statistics.median(a / b for a, b in zip(v, ns["native"]))))
print("targets: memtap-vmm never more than native and within 1.02 (above 1 GiB); memtap never more than native;"
      " memtap-vmm under 300 ns an operation")
os.rmdir(TMP)
