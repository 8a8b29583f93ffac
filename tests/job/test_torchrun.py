"""Whole jobs through a real launcher: `memtap run --policy cap --policy oom_snapshot --
torchrun --nproc_per_node 8 job.py` with --standalone's rendezvous (on a free port),
Debian's python3-torch on the gloo
backend, each rank allocating through simgpu with ctypes. No --dir: the ranks name the
run directory from torchrun's job id (TORCHELASTIC_RUN_ID). Rank 3 runs out of memory;
every other rank takes a snapshot of that moment and runs its on_peer_oom, and `memtap
report` on the directory shows all 8 ranks at the OOM next to their own peaks. Each rank
first makes and frees a larger allocation, and the others allocate more once their
snapshot is taken: what each held at the OOM is neither its peak before it nor its own."""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMGPU = os.path.join(B, "tools/simgpu/simgpu-run")
WORLD, OOM_RANK = 8, 3
MiB = 1 << 20

if os.environ.get("MT_SANITIZERS", "no") != "no":
    print("1..0 # SKIP torchrun is tested in the plain build (a sanitized library cannot be preloaded into python)")
    sys.exit(0)
if not shutil.which("torchrun"):
    print("1..0 # SKIP no torchrun (Debian's python3-torch; ./quickstart check installs it)")
    sys.exit(0)
# torchrun starts the ranks with its own interpreter, the one on its #! line
PY = open(shutil.which("torchrun")).readline()[2:].split()[0]
if subprocess.run([PY, "-c", "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"],
                  capture_output=True).returncode:
    print("1..0 # SKIP torchrun's %s has no torch.distributed with gloo (Debian's python3-torch has it)" % PY)
    sys.exit(0)

TMP = scratch("torchrun")
JOB = os.path.join(TMP, "job.py")
open(JOB, "w").write(r'''
import ctypes, glob, os, time
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
run = os.path.join(os.getcwd(), "memtap-torchrun-" + os.environ["TORCHELASTIC_RUN_ID"].replace("/", "_"))
rt = ctypes.CDLL("libcudart.so.13")
keep, first, later = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(first), ctypes.c_size_t(((rank + 1) * 64 + 40) << 20)) == 0
rt.cudaFree(first)
assert rt.cudaMalloc(ctypes.byref(keep), ctypes.c_size_t((rank + 1) * 64 << 20)) == 0


def wait(pattern):
    while not glob.glob(pattern):
        time.sleep(0.005)


wait(os.path.join(run, ".memtap", "rank-%d" % rank))  # the policy thread counts this process as the rank
dist.barrier()
if rank == OOM_RANK:
    more = ctypes.c_void_p()
    print("rank %d: cudaMalloc past the cap: %d" % (rank, rt.cudaMalloc(ctypes.byref(more), ctypes.c_size_t(8 << 30))))
else:
    wait(os.path.join(run, "snapshots", "*", "rank-%d.trace" % rank))
    assert rt.cudaMalloc(ctypes.byref(later), ctypes.c_size_t(96 << 20)) == 0
    rt.cudaFree(later)
dist.barrier()
rt.cudaFree(keep)
dist.destroy_process_group()
'''.replace("OOM_RANK", str(OOM_RANK)))
PEER = os.path.join(TMP, "peer.lua")
open(PEER, "w").write("""
memtap.on_peer_oom(function(ev)
  assert(memtap.append("peer-" .. memtap.rank .. ".txt", ev.rank .. " " .. ev.id .. "\\n"))
end)
""")

env = dict(os.environ, SIMGPU_MEM="16GiB", MEMTAP_CAP="4GiB", OMP_NUM_THREADS="1")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MEMTAP_DIR", "MEMTAP_OUTPUT"):
    env.pop(k, None)
# --redirects/--tee given as mappings: torch 1.13's default "0" reads as no setting under
# Python 3.11 (an IntFlag's zero member is not iterated) and torchrun fails; rank 0's
# stderr teed to torchrun's log folder is harmless
# --standalone's rendezvous, but on a free port: --standalone's fixed 29400 collides with
# another torchrun on the machine (a second test suite running beside this one)
with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
p = subprocess.run([MEMTAP, "run", "--policy", "cap", "--policy", "oom_snapshot", "--policy", PEER, "--", SIMGPU,
                    "torchrun", "--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:%d" % port,
                    "--rdzv_id", str(uuid.uuid4()), "--nproc_per_node", str(WORLD), "--redirects", "0:2", "--tee", "0:2",
                    "--log_dir", os.path.join(TMP, "logs"), JOB], cwd=TMP, env=env,
                   capture_output=True, text=True, timeout=600)
ok(p.returncode == 0, "torchrun ran 8 ranks on gloo under memtap, one of them out of memory",
   p.stdout[-1500:] + p.stderr[-2500:])
ok("rank %d: cudaMalloc past the cap: 2" % OOM_RANK in p.stdout, "rank %d's allocation past the cap failed" % OOM_RANK,
   p.stdout[-1500:])
runs = glob.glob(os.path.join(TMP, "memtap-torchrun-*"))
ok(len(runs) == 1, "one run directory, named from torchrun's job id", os.listdir(TMP))
run = runs[0] if runs else TMP
traces = sorted(os.path.basename(t) for t in glob.glob(os.path.join(run, "*.trace")))
ok(traces == ["rank-%d.trace" % r for r in range(WORLD)], "every rank's trace in it, by rank", traces)
snaps = sorted(os.path.basename(t) for t in glob.glob(os.path.join(run, "snapshots", "*", "*.trace")))
ok(snaps == ["rank-%d.trace" % r for r in range(WORLD)], "every rank took a snapshot of the OOM's moment", snaps)
peers = {r: open(os.path.join(run, "peer-%d.txt" % r)).read().split() if os.path.exists(
    os.path.join(run, "peer-%d.txt" % r)) else [] for r in range(WORLD)}
ok(all(len(peers[r]) == 2 and peers[r][0] == str(OOM_RANK) for r in range(WORLD) if r != OOM_RANK) and
   not peers[OOM_RANK], "on_peer_oom ran once in each of the 7 other ranks", peers)
q = subprocess.run([MEMTAP, "report", "--json", run], capture_output=True, text=True)
rep = json.loads(q.stdout) if q.returncode == 0 else {}
at = {x["rank"]: x for x in rep["ooms"][0]["ranks"]} if rep.get("ooms") else {}
held = {r: (r + 1) * 64 * MiB for r in range(WORLD)}
peak = {r: held[r] + (40 * MiB if r == OOM_RANK else 96 * MiB) for r in range(WORLD)}
ok(sorted(at) == list(range(WORLD)) and at[OOM_RANK]["state"] == "out of memory" and
   all(at[r]["state"] == "snapshot" for r in range(WORLD) if r != OOM_RANK) and
   {r: (at[r]["allocated_bytes"], at[r]["peak_allocated_bytes"]) for r in at} ==
   {r: (held[r], peak[r]) for r in range(WORLD)},
   "memtap report: every rank at the OOM (what it held then, from its snapshot), next to its own peak",
   q.stdout[-3000:] + q.stderr)
done()
