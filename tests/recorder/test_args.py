"""Each argument of every hooked entry point lands in its own field of the recorded event.
The entry points are read from memtap's own tables (src/recorder/driver_hooks.def,
runtime_hooks.def): a hook added there fails this test until tests/recorder/args.c calls
it and RULES below says what it records. args.c calls each with a distinct value for
every argument (two streams, pools, flags that are neither 0 nor 1, the current device 1
and device 2 where an argument names one) and prints what it passed and got back; RULES
turn each line into the events memtap must record, and the trace is held to them field by
field, in order (kind, device, address, size, aux, aux2, API, error): swapped, dropped
or constant arguments fail the hook whose call made the event. The same calls through
the CUPTI backend's callback (tests/cupti/cupti_args.c, CUPTI's parameter structures)
must make the same events. Then again under
--allocator=caching (`args cached`): the runtime's entry points memtap's caching allocator
serves, and PyTorch's pluggable entry points (memtap_alloc, memtap_free), whose blocks
carry the device and stream they were asked for and PyTorch's 512-byte rounding. simgpu's
runtime serves cudaGetDriverEntryPoint* through the driver's private lookup
(SIMGPU_ENTRY_POINTS=private), as NVIDIA's may: what they hand out is memtap's only if its
runtime hooks make it so."""
import difflib
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["MT_SRCDIR"], "tests"))
from tap import done, ok, scratch  # noqa: E402

B, S = os.environ["MT_BUILDDIR"], os.environ["MT_SRCDIR"]
MEMTAP = os.path.join(B, "tools/memtap/memtap")
ARGS = os.path.join(B, "tests/recorder/args")
TMP = scratch("args")
CURRENT = 1  # the device args.c makes current; 2 is the one arguments name

# enum mt_api (core/format.h)
DRIVER, RUNTIME, PITCH, ASYNC, POOL, MANAGED, HOST, VMM, BLOCK, ARRAY, REGISTER, IPC, GRAPH = range(1, 14)
FIELDS = ("kind", "device", "addr", "size", "aux", "aux2", "flags", "error")


def ev(kind, **f):
    e = dict(kind=kind, device=-1, addr=0, size=0, aux=0, aux2=0, flags=0, error=0)
    e.update(f)
    return e


def made(kind, api, a, size=None, device=CURRENT, aux=0, aux2=0):
    return [ev(kind, device=device, addr=a["addr"], size=a["size"] if size is None else size, aux=aux, aux2=aux2,
               flags=api)]


def gone(kind, a, aux=0, size=0):
    return [ev(kind, addr=a["addr"], aux=aux, size=size)]


def graph_nodes(a, st, key):
    """The allocation nodes a graph call backs (`backs=`) or frees (`frees=`), as args.c says."""
    return [st["nodes"][a[key]]] if key in a else []


def backs(a, st):
    return [ev("alloc", device=n["device"], addr=n["addr"], size=n["size"], aux2=a["exec"], flags=GRAPH)
            for n in graph_nodes(a, st, "backs")]


def frees(a, st):
    return [ev("free", addr=n["addr"]) for n in graph_nodes(a, st, "frees")]


def node(a, st):
    st["nodes"][a["addr"]] = a
    return []


