"""Builds memtap traces byte by byte (docs/FORMAT.md), every chunk with a correct CRC-32C,
so a hostile value reaches the reader's checks instead of stopping at a checksum. Used
by make_corpus.py; nothing here reads memtap's C sources."""
import struct

KINDS = ["alloc", "free", "managed_alloc", "host_alloc", "host_free", "vmm_create", "vmm_release", "vmm_reserve",
         "vmm_addr_free", "vmm_map", "vmm_unmap", "alloc_failed", "pool_create", "pool_destroy", "pool_trim",
         "meminfo", "range_push", "range_pop", "range_start", "range_end", "nvtx_mark", "tag_push", "tag_pop",
         "tag_range", "mark", "snapshot", "device", "thread", "exit", "vmm_access", "segment_alloc",
         "segment_free"]
INFO, STRINGS, STACKS, MODULES, EVENTS, END = 1, 2, 3, 4, 5, 6
NO_DEVICE = 0xFF
PYFRAME = 1 << 63


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def zigzag(v):
    v = (v + (1 << 63)) % (1 << 64) - (1 << 63)  # as a signed 64-bit number
    return varint(((v << 1) ^ (v >> 63)) & ((1 << 64) - 1))


def header():
    return b"MEMTAP\0\x01" + bytes([1]) + bytes(7)


def chunk(kind, payload, crc=None):
    return struct.pack("<IB3xII", 0x4B43544D, kind, len(payload), crc32c(payload) if crc is None else crc) + payload


def event(kind, thread=1, time=0, addr=0, size=0, aux=0, aux2=0, stack=0, phase=0, device=NO_DEVICE, tag=0,
          flags=0, error=0, prev=(0, 0)):
    """One encoded event and the (time, addr) state after it; prev is the state before."""
    more = (1 if tag else 0) | (2 if flags else 0) | (4 if error else 0)
    mask = ((1 if addr != prev[1] or addr else 0) | (2 if size else 0) | (4 if aux else 0) | (8 if aux2 else 0) |
            (16 if stack else 0) | (32 if phase else 0) | (64 if device != NO_DEVICE else 0) | (128 if more else 0))
    k = KINDS.index(kind) if isinstance(kind, str) else kind
    out = bytes([k, mask]) + varint(thread) + zigzag(time - prev[0])
    if mask & 1:
        out += zigzag(addr - prev[1])
    for bit, v in ((2, size), (4, aux), (8, aux2), (16, stack), (32, phase)):
        if mask & bit:
            out += varint(v)
    if mask & 64:
        out += bytes([device])
    if more:
        out += bytes([more])
        if tag:
            out += bytes([tag])
        if flags:
            out += bytes([flags])
        if error:
            out += zigzag(error)
    return out, (time, addr if mask & 1 else prev[1])


class Trace:
    """A trace assembled in order: info, strings, stacks, events, end. Each add_* call
    appends one chunk; raw() appends any bytes."""

    def __init__(self, info="memtap_version=0.1.0\nbackend=preload\npid=4242\nhost=hostile\n"
                 "start_monotonic_ns=1000\n"):
        self.data = bytearray(header())
        if info is not None:
            self.data += chunk(INFO, info.encode())

    def strings(self, items):
        """items: (id, text) pairs."""
        payload = b"".join(varint(i) + varint(len(s.encode() if isinstance(s, str) else s)) +
                           (s.encode() if isinstance(s, str) else s) for i, s in items)
        self.data += chunk(STRINGS, payload)
        return self

    def stacks(self, items):
        """items: (id, [frames]) pairs, or (id, depth, raw frame bytes) for lies about depth."""
        payload = bytearray()
        for item in items:
            if len(item) == 3:
                payload += varint(item[0]) + varint(item[1]) + item[2]
                continue
            sid, frames = item
            payload += varint(sid) + varint(len(frames))
            prev = 0
            for f in frames:
                payload += zigzag(f - prev)
                prev = f
        self.data += chunk(STACKS, bytes(payload))
        return self

    def modules(self, items):
        """items: (path, build_id, base, start, size)."""
        payload = b"".join(varint(len(p)) + p.encode() + varint(len(b)) + b.encode() + varint(base) + varint(start) +
                           varint(size) for p, b, base, start, size in items)
        self.data += chunk(MODULES, payload)
        return self

    def events(self, items, dropped=0):
        """items: keyword dicts for event()."""
        payload = bytearray(varint(dropped))
        state = (0, 0)
        for e in items:
            enc, state = event(prev=state, **e)
            payload += enc
        self.data += chunk(EVENTS, bytes(payload))
        return self

    def end(self, dropped=0, written=0):
        self.data += chunk(END, varint(dropped) + varint(written))
        return self

    def raw(self, b):
        self.data += b
        return self

    def bytes(self):
        return bytes(self.data)


def basic_events(t0=2000, device=0):
    """A small healthy run: a thread, a device, an allocation and its free."""
    return [dict(kind="thread", thread=1, time=t0, aux=4242),
            dict(kind="device", thread=1, time=t0 + 1, device=device, size=80 << 30, aux=1),
            dict(kind="alloc", thread=1, time=t0 + 2, device=device, addr=0x200000000000, size=1 << 20, stack=1,
                 flags=2),
            dict(kind="free", thread=1, time=t0 + 3, device=device, addr=0x200000000000)]
