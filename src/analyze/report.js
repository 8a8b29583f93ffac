// memtap's HTML report: draws REPORT (the same document `memtap report --json` writes)
// and SERIES (the composition timeline, the blocks at each peak, the biggest allocations,
// what was live by stack at the peak and at each OOM, segment maps through the run, and
// those stacks) into the page.
// Plain DOM and SVG, nothing fetched. Every number shown carries its raw value in
// data-value, so tests can compare the page with the JSON.
"use strict";
(function () {
  const errors = [];
  window.addEventListener("error", (e) => { errors.push(String(e.message)); done(); });

  const CATEGORIES = ["params", "grads", "optimizer", "activations", "temporaries", "other"];
  const COLOURS = { params: "#4e79a7", grads: "#f28e2b", optimizer: "#59a14f", activations: "#e15759",
                    temporaries: "#b07aa1", other: "#9c9c9c", reserved: "#222" };
  const SVGNS = "http://www.w3.org/2000/svg";
  const CURSORS = {}; // device -> what follows the composition's cursor (a time in ns)
  const SHOW = {}; // device -> [what shows a moment (time in ns, an OOM or the peak)]: the diagnosis' links

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = 0, v = n;
    while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return (u ? v.toFixed(2) : String(v)) + " " + units[u];
  }
  // A moment of the trace: its time, or an entry's place in a snapshot without times.
  function moment(ns, scale) {
    if (REPORT.times === "none") return "the snapshot";
    if (REPORT.times === "order") return "entry " + Math.round(ns);
    const s = scale || ns;
    if (s >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (s >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    return (ns / 1e3).toFixed(1) + " \u00b5s";
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function num(value, text) { return el("td", { class: "num", "data-value": value }, text); }
  // A stack as the text report reads it (its view: the user's Python frames first, the
  // plumbing left out), and every frame in full on a click.
  function fullFrame(f) {
    const where = f.file ? " (" + f.file + ":" + f.line + ")" : f.module ? " (" + f.module + ")" : "";
    return (f.function || f.address || "?") + where;
  }
  function frameText(g) {
    const frames = g.frames || [];
    const td = el("td", { class: "frames" });
    if (g.before_recording) td.append(el("div", {}, frames.length ? "made before the trace's first entry:" : g.before_text));
    if (!frames.length) {
      if (!g.before_recording) td.append(el("div", {}, REPORT.python_frames
        ? "(no frames: a thread without Python, autograd's engine thread likely)" : "(no stack)"));
      return td;
    }
    const view = g.view && g.view.length ? g.view : frames.slice(0, 8).map(fullFrame);
    const lines = [...view];
    if (g.stacks > 1) lines.unshift(`from ${g.stacks} stacks; the biggest:`);
    if (REPORT.python_frames && !frames.some((f) => f.module === "python" || /\.py$/.test(f.file || "")))
      lines.unshift("(no Python frames: " + (frames.some((f) => /autograd::Engine::thread_main/.test(f.function || ""))
        ? "autograd's engine thread)" : "a thread without Python)"));
    td.append(el("div", { class: "view" }, lines.join("\n")));
    if (frames.length > view.length) {
      const depth = g.depth || frames.length; // the page's own stacks keep the first frames of a deep one
      const all = el("details", { class: "all-frames" }, el("summary", {}, depth > frames.length
        ? `the first ${frames.length} of ${depth} frames` : "all " + frames.length + " frames"));
      all.append(el("div", {}, frames.map(fullFrame).join("\n")));
      td.append(all);
    }
    return td;
  }
  function table(id, headers, rows) {
    const t = el("table", { id: id });
    t.append(el("tr", {}, ...headers.map((h) => el("th", h.num ? { class: "num" } : {}, h.text || h))));
    for (const r of rows) t.append(el("tr", {}, ...r));
    return t;
  }
  // Rows grouped by where in the code (the first user frame), as the text report groups
  // them, apart by device, kind and whether made before recording: bytes, allocations
  // and growth summed, the biggest stack shown; biggest first.
  function bySite(list) {
    const weight = (g) => (g.growth_bytes_per_iteration || 0) + g.bytes;
    const sites = new Map();
    for (const g of list) {
      const key = [g.device, g.kind, g.before_recording, g.read_as, g.where].join("\u0000");
      const s = sites.get(key);
      if (!s) {
        sites.set(key, { ...g, stacks: 1, biggest: weight(g) });
        continue;
      }
      if (weight(g) > s.biggest) Object.assign(s, { frames: g.frames, view: g.view, biggest: weight(g) });
      s.bytes += g.bytes;
      s.count += g.count || 0;
      s.stacks++;
      if ("growth_bytes_per_iteration" in g) {
        s.growth_bytes_per_iteration += g.growth_bytes_per_iteration;
        s.iterations = Math.max(s.iterations, g.iterations);
      }
    }
    return [...sites.values()].sort((a, b) => (b.growth_bytes_per_iteration || 0) - (a.growth_bytes_per_iteration || 0) ||
                                               b.bytes - a.bytes);
  }
  function stackRows(list) {
    return bySite(list).map((g) => [num(g.bytes, bytes(g.bytes)), num(g.count, g.count), el("td", {}, g.kind),
                                    frameText(g)]);
  }

  // A chart: x in time (or entries) over [x0, x1], y in bytes over [0, ymax].
  const M = { l: 70, r: 20, t: 10, b: 24 };
  function axes(width, height, x1, ymax, x0 = 0) {
    const m = M, span = x1 - x0;
    const root = svg("svg", { width: width, height: height, viewBox: `0 0 ${width} ${height}` });
    const x = (t) => m.l + (span ? (t - x0) / span : 0) * (width - m.l - m.r);
    const y = (b) => height - m.b - (ymax ? b / ymax : 0) * (height - m.t - m.b);
    x.invert = (px) => x0 + (px - m.l) / (width - m.l - m.r) * span;
    const g = svg("g", { class: "axis" });
    g.append(svg("line", { x1: m.l, y1: y(0), x2: width - m.r, y2: y(0) }));
    g.append(svg("line", { x1: m.l, y1: y(0), x2: m.l, y2: m.t }));
    for (let i = 0; i <= 4; i++) {
      const ty = svg("text", { x: m.l - 6, y: y(ymax * i / 4) + 4, "text-anchor": "end" });
      ty.textContent = bytes(Math.round(ymax * i / 4));
      g.append(ty);
      if (REPORT.times === "none" && i !== 2) continue; // one moment: one label
      const tx = svg("text", { x: x(x0 + span * i / 4), y: height - 6, "text-anchor": "middle", class: "tick" });
      tx.textContent = moment(x0 + span * i / 4, x1);
      g.append(tx);
    }
    root.append(g);
    return { root, x, y };
  }

  const total = (p) => CATEGORIES.reduce((s, _, i) => s + p[1 + i], 0);
  // The last point at or before t (points in time order), or -1.
  function at(points, t) {
    let lo = 0, hi = points.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (points[mid][0] <= t) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
  }

  // Stacked areas of each category over [x0, x1]; the peak, each OOM and a policy's cap marked.
  function compositionChart(device, points, x0, x1, ymax) {
    const c = axes(900, 260, x1, ymax, x0);
    c.root.setAttribute("id", "composition-" + device.device);
    // Each pixel column holds the highest moment that touches it (and the most reserved), so
    // that a peak shorter than a pixel is still drawn, a pixel wide.
    const cols = [], res = [], left = Math.floor(c.x(x0)), right = Math.ceil(c.x(x1));
    for (let i = Math.max(0, at(points, x0)); i < points.length && points[i][0] <= x1; i++) {
      const p = points[i], next = i + 1 < points.length ? points[i + 1][0] : x1;
      const a = Math.max(left, Math.min(Math.floor(c.x(p[0])), right - 1)),
        b = Math.max(a, Math.min(right, Math.ceil(c.x(next))) - 1);
      for (let k = a; k <= b; k++) {
        if (!cols[k] || total(p) > total(cols[k])) cols[k] = p;
        if (res[k] === undefined || p[7] > res[k]) res[k] = p[7];
      }
    }
    const runs = []; // [first column, past the last, moment, reserved]
    cols.forEach((p, k) => {
      const last = runs[runs.length - 1];
      if (last && last[1] === k && last[2] === p && last[3] === res[k]) last[1] = k + 1;
      else runs.push([k, k + 1, p, res[k]]);
    });
    const base = runs.map(() => 0);
    CATEGORIES.forEach((cat, k) => {
      if (!runs.some((r) => r[2][1 + k] > 0)) return;
      let top = "", bottom = "";
      runs.forEach(([a, b, p], i) => {
        const lo = base[i], hi = base[i] + p[1 + k];
        top += `${i ? "L" : "M"}${a},${c.y(hi)}L${b},${c.y(hi)}`;
        bottom = `L${b},${c.y(lo)}L${a},${c.y(lo)}` + bottom;
        base[i] = hi;
      });
      c.root.append(svg("path", { d: top + bottom + "Z", fill: COLOURS[cat], "fill-opacity": 0.85,
                                  class: "area", "data-category": cat }));
    });
    if (runs.some((r) => r[3] > 0)) {
      let d = "";
      runs.forEach(([a, b, , reserved], i) => { d += `${i ? "L" : "M"}${a},${c.y(reserved)}L${b},${c.y(reserved)}`; });
      c.root.append(svg("path", { d: d, fill: "none", stroke: COLOURS.reserved, "stroke-dasharray": "4 3",
                                  class: "reserved" }));
    }
    const mark = (cls, t, colour, text, row) => {
      if (t < x0 || t > x1) return;
      const px = c.x(t);
      c.root.append(svg("line", { x1: px, x2: px, y1: c.y(0), y2: c.y(ymax), stroke: colour, class: cls,
                                  "data-time-ns": t }));
      const label = svg("text", { x: px + 4, y: c.y(ymax) + 12 * row, fill: colour, class: cls + "-label" });
      label.textContent = text;
      c.root.append(label);
    };
    mark("peak", device.peak_time_ns, "#c00", "peak " + bytes(device.peak_allocated_bytes), 1);
    REPORT.oom.filter((o) => o.device === device.device)
      .forEach((o) => mark("oom", o.time_ns, "#000", `out of memory: ${bytes(o.size)} asked`, 2));
    // what memtap's policies did: a mark on the top edge, its words on hover (a cap or an
    // allocator change is its own device's)
    for (const [t, text] of SERIES.actions || []) {
      const own = /^memtap\.(?:cap|allocator) (\d+)/.exec(text);
      if (t < x0 || t > x1 || (own && +own[1] !== device.device)) continue;
      const px = c.x(t), top = c.y(ymax);
      const a = svg("path", { d: `M${px - 5},${top - 9}L${px + 5},${top - 9}L${px},${top - 1}Z`, class: "action",
                              "data-time-ns": t, "data-text": text });
      const title = svg("title", {});
      title.textContent = text;
      a.append(title);
      c.root.append(a);
    }
    if (capped(device)) {
      const py = c.y(device.capacity_bytes);
      c.root.append(svg("line", { x1: M.l, x2: 900 - M.r, y1: py, y2: py, stroke: "#b35c00", "stroke-dasharray": "8 4",
                                  class: "cap", "data-bytes": device.capacity_bytes }));
      const label = svg("text", { x: 900 - M.r, y: py - 4, "text-anchor": "end", fill: "#b35c00" });
      label.textContent = "cap " + bytes(device.capacity_bytes);
      c.root.append(label);
    }
    return c;
  }
  const capped = (device) => device.capacity_bytes && device.device_bytes > device.capacity_bytes;

  // The biggest allocations as blocks of memory over time: each is placed, when it is
  // made, at the lowest place free of those then live (first fit), so that its height is
  // its size and the picture reads like memory filling and emptying.
  function place(list, xmax) {
    const order = list.map((a, i) => i).sort((i, j) => list[i][0] - list[j][0] || i - j);
    const at = [], live = []; // live: [offset, size, end], by offset
    let top = 1;
    for (const i of order) {
      const [made, freed, size] = list[i];
      for (let k = live.length - 1; k >= 0; k--) if (live[k][2] <= made) live.splice(k, 1);
      let offset = 0, k = 0;
      for (; k < live.length && live[k][0] < offset + size; k++) offset = Math.max(offset, live[k][0] + live[k][1]);
      live.splice(k, 0, [offset, size, freed < 0 ? xmax + 1 : freed]);
      live.sort((x, y) => x[0] - y[0]);
      at[i] = offset;
      top = Math.max(top, offset + size);
    }
    return { at, top };
  }
  function allocationChart(device, list, placed, x0, x1) {
    const c = axes(900, 200, x1, placed.top, x0);
    c.root.setAttribute("id", "allocations-" + device.device);
    list.forEach((a, i) => {
      const end = a[1] < 0 ? x1 : a[1];
      if (end < x0 || a[0] > x1) return;
      const ax = Math.max(c.x(a[0]), M.l), bx = Math.min(c.x(end), 900 - M.r);
      const y0 = c.y(placed.at[i] + a[2]), y1 = c.y(placed.at[i]);
      c.root.append(svg("rect", { x: ax, y: y0, width: Math.max(bx - ax, 1.5), height: Math.max(y1 - y0, 1),
                                  fill: COLOURS[CATEGORIES[a[3]]], class: "alloc", "data-index": i }));
    });
    return c;
  }
  function lifetime(a) {
    return `made at ${moment(a[0])}, ` + (a[1] < 0 ? "still live at the end"
      : `freed at ${moment(a[1])} (lived ${moment(a[1] - a[0])})`);
  }
  function allocationText(a) {
    const st = (SERIES.stacks || {})[a[4]] || {};
    return [`${bytes(a[2])} ${CATEGORIES[a[3]]}`, lifetime(a)].concat(st.view && st.view.length ? st.view
      : (st.frames || []).slice(0, 8).map(fullFrame)).join("\n");
  }

  // The composition over time and the biggest allocations under it, on one time axis that
  // zooms: drag across either to zoom, double-click or Esc to go back; the arrow keys step
  // through the moments (or, on the allocations, from one allocation to the next).
  function timeline(device, points, xmin, xmax) {
    const d = device.device;
    if (REPORT.times === "none" && points.length) // one moment: what it held, the chart's width
      points = [[0, ...points[points.length - 1].slice(1)]];
    // what is drawn: the page's own over the whole run; zoomed in on a served page, the
    // detail of the part in view, which memtap report --serve finds when asked
    const whole = { points, list: (SERIES.allocations || {})[d] || [] };
    whole.placed = place(whole.list, xmax);
    let list = whole.list, placed = whole.placed; // and points
    const ymax = Math.max(1, device.peak_allocated_bytes, capped(device) ? device.capacity_bytes : 0,
                          ...points.map((p) => Math.max(total(p), p[7])));
    const box = el("div", { class: "timeline", id: "timeline-" + d });
    const readout = el("div", { class: "readout", id: "readout-" + d, "aria-live": "polite" });
    const detail = el("div", { class: "detail", id: "detail-" + d });
    const help = el("p", { class: "sub" }, "Drag across a chart to zoom, double-click or Esc to zoom out; with a chart " +
      "focused, \u2190 \u2192 Home End step and + \u2212 zoom. Hover or click an allocation for its size, lifetime and stack.");
    const note = el("p", { class: "sub", id: "allocations-shown-" + d });
    const state = { x0: xmin, x1: xmax, cursor: -1, pick: -1, drag: null, asked: 0 };
    let comp, allocs;
    const tip = tooltip();

    function show() {
      box.dataset.x0 = state.x0;
      box.dataset.x1 = state.x1;
      const served = points !== whole.points;
      box.dataset.detail = served ? "served" : "page";
      note.dataset.shown = list.length;
      note.textContent = !list.length ? "No allocations to show." : (served
        ? `${list.length} allocations of those live in view (the biggest, and the biggest made in each fiftieth of it), ` +
          "from memtap report --serve" : REPORT.events.allocs > list.length ? `${list.length} allocations of the ` +
          `${REPORT.events.allocs} in the trace (the biggest, and the biggest made in each fiftieth of the run)`
          : "Every allocation") + ", each placed where it fits among those live when it was made:";
      const c = compositionChart(device, points, state.x0, state.x1, ymax);
      const a = allocationChart(device, list, placed, state.x0, state.x1);
      wire(c, "composition"), wire(a, "allocations");
      const focused = document.activeElement; // a chart keeps the keyboard when it is drawn again
      if (comp) comp.root.replaceWith(c.root); else box.append(c.root);
      if (allocs) allocs.root.replaceWith(a.root); else box.append(note, a.root);
      if (comp && focused === comp.root) c.root.focus();
      if (allocs && focused === allocs.root) a.root.focus();
      comp = c, allocs = a;
      cursor();
      if (state.pick >= 0) pick(state.pick);
    }
    function zoom(a, b) { // [a, b], moved into the run as a whole where it fits
      const w = Math.min(b - a, xmax - xmin);
      if (w < 1) return;
      a = Math.max(xmin, Math.min(a, xmax - w)), b = a + w;
      state.x0 = a, state.x1 = b;
      const asked = ++state.asked;
      if (SERIES.served && (a > xmin || b < xmax)) // the detail of [a, b], drawn when it comes
        fetch(`range?device=${d}&from=${Math.floor(a)}&to=${Math.ceil(b)}`).then((r) => r.json()).then((j) => {
          if (asked !== state.asked) return; // zoomed again since
          Object.assign(SERIES.stacks, j.stacks);
          use(asked, { points: j.points, list: j.allocations, placed: place(j.allocations, xmax) });
        }).catch((e) => { note.textContent = "memtap report --serve did not answer: " + e; });
      else use(asked, whole);
      show();
    }
    function use(asked, next) { // what is drawn, the cursor kept at its moment
      const t = points[state.cursor] ? points[state.cursor][0] : null;
      points = next.points, list = next.list, placed = next.placed;
      state.pick = -1;
      if (t !== null) state.cursor = at(points, t);
      if (asked === state.asked && next !== whole) show();
    }
    function cursor() {
      comp.root.querySelectorAll(".cursor").forEach((e) => e.remove());
      const p = points[state.cursor];
      if (!p) return;
      const px = comp.x(Math.max(state.x0, Math.min(state.x1, p[0])));
      comp.root.append(svg("line", { x1: px, x2: px, y1: comp.y(0), y2: comp.y(ymax), class: "cursor",
                                     "data-time-ns": p[0] }));
      readout.dataset.index = state.cursor;
      (CURSORS[d] || []).forEach((f) => f(p[0]));
      readout.textContent = `At ${moment(p[0], xmax)}: ${bytes(total(p))} allocated (` +
        CATEGORIES.map((cat, k) => p[1 + k] ? `${cat} ${bytes(p[1 + k])}` : "").filter((x) => x).join(", ") + ")" +
        (p[7] ? `, ${bytes(p[7])} reserved` : "");
    }
    function pick(i) {
      state.pick = i;
      allocs.root.querySelectorAll(".picked").forEach((e) => e.classList.remove("picked"));
      const bar = allocs.root.querySelector(`rect.alloc[data-index="${i}"]`);
      if (bar) bar.classList.add("picked");
      detail.replaceChildren();
      if (i < 0) return;
      const a = list[i], st = (SERIES.stacks || {})[a[4]] || { frames: [] };
      detail.dataset.index = i;
      detail.append(el("div", {}, `${bytes(a[2])} ${CATEGORIES[a[3]]}, ${lifetime(a)}`));
      detail.append(el("table", {}, el("tr", {}, frameText(st))));
    }
    function wire(c, which) {
      const r = c.root;
      r.setAttribute("tabindex", "0");
      r.setAttribute("role", "img");
      r.setAttribute("aria-label", which === "composition" ? `device ${d}'s memory over time` :
                     `device ${d}'s biggest allocations over time`);
      const brush = svg("rect", { class: "brush", y: M.t, height: r.getAttribute("height") - M.t - M.b, width: 0 });
      r.append(brush);
      const px = (ev) => ev.clientX - r.getBoundingClientRect().left;
      r.addEventListener("mousedown", (ev) => { state.drag = { c, which, brush, from: px(ev), px }; ev.preventDefault(); });
      r.addEventListener("mousemove", (ev) => {
        const x = px(ev), g = state.drag;
        if (g && g.c === c && Math.abs(x - g.from) > 2) {
          brush.setAttribute("x", Math.min(g.from, x));
          brush.setAttribute("width", Math.abs(x - g.from));
        }
        if (which === "composition") {
          state.cursor = at(points, c.x.invert(x));
          cursor();
          const said = ev.target.dataset ? ev.target.dataset.text : undefined;
          if (said === undefined) tip.hide(); else tip.show(`${moment(+ev.target.dataset.timeNs, xmax)}: ${said}`, ev);
        } else {
          const i = ev.target.dataset ? ev.target.dataset.index : undefined;
          if (i === undefined) tip.hide(); else tip.show(allocationText(list[i]), ev);
        }
      });
      r.addEventListener("mouseleave", () => tip.hide());
      r.addEventListener("dblclick", () => zoom(xmin, xmax));
      r.addEventListener("keydown", (ev) => {
        const mid = points[state.cursor] ? points[state.cursor][0] : (state.x0 + state.x1) / 2;
        const half = (state.x1 - state.x0) / 2;
        if (ev.key === "Escape") zoom(xmin, xmax);
        else if (ev.key === "+" || ev.key === "=") zoom(mid - half / 2, mid + half / 2);
        else if (ev.key === "-") zoom(mid - half * 2, mid + half * 2);
        else if (/^(ArrowRight|ArrowLeft|Home|End)$/.test(ev.key) && which === "composition" && points.length) {
          const to = { ArrowRight: state.cursor + 1, ArrowLeft: state.cursor - 1, Home: 0, End: points.length - 1 };
          state.cursor = Math.max(0, Math.min(points.length - 1, to[ev.key]));
          const t = points[state.cursor][0];
          if (t < state.x0 || t > state.x1) zoom(t - half, t + half); else cursor();
        } else if (/^(ArrowRight|ArrowLeft|Home|End)$/.test(ev.key) && list.length) { // allocations in the order made
          const order = list.map((_, i) => i).sort((i, j) => list[i][0] - list[j][0] || i - j), k = order.indexOf(state.pick);
          const to = { ArrowRight: k + 1, ArrowLeft: k - 1, Home: 0, End: order.length - 1 };
          pick(order[Math.max(0, Math.min(order.length - 1, to[ev.key]))]);
        } else return;
        ev.preventDefault();
      });
    }
    // a drag ends where the button is let go, on the chart or not
    window.addEventListener("mouseup", (ev) => {
      const g = state.drag;
      if (!g) return;
      const x = g.px(ev), a = g.from;
      state.drag = null;
      g.brush.setAttribute("width", 0);
      if (Math.abs(x - a) > 2) zoom(g.c.x.invert(Math.min(a, x)), g.c.x.invert(Math.max(a, x)));
      else if (g.which === "allocations" && ev.target.dataset && ev.target.dataset.index !== undefined)
        pick(Number(ev.target.dataset.index));
    });
    (SHOW[d] = SHOW[d] || []).push((t) => { // the tenth of the run around t, the cursor on it
      zoom(t - (xmax - xmin) / 20, t + (xmax - xmin) / 20);
      state.cursor = at(points, t);
      cursor();
      box.scrollIntoView();
    });
    show();
    box.append(help, readout, detail);
    return box;
  }

  // What was live at a moment as a tree of callers: the outermost frame at the top, each
  // call's width its bytes, so that allocations made through one helper from different
  // callers stay apart. A click (or Enter) zooms into a call, Esc zooms out; the arrow
  // keys move between calls.
  function callerTree(rows) {
    const node = (name) => ({ name, bytes: 0, count: 0, children: new Map(), parent: null });
    const root = node("all");
    for (const [stack, b, n] of rows) {
      const st = (SERIES.stacks || {})[stack] || {};
      const lines = st.calls && st.calls.length ? st.calls.slice() : (st.frames || []).slice(0, 8).map(fullFrame).reverse();
      if (!lines.length) lines.push(st.before_recording ? st.before_text || "made before recording" : "(no stack)");
      let at = root;
      root.bytes += b, root.count += n;
      for (const name of lines) {
        let c = at.children.get(name);
        if (!c) at.children.set(name, c = Object.assign(node(name), { parent: at }));
        c.bytes += b, c.count += n;
        at = c;
      }
    }
    return root;
  }
  const kids = (n) => [...n.children.values()].sort((a, b) => b.bytes - a.bytes || (a.name < b.name ? -1 : 1));

  function treeChart(id, root) {
    const width = 900, row = 18, tip = tooltip();
    const box = el("div", { class: "tree", id: id });
    const readout = el("div", { class: "readout", id: id + "-readout", "aria-live": "polite" });
    let focus = root, selected = root, chart = null;
    const text = (n) => `${n.name}\n${bytes(n.bytes)}, ${(100 * n.bytes / (root.bytes || 1)).toFixed(1)}% of what ` +
      `was live, ${n.count} allocation${n.count === 1 ? "" : "s"}`;
    function depth(n) { let k = 0; for (; n.parent; n = n.parent) k++; return k; }
    function draw() {
      const path = []; // the focused call's callers, drawn full width above it
      for (let n = focus.parent; n; n = n.parent) path.unshift(n);
      let rows = 0;
      const items = [];
      path.forEach((n, k) => items.push([n, 0, width, k]));
      (function lay(n, x, w, k) {
        if (w < 0.5) return;
        items.push([n, x, w, k]);
        rows = Math.max(rows, k + 1);
        let cx = x;
        for (const c of kids(n)) {
          const cw = w * c.bytes / (n.bytes || 1);
          lay(c, cx, cw, k + 1);
          cx += cw;
        }
      })(focus, 0, width, path.length);
      const r = svg("svg", { width: width, height: rows * row + 2, tabindex: 0, role: "tree", id: id + "-svg",
                             "aria-label": "what was live, by caller" });
      for (const [n, x, w, k] of items) {
        const g = svg("g", { class: "call" + (n === selected ? " selected" : ""), "data-name": n.name,
                             "data-bytes": n.bytes, "data-depth": depth(n) });
        g.append(svg("rect", { x: x, y: k * row, width: Math.max(w - 1, 0.5), height: row - 2,
                               fill: n === root ? "#ccc" : `hsl(${(n.name.length * 37 + depth(n) * 53) % 60 + 10}, 70%, 70%)` }));
        const chars = Math.floor((w - 6) / 6.5);
        if (chars > 3) {
          const t = svg("text", { x: x + 3, y: k * row + 12 });
          t.textContent = n.name.length > chars ? n.name.slice(0, chars - 1) + "\u2026" : n.name;
          g.append(t);
        }
        g.addEventListener("mousemove", (ev) => tip.show(text(n), ev));
        g.addEventListener("click", () => { selected = focus = n; draw(); });
        r.append(g);
      }
      r.addEventListener("mouseleave", () => tip.hide());
      r.addEventListener("dblclick", () => { focus = root; draw(); });
      r.addEventListener("keydown", (ev) => {
        const sib = selected.parent ? kids(selected.parent) : [selected], at = sib.indexOf(selected);
        const to = { ArrowDown: kids(selected)[0], ArrowUp: selected.parent, ArrowRight: sib[at + 1],
                     ArrowLeft: sib[at - 1] }[ev.key];
        if (ev.key === "Escape") focus = root;
        else if (ev.key === "Enter") focus = selected;
        else if (to) selected = to;
        else if (!(ev.key in { ArrowDown: 1, ArrowUp: 1, ArrowRight: 1, ArrowLeft: 1 })) return;
        ev.preventDefault();
        draw();
      });
      const had = chart && document.activeElement === chart;
      if (chart) chart.replaceWith(r); else box.append(r);
      if (had) r.focus();
      chart = r;
      box.dataset.focus = focus.name;
      readout.textContent = text(selected).replace("\n", ": ");
    }
    draw();
    box.append(readout);
    return box;
  }

  // The caller trees of a device: at its peak and at each of its OOMs, one shown at a time.
  function treeSection(device) {
    const d = device.device, live = SERIES.live || { peak: {}, oom: [] };
    const moments = [];
    if ((live.peak[d] || []).length)
      moments.push([`at the peak (${moment(device.peak_time_ns)})`, live.peak[d], device.peak_time_ns]);
    REPORT.oom.forEach((o, k) => {
      if (o.device === d && (live.oom[k] || []).length)
        moments.push([`at the OOM at ${moment(o.time_ns)} (${bytes(o.size)} asked)`, live.oom[k], o.time_ns]);
    });
    if (!moments.length) return null;
    const s = el("div", { id: "callers-" + d });
    s.append(el("h3", {}, "What was live, by caller"));
    s.append(el("p", { class: "sub" }, "The outermost call at the top, each call as wide as the memory made under it. " +
      "Hover for the bytes; click or Enter to zoom into a call, Esc or double-click to zoom out; the arrow keys move."));
    const pick = el("div", { class: "moments", role: "radiogroup" });
    let tree = null;
    moments.forEach(([label, rows, t], k) => {
      const b = el("button", { type: "button", "data-moment": k, "data-time-ns": t,
                               "aria-pressed": k === 0 ? "true" : "false" }, label);
      b.addEventListener("click", () => {
        pick.querySelectorAll("button").forEach((x) => x.setAttribute("aria-pressed", x === b ? "true" : "false"));
        const t = treeChart(`tree-${d}`, callerTree(rows));
        tree.replaceWith(t);
        tree = t;
      });
      pick.append(b);
    });
    s.append(pick);
    tree = treeChart(`tree-${d}`, callerTree(moments[0][1]));
    s.append(tree);
    (SHOW[d] = SHOW[d] || []).push((t) => { const b = pick.querySelector(`button[data-time-ns="${t}"]`); if (b) b.click(); });
    return s;
  }

  let tipBox = null;
  function tooltip() {
    if (!tipBox) {
      tipBox = el("div", { class: "tip", id: "tip", role: "tooltip" });
      tipBox.hidden = true;
      document.body.append(tipBox);
    }
    return {
      show(text, ev) {
        tipBox.textContent = text;
        tipBox.hidden = false;
        tipBox.style.left = Math.min(ev.pageX + 12, window.scrollX + document.documentElement.clientWidth - 560) + "px";
        tipBox.style.top = ev.pageY + 14 + "px";
      },
      hide() { tipBox.hidden = true; },
    };
  }

  function legend(withReserved) {
    const l = el("div", { class: "legend" });
    for (const cat of CATEGORIES)
      l.append(el("span", {}, el("i", { class: "swatch", style: "background:" + COLOURS[cat] }), cat));
    if (withReserved) l.append(el("span", {}, "- - reserved by the caching allocator"));
    return l;
  }

  // Reserved, allocated and requested bytes in segments over time.
  function fragmentationChart(device, f, xmin, xmax) {
    const tl = f.timeline;
    const ymax = Math.max(1, ...tl.map((s) => s.reserved_bytes));
    const c = axes(900, 180, xmax, ymax, xmin), x = (t) => c.x(Math.max(xmin, t));
    c.root.setAttribute("id", "fragmentation-" + device.device);
    [["reserved_bytes", "#222"], ["allocated_bytes", "#e15759"], ["requested_bytes", "#4e79a7"]].forEach(([k, colour]) => {
      // steps: a sample holds until the next (a slope would say it changed in between)
      let d = "";
      tl.forEach((s, i) => {
        d += i ? `L${x(s.time_ns)},${c.y(tl[i - 1][k])}L${x(s.time_ns)},${c.y(s[k])}`
               : `M${x(s.time_ns)},${c.y(s[k])}`;
      });
      c.root.append(svg("path", { d: d, fill: "none", stroke: colour, "stroke-width": 1.5, class: "line", "data-key": k }));
    });
    return c.root;
  }

  // Each segment at the peak as a bar; its live blocks filled, the gaps left white.
  // The most free space first; past 400 segments, how many are left out and what they hold.
  const MAX_SEGMENTS = 400;
  function segmentMap(device, f, blocks) {
    const all = [...f.segments_at_peak].sort((a, b) => (b.size - b.allocated_bytes) - (a.size - a.allocated_bytes) ||
                                                       a.address - b.address);
    const segs = all.slice(0, MAX_SEGMENTS);
    const largest = Math.max(1, ...segs.map((s) => s.size));
    const row = 12, width = 900, left = 160;
    const root = svg("svg", { width: width, height: segs.length * row + 4, id: "segments-" + device.device });
    let b = 0;
    segs.forEach((s, i) => {
      const y = i * row, w = (width - left) * s.size / largest;
      const name = svg("text", { x: left - 6, y: y + 10, "text-anchor": "end" });
      name.textContent = bytes(s.size) + ", largest free " + bytes(s.largest_free_block_bytes);
      root.append(name);
      root.append(svg("rect", { x: left, y: y + 1, width: Math.max(w, 1), height: row - 2, fill: "#fff", stroke: "#999",
                                class: "segment", "data-allocated": s.allocated_bytes }));
      b = lower(blocks, s.address);
      for (; b < blocks.length && blocks[b][0] < s.address + s.size; b++) {
        const bx = left + w * (blocks[b][0] - s.address) / s.size, bw = w * blocks[b][1] / s.size;
        root.append(svg("rect", { x: bx, y: y + 2, width: Math.max(bw, 0.5), height: row - 4, fill: "#e15759",
                                  class: "block" }));
      }
    });
    const box = el("div", { id: "segment-map-" + device.device });
    const rest = all.slice(MAX_SEGMENTS);
    box.append(el("p", { class: "sub", id: "segments-shown-" + device.device, "data-shown": segs.length,
                         "data-total": all.length },
                  rest.length ? `The ${segs.length} of ${all.length} segments with the most free space; ` +
                    `${rest.length} left out hold ${bytes(rest.reduce((x, s) => x + s.size - s.allocated_bytes, 0))} free.`
                    : `All ${all.length} segments, the most free space first.`));
    box.append(root);
    return box;
  }
  // The first block at or after addr (blocks by address).
  function lower(blocks, addr) {
    let lo = 0, hi = blocks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (blocks[mid][0] < addr) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  function fragmentationSection(device, f, blocks, xmin, xmax) {
    const s = el("div", { id: "fragmentation-section-" + device.device });
    s.append(el("h3", {}, "Fragmentation"));
    const rows = [["at the peak", f.at_peak], ["at the end", f.at_exit]].map(([when, st]) => [
      el("td", {}, when), num(st.segments, st.segments), num(st.reserved_bytes, bytes(st.reserved_bytes)),
      num(st.allocated_bytes, bytes(st.allocated_bytes)), num(st.internal_bytes, bytes(st.internal_bytes)),
      num(st.external_bytes, bytes(st.external_bytes)), num(st.largest_free_block_bytes, bytes(st.largest_free_block_bytes))]);
    s.append(table("fragmentation-table-" + device.device, ["", { text: "segments", num: 1 }, { text: "reserved", num: 1 },
      { text: "allocated", num: 1 }, { text: "rounding", num: 1 }, { text: "free in segments", num: 1 },
      { text: "largest free block", num: 1 }], rows));
    if (f.block_sizes === "estimated")
      s.append(el("p", { class: "sub" }, "Block sizes estimated: requests rounded up to 512 bytes where the trace gives only the request."));
    s.append(el("p", { class: "sub" }, "Over time: reserved (black), allocated in blocks (red), requested (blue)."));
    s.append(fragmentationChart(device, f, xmin, xmax));
    const maps = (SERIES.maps || {})[device.device] || [];
    const title = el("p", { class: "sub", id: "segment-moment-" + device.device }, "Segments at the peak (live blocks in " +
      "red, free space white):");
    s.append(title);
    let shown = segmentMap(device, f, blocks || []), at = maps.findIndex((m) => m[1] === 1);
    s.append(shown);
    if (maps.length < 2 && !SERIES.served) return s;
    // a map [time, kind, segments, blocks, blocks not drawn] in place of the one shown
    const draw = ([time, kind, segs, flat, more], where) => {
      const bl = [], list = [];
      for (let i = 0; i < flat.length; i += 2) bl.push([flat[i], flat[i + 1]]);
      for (let i = 0, b = 0; i < segs.length; i += 2) {
        const seg = { address: segs[i], size: segs[i + 1], allocated_bytes: 0, largest_free_block_bytes: 0 };
        let free = seg.address;
        for (b = lower(bl, seg.address); b < bl.length && bl[b][0] < seg.address + seg.size; b++) {
          seg.largest_free_block_bytes = Math.max(seg.largest_free_block_bytes, bl[b][0] - free);
          free = Math.max(free, bl[b][0] + bl[b][1]);
          seg.allocated_bytes += bl[b][1];
        }
        seg.largest_free_block_bytes = Math.max(seg.largest_free_block_bytes, seg.address + seg.size - free);
        list.push(seg);
      }
      const next = kind === 1 && !SERIES.served ? segmentMap(device, f, blocks || [])
        : segmentMap(device, { segments_at_peak: list }, bl);
      next.dataset.timeNs = time;
      shown.replaceWith(next);
      shown = next;
      const what = [["", "the peak", "an OOM"][kind], where, "live blocks in red, free space white"].filter((x) => x);
      title.textContent = `Segments at ${moment(time)} (${what.join("; ")})` +
        (more ? `; ${more} more blocks not drawn` : "") + ":";
      return next;
    };
    // the page's own maps, stepped one by one
    const show = (k) => {
      at = Math.max(0, Math.min(maps.length - 1, k));
      draw(maps[at], `${at + 1} of ${maps.length}`).dataset.moment = at;
    };
    // served: after any event of the allocator's, stepped one by one, found when asked
    let event = null, asking = null, wanted = null;
    const WHAT = { alloc: "an allocation", free: "a free", vmm_create: "a VMM allocation", vmm_release: "a VMM release",
                   segment_alloc: "a segment reserved", segment_free: "a segment released",
                   alloc_failed: "a failed allocation" };
    const ask = (query) => {
      if (asking) { wanted = query; return; } // one question at a time; the last one wanted next
      asking = fetch(`map?device=${device.device}&${query}`).then((r) => r.json()).then((m) => {
        if (m.event !== null && m.map) {
          event = m.event;
          draw(m.map, `after event ${m.event}, ${WHAT[m.kind] || m.kind} of ${bytes(m.size)}`).dataset.event = m.event;
        }
      }).catch((e) => { title.textContent = "memtap report --serve did not answer: " + e; }).finally(() => {
        asking = null;
        if (wanted) { const q = wanted; wanted = null; ask(q); }
      });
    };
    const move = (k) => {
      if (!SERIES.served) return show(at + k);
      ask((event !== null ? `event=${event}` : `time=${shown.dataset.timeNs || device.peak_time_ns}`) +
          (k < 0 ? "&back=1" : "&step=1"));
    };
    const step = (k) => el("button", { type: "button", class: "step", "aria-label": k < 0 ? "the moment before" :
      "the moment after" }, k < 0 ? "\u25c0" : "\u25b6");
    const back = step(-1), forth = step(1);
    back.addEventListener("click", () => move(-1));
    forth.addEventListener("click", () => move(1));
    title.before(el("div", { class: "moments", id: "segment-steps-" + device.device }, back, forth));
    s.addEventListener("keydown", (ev) => {
      if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") move(ev.key === "ArrowRight" ? 1 : -1);
      else return;
      ev.preventDefault();
    });
    (CURSORS[device.device] = CURSORS[device.device] || []).push((t) => {
      if (SERIES.served) return ask(`time=${Math.round(t)}`);
      let k = -1;
      while (k + 1 < maps.length && maps[k + 1][0] <= t) k++;
      if (k >= 0 && k !== at) show(k);
    });
    return s;
  }

  // Where a category's figure comes from and, read by frames, how sure it is (as the text says).
  function sourceText(device, c) {
    const src = (device.composition_source || {})[c] || "", sure = (device.composition_confidence || {})[c];
    if (!/frames/.test(src) || sure === undefined) return src;
    return src + ", " + (sure >= 0.9 ? "sure" : sure >= 0.5 ? "likely" : "a guess");
  }

  function deviceSection(device) {
    const d = device.device, s = el("section", { id: "device-" + d });
    s.append(el("h2", {}, `Device ${d}: ${device.name}`));
    s.append(table("summary-" + d, ["", { text: "bytes", num: 1 }], [
      [el("td", {}, "peak allocated"), num(device.peak_allocated_bytes, bytes(device.peak_allocated_bytes))],
      [el("td", {}, "peak at"), num(device.peak_time_ns, moment(device.peak_time_ns))],
      [el("td", {}, "capacity"), num(device.capacity_bytes, !device.capacity_bytes ? "unknown"
        : device.device_bytes > device.capacity_bytes
          ? `${bytes(device.capacity_bytes)}: a policy's cap (the device has ${bytes(device.device_bytes)})`
          : bytes(device.capacity_bytes))],
      [el("td", {}, "allocated at exit"), num(device.allocated_at_exit_bytes, bytes(device.allocated_at_exit_bytes))]]));
    const comp = device.composition_at_peak;
    s.append(el("h3", {}, "What the peak was made of"));
    s.append(table("composition-table-" + d, ["category", { text: "bytes", num: 1 }, "source"],
      CATEGORIES.concat(["reserved_unallocated"]).map((c) => [
        el("td", {}, el("i", { class: "swatch", style: "background:" + (COLOURS[c] || "#fff") }), c),
        num(comp[c], bytes(comp[c])), el("td", {}, sourceText(device, c))])));
    const points = (SERIES.timeline || {})[d] || [];
    s.append(legend(points.some((p) => p[7] > 0)));
    // one time axis for the device's charts, to the trace's end where segments are known: a
    // device that went quiet before another's last entry keeps what it held until then
    const tl = device.fragmentation ? device.fragmentation.timeline : [];
    const xmax = Math.max(1, ...points.map((p) => p[0]), device.peak_time_ns, ...tl.map((t) => t.time_ns),
                          ...REPORT.oom.filter((o) => o.device === d).map((o) => o.time_ns),
                          ...(SERIES.actions || []).map((a) => a[0]));
    // ...from where the device's memory (or a policy's first action) begins, a fiftieth of
    // the run before it: a job's first seconds are often setup with none
    const first = Math.min(xmax, ...points.slice(0, 1).map((p) => p[0]), ...tl.slice(0, 1).map((t) => t.time_ns),
                           ...((SERIES.allocations || {})[d] || []).slice(0, 1).map((a) => a[0]),
                           ...(SERIES.actions || []).slice(0, 1).map((a) => a[0]));
    const xmin = REPORT.times === "ns" ? Math.max(0, first - (xmax - first) / 50) : 0;
    s.append(timeline(device, points, xmin, xmax));
    const libs = device.by_library_at_peak || [], count = device.driver_count, cache = device.caching_allocator_at_peak;
    if (libs.length || count || cache) {
      s.append(el("h3", {}, "Which library holds the memory"));
      // only what this device's figures are: a snapshot has no libraries and no driver's figure
      s.append(el("p", { class: "sub" }, [
        libs.length ? "At the peak, by the first module of each stack that is not CUDA's runtime or driver." : "",
        count ? "The memory in use on the device as the driver said it, beside what memtap recorded: the rest " +
          "is memory memtap could not see (CUDA contexts, memory libraries keep for themselves)." : "",
        cache ? "The caching allocator's reserve at the peak, split into tensors' blocks and cache." : ""]
        .filter((x) => x).join(" ")));
      const rows = libs.map((l) => [el("td", {}, l.library), num(l.bytes, bytes(l.bytes))]);
      if (count) {
        const when = { first_use: " (when memtap asked, at the device's first use)", exit: " (when memtap asked, at exit)",
          job: " (when the job asked)", oom: " (at the out-of-memory failure)" }[count.reading] || "";
        rows.push([el("td", {}, `in use as the driver said at ${moment(count.time_ns)}${when}`), num(count.used_bytes, bytes(count.used_bytes))]);
        rows.push([el("td", {}, "of it, recorded by memtap"), num(count.recorded_bytes, bytes(count.recorded_bytes))]);
        rows.push([el("td", {}, "not seen by memtap (CUDA contexts, libraries' own memory)"), num(count.unseen_bytes, bytes(count.unseen_bytes))]);
      }
      if (cache) {
        rows.push([el("td", {}, "the caching allocator's reserve"), num(cache.reserved_bytes, bytes(cache.reserved_bytes))]);
        rows.push([el("td", {}, "of it, in tensors' blocks"), num(cache.tensor_bytes, bytes(cache.tensor_bytes))]);
        rows.push([el("td", {}, "of it, cache (no tensor)"), num(cache.cache_bytes, bytes(cache.cache_bytes))]);
      }
      s.append(table("libraries-" + d, ["library", { text: "bytes", num: 1 }], rows));
    }
    const top = REPORT.top_at_peak.filter((g) => g.device === d);
    s.append(el("h3", {}, "Live at the peak, by stack"));
    s.append(top.length ? table("top-" + d, [{ text: "bytes", num: 1 }, { text: "count", num: 1 }, "kind", "stack"],
                                stackRows(top)) : el("p", { class: "none" }, "nothing"));
    const callers = treeSection(device);
    if (callers) s.append(callers);
    if (device.fragmentation)
      s.append(fragmentationSection(device, device.fragmentation, (SERIES.blocks || {})[d], xmin, xmax));
    return s;
  }

  function planSection(plan) {
    const s = el("section", { id: "plan" });
    s.append(el("h2", {}, "Capacity plan"));
    s.append(el("p", { class: "sub" }, `Device ${plan.device}, the run as ${plan.setup}. The measured composition at ` +
      "the peak calibrates the model; the table projects it to other ZeRO stages and recomputation modes."));
    s.append(table("plan-components", ["component", { text: "measured", num: 1 }, { text: "estimated", num: 1 }],
      plan.components.map((c) => [el("td", {}, c.name), num(c.measured, bytes(c.measured)),
        num(c.estimated, bytes(c.estimated))])));
    const cell = (v) => v === null ? num(-1, "impossible") : num(v, bytes(v));
    s.append(table("plan-table", ["total per GPU", { text: "no recomputation", num: 1 }, { text: "selective", num: 1 },
      { text: "full", num: 1 }], plan.table.map((row) => [el("td", {}, "ZeRO-" + row.zero), cell(row.none),
        cell(row.selective), cell(row.full)])));
    return s;
  }

  function render() {
    const root = document.getElementById("report");
    const p = REPORT.process || {};
    root.append(el("h1", {}, "memtap report"));
    root.append(el("p", { class: "sub" }, `${REPORT.trace}` + (p.cmdline ? ` — ${p.cmdline}` : "") +
      (p.pid ? ` (pid ${p.pid} on ${p.host})` : "")));
    if (REPORT.problem) root.append(el("p", { class: "problem" }, REPORT.problem));
    const ev = REPORT.events;
    root.append(table("events", [{ text: "allocations", num: 1 }, { text: "frees", num: 1 }, { text: "failed", num: 1 },
      { text: "dropped", num: 1 }, { text: "events", num: 1 }],
      [[num(ev.allocs, ev.allocs), num(ev.frees, ev.frees), num(ev.failed, ev.failed), num(ev.dropped, ev.dropped),
        num(ev.total, ev.total)]]));
    for (const device of REPORT.devices) root.append(deviceSection(device));
    if (REPORT.plan) root.append(planSection(REPORT.plan));

    root.append(el("h2", {}, "Growing from iteration to iteration"));
    root.append(el("p", { class: "sub" }, `Iteration boundaries: ${REPORT.iterations.boundary} (${REPORT.iterations.count}).`));
    root.append(REPORT.leaks.length ? table("leaks", [{ text: "growth per iteration", num: 1 }, { text: "live", num: 1 },
      { text: "iterations", num: 1 }, "device", "stack"], bySite(REPORT.leaks).map((l) => [
        num(l.growth_bytes_per_iteration, bytes(l.growth_bytes_per_iteration)), num(l.bytes, bytes(l.bytes)),
        num(l.iterations, l.iterations), el("td", {}, l.device), frameText(l)]))
      : el("p", { class: "none", id: "leaks" }, "no stack grew"));

    root.append(el("h2", {}, "Live at exit"));
    root.append(REPORT.live_at_exit.length ? table("exit", [{ text: "bytes", num: 1 }, { text: "count", num: 1 }, "kind",
      "stack"], stackRows(REPORT.live_at_exit)) : el("p", { class: "none", id: "exit" }, "nothing"));

    root.append(el("h2", {}, "Out-of-memory events"));
    root.append(REPORT.oom.length ? table("oom", [{ text: "requested", num: 1 }, { text: "free", num: 1 }, "device",
      { text: "at", num: 1 }, "verdict", "stack"], REPORT.oom.map((o) => [
        num(o.size, bytes(o.size)), num(o.free_bytes, bytes(o.free_bytes)), el("td", {}, o.device),
        num(o.time_ns, moment(o.time_ns)),
        el("td", {}, verdict(o)),
        frameText(o)]))
      : el("p", { class: "none", id: "oom" }, "none"));
    if ((REPORT.diagnosis || []).length) root.append(diagnosisSection(REPORT.diagnosis));
  }

  // What to change so that it fits: each failure's (or peak's) cause, and the changes with their predicted peaks.
  const CAUSES = {
    step: (g) => `the step needs more than the device: it needs ${bytes(g.need_bytes)}` +
      (g.need === "estimated" ? " (estimated: the first step had not finished)" : " or more"),
    optimizer_state: (g) => `the optimizer's state, ${bytes(g.cause_bytes)} made at the first step, leaves the next ` +
      "step no room",
    growth: (g) => `memory grew across iterations, ${bytes(g.cause_bytes)}, most at ${g.cause_where || "(no stack)"}` +
      (g.what_grew ? `: ${g.what_grew}` : ""),
    checkpoint: (g) => `a checkpoint loaded onto the device beside the live model, ${bytes(g.cause_bytes)}, most at ` +
      (g.cause_where || "(no stack)"),
    graph_pools: (g) => `CUDA graphs' private pools hold ${bytes(g.cause_bytes)}`,
    fragmentation: (g) => `fragmentation: ${bytes(g.cause_bytes)} free in the allocator's segments, not in one block`,
    cache: (g) => `the allocator's cache: the tensors peak at ${bytes(g.allocated_bytes)}, within the capacity, ` +
      `but the allocator held ${bytes(g.cause_bytes)} more`,
    outside_allocator: (g) => `${bytes(g.cause_bytes)} of the device used where memtap saw no allocation`,
  };

  function diagnosisSection(all) {
    const s = el("section", { id: "diagnosis" });
    s.append(el("h2", {}, "What to change so that it fits"));
    all.forEach((g, i) => {
      s.append(el("h3", {}, g.of === "peak"
        ? `Device ${g.device}'s peak, ${bytes(g.reserved_bytes || g.allocated_bytes)}, over the ` +
          `${bytes(g.capacity_bytes)} of --gpu-mem`
        : `The failure at ${moment(g.time_ns, 1e9)} on device ${g.device}: ${bytes(g.request_bytes)} asked with ` +
          `${bytes(g.allocated_bytes)} in use, of ${bytes(g.capacity_bytes)}`));
      s.append(el("p", { class: "cause" }, "Cause: " + (CAUSES[g.cause] || ((x) => x.cause))(g)));
      const when = g.of === "peak" ? (REPORT.devices.find((x) => x.device === g.device) || {}).peak_time_ns : g.time_ns;
      if (when !== undefined && SHOW[g.device]) { // the evidence: the charts at that moment, what was live then
        const b = el("button", { type: "button", class: "evidence", id: "evidence-" + i },
                     "Show it: the charts at that moment and what was live then, by caller");
        b.addEventListener("click", () => SHOW[g.device].forEach((f) => f(when)));
        s.append(b);
      }
      const live = Object.entries(g.live).filter(([, b]) => b > 0).sort((a, b) => b[1] - a[1]);
      if (live.length) s.append(el("p", { class: "live" }, "In use then: " +
        live.map(([tag, b]) => `${tag} ${bytes(b)}`).join(", ")));
      // what fits first, each part in the order of what it costs
      const remedies = g.remedies.filter((m) => m.fits).concat(g.remedies.filter((m) => !m.fits));
      s.append(remedies.length ? table("remedies-" + i, ["change", { text: "allocated", num: 1 },
        { text: "reserved", num: 1 }, "fits", "cost", "predicted by"], remedies.map((m) => [
          el("td", {}, m.change + (m.where ? ` (${m.where})` : "")), num(m.allocated_bytes, bytes(m.allocated_bytes)),
          num(m.reserved_bytes, bytes(m.reserved_bytes)), el("td", {}, m.fits ? "fits" : "does not fit"),
          el("td", {}, m.cost), el("td", {}, m.predicted_by)]))
        : el("p", { class: "none" }, g.planned ? "nothing memtap tried" :
          "memtap report --plan 'SETUP' (the model and the run's setup) predicts the changes to the training setup"));
    });
    return s;
  }

  // An OOM's verdict in the text's words: would it have fit in the segments' free space.
  function verdict(o) {
    const f = o.fragmentation;
    if (o.fits_without_fragmentation === true)
      return `it would have fit without fragmentation: ${bytes(f.external_bytes)} free in segments, ` +
        `the largest block ${bytes(f.largest_free_block_bytes)}`;
    if (o.fits_without_fragmentation === false)
      return `not fragmentation: ${bytes(f.allocated_bytes)} of ${bytes(f.reserved_bytes)} reserved was allocated, ` +
        `${bytes(f.external_bytes)} free in segments`;
    return "fragmentation not known: the trace has no caching allocator's segments";
  }

  function done() {
    document.body.dataset.errors = errors.join("; ");
    document.body.dataset.rendered = errors.length ? "no" : "yes";
    if (errors.length) document.body.prepend(el("p", { class: "error" }, "The report could not be drawn: " + errors.join("; ")));
  }

  try { render(); } catch (e) { errors.push(String(e && e.stack || e)); }
  done();
})();
