"""Traces of over 1 MiB, where the index pass of an opened trace has a second thread that
sums up the EVENTS chunks of the file's second half (src/reader/ahead.c), each with
something in that half that the sums must leave to the pass: an event naming a stack,
a phase or a string the tables do not hold, a bad event, a chunk of twenty threads, a bad
checksum, tables that grow there, and a chunk header's bytes inside a string at the
middle. Walked from the file, each must read as read whole (test_stream.sh).

usage: python3 tests/core/make_halves.py DIR"""
import os
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hostile"))
import mtrace  # noqa: E402
from mtrace import EVENTS, STRINGS, Trace, chunk, varint  # noqa: E402

# Written with the IEEE CRC-32 that memtap wrote before 2026-11-21 (zlib's is quick; the
# pass then wants a sum's IEEE match): bench/gen_trace's traces in test_stream.sh are
# CRC-32C's, over 1 MiB too
mtrace.crc32c = zlib.crc32
CHUNKS = 300  # of each half, 200 events each: about 1.15 MB in all
PER = 200


def events(c, threads=1, **twist):
    """Chunk c's events: allocations and frees, the one in the middle with `twist`."""
    out = []
    for i in range(PER):
        n = c * PER + i
        e = dict(kind="alloc" if i % 2 == 0 else "free", thread=1 + n % threads, time=1000 * n,
                 addr=0x7f0000000000 + (n // 2) * 4096, size=4096 if i % 2 == 0 else 0, stack=1 + n % 2, phase=2)
        out.append(dict(e, **twist) if i == PER // 2 else e)
    return out


def plain(t, c, rest={}):
    """Appends chunk c's events as they are: only its first event's encoding differs from
    chunk 0's (times and addresses go as deltas), so the rest is encoded once."""
    evs = events(c)
    first, state = mtrace.event(prev=(0, 0), **evs[0])
    if not rest:
        prev = state
        for e in evs[1:]:
            enc, prev = mtrace.event(prev=prev, **e)
            rest[0] = rest.get(0, b"") + enc
    t.raw(chunk(EVENTS, varint(0) + first + rest[0]))


def trace(twist_at=None, twist=None, threads=1, table=False, bad_crc=False, middle=b"", tail=0):
    t = Trace().strings([(1, "cuda:0"), (2, "forward")]).stacks([(1, [0x401000, 0x402000]), (2, [0x401100])])
    for c in range(CHUNKS):
        plain(t, c)
    if middle:
        t.strings([(3, middle)])
    for c in range(CHUNKS, 2 * CHUNKS):
        if table and c == CHUNKS + CHUNKS // 2:  # a stack and a string first named in this half
            t.strings([(3, "backward")]).stacks([(3, [0x403000])])
        if c == twist_at:
            n = len(t.data)
            t.events(events(c, threads, **twist))
            if bad_crc:
                t.data[n + 12] ^= 1
        elif table and c > CHUNKS + CHUNKS // 2:
            t.events([dict(e, stack=3, phase=3) for e in events(c)])
        else:
            plain(t, c)
    if tail:
        t.strings([(4, b"y" * tail)])
    return t.end(0, 2 * CHUNKS * PER).bytes()


def fake_header():
    """A string between the halves holding an EVENTS chunk header of no payload (whose
    checksum, of nothing, matches), right before the next real chunk: the second thread
    starts there. A string at the end moves the middle to just before it."""
    fake = chunk(EVENTS, b"", crc=0)
    data = trace(middle=fake)
    at, size = data.index(fake), len(data)
    for tail in range(1, 1 << 16):  # the sizes worked out, the trace made once more
        grown = len(chunk(STRINGS, varint(4) + varint(tail) + bytes(tail)))
        if at - 64 <= 16 + (size + grown - 16) // 2 < at:
            data = trace(middle=fake, tail=tail)
            assert at - 64 <= 16 + (len(data) - 16) // 2 < data.index(fake)
            return data
    sys.exit("make_halves: no string at the end puts the middle before the header")


THREE_QUARTERS = CHUNKS + CHUNKS // 2
TRACES = {
    "halves-ok": lambda: trace(),
    "halves-tables-grow": lambda: trace(table=True),
    "halves-stack-out": lambda: trace(THREE_QUARTERS, dict(stack=99)),
    "halves-phase-out": lambda: trace(THREE_QUARTERS, dict(phase=99)),
    "halves-mark-out": lambda: trace(THREE_QUARTERS, dict(kind="mark", aux=99, size=0)),
    "halves-bad-kind": lambda: trace(THREE_QUARTERS, dict(kind=63)),
    "halves-size-wraps": lambda: trace(THREE_QUARTERS, dict(size=1 << 62)),
    "halves-20-threads": lambda: trace(THREE_QUARTERS, {}, threads=20),
    "halves-checksum": lambda: trace(THREE_QUARTERS, {}, bad_crc=True),
    "halves-fake-header": fake_header,
}

if __name__ == "__main__":
    for name, make in TRACES.items():
        with open(os.path.join(sys.argv[1], name + ".trace"), "wb") as f:
            f.write(make())
