// What PyTorch's memory viewer (torch/utils/viz/MemoryViz.js, behind pytorch.org/memory_viz)
// does with a snapshot before it draws, written for memtap's tests from a reading of that
// viewer (no code of it here): its unpickler (protocols 2 to 4, a fixed set of opcodes,
// anything else throws), annotate_snapshot (free_requested + free_completed become one
// 'free'; categories collected from the trace entries, and a throw when some entry has a
// category and none says 'unknown', as its misspelt `categores.push` does), the
// "Allocator State History" view (from the final segments and their active blocks, each
// event undone walking back: segment_unmap re-maps pages and joins touching segments of
// one stream, segment_map takes pages out of the segment holding them, segment_free and
// segment_alloc add or drop a whole segment; a block outside every segment throws when
// drawn) and the "Active Memory Timeline" (allocs matched to frees; blocks of the final
// segments never allocated in the trace, and frees without an alloc, were there at the
// start). viewer(bytes) returns what each view would show, or throws where the viewer would.
"use strict";

function unpickle(u8) {
  const view = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const stack = [], marks = [], memo = [];
  const text = new TextDecoder();
  let at = 0;
  const byte = () => u8[at++];
  const u16 = () => { const v = view.getUint16(at, true); at += 2; return v; };
  const u32 = () => { const v = view.getUint32(at, true); at += 4; return v; };
  const popMark = () => { const m = marks.pop(); return stack.splice(m, stack.length - m); };
  const str = n => { const s = text.decode(u8.subarray(at, at + n)); at += n; return s; };
  for (;;) {
    const op = byte();
    switch (op) {
      case 0x80: { const v = byte(); if (v < 2 || v > 4) throw new Error("Unhandled version " + v); break; }
      case 0x95: at += 8; break; // FRAME
      case 0x28: marks.push(stack.length); break; // MARK
      case 0x2e: return stack.pop(); // STOP
      case 0x7d: stack.push({}); break; // EMPTY_DICT
      case 0x5d: stack.push([]); break; // EMPTY_LIST
      case 0x29: stack.push([]); break; // EMPTY_TUPLE
      case 0x64: { const items = popMark(), d = {}; for (let i = 0; i < items.length; i += 2) d[items[i]] = items[i + 1]; stack.push(d); break; } // DICT
      case 0x6c: case 0x74: stack.push(popMark()); break; // LIST, TUPLE
      case 0x85: stack.push([stack.pop()]); break; // TUPLE1
      case 0x86: { const b = stack.pop(), a = stack.pop(); stack.push([a, b]); break; } // TUPLE2
      case 0x87: { const c = stack.pop(), b = stack.pop(), a = stack.pop(); stack.push([a, b, c]); break; } // TUPLE3
      case 0x73: { const v = stack.pop(), k = stack.pop(); stack[stack.length - 1][k] = v; break; } // SETITEM
      case 0x75: { const items = popMark(), d = stack[stack.length - 1]; for (let i = 0; i < items.length; i += 2) d[items[i]] = items[i + 1]; break; } // SETITEMS
      case 0x61: { const v = stack.pop(); stack[stack.length - 1].push(v); break; } // APPEND
      case 0x65: { const items = popMark(); stack[stack.length - 1].push(...items); break; } // APPENDS
      case 0x4a: stack.push(view.getInt32(at, true)); at += 4; break; // BININT
      case 0x4b: stack.push(byte()); break; // BININT1
      case 0x4d: stack.push(u16()); break; // BININT2
      case 0x8a: { // LONG1
        const n = byte();
        if (n > 8) throw new Error("Unsupported number bigger than 8 bytes");
        let v = 0n;
        for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(u8[at + i]);
        if (n && (u8[at + n - 1] & 0x80)) v -= 1n << BigInt(8 * n);
        at += n;
        stack.push(Number(v));
        break;
      }
      case 0x47: stack.push(view.getFloat64(at, false)); at += 8; break; // BINFLOAT
      case 0x88: stack.push(true); break;
      case 0x89: stack.push(false); break;
      case 0x4e: stack.push(null); break;
      case 0x8c: stack.push(str(byte())); break; // SHORT_BINUNICODE
      case 0x58: stack.push(str(u32())); break; // BINUNICODE
      case 0x68: stack.push(memo[byte()]); break; // BINGET
      case 0x6a: stack.push(memo[u32()]); break; // LONG_BINGET
      case 0x71: memo[byte()] = stack[stack.length - 1]; break; // BINPUT
      case 0x72: memo[u32()] = stack[stack.length - 1]; break; // LONG_BINPUT
      case 0x94: memo.push(stack[stack.length - 1]); break; // MEMOIZE
      default: throw new Error("UNKNOWN OPCODE: " + op);
    }
  }
}