# name -> (argument keys of its line that must hold distinct values, the events its call makes)
RULES = {
    "cuMemAlloc_v2": ("addr size", lambda a, st: made("alloc", DRIVER, a)),
    "cuMemAllocPitch_v2": ("addr width height elem pitch",
                           lambda a, st: made("alloc", PITCH, a, size=a["pitch"] * a["height"])),
    "cuMemFree_v2": ("addr", lambda a, st: gone("free", a)),
    "cuMemGetInfo_v2": ("free total", lambda a, st: [ev("meminfo", device=CURRENT, aux=a["free"], aux2=a["total"])]),
    "cuMemAllocManaged": ("addr size flags", lambda a, st: made("managed_alloc", MANAGED, a, aux=a["flags"])),
    "cuMemHostAlloc": ("addr size flags", lambda a, st: made("host_alloc", HOST, a, device=-1, aux=a["flags"])),
    "cuMemAllocHost_v2": ("addr size", lambda a, st: made("host_alloc", HOST, a, device=-1)),
    "cuMemFreeHost": ("addr", lambda a, st: gone("host_free", a)),
    "cuMemAllocAsync": ("addr size stream", lambda a, st: made("alloc", ASYNC, a, aux=a["stream"])),
    "cuMemAllocAsync_ptsz": ("addr size stream", lambda a, st: made("alloc", ASYNC, a, aux=a["stream"])),
    "cuMemFreeAsync": ("addr stream", lambda a, st: gone("free", a, aux=a["stream"])),
    "cuMemFreeAsync_ptsz": ("addr stream", lambda a, st: gone("free", a, aux=a["stream"])),
    "cuMemAllocFromPoolAsync": ("addr size pool stream",
                                lambda a, st: made("alloc", POOL, a, aux=a["stream"], aux2=a["pool"])),
    "cuMemAllocFromPoolAsync_ptsz": ("addr size pool stream",
                                     lambda a, st: made("alloc", POOL, a, aux=a["stream"], aux2=a["pool"])),
    "cuMemCreate": ("handle size device location",
                    lambda a, st: [ev("vmm_create", device=a["device"], size=a["size"], aux=a["handle"],
                                      flags=a["location"])]),
    "cuMemRelease": ("handle", lambda a, st: [ev("vmm_release", aux=a["handle"])]),
    "cuMemMap": ("addr size handle", lambda a, st: [ev("vmm_map", addr=a["addr"], size=a["size"], aux=a["handle"],
                                                       aux2=a["offset"])]),
    "cuMemUnmap": ("addr size", lambda a, st: gone("vmm_unmap", a, size=a["size"])),
    "cuMemAddressReserve": ("addr size alignment", lambda a, st: [ev("vmm_reserve", addr=a["addr"], size=a["size"])]),
    "cuMemAddressFree": ("addr size", lambda a, st: gone("vmm_addr_free", a, size=a["size"])),
    "cuMemSetAccess": ("addr size device flags", lambda a, st: [ev("vmm_access", device=a["device"], addr=a["addr"],
                                                                   size=a["size"], aux=a["flags"])]),
    "cuMemPoolCreate": ("pool device", lambda a, st: [ev("pool_create", device=a["device"], aux=a["pool"])]),
    "cuMemPoolDestroy": ("pool", lambda a, st: [ev("pool_destroy", aux=a["pool"])]),
    "cuMemPoolTrimTo": ("pool keep", lambda a, st: [ev("pool_trim", size=a["keep"], aux=a["pool"])]),
    "cuMemPoolSetAttribute": ("pool attr value", lambda a, st: [ev("pool_attr", size=a["value"], aux=a["pool"],
                                                                   aux2=a["attr"])]),
    "cuArrayCreate_v2": ("addr size", lambda a, st: made("alloc", ARRAY, a)),
    "cuArray3DCreate_v2": ("addr size", lambda a, st: made("alloc", ARRAY, a)),
    "cuArrayDestroy": ("addr", lambda a, st: gone("free", a)),
    "cuMipmappedArrayCreate": ("addr size", lambda a, st: made("alloc", ARRAY, a)),
    "cuMipmappedArrayDestroy": ("addr", lambda a, st: gone("free", a)),
    "cuMemHostRegister_v2": ("addr size flags", lambda a, st: made("host_alloc", REGISTER, a, device=-1,
                                                                   aux=a["flags"])),
    "cuMemHostUnregister": ("addr", lambda a, st: gone("host_free", a)),
    "cuIpcOpenMemHandle_v2": ("addr size flags", lambda a, st: made("alloc", IPC, a, device=-1, aux=a["flags"])),
    "cuIpcOpenMemHandle": ("addr size flags", lambda a, st: made("alloc", IPC, a, device=-1, aux=a["flags"])),
    # an allocation of another process's pool: an import, as an IPC handle's is
    "cuMemPoolImportPointer": ("addr size", lambda a, st: made("alloc", IPC, a, device=-1)),
    "cuIpcCloseMemHandle": ("addr", lambda a, st: gone("free", a)),
    # memory another process owns: an imported handle (aux2 1), on no device of this process
    "cuMemImportFromShareableHandle": ("handle", lambda a, st: [ev("vmm_create", aux=a["handle"], aux2=1, flags=1)]),
    # graph memory: recorded when the driver holds it (backs=) and when it goes back (frees=)
    "cuGraphAddMemAllocNode": ("graph addr size device", node),
    "cuGraphAddMemFreeNode": ("graph addr", lambda a, st: []),
    "cuGraphAddNode": ("graph addr size device", node),
    "cuGraphAddNode_v2": ("graph addr size device", node),
    "cuGraphInstantiate": ("exec graph", lambda a, st: backs(a, st)),
    "cuGraphInstantiate_v2": ("exec graph", lambda a, st: backs(a, st)),
    "cuGraphInstantiateWithFlags": ("exec graph", lambda a, st: backs(a, st)),
    "cuGraphInstantiateWithParams": ("exec graph", lambda a, st: backs(a, st)),
    "cuGraphInstantiateWithParams_ptsz": ("exec graph", lambda a, st: backs(a, st)),
    "cuGraphLaunch": ("exec stream", lambda a, st: backs(a, st) + frees(a, st)),
    "cuGraphLaunch_ptsz": ("exec stream", lambda a, st: backs(a, st) + frees(a, st)),
    "cuGraphUpload": ("exec stream", lambda a, st: backs(a, st)),
    "cuGraphUpload_ptsz": ("exec stream", lambda a, st: backs(a, st)),
    "cuGraphExecDestroy": ("exec", lambda a, st: frees(a, st)),
    "cuGraphDestroy": ("graph", lambda a, st: frees(a, st)),
    "cuDeviceGraphMemTrim": ("device", lambda a, st: frees(a, st)),
    # the runtime's
    "cudaMalloc": ("addr size", lambda a, st: made("alloc", RUNTIME, a)),
    "cudaFree": ("addr", lambda a, st: gone("free", a)),
    "cudaMallocAsync": ("addr size stream", lambda a, st: made("alloc", ASYNC, a, aux=a["stream"])),
    "cudaMallocAsync_ptsz": ("addr size stream", lambda a, st: made("alloc", ASYNC, a, aux=a["stream"])),
    "cudaFreeAsync": ("addr stream", lambda a, st: gone("free", a, aux=a["stream"])),
    "cudaFreeAsync_ptsz": ("addr stream", lambda a, st: gone("free", a, aux=a["stream"])),
    "cudaMallocFromPoolAsync": ("addr size pool stream",
                                lambda a, st: made("alloc", POOL, a, aux=a["stream"], aux2=a["pool"])),
    "cudaMallocFromPoolAsync_ptsz": ("addr size pool stream",
                                     lambda a, st: made("alloc", POOL, a, aux=a["stream"], aux2=a["pool"])),
    "cudaMallocManaged": ("addr size flags", lambda a, st: made("managed_alloc", MANAGED, a, aux=a["flags"])),
    "cudaMallocPitch": ("addr width height pitch", lambda a, st: made("alloc", PITCH, a,
                                                                      size=a["pitch"] * a["height"])),
    "cudaMalloc3D": ("addr width height depth pitch",
                     lambda a, st: made("alloc", PITCH, a, size=a["pitch"] * a["height"] * a["depth"])),
    "cudaMallocHost": ("addr size", lambda a, st: made("host_alloc", HOST, a, device=-1)),
    "cudaHostAlloc": ("addr size flags", lambda a, st: made("host_alloc", HOST, a, device=-1, aux=a["flags"])),
    "cudaFreeHost": ("addr", lambda a, st: gone("host_free", a)),
    "cudaMemGetInfo": ("free total", lambda a, st: [ev("meminfo", device=CURRENT, aux=a["free"], aux2=a["total"])]),
    # not hooked: the runtime's call reaches the driver's hook, which records it
    "cudaMemPoolCreate": ("pool device", lambda a, st: [ev("pool_create", device=a["device"], aux=a["pool"])]),
    "cudaMemPoolDestroy": ("pool", lambda a, st: [ev("pool_destroy", aux=a["pool"])]),
}

