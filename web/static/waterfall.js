// The session's calls on a time axis, as DevTools' network waterfall draws requests: one bar per
// call from its start to its end, calls that overlap in time on separate lanes, so concurrency
// (sub-agents, parallel tool rounds, title calls) shows as stacked bars. Plain SVG, one <rect>
// per call; a bar's tooltip says the call, its start and its latency; a click opens the call.

import { h, svg, fmtMs } from "./dom.js";
import { vocab } from "./vocab.js";

const LANE = 9; // px per lane
const MAX_LANES = 12; // deeper overlap shares the last lane (the count says how deep it went)
const PAD = { l: 44, r: 8, t: 16, b: 4 };

// Lanes by first fit: a call goes on the first lane free at its start.
export function lanes(starts, ms) {
  const ends = [];
  const lane = starts.map((s, i) => {
    if (s == null) return null;
    const end = s + Math.max(0, ms[i] || 0);
    let k = ends.findIndex((e) => e <= s);
    if (k < 0) { k = ends.length; ends.push(end); } else ends[k] = end;
    return k;
  });
  return { lane, depth: ends.length };
}

function tickStep(span) {
  for (const s of [100, 250, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 1800000, 3600000]) {
    if (span / s <= 8) return s;
  }
  return 7200000;
}

function fmtOffset(ms) {
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return +(ms / 1000).toFixed(2) + " s";
  return Math.floor(ms / 60000) + "m" + (ms % 60000 ? String(Math.round((ms % 60000) / 1000)).padStart(2, "0") + "s" : "");
}

export function waterfall(series, { width, onPick } = {}) {
  const starts = series.start || [];
  const ms = series.ms || [];
  const n = series.id.length;
  const { lane, depth } = lanes(starts, ms);
  const shown = Math.max(1, Math.min(depth, MAX_LANES));
  const span = Math.max(1, ...starts.map((s, i) => (s == null ? 0 : s + Math.max(0, ms[i] || 0))));
  const W = Math.max(320, Math.round(width || 1000));
  const H = PAD.t + shown * LANE + PAD.b;
  const iw = W - PAD.l - PAD.r;
  const x = (t) => PAD.l + (t / span) * iw;
  const ticks = [];
  const step = tickStep(span);
  for (let t = 0; t <= span; t += step) {
    const xx = x(t).toFixed(1);
    ticks.push(svg("line", { x1: xx, x2: xx, y1: PAD.t - 3, y2: H - PAD.b, class: "grid-line" }));
    ticks.push(svg("text", { x: xx, y: PAD.t - 5, class: "axis", "text-anchor": t === 0 ? "start" : "middle", text: fmtOffset(t) }));
  }
  const { DIVERGED } = vocab.RelationKind;
  const bars = [];
  for (let i = 0; i < n; i++) {
    if (starts[i] == null) continue;
    const k = Math.min(lane[i], MAX_LANES - 1);
    const x0 = x(starts[i]);
    const w = Math.max(2, x(starts[i] + Math.max(0, ms[i] || 0)) - x0);
    const t = series.thread[i];
    const cls = "wf-bar" + (t != null ? " wt" + (t % 6) : "") + (series.ok[i] ? "" : " wf-err") +
      (series.relation[i] === DIVERGED ? " wf-break" : "");
    bars.push(svg("rect", { x: x0.toFixed(2), y: PAD.t + k * LANE + 1, width: w.toFixed(2), height: LANE - 2, rx: 1.5, class: cls,
      "data-index": i, "data-seq": series.seq[i] },
      svg("title", { text: `#${series.seq[i]} · starts ${fmtOffset(starts[i])} after the first call · latency ${fmtMs(ms[i])}` +
        (t != null ? ` · thread T${t + 1}` : "") + (series.ok[i] ? "" : " · failed") }))); 
  }
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "waterfall", width: W, height: H, role: "img",
    "aria-label": `waterfall: ${n} calls over ${fmtOffset(span)}, at most ${depth} at once`,
    onclick: (ev) => { const r = ev.target.closest && ev.target.closest("rect.wf-bar"); if (r && onPick) onPick(Number(r.getAttribute("data-index"))); } },
    svg("text", { x: 0, y: PAD.t + LANE - 1, class: "axis", text: "calls" }), ticks, bars);
  return h("div", { class: "waterfall-box" }, chart,
    h("div", { class: "legend" }, h("span", {}, `at most ${depth} call${depth === 1 ? "" : "s"} at once`),
      depth > MAX_LANES ? h("span", {}, `(lanes past ${MAX_LANES} drawn on the last)`) : null,
      h("span", { class: "lg lg-wf-break" }, "prompt changed"), h("span", { class: "lg lg-wf-err" }, "failed")));
}