function annotate(snap) {
  snap.categories = [];
  const streams = {0: 0};
  let next = 1;
  const stream = s => (s in streams ? streams[s] : (streams[s] = next++));
  snap.device_traces = snap.device_traces.map(trace => {
    const out = [];
    for (const t of trace) {
      if (!("frames" in t)) t.frames = [];
      t.stream = stream(t.stream);
      if (t.action === "free_completed" && out.length) {
        const prev = out[out.length - 1];
        if (prev.action === "free_requested" && prev.addr === t.addr) {
          prev.action = "free";
          continue;
        }
      }
      if ("category" in t && !snap.categories.includes(t.category)) snap.categories.push(t.category);
      out.push(t);
    }
    return out;
  });
  for (const seg of snap.segments) {
    seg.stream = stream(seg.stream);
    let addr = seg.address;
    for (const b of seg.blocks) {
      b.addr = addr;
      if ("history" in b) b.real_size = b.history[0].real_size;
      else b.real_size = b.requested_size || b.size;
      addr += b.size;
    }
  }
  if (snap.categories.length > 0 && !snap.categories.includes("unknown"))
    throw new TypeError("annotate_snapshot: entries have categories and none is 'unknown' " +
                        "(the viewer pushes to an undefined field: a blank page)");
}

// Allocator State History: reserved and allocated after each event, from the end back.
function stateHistory(snap, device) {
  const events = snap.device_traces[device] || [];
  const segs = [], blocks = {};
  for (const seg of snap.segments) {
    if (seg.device !== device) continue;
    segs.push({addr: seg.address, size: seg.total_size, stream: seg.stream});
    for (const b of seg.blocks)
      if (b.state === "active_allocated" || b.state === "active_pending_free")
        blocks[b.addr] = {addr: b.addr, size: b.size, real: b.real_size};
  }
  segs.sort((x, y) => x.addr - y.addr);
  const mapIn = (merge, s) => {
    let i = segs.findIndex(e => e.addr > s.addr);
    if (i === -1) i = segs.length;
    segs.splice(i, 0, s);
    if (!merge) return;
    if (i + 1 < segs.length && s.addr + s.size === segs[i + 1].addr && s.stream === segs[i + 1].stream) {
      s.size += segs[i + 1].size;
      segs.splice(i + 1, 1);
    }
    if (i > 0 && segs[i - 1].addr + segs[i - 1].size === s.addr && segs[i - 1].stream === s.stream) {
      segs[i - 1].size += s.size;
      segs.splice(i, 1);
    }
  };
  const takeOut = (merge, s) => {
    if (!merge) {
      const i = segs.findIndex(e => e.addr === s.addr);
      if (i < 0) throw new Error("segment_alloc undone for a segment that is not there: " + s.addr.toString(16));
      segs.splice(i, 1);
      return;
    }
    const end = s.addr + s.size;
    const i = segs.findIndex(e => e.addr <= s.addr && end <= e.addr + e.size);
    if (i < 0) throw new TypeError("segment_map undone for pages no segment holds: " + s.addr.toString(16));
    const g = segs[i], gend = g.addr + g.size;
    if (g.addr === s.addr) {
      g.addr += s.size;
      g.size -= s.size;
      if (!g.size) segs.splice(i, 1);
    } else if (gend === end) {
      g.size -= s.size;
    } else {
      g.size = s.addr - g.addr;
      segs.splice(i + 1, 0, {addr: end, size: gend - end, stream: g.stream});
    }
  };
  const measure = () => {
    for (let i = 1; i < segs.length; i++)
      if (segs[i - 1].addr + segs[i - 1].size > segs[i].addr) throw new Error("segments overlap");
    let allocated = 0;
    for (const b of Object.values(blocks)) {
      if (!segs.some(g => g.addr <= b.addr && b.addr < g.addr + g.size))
        throw new TypeError("a block outside every segment: " + b.addr.toString(16));
      allocated += b.real;
    }
    return [segs.reduce((x, g) => x + g.size, 0), allocated];
  };
  const out = new Array(events.length);
  for (let i = events.length - 1; i >= 0; i--) {
    out[i] = measure(); // the state after event i
    const e = events[i];
    switch (e.action) {
      case "free": case "free_completed": blocks[e.addr] = {addr: e.addr, size: e.size, real: e.size}; break;
      case "free_requested":
        if (!blocks[e.addr]) throw new TypeError("free_requested undone for an unknown block");
        break;
      case "alloc": delete blocks[e.addr]; break;
      case "segment_free": case "segment_unmap":
        mapIn(e.action === "segment_unmap", {addr: e.addr, size: e.size, stream: e.stream}); break;
      case "segment_alloc": case "segment_map":
        takeOut(e.action === "segment_map", {addr: e.addr, size: e.size, stream: e.stream}); break;
      default: break;
    }
  }
  return {states: out, start: measure(), segments: segs.length};
}

