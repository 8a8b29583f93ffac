"""Writes the hostile corpus the readers are tested on (test_readers.py) and fuzzed from
(tests/fuzz): memtap traces whose every chunk has a correct checksum, pickles made with
the standard pickle module and by hand, RMM logs and DeepSpeed configs. Each file is an
attack or an edge a reader must survive: what each should do is in test_readers.py.
Deterministic: run it again and git sees no change.

usage: python3 tests/hostile/make_corpus.py   (from anywhere; writes next to itself)"""
import json
import os
import pickle
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mtrace import PYFRAME, Trace, basic_events  # noqa: E402

STRINGS = [(1, "cuda:0"), (2, "forward"), (3, "step")]
STACKS = [(1, [0x401000, 0x402000]), (2, [0x401100])]


def write(kind, name, data):
    os.makedirs(os.path.join(HERE, kind), exist_ok=True)
    with open(os.path.join(HERE, kind, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def trace(events, strings=STRINGS, stacks=STACKS, modules=None, end=True):
    t = Trace().strings(strings).stacks(stacks)
    if modules:
        t.modules(modules)
    t.events(events)
    if end:
        t.end(0, len(events))
    return t.bytes()


def with_event(extra, at=2):
    ev = basic_events()
    ev.insert(at, extra)
    return ev


# ---- memtap traces (valid checksums) ----
def traces():
    # a healthy trace: the other side of memtap diff in test_readers.py
    write("traces", "healthy.trace", trace(basic_events()))
    # issue 26 item 4: a thread index of 0xffffffff wrapped `thread + 16` and crashed every reader;
    # a thread index is any 32-bit number (a forked child keeps its parent's), so this trace is valid
    write("traces", "thread-0xffffffff.trace", trace(with_event(
        dict(kind="range_push", thread=0xFFFFFFFF, time=2001, aux=2))))
    write("traces", "thread-sparse.trace", trace([
        dict(kind="thread", thread=7, time=2000, aux=70), dict(kind="thread", thread=4000000000, time=2000, aux=71),
        dict(kind="device", thread=7, time=2001, device=0, size=80 << 30, aux=1),
        dict(kind="range_push", thread=4000000000, time=2002, aux=2),
        dict(kind="alloc", thread=4000000000, time=2003, device=0, addr=0x200000000000, size=4096, stack=1, flags=2),
        dict(kind="range_pop", thread=4000000000, time=2004),
        dict(kind="alloc", thread=7, time=2005, device=0, addr=0x200000100000, size=8192, stack=2, flags=2)]))
    # indices past the trace's own tables
    write("traces", "stack-out-of-table.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0x200000200000, size=4096, stack=99, flags=2))))
    write("traces", "phase-out-of-table.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0x200000200000, size=4096, phase=77, flags=2))))
    write("traces", "range-name-out-of-table.trace", trace(with_event(
        dict(kind="range_push", thread=1, time=2001, aux=1 << 40))))
    # ... by one: the tables' last ids are stack 2 and string 3
    write("traces", "stack-one-past-table.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0x200000200000, size=4096, stack=3, flags=2))))
    write("traces", "phase-one-past-table.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0x200000200000, size=4096, phase=4, flags=2))))
    write("traces", "range-name-one-past-table.trace", trace(with_event(
        dict(kind="range_push", thread=1, time=2001, aux=4))))
    write("traces", "device-name-out-of-table.trace", trace([
        dict(kind="thread", thread=1, time=2000, aux=1), dict(kind="device", thread=1, time=2001, device=3, aux=1000)]))
    write("traces", "mark-name-out-of-table.trace", trace(with_event(
        dict(kind="mark", thread=1, time=2001, aux=0xFFFFFFFF))))
    # tables whose ids would make the reader allocate far more than the file holds
    t = Trace().strings([(1 << 30, "x")]).events(basic_events()).end()
    write("traces", "string-id-huge.trace", t.bytes())
    t = Trace().strings(STRINGS).stacks([(1 << 30, [0x401000])]).events(basic_events()).end()
    write("traces", "stack-id-huge.trace", t.bytes())
    t = Trace().strings(STRINGS).stacks([(1, 4096, b"\x02")]).events(basic_events()).end()
    write("traces", "stack-depth-lie.trace", t.bytes())
    t = Trace().strings([(1, "cuda:0"), (0, "not none")]).events(basic_events()).end()
    write("traces", "string-id-zero.trace", t.bytes())
    # 32-bit fields written wider than 32 bits
    write("traces", "stack-id-33-bits.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0x200000200000, size=4096, stack=(1 << 32) + 1,
             flags=2))))
    # sizes no address space holds
    write("traces", "size-wraps.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0xFFFFFFFFFFFFF000, size=1 << 20, flags=2))))
    write("traces", "size-2-63.trace", trace(with_event(
        dict(kind="alloc", thread=1, time=2001, device=0, addr=0x1000, size=1 << 63, flags=2))))
    write("traces", "vmm-create-huge.trace", trace(with_event(
        dict(kind="vmm_create", thread=1, time=2001, device=0, aux=5, size=(1 << 64) - 1, flags=1))))
    write("traces", "module-wraps.trace", trace(basic_events(), modules=[
        ("/usr/lib/libhostile.so", "", 0, 0xFFFFFFFFFFFFF000, 1 << 20)]))
    # a module that is a pipe: opening it for symbols would wait forever
    write("traces", "module-is-stdin.trace", trace(basic_events(), modules=[
        ("/dev/stdin", "", 0x400000, 0x400000, 0x10000), ("/proc/self/fd/0", "", 0x500000, 0x500000, 0x10000)]))
    # Python frames whose string is not in the table: read as an empty name
    write("traces", "pyframe-out-of-table.trace", trace(basic_events(), stacks=[
        (1, [PYFRAME | 0xFFFFFFFF, PYFRAME | 2, 0x401000])]))
    # times at both ends of the clock, and backwards
    write("traces", "time-extremes.trace", trace([
        dict(kind="thread", thread=1, time=(1 << 64) - 1, aux=1),
        dict(kind="device", thread=1, time=0, device=0, size=80 << 30, aux=1),
        dict(kind="alloc", thread=1, time=(1 << 64) - 2, device=0, addr=0x200000000000, size=4096, flags=2),
        dict(kind="alloc", thread=1, time=1, device=0, addr=0x200000100000, size=4096, flags=2),
        dict(kind="free", thread=1, time=(1 << 63), device=0, addr=0x200000000000)]))
    # memory the analyses never saw made: frees, unmaps and releases of nothing, a map of a released handle
    write("traces", "vmm-disorder.trace", trace([
        dict(kind="thread", thread=1, time=2000, aux=1),
        dict(kind="vmm_unmap", thread=1, time=2001, addr=0x300000000000, size=1 << 21),
        dict(kind="vmm_release", thread=1, time=2002, aux=9),
        dict(kind="vmm_create", thread=1, time=2003, device=0, aux=9, size=1 << 21, flags=1),
        dict(kind="vmm_release", thread=1, time=2004, aux=9),
        dict(kind="vmm_map", thread=1, time=2005, addr=0x300000000000, size=1 << 21, aux=9, device=0),
        dict(kind="vmm_map", thread=1, time=2006, addr=0x300000000000, size=1 << 21, aux=9, device=0),
        dict(kind="vmm_unmap", thread=1, time=2007, addr=0x300000000000, size=1 << 40),
        dict(kind="free", thread=1, time=2008, device=0, addr=0x12345),
        dict(kind="segment_free", thread=1, time=2009, device=0, addr=0x400000000000, size=1 << 21),
        dict(kind="tag_pop", thread=1, time=2010), dict(kind="range_pop", thread=1, time=2011),
        dict(kind="range_end", thread=1, time=2012, aux2=77)]))
    # every device a trace can name, each with an allocation
    ev = [dict(kind="thread", thread=1, time=2000, aux=1)]
    for d in range(255):
        ev.append(dict(kind="device", thread=1, time=2001 + d, device=d, size=1 << 30, aux=1))
        ev.append(dict(kind="alloc", thread=1, time=2001 + d, device=d, addr=0x200000000000 + (d << 24), size=4096,
                       stack=1, flags=2))
    write("traces", "devices-255.trace", trace(ev))
    # ranges pushed 10000 deep and never popped
    ev = [dict(kind="thread", thread=1, time=2000, aux=1)]
    ev += [dict(kind="range_push", thread=1, time=2001 + i, aux=2 + i % 2) for i in range(10000)]
    ev.append(dict(kind="alloc", thread=1, time=30000, device=0, addr=0x200000000000, size=4096, stack=1, flags=2))
    write("traces", "ranges-10000-deep.trace", trace(ev))
    # the END chunk first, then events: still read, the file was closed at some point
    t = Trace().strings(STRINGS).stacks(STACKS).end().events(basic_events())
    write("traces", "end-before-events.trace", t.bytes())
    # a chunk type this memtap does not know, with a valid checksum: skipped, and said (the
    # checksum does not cover the header: a flipped type byte looks just like this)
    from mtrace import chunk
    t = Trace().strings(STRINGS).stacks(STACKS).raw(chunk(99, b"\xff" * 64)).events(basic_events()).end()
    write("traces", "unknown-chunk.trace", t.bytes())
    # the reader's first bytes: a two-byte "pickle" ending in STOP (libFuzzer: read past the buffer)
    write("traces", "two-bytes.trace", b"\x01.")


# ---- pickles ----
def entry(action, addr, size, t, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1718000000000000 + t}
    e.update(extra)
    return e


# Bombs by size: the corpus holds small ones; test_readers.py makes them big at test time.
def shared_dict(keys, refs):
    shared = {"k%05d" % i: i for i in range(keys)}
    shared.update(action="alloc", addr=0x7F0000000000, size=512, stream=0, time_us=1718000000000000)
    return pickle.dumps({"segments": [], "device_traces": [[shared] * refs]}, protocol=4)


def expansion_devices(entries):
    per_device = [entry("alloc", 0x7F0000000000 + 512 * i, 512, i) for i in range(entries)]
    return pickle.dumps({"segments": [], "device_traces": [per_device] * 255}, protocol=4)


def shared_long_name(length, frames):
    name = "f" * length
    return pickle.dumps({"segments": [], "device_traces": [[
        entry("alloc", 0x7F0000000000 + 512 * i, 512, i, frames=[{"name": name, "filename": "t.py", "line": i}])
        for i in range(frames)]]}, protocol=4)


def segment_keys_again(times):
    """A dict not a segment (its address is no number) given a segment's keys again and
    again, each time by SETITEMS: it was read as a segment at each, all its pairs each time."""
    head = (b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces]]a\x8c\x04meta}\x94"  # meta: memo 0
            b"(\x8c\x07address\x8c\x01x\x8c\x0atotal_size\x94K\x01\x8c\x06blocks\x94]\x94u")  # memo 1, 2, 3
    again = b"h\x00(h\x01K\x01h\x02h\x03u0"  # meta, MARK, total_size 1, blocks [], SETITEMS, POP
    return head + again * times + b"u."


def pickles():
    # issue 26 item 9: a 9-byte memo bomb (LONG_BINPUT at 2^26 - 1) took 514 MB
    write("pickles", "memo-bomb.pickle", b"\x80\x04N" + b"r" + struct.pack("<I", (1 << 26) - 1) + b".")
    write("pickles", "memo-bomb-text.pickle", b"Np4294967295\n.")
    write("pickles", "memo-index-negative.pickle", b"Np-1\n.")
    # issue 26 item 10: INT's text read past the end of the input
    write("pickles", "int-text-overread.pickle", b"\x80\x01I\n")
    write("pickles", "float-text-overread.pickle", b"\x80\x01F\n")
    write("pickles", "int-text-too-long.pickle", b"I" + b"9" * 80 + b"\n.")
    write("pickles", "int-text-65-bits.pickle", b"I36893488147419103232\n.")
    # issue 26 item 9: one big dict shared by every entry, looked up for each (2.85 s for 129 KB before)
    write("pickles", "shared-dict.pickle", shared_dict(6000, 12000))
    # one list of entries referred to by all 255 devices: an expansion bomb
    write("pickles", "expansion-devices.pickle", expansion_devices(1500))
    # segments that all share one segment holding many blocks
    blocks = [{"address": 0x7F0000000000 + 512 * i, "size": 512, "requested_size": 512, "state": "inactive"}
              for i in range(2000)]
    seg = {"device": 0, "address": 0x7F0000000000, "total_size": 2000 * 512, "stream": 0, "blocks": blocks}
    write("pickles", "expansion-segments.pickle", pickle.dumps({"segments": [seg] * 5000, "device_traces": []},
                                                               protocol=4))
    # many frames sharing one long function name: copied once, not once per frame
    write("pickles", "shared-long-name.pickle", shared_long_name(100000, 2000))
    # a frame list holding itself
    loop = []
    loop.append(loop)
    write("pickles", "frames-cycle.pickle", pickle.dumps({"segments": [], "device_traces": [[
        entry("alloc", 0x7F0000000000, 512, 1, frames=loop)]]}, protocol=4))
    # a dict whose frames list holds the dict itself, the list not memoized (hand-written
    # opcodes: Python's pickler memoizes every list): making the dict a frame gave back the
    # list's last reference while its stack was being read (a use after free)
    write("pickles", "frames-holds-its-dict.pickle", b"\x80\x04}\x94(\x8c\x06frames](h\x00h\x00eu.")
    write("pickles", "frames-holds-its-dict-1.pickle", b"\x80\x04}\x94(\x8c\x06frames](h\x00eu.")
    # a segment that is its own block, its list of blocks not memoized: making the block a
    # token gave back the list while it was being read (seen under ASan's poisoning of
    # the pickle reader's free values); alone, and in a list of segments with a pool id
    write("pickles", "segment-is-its-block.pickle", b"\x80\x04}\x94(\x8c\x06blocks](h\x00e\x8c\x0atotal_sizeK\x00u.")
    # a block whose frames are its segment's own list of blocks (protocol 0: the list is
    # read whole as the block's frames while the segment's blocks were read: a crash), a
    # segment that is its own block and also has its list of blocks as its frames, and a
    # segment dict given a pair after it looked whole
    def self_referencing(protocol, frames_is_blocks=True):
        blocks = []
        blocks += [{"address": 0x10000000 + i * (1 << 20), "size": 1 << 20, "requested_size": (1 << 20) - 1,
                    "state": "active_allocated", "frames": blocks if i == 0 and frames_is_blocks else []}
                   for i in range(2)]
        seg = {"device": 0, "address": 0x10000000, "total_size": 2 << 20, "stream": 0, "segment_type": "large",
               "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}
        return pickle.dumps({"segments": [seg], "device_traces": [[]], "allocator_settings": {}}, protocol=protocol)
    write("pickles", "block-frames-are-its-blocks-p0.pickle", self_referencing(0))
    write("pickles", "block-frames-are-its-blocks-p4.pickle", self_referencing(4))
    seg = {"device": 0, "address": 0x10000000, "total_size": 2 << 20, "size": 1 << 20, "requested_size": 100,
           "state": "active_allocated"}
    seg["blocks"] = seg["frames"] = [seg]
    write("pickles", "segment-its-own-block-and-frames.pickle", pickle.dumps({"segments": [seg]}, protocol=4))
    write("pickles", "segment-given-a-pair-after.pickle",
          b"\x80\x04}(\x8c\x08segments]}(\x8c\x0atotal_sizeJ\x00\x00\x20\x00\x8c\x06blocks]u\x8c\x07addressK\x00sau.")
    write("pickles", "segment-is-its-block-listed.pickle",
          b"\x80\x04}\x94(\x8c\x08segments](}\x94(\x8c\x06blocks](h\x01e\x8c\x0fsegment_pool_id(K\x01K\x02t"
          b"\x8c\x0atotal_sizeK\x00ueu.")
    # numbers where integers belong (issue 26 item 10: float-to-integer conversion)
    for name, value in (("nan", float("nan")), ("inf", float("inf")), ("1e300", 1e300)):
        write("pickles", "time-%s.pickle" % name, pickle.dumps({"segments": [], "device_traces": [[
            entry("alloc", 0x7F0000000000, 512, 0, time_us=value)]]}, protocol=2))
    write("pickles", "size-string.pickle", pickle.dumps({"segments": [], "device_traces": [[
        entry("alloc", 0x7F0000000000, "512", 0)]]}, protocol=4))
    write("pickles", "size-negative.pickle", pickle.dumps({"segments": [], "device_traces": [[
        entry("alloc", 0x7F0000000000, -1, 0)]]}, protocol=4))
    write("pickles", "addr-wraps.pickle", pickle.dumps({"segments": [], "device_traces": [[
        entry("alloc", -4096, 1 << 20, 0)]]}, protocol=4))
    # issue 26 item 10: a block's default address (segment + blocks before it) overflowed int64
    write("pickles", "block-address-overflow.pickle", pickle.dumps({"device_traces": [], "segments": [{
        "device": 0, "address": (1 << 63) - 1, "total_size": 8192, "stream": 0, "blocks": [
            {"size": 4096, "state": "inactive"}, {"size": 16, "requested_size": 16, "state": "active_allocated"}]}]},
        protocol=4))
    write("pickles", "devices-300.pickle", pickle.dumps({"segments": [], "device_traces": [[]] * 300}, protocol=4))
    write("pickles", "segment-device-300.pickle", pickle.dumps({"device_traces": [], "segments": [{
        "device": 300, "address": 4096, "total_size": 4096, "stream": 0, "blocks": []}]}, protocol=4))
    # code, never run
    write("pickles", "global-reduce.pickle", b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueq\x00\x85R.")
    # the stack, marks and lengths
    write("pickles", "marks-20000.pickle", b"\x80\x04" + b"(" * 20000 + b".")
    write("pickles", "long4-2-31-bytes.pickle", b"\x80\x04\x8b\x00\x00\x00\x80" + b"\x00" * 16 + b".")
    write("pickles", "binunicode8-huge.pickle", b"\x80\x04\x8d" + struct.pack("<Q", (1 << 63) + 5) + b"abc.")
    write("pickles", "frame-huge.pickle", b"\x80\x04\x95" + struct.pack("<Q", (1 << 64) - 1) + b"N.")
    # a dict that gives a key twice: the last one counts, as in Python
    def k(text):
        return b"\x8c" + bytes([len(text)]) + text.encode()
    write("pickles", "dict-duplicate-keys.pickle", b"\x80\x04}(" + k("device_traces") + b"](](}(" + k("action") +
          k("free") + k("action") + k("alloc") + k("addr") + b"J\x00\x10\x00\x00" + k("size") + b"M\x00\x02uee" +
          k("segments") + b"]u.")
    write("pickles", "not-a-snapshot.pickle", pickle.dumps({"hello": [1, 2, 3]}, protocol=4))
    # issue 36 item 16: one allocation of 2^52 bytes, more than any device holds, which
    # memtap-vmm's replay mapped 2 MiB page by page (30 s, 4.7 GB); report reads it at once
    write("pickles", "alloc-2-52.pickle", pickle.dumps({"segments": [], "device_traces": [[
        entry("alloc", 0x7F0000000000, 1 << 52, 0)]]}, protocol=4))


# ---- RMM logs ----
HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def rmm():
    row = "1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n"
    for name, bad in (("time-nan", "1,10:00:nan,allocate,0x1000,4096,0x0\n"),
                      ("time-1e308", "1,10:00:1e308,allocate,0x1000,4096,0x0\n"),
                      ("time-hours-huge", "1,99999999999999999999:00:00.0,allocate,0x1000,4096,0x0\n"),
                      ("time-negative", "1,-1:00:00.0,allocate,0x1000,4096,0x0\n"),
                      ("size-2-64", "1,10:00:00.0,allocate,0x1000,18446744073709551616,0x0\n"),
                      ("size-2-64-minus-1", "1,10:00:00.0,allocate,0x1000,18446744073709551615,0x0\n"),
                      ("size-negative", "1,10:00:00.0,allocate,0x1000,-1,0x0\n"),
                      ("size-float", "1,10:00:00.0,allocate,0x1000,1e3,0x0\n"),
                      ("thread-negative", "-5,10:00:00.0,allocate,0x1000,4096,0x0\n"),
                      ("pointer-wraps", "1,10:00:00.0,allocate,0xfffffffffffff000,1048576,0x0\n"),
                      ("pointer-not-hex", "1,10:00:00.0,allocate,0xzz,4096,0x0\n"),
                      ("stream-garbage", "1,10:00:00.0,allocate,0x1000,4096,stream\n"),
                      ("field-too-long", "1,10:00:00.0,allocate,0x" + "1" * 100 + ",4096,0x0\n"),
                      ("nul-in-field", "1\0,10:00:00.0,allocate,0x1000,4096,0x0\n"),
                      ("unknown-action", "1,10:00:00.0,reallocate,0x1000,4096,0x0\n"),
                      ("too-few-fields", "1,10:00:00.0,allocate\n")):
        write("rmm", name + ".csv", HEADER + row + bad)
    write("rmm", "header-only.csv", HEADER)
    write("rmm", "size-2-52.csv", HEADER + "1,10:00:00.000001,allocate,0x7f0000000000,%d,0x0\n" % (1 << 52))
    # three live allocations of 768 GiB, each one a device could hold, not together
    write("rmm", "live-2.25-tib.csv", HEADER + "".join(
        "1,10:00:00.%06d,allocate,0x%x,%d,0x0\n" % (i + 1, 0x7f0000000000 + (i << 40), 768 << 30) for i in range(3)))
    write("rmm", "crlf-past-midnight.csv", (HEADER + "1,23:59:59.999999,allocate,0x1000,4096,0x0\n"
                                             "1,00:00:00.000001,free,0x1000,4096,0x0\n").replace("\n", "\r\n"))
    write("rmm", "threads-2000.csv", HEADER + "".join(
        "%d,10:00:00.%06d,allocate,0x%x,512,0x0\n" % (1000000 + i, i, 0x7F0000000000 + 512 * i) for i in range(2000)))
    # past midnight over and over: the day count grows, times stay integers
    write("rmm", "midnight-flapping.csv", HEADER + "".join(
        "1,%s,allocate,0x%x,512,0x0\n" % ("00:00:00.0" if i % 2 else "23:00:00.0", 0x1000 + 512 * i)
        for i in range(1000)))


# ---- DeepSpeed configs ----
def deepspeed():
    good = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
            "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}
    for name, cfg in (
            # issue 26: micro-batch x steps wrapped to 0, then train_batch_size % 0
            ("batch-product-wraps", {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1 << 62,
                                     "gradient_accumulation_steps": 4}),
            ("micro-batch-2-63", {"train_micro_batch_size_per_gpu": (1 << 63) - 1}),
            ("stage-99", {"zero_optimization": {"stage": 99}}),
            ("ok-stage-string", {"zero_optimization": {"stage": "3"}}),  # pydantic reads "3" as 3
            ("zero-not-object", {"zero_optimization": [3]}),
            ("offload-gpu", {"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}}),
            ("offload-not-object", {"zero_optimization": {"offload_optimizer": "cpu"}}),
            ("bf16-enabled-string", {"bf16": {"enabled": "yes"}}),
            ("optimizer-type-number", {"optimizer": {"type": 7}}),
            ("batch-not-multiple", {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4,
                                    "gradient_accumulation_steps": 1}),
            ("ok-zero3", good),
            ("ok-auto", {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                         "zero_optimization": {"stage": "auto"}, "fp16": {"enabled": "auto"}}),
            ("ok-dp-1e9", {"train_batch_size": 1000000000, "train_micro_batch_size_per_gpu": 1,
                           "gradient_accumulation_steps": 1}),
            ("ok-many-keys", dict(("key%05d" % i, i) for i in range(3000)))):
        write("deepspeed", name + ".json", json.dumps(cfg))
    write("deepspeed", "empty.json", "")
    write("deepspeed", "array.json", "[1, 2]")
    write("deepspeed", "nesting-5000.json", "[" * 5000 + "]" * 5000)
    write("deepspeed", "integer-too-big.json", '{"zero_optimization": {"stage": 99999999999999999999999}}')
    write("deepspeed", "real-overflow.json", '{"train_batch_size": 1e400}')
    write("deepspeed", "nul-in-key.json", '{"zero_\\u0000optimization": {"stage": 1}}')
    write("deepspeed", "invalid-utf8.json", b'{"\xff\xfe": 1}')
    write("deepspeed", "trailing-garbage.json", json.dumps(good) + "\n}}}")
    # jansson quotes the input near an error, newline included: still one line
    write("deepspeed", "error-near-newline.json", '{\n "zero_optimization": {"stage": 3},\n "zero_o tru\\\n },\n'
          ' "gidpu": 4\n}')
    # keys DeepSpeed ignores (top level), named in one line however they are spelt
    write("deepspeed", "ok-key-with-newline.json", json.dumps({"line\none": 1, "esc\x1b[31m": 1,
                                                              "zero_optimization": {"stage": 2}}))
    # DeepSpeed's object_pairs_hook refuses a key given twice, at any depth
    write("deepspeed", "duplicate-keys.json", '{"zero_optimization": {"stage": 1}, "zero_optimization": {"stage": 2}}')
    write("deepspeed", "duplicate-nested-keys.json", '{"zero_optimization": {"stage": 1, "stage": 2}}')
    # hjson, the syntax DeepSpeed loads: the ZeRO-Offload tutorial's config (a missing and a
    # trailing comma), comments and quoteless text, a multi-line string, a byte-order mark
    # and CR LF lines, a root without braces
    write("deepspeed", "ok-hjson-tutorial.json", '{\n    "zero_optimization": {\n        "stage": 2,\n'
          '        "offload_optimizer": {\n            "device": "cpu",\n        }\n'
          '        "contiguous_gradients": true,\n        "overlap_comm": true\n    }\n}\n')
    write("deepspeed", "ok-hjson-comments.json", "# a ZeRO-3 config\n{\n  // batch\n  train_micro_batch_size_per_gpu: 4\n"
          "  /* precision */ bf16: { enabled: true }\n  zero_optimization: {\n    stage: 3\n"
          "    offload_param: {\n      device: cpu\n    }\n  },\n}\n")
    write("deepspeed", "ok-hjson-multiline.json", "{\n  comment:\n    " + "'" * 3 + "\n    two\n    lines\n    " +
          "'" * 3 + "\n  train_micro_batch_size_per_gpu: 1\n}\n")
    write("deepspeed", "ok-bom-crlf.json", b'\xef\xbb\xbf{\r\n  "train_micro_batch_size_per_gpu": 2,\r\n'
          b'  "bf16": {"enabled": true}\r\n}\r\n')
    write("deepspeed", "ok-no-braces.json", "train_micro_batch_size_per_gpu: 2\nzero_optimization: {stage: 1}\n")
    # a quoteless value runs to the end of its line: the closing braces become its text
    write("deepspeed", "hjson-quoteless-brace.json", '{"zero_optimization": {"offload_param": {"device": cpu}}}')
    write("deepspeed", "hjson-open-comment.json", '{"train_micro_batch_size_per_gpu": 1 /* never closed')
    write("deepspeed", "hjson-key-space.json", '{zero optimization: {stage: 1}}')
    write("deepspeed", "hjson-multiline-open.json", "{comment: " + "'" * 3 + "never closed\n")
    write("deepspeed", "nesting-600.json", "{a:" * 600 + "1" + "}" * 600)
    write("deepspeed", "ok-long-string.json", json.dumps({"comment": "x" * 30000, "train_micro_batch_size_per_gpu": 2}))


if __name__ == "__main__":
    traces()
    pickles()
    rmm()
    deepspeed()
