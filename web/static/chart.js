// Plain-SVG charts for a session: context size over the session (line) over per-call input
// split into cache read / cache write / uncached (stacked bars). One <path> per series, so a
// 1,000-call session costs a handful of DOM nodes, not thousands.

import { h, svg, fmtTokens, fmtInt, fmtMs } from "./dom.js";
import { vocab } from "./vocab.js";

const H = 160;
const PAD = { l: 44, r: 8, t: 10, b: 24 };

function niceMax(v) {
  if (!v || v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

export function sessionChart(series, { onPick, width, mainThread = null } = {}) {
  const W = Math.max(320, Math.round(width || 1000));
  const n = series.id.length;
  const ctx = series.ctx.map((v) => v || 0);
  const input = series.input.map((v, i) => (v == null ? null : v));
  const max = niceMax(Math.max(1, ...ctx, ...input.map((v) => v || 0)));
  const iw = W - PAD.l - PAD.r;
  const ih = H - PAD.t - PAD.b;
  const step = iw / Math.max(1, n);
  const bw = Math.min(28, Math.max(0.6, step * 0.8));
  const y = (v) => PAD.t + ih - (v / max) * ih;
  const x = (i) => PAD.l + i * step + (step - bw) / 2;

  let dRead = "", dWrite = "", dUncached = "", dNone = "";
  for (let i = 0; i < n; i++) {
    const inp = input[i];
    const xi = x(i).toFixed(2);
    if (inp == null) { dNone += `M${xi} ${y(0).toFixed(1)}h${bw.toFixed(2)}v-2h-${bw.toFixed(2)}z`; continue; }
    const read = Math.min(inp, series.read[i] || 0);
    const write = Math.min(inp - read, series.write[i] || 0);
    const unc = Math.max(0, inp - read - write);
    let base = 0;
    const seg = (v) => { const y0 = y(base), y1 = y(base + v); base += v; return v > 0 ? `M${xi} ${y1.toFixed(1)}h${bw.toFixed(2)}V${y0.toFixed(1)}h-${bw.toFixed(2)}z` : ""; };
    dRead += seg(read); dWrite += seg(write); dUncached += seg(unc);
  }
  // The line follows the main thread; calls of side threads (titles, sub-agents) are dots.
  let line = "";
  const side = [];
  ctx.forEach((v, i) => {
    const cx = (PAD.l + i * step + step / 2).toFixed(2);
    const t = series.thread[i];
    if (mainThread != null && t != null && t !== mainThread) { side.push(svg("circle", { cx, cy: y(v).toFixed(1), r: 2.4, class: "mk-side" })); return; }
    line += (line ? "L" : "M") + cx + " " + y(v).toFixed(1);
  });

  const marks = [];
  const { EPOCH_START } = vocab.RelationKind, { CLIENT_BREAK } = vocab.CacheVerdict;
  for (let i = 0; i < n; i++) {
    const cx = (PAD.l + i * step + step / 2).toFixed(2);
    if (series.compaction[i]) marks.push(svg("line", { x1: cx, x2: cx, y1: PAD.t, y2: PAD.t + ih, class: "mk-compaction" }));
    else if (series.relation[i] === EPOCH_START && i > 0 && (mainThread == null || series.thread[i] == null || series.thread[i] === mainThread)) marks.push(svg("line", { x1: cx, x2: cx, y1: PAD.t, y2: PAD.t + ih, class: "mk-epoch" }));
    if (series.verdict[i] === CLIENT_BREAK) marks.push(svg("circle", { cx, cy: PAD.t + 3, r: 2.6, class: "mk-break" }));
    if (!series.ok[i]) marks.push(svg("circle", { cx, cy: PAD.t + ih + 6, r: 2.2, class: "mk-error" }));
  }

  const grid = [];
  for (const f of [0, 0.5, 1]) {
    const yy = y(max * f).toFixed(1);
    grid.push(svg("line", { x1: PAD.l, x2: W - PAD.r, y1: yy, y2: yy, class: "grid-line" }));
    grid.push(svg("text", { x: PAD.l - 6, y: Number(yy) + 3, class: "axis", "text-anchor": "end", text: fmtTokens(max * f) }));
  }
  // The x axis: call numbers (the table's #), about one label per 70 px, at the bar's middle.
  const every = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(iw / 70))));
  const xticks = [];
  for (let i = 0; i < n; i += every) {
    const cx = (PAD.l + i * step + step / 2).toFixed(1);
    xticks.push(svg("text", { x: cx, y: H - 2, class: "axis x-tick", "text-anchor": "middle", text: "#" + series.seq[i] }));
  }
  if (n) xticks.push(svg("text", { x: 2, y: H - 2, class: "axis", text: "call" }));
  const cursor = svg("rect", { x: 0, y: PAD.t, width: Math.max(1, step), height: ih, class: "cursor", visibility: "hidden" });
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", width: W, height: H, role: "img",
    "aria-label": `context size and cache use over ${n} calls` },
    grid, xticks,
    svg("path", { d: dRead, class: "s-read" }), svg("path", { d: dWrite, class: "s-write" }),
    svg("path", { d: dUncached, class: "s-uncached" }), svg("path", { d: dNone, class: "s-none" }),
    svg("path", { d: line, class: "s-ctx" }), side, marks, cursor);

  const tip = h("div", { class: "tip", hidden: true });
  const wrap = h("div", { class: "chart-wrap" }, chart, tip);
  const indexAt = (ev) => {
    const r = chart.getBoundingClientRect();
    const vx = ((ev.clientX - r.left) / r.width) * W;
    const i = Math.floor((vx - PAD.l) / step);
    return i >= 0 && i < n ? i : -1;
  };
  chart.addEventListener("mousemove", (ev) => {
    const i = indexAt(ev);
    if (i < 0) { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); return; }
    cursor.setAttribute("x", (PAD.l + i * step).toFixed(2));
    cursor.setAttribute("visibility", "visible");
    const lines = [
      `#${series.seq[i]} ${series.relation[i] || ""} ${series.verdict[i] ? "· " + series.verdict[i] : ""}`,
      `context ${fmtInt(series.ctx[i])} tokens`,
      series.input[i] == null ? "usage not reported"
        : `read ${fmtInt(series.read[i] || 0)} · write ${fmtInt(series.write[i] || 0)} · uncached ${fmtInt(Math.max(0, series.input[i] - (series.read[i] || 0) - (series.write[i] || 0)))}`,
      `latency ${fmtMs(series.ms[i])}`,
    ];
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    const r = wrap.getBoundingClientRect();
    const left = ev.clientX - r.left + 12;
    tip.style.left = Math.min(left, r.width - 230) + "px";
    tip.style.top = (ev.clientY - r.top + 12) + "px";
  });
  chart.addEventListener("mouseleave", () => { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); });
  chart.addEventListener("click", (ev) => { const i = indexAt(ev); if (i >= 0 && onPick) onPick(i); });

  const legend = h("div", { class: "legend" },
    h("span", { class: "lg lg-ctx" }, "context size"), h("span", { class: "lg lg-read" }, "cache read"),
    h("span", { class: "lg lg-write" }, "cache write"), h("span", { class: "lg lg-uncached" }, "uncached input"),
    side.length ? h("span", { class: "lg lg-side" }, "side-thread call") : null, h("span", { class: "lg lg-compaction" }, "compaction"), h("span", { class: "lg lg-epoch" }, "epoch start"),
    h("span", { class: "lg lg-break" }, "cache break"), h("span", { class: "lg lg-error" }, "error"));
  return h("div", { class: "chart-box" }, wrap, legend);
}