// Active Memory Timeline: allocated bytes over the trace, with what was there at the start.
function activeTimeline(snap, device) {
  const live = {};
  let initial = 0, total = 0, max = 0;
  const seen = new Set();
  for (const e of snap.device_traces[device] || []) {
    if (e.action === "alloc") { live[e.addr] = e.size; seen.add(e.addr); }
    else if ((e.action === "free" || e.action === "free_completed") && !(e.addr in live)) initial += e.size;
    else if (e.action === "free" || e.action === "free_completed") delete live[e.addr];
  }
  for (const seg of snap.segments)
    if (seg.device === device)
      for (const b of seg.blocks)
        if (b.state === "active_allocated" && !(b.addr in live)) initial += b.real_size;
  total = max = initial;
  const open = {};
  for (const e of snap.device_traces[device] || []) {
    if (e.action === "alloc") { open[e.addr] = e.size; total += e.size; }
    else if (e.action === "free" || e.action === "free_completed") {
      total -= e.addr in open ? open[e.addr] : e.size;
      delete open[e.addr];
    }
    max = Math.max(max, total);
  }
  return {initial, max, end: total};
}

function viewer(u8) {
  const snap = unpickle(u8);
  if (!snap || Array.isArray(snap) || !Array.isArray(snap.device_traces) || !Array.isArray(snap.segments))
    throw new TypeError("not a snapshot the viewer reads (segments and device_traces)");
  annotate(snap);
  const devices = [];
  for (let d = 0; d < snap.device_traces.length; d++) {
    if (!snap.device_traces[d].length && !snap.segments.some(s => s.device === d)) continue;
    const h = stateHistory(snap, d);
    devices.push({device: d, entries: snap.device_traces[d].length, history: h.states, start: h.start,
                  active: activeTimeline(snap, d)});
  }
  return {categories: snap.categories, devices,
          allocator_settings: snap.allocator_settings === undefined ? null : snap.allocator_settings};
}

if (typeof module !== "undefined") module.exports = {viewer, unpickle};
