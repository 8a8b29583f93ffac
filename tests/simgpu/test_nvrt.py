"""NVIDIA's own libcudart.so.13 on simgpu's driver, plain and under memtap. It makes its
cuGetProcAddress lookups (the list comes from the real binary, through $SIMGPU_LOG, so
a new toolkit is checked as it is), every one is served, and it stops cleanly at
cuGetExportTable, which simgpu refuses. Replaying that list under memtap: a wrapper for
each allocation entry memtap hooks, at the ABI of the version asked (the symbol the
driver returned), the driver's own pointer for everything else, the driver's result
and status for all; and every entry that makes, imports or gives back memory, told by
CUDA's own names rather than memtap's list, comes back wrapped at every version the
runtime asks. simgpu's runtime makes the same lookups in the same order."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B = os.environ["MT_BUILDDIR"]
S = os.environ["MT_SRCDIR"]
CUDA = os.environ.get("MT_CUDA_HOME", "/usr/local/cuda")
REAL = os.path.join(CUDA, "lib64", "libcudart.so.13")
NVRT = os.path.join(B, "tests/simgpu/nvrt")
MEMTAP = os.path.join(B, "tools/memtap/memtap")
SIMRT = os.path.join(B, "tools/simgpu/.libs/libcudart.so.13")
TMP = scratch("nvrt")

if not os.path.exists(REAL):
    print("1..0 # SKIP no NVIDIA libcudart.so.13 under %s" % CUDA)
    sys.exit(0)

# only simgpu's driver on the library path: libcudart.so.13 is NVIDIA's
DRVONLY = os.path.join(TMP, "driver")
os.makedirs(DRVONLY)
os.symlink(os.path.join(B, "tools/simgpu/.libs/libcuda.so.1"), os.path.join(DRVONLY, "libcuda.so.1"))
HOOKED = set(re.findall(r"^DRV\(\w+, (\w+),", open(os.path.join(S, "src/recorder/driver_hooks.def")).read(), re.M))

# Memory entries, by CUDA's naming: a name about memory, arrays, graphs or IPC with a verb
# that makes or gives back (cuGraphics*, the graphics interop, maps other APIs' resources)
MEMORY_NOUN = re.compile(r"Mem|Array|Graph|Ipc")
MEMORY_VERB = re.compile(r"Alloc|Free|Create|Release|Destroy|Map|Unmap|Import|Register|Unregister|Reserve|"
                         r"Instantiate|Launch|Upload|AddNode|Trim|Open|Close")
# what those words also name that makes no memory, or memory memtap does not follow
NOT_MEMORY = {
    "cuGraphCreate": "an empty graph: its memory nodes are followed as they are added",
    "cuGraphConditionalHandleCreate": "a conditional node's handle",
    "cuGraphDestroyNode": "cuda.h: no node of a graph with memory nodes can be destroyed",
    "cuGraphMemAllocNodeGetParams": "reads a node's parameters",
    "cuGraphMemFreeNodeGetParams": "reads a node's parameters",
    "cuGraphReleaseUserObject": "a user object's reference",
    "cuIpcOpenEventHandle": "an event",
    "cuMemPoolImportFromShareableHandle": "a pool's handle: its allocations come with cuMemPoolImportPointer",
    "cuImportExternalMemory": "Vulkan's or Direct3D's memory: not followed (docs/RECORDER.md)",
    "cuExternalMemoryGetMappedBuffer": "Vulkan's or Direct3D's memory: not followed (docs/RECORDER.md)",
    "cuExternalMemoryGetMappedMipmappedArray": "Vulkan's or Direct3D's memory: not followed (docs/RECORDER.md)",
    "cuDestroyExternalMemory": "Vulkan's or Direct3D's memory: not followed (docs/RECORDER.md)",
}


def is_memory(name):
    return (bool(MEMORY_NOUN.search(name) and MEMORY_VERB.search(name[2:])) and name not in NOT_MEMORY
            and not name.startswith("cuGraphics"))


def run(name, argv, libpath, memtap=False):
    """Runs argv with $SIMGPU_LOG; returns (process, gpa rows, other log lines)."""
    log = os.path.join(TMP, name + ".log")
    env = dict(os.environ, SIMGPU_LOG=log, LD_LIBRARY_PATH=libpath)
    if REAL in argv:
        # NVIDIA's runtime unloads the driver when it gives up: LeakSanitizer then no longer
        # sees the driver's globals, which still hold what they allocated, and calls it leaked
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    if memtap:
        argv = [MEMTAP, "run", "-o", os.path.join(TMP, name + "-%p.trace"), "--", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    rows = [ln.split()[1:] for ln in lines if ln.startswith("gpa ")]
    return p, rows, [ln for ln in lines if not ln.startswith("gpa ")]


def asked(rows):
    return [tuple(r[:3]) for r in rows if r[0] != "(empty)"]


# ---- NVIDIA's runtime: its lookups are all served, it stops at the export table ----
p, rows, other = run("real", [NVRT, "run", REAL], DRVONLY)
lookups = asked(rows)
ok(p.returncode == 0 and re.match(r"cudaGetDeviceCount [1-9]\d* ", p.stdout), "NVIDIA's runtime fails cleanly",
   p.stdout + p.stderr)
ok("refused cuGetExportTable" in other, "at cuGetExportTable, which simgpu refuses", other[:5])
ok(len(lookups) >= 100, "it looks up the driver through cuGetProcAddress (%d lookups)" % len(lookups))
bad = [r for r in rows if r[0] != "(empty)" and (r[3] != "0" or r[4] != "0")]
ok(not bad, "simgpu serves every lookup at the version and flags asked", bad[:10])
ok(any(r[2] == "2" for r in lookups), "including per-thread-default-stream twins")

# ---- the same under memtap: the same lookups reach the driver, the same failure ----
pm, rows_m, other_m = run("real-memtap", [NVRT, "run", REAL], DRVONLY, memtap=True)
ok(pm.returncode == 0 and pm.stdout == p.stdout, "under memtap it fails the same way", pm.stdout + pm.stderr)
ok(asked(rows_m) == lookups, "under memtap the same lookups reach the driver")

# ---- simgpu's runtime makes NVIDIA's lookups ----
ps, rows_s, _ = run("simgpu", [NVRT, "run", SIMRT], os.path.join(B, "tools/simgpu/.libs"))
ok(ps.returncode == 0 and ps.stdout.startswith("cudaGetDeviceCount 0 1"), "simgpu's runtime runs",
   ps.stdout + ps.stderr)
mine = asked(rows_s)
ok(mine == lookups, "simgpu's runtime makes the same lookups, in the same order",
   "\n".join("%s: %s / %s" % (i, a, b) for i, (a, b) in enumerate(zip(mine + [None] * 999, lookups))
             if a != b)[:2000] or "%d vs %d" % (len(mine), len(lookups)))

# ---- replaying the lookups under memtap: wrappers exactly where memtap hooks ----
listing = os.path.join(TMP, "lookups.txt")
with open(listing, "w") as f:
    f.writelines(" ".join(r) + "\n" for r in lookups)
for under in (False, True):
    tag = "under memtap" if under else "plain"
    pr, drv, _ = run("replay-" + tag.split()[-1], [NVRT, "replay", listing], DRVONLY, memtap=under)
    got = [ln.split() for ln in pr.stdout.splitlines()]
    drv = [r for r in drv if r[0] != "(empty)"]
    if not ok(pr.returncode == 0 and len(got) == len(lookups) == len(drv),
              "replay %s: every lookup made and answered once" % tag,
              "%d %d %d %s" % (len(got), len(lookups), len(drv), pr.stderr)):
        continue
    wrong_status, wrong_ptr, wrapped = [], [], 0
    for g, d in zip(got, drv):
        name, version, flags, result, status, symbol, lib, ptr = g
        if (result, status) != (d[3], d[4]):
            wrong_status.append((g, d))
        want_wrap = under and (d[5] in HOOKED or name == "cuGetProcAddress") and int(version) <= 13999
        if want_wrap:
            wrapped += 1
            # the wrapper for the ABI asked: the one memtap exports under the driver's symbol,
            # or the wrapper of that same row made for the driver handle asked (no symbol)
            good = lib.startswith("libmemtap") and (name == "cuGetProcAddress" or symbol in (d[5], "-"))
        else:
            good = int(ptr, 16) == int(d[6], 16)
        if not good:
            wrong_ptr.append((g, d))
    ok(not wrong_status, "replay %s: the driver's result and status for every lookup" % tag, wrong_status[:5])
    if under:
        memory = [g for g in got if is_memory(g[0])]
        bare = [g for g in memory if not g[6].startswith("libmemtap")]
        ok(len(memory) >= 40 and not bare, "replay under memtap: each of the %d memory entries the runtime asks for, "
           "at each version and flag it asks, comes back wrapped" % len(memory), bare)
        names = {g[0] for g in got}
        ok(set(NOT_MEMORY) <= names, "the entries told apart as making no memory are ones the runtime asks for",
           set(NOT_MEMORY) - names)
    ok(not wrong_ptr, "replay %s: %s" % (tag, "a wrapper at the ABI asked for each of %d allocation entries, "
                                         "the driver's pointer for the rest" % wrapped if under
                                         else "the driver's pointer for every lookup"), wrong_ptr[:5])
    if under:
        ok(wrapped >= 10, "replay under memtap: the runtime asks for memtap's allocation entries (%d)" % wrapped)
done()