# the driver's cuMemAlloc as each hands it out, called: memtap's wrapper records it
RULES.update({name: ("addr size", lambda a, st: made("alloc", DRIVER, a))
              for name in ("cudaGetDriverEntryPoint", "cudaGetDriverEntryPoint_ptsz",
                           "cudaGetDriverEntryPointByVersion", "cudaGetDriverEntryPointByVersion_ptsz")})

driver = re.findall(r"^DRV\(\w+,\s*(\w+),", open(os.path.join(S, "src/recorder/driver_hooks.def")).read(), re.M)
runtime = re.findall(r"^RT\((\w+)\)", open(os.path.join(S, "src/recorder/runtime_hooks.def")).read(), re.M)
hooked = driver + runtime
ok(len(driver) > 40 and len(runtime) > 10, "the hooked entry points, from driver_hooks.def and runtime_hooks.def",
   (len(driver), len(runtime)))
ok(not [h for h in hooked if h not in RULES], "every hooked entry point has a rule here saying what it records",
   [h for h in hooked if h not in RULES])


def round_block(n):
    """PyTorch's round_size (native policy): at least 512 bytes, a multiple of 512."""
    return max(512, (n + 511) // 512 * 512)


def cached_alloc(a, st, device=CURRENT, stream=0):
    st["blocks"][a["addr"]] = (round_block(a["size"]), stream)
    return [ev("alloc", device=device, addr=a["addr"], size=a["size"], aux=stream, aux2=round_block(a["size"]),
               flags=BLOCK)]


def cached_free(a, st, stream=0):
    """A block goes back at its size, with the stream it was made on; other memory as without the cache."""
    if a["addr"] in st["blocks"]:
        size, made_on = st["blocks"].pop(a["addr"])
        return [ev("free", addr=a["addr"], size=size, aux=made_on)]
    return gone("free", a, aux=stream)


# what --allocator=caching changes: the entry points the cache serves, and PyTorch's own
CACHED = {
    "cudaMalloc": ("addr size", lambda a, st: cached_alloc(a, st)),
    "cudaMallocAsync": ("addr size stream", lambda a, st: cached_alloc(a, st, stream=a["stream"])),
    "cudaMallocAsync_ptsz": ("addr size stream", lambda a, st: cached_alloc(a, st, stream=a["stream"])),
    "cudaFree": ("addr", lambda a, st: cached_free(a, st)),
    "cudaFreeAsync": ("addr stream", lambda a, st: cached_free(a, st, a["stream"])),
    "cudaFreeAsync_ptsz": ("addr stream", lambda a, st: cached_free(a, st, a["stream"])),
    "memtap_alloc": ("addr size device stream",
                     lambda a, st: cached_alloc(a, st, device=a["device"], stream=a["stream"])),
    "memtap_free": ("addr size device stream", lambda a, st: cached_free(a, st)),
    "memtap_record_stream": ("addr stream", lambda a, st: []),
}


def trace_of(pid):
    found = []
    for t in glob.glob(os.path.join(TMP, "*.trace")):
        q = subprocess.run([MEMTAP, "report", "--json", t], capture_output=True, text=True)
        if q.stdout.startswith("{") and json.loads(q.stdout)["process"]["pid"] == str(pid):
            found.append(t)
    return found[0] if len(found) == 1 else None


def recorded(path, segments):
    """The events the job's calls made: memtap's own (its threads' and devices' first sight,
    its reading of the driver's count at a device's first use, the exit, the caching
    allocator's notes) left out, and the caching allocator's segments into `segments`."""
    q = subprocess.run([MEMTAP, "dump", "--json", path], capture_output=True, text=True)
    out = []
    for line in q.stdout.splitlines():
        e = json.loads(line)
        if e["kind"] in ("thread", "device", "exit", "nvtx_mark") or (e["kind"] == "meminfo" and e["flags"]):
            continue
        if e["kind"] in ("segment_alloc", "segment_free"):
            segments.append((len(out), {k: e[k] for k in FIELDS}))
            continue
        out.append({k: e[k] for k in FIELDS})
    return out


def check(mode, opts, argv, rules, must):
    """Runs args.c under memtap with `opts` (or takes `argv` as what a program printed when
    `opts` is None); every hook of `must` is called and its events match."""
    if opts is None:
        out = argv
    else:
        p = subprocess.run([MEMTAP, "run", "-q", "-o", os.path.join(TMP, mode + "-%p.trace"), *opts, "--", ARGS,
                            *argv], capture_output=True, text=True, env=dict(os.environ, SIMGPU_DEVICES="3",
                                                                             SIMGPU_ENTRY_POINTS="private"),
                           timeout=600)
        ok(p.returncode == 0, "%s: args.c ran on simgpu under memtap" % mode, p.stderr[-2000:])
        out = p.stdout
    calls, pid = {}, None
    for line in out.splitlines():  # the lines, by process
        name, *kv = line.split()
        a = {k: int(v) for k, v in (x.split("=") for x in kv)}
        if name == "process":
            pid = a["pid"]
            continue
        calls.setdefault(pid, []).append((name, a))
    called = {name for lines in calls.values() for name, _ in lines}
    ok(not [h for h in must if h not in called], "%s: args.c calls every entry point" % mode,
       [h for h in must if h not in called])
    ok(not [n for n in called if n not in rules], "%s: and nothing this test has no rule for" % mode,
       called - set(rules))
    # distinct values: a value two arguments share cannot tell them apart in the trace
    same = []
    for lines in calls.values():
        for name, a in lines:
            if name not in rules or a.get("spare"):
                continue
            keys = rules[name][0].split()
            vals = [a[k] for k in keys if k in a]
            if len(vals) != len(keys) or len(set(vals)) != len(vals) or 0 in vals:
                same.append((name, a))
    ok(not same, "%s: each call's arguments and results hold distinct values, none of them 0" % mode, same)
    bad = {}
    for pid, lines in calls.items():
        st = {"nodes": {}, "blocks": {}}
        want, owner = [], []
        for name, a in lines:
            if name in rules:
                for e in rules[name][1](a, st):
                    want.append(e)
                    owner.append(name)
        path = trace_of(pid)
        if not ok(path, "%s: process %d's trace" % (mode, pid)):
            continue
        segments = []
        got = recorded(path, segments)
        key = [tuple(e[k] for k in FIELDS) for e in want]
        have = [tuple(e[k] for k in FIELDS) for e in got]
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, key, have, autojunk=False).get_opcodes():
            if op == "equal":
                continue
            for i in range(i1, i2):
                bad.setdefault(owner[i], []).append({"want": want[i], "got": got[j1:j2]})
            if i1 == i2:  # events no call makes
                bad.setdefault("(no call)", []).append({"got": got[j1:j2]})
        # a segment is made for the block that follows it, on that block's device and stream
        for at, g in segments:
            nxt = got[at] if at < len(got) else {}
            if g["kind"] == "segment_alloc" and (nxt.get("flags") != BLOCK or (g["device"], g["aux"]) !=
                                                 (nxt["device"], nxt["aux"])):
                bad.setdefault("(segments)", []).append({"segment": g, "block": nxt})
    for h in must + [n for n in sorted(called) if n not in must]:
        ok(h not in bad, "%s: %s: each argument in its own field of what is recorded" % (mode, h), bad.get(h))
    ok("(no call)" not in bad, "%s: nothing is recorded that no call made" % mode, bad.get("(no call)"))
    ok("(segments)" not in bad, "%s: each segment on the device and stream of the block it was made for" % mode,
       bad.get("(segments)"))


check("hooks", [], [], RULES, hooked)
# the CUPTI backend: the driver's entry points through its callback, the same rules
CUPTI_LIB, FAKE = os.path.join(B, "src/cupti/.libs/libmemtap-cupti.so"), os.path.join(B, "tests/cupti/.libs")
env = dict(os.environ, MEMTAP_OUTPUT=os.path.join(TMP, "cupti-%p.trace"), SIMGPU_DEVICES="3",
           LD_LIBRARY_PATH=FAKE + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
q = subprocess.run([os.path.join(B, "tests/cupti/cupti_args"), CUPTI_LIB], capture_output=True, text=True, env=env,
                   timeout=600)
ok(q.returncode == 0, "cupti: every driver entry point played through the CUPTI backend's callback", q.stderr[-2000:])
check("cupti", None, q.stdout, RULES, driver)
check("cached", ["--allocator=caching", "-O", "alloc_policy=native"], ["cached"], dict(RULES, **CACHED),
      runtime + ["memtap_alloc", "memtap_free", "memtap_record_stream"])
done()
