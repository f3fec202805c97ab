// Usage page: tokens, cache reads and dollars per day and per model, over a chosen span of days.
// Each bar opens the sessions behind it. Data: /api/usage (web/usage.py).

import { h, mount, fmtInt, fmtTokens, fmtCost, fmtPct } from "./dom.js";
import { getJSON } from "./api.js";
import { sortState, sortRows, headerCell } from "./sortable.js";

const SESSION_COLUMNS = [
  { key: "session", label: "session", value: (s) => s.session.toLowerCase() },
  { key: "calls", label: "calls", num: true, value: (s) => s.calls },
  { key: "tokens", label: "tokens", num: true, value: (s) => s.tokens },
  { key: "cost", label: "cost", num: true, value: (s) => s.cost_usd },
];

const METRICS = {
  tokens: { label: "tokens", value: (b) => b.input + b.output, fmt: fmtTokens },
  cache_read: { label: "cache reads", value: (b) => b.cache_read, fmt: fmtTokens },
  cost: { label: "dollars", value: (b) => b.cost_usd || 0, fmt: (v, b) => fmtCost(b ? b.cost_usd : v, b && b.cost_estimated) },
};

// A bar's track: tokens split into cache read, cache write, uncached input and output; the other
// metrics one segment.
function track(b, metric, max) {
  // a value above nothing stays visible (2 px) beside a bar a thousand times bigger
  const seg = (cls, v) => h("span", { class: "seg " + cls, style: { width: max > 0 ? ((v / max) * 100).toFixed(2) + "%" : "0", minWidth: v > 0 ? "2px" : "0" } });
  if (metric !== "tokens") return [seg(metric === "cost" ? "s-output" : "s-read", METRICS[metric].value(b))];
  const read = Math.min(b.input, b.cache_read), write = Math.min(b.input - read, b.cache_write);
  return [seg("s-read", read), seg("s-write", write), seg("s-uncached", Math.max(0, b.input - read - write)), seg("s-output", b.output)];
}

function barTitle(b) {
  return `${b.key}: ${fmtInt(b.calls)} calls in ${fmtInt(b.session_count)} session${b.session_count === 1 ? "" : "s"}\n` +
    `input ${fmtInt(b.input)} (cache read ${fmtInt(b.cache_read)}, ${b.input ? fmtPct(b.cache_read / b.input) : "–"}; cache write ${fmtInt(b.cache_write)})\n` +
    `output ${fmtInt(b.output)}\ncost ${fmtCost(b.cost_usd, b.cost_estimated)}` + (b.cost_usd == null ? " (no price known, or the simulator)" : "");
}

export function renderUsage(root, params, ctx) {
  let disposed = false;
  let data = null;
  let picked = null; // [group, key] of the bar whose sessions show
  const sessionSort = sortState(null); // the API's order (dearest first) until a header is clicked
  ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: "usage" }]);
  ctx.setTitle("usage");
  const state = { metric: METRICS[params.get("metric")] ? params.get("metric") : "tokens", days: params.get("days") || "30" };
  const metricSel = h("select", { "aria-label": "metric", onchange: () => { state.metric = metricSel.value; draw(); } },
    Object.entries(METRICS).map(([k, m]) => h("option", { value: k, selected: k === state.metric ? true : null }, m.label)));
  const daysSel = h("select", { "aria-label": "days", onchange: () => { state.days = daysSel.value; load(); } },
    [["1", "today"], ["7", "last 7 days"], ["30", "last 30 days"], ["90", "last 90 days"], ["", "all time"]]
      .map(([v, t]) => h("option", { value: v, selected: v === state.days ? true : null }, t)));
  const totals = h("div", { class: "stats" });
  const dayBox = h("div", { class: "card", id: "usage-days" });
  const modelBox = h("div", { class: "card", id: "usage-models" });
  const sessionsBox = h("div", { class: "card usage-sessions", id: "usage-sessions", hidden: true });
  const legend = h("div", { class: "legend" });
  mount(root, h("div", { class: "toolbar" }, h("h1", {}, "Usage"), h("span", { class: "spacer" }), metricSel, daysSel),
    totals, legend, h("div", { class: "cols2" }, dayBox, modelBox), sessionsBox);

  // Every day of the span from its first call to today, a day without calls an empty bar: a gap
  // in the work reads as a gap, not as two neighbouring days.
  function everyDay(days) {
    const known = days.filter((b) => /^\d{4}-\d{2}-\d{2}$/.test(b.key));
    if (!known.length || known.length !== days.length) return days;
    const at = new Map(known.map((b) => [b.key, b]));
    const out = [];
    const end = new Date(Math.max(Date.parse(known[known.length - 1].key), Date.parse(new Date().toISOString().slice(0, 10))));
    for (let d = new Date(known[0].key); d <= end && out.length < 400; d.setUTCDate(d.getUTCDate() + 1)) {
      const key = d.toISOString().slice(0, 10);
      out.push(at.get(key) || { key, calls: 0, input: 0, output: 0, cache_read: 0, cache_write: 0, cost_usd: null, session_count: 0, sessions: [] });
    }
    return out.length < 400 ? out : days;
  }

  function bars(group, list, title) {
    const m = METRICS[state.metric];
    const max = Math.max(0, ...list.map((b) => m.value(b)));
    return [h("div", { class: "card-title" }, title, " · ", m.label),
      list.length ? h("div", { class: "bars" }, list.map((b) => h("div", {
        class: "bar-row" + (picked && picked[0] === group && picked[1] === b.key ? " on" : ""), dataset: { key: b.key, group },
        title: barTitle(b), role: "button", tabindex: "0",
        onclick: () => { picked = [group, b.key]; draw(); },
        onkeydown: (ev) => { if (ev.key === "Enter") { picked = [group, b.key]; draw(); } },
      }, h("span", { class: "bar-label" }, b.key), h("span", { class: "bar-track" }, track(b, state.metric, max)),
        h("span", { class: "bar-value" }, m.fmt(m.value(b), b)))))
        : h("p", { class: "muted" }, "No calls in this span.")];
  }

  function drawSessions() {
    const list = picked && data ? (picked[0] === "day" ? data.days : data.models).find((b) => b.key === picked[1]) : null;
    sessionsBox.hidden = !list;
    if (!list) return;
    mount(sessionsBox, h("div", { class: "card-title" }, `sessions behind ${picked[0] === "day" ? "the day" : "the model"} ${list.key}`),
      h("table", { class: "grid" }, h("thead", {}, h("tr", {}, SESSION_COLUMNS.map((c) => headerCell(c, sessionSort, drawSessions)))),
        h("tbody", {}, sortRows(list.sessions, SESSION_COLUMNS, sessionSort).map((s) => h("tr", {},
          h("td", { class: "session-cell" }, h("a", { class: "session-link", href: "#/session/" + encodeURIComponent(s.session), title: s.session }, s.session)),
          h("td", { class: "num" }, fmtInt(s.calls)), h("td", { class: "num" }, fmtTokens(s.tokens)), h("td", { class: "num" }, fmtCost(s.cost_usd)))))),
      list.session_count > list.sessions.length ? h("p", { class: "muted small" }, `… and ${list.session_count - list.sessions.length} smaller sessions`) : null);
  }

  function draw() {
    if (!data) return;
    const t = data.total;
    mount(totals,
      h("div", { class: "stat", title: "model calls in the span, all sessions but those ctxscope made itself" }, h("div", { class: "stat-v" }, fmtInt(t.calls)), h("div", { class: "stat-l" }, "calls")),
      h("div", { class: "stat", title: "input + output tokens, as reported" }, h("div", { class: "stat-v" }, fmtTokens(t.input + t.output)), h("div", { class: "stat-l" }, "tokens")),
      h("div", { class: "stat", title: "input tokens read from the cache, and their share of all input tokens" }, h("div", { class: "stat-v" }, fmtTokens(t.cache_read) + (t.input ? " · " + fmtPct(t.cache_read / t.input) : "")), h("div", { class: "stat-l" }, "cache reads")),
      h("div", { class: "stat", title: "the reported usage at list prices (≈: a guessed price); the simulator is free" }, h("div", { class: "stat-v" }, fmtCost(t.cost_usd, t.cost_estimated)), h("div", { class: "stat-l" }, "cost")),
      h("div", { class: "stat", title: "sessions with calls in the span" }, h("div", { class: "stat-v" }, fmtInt(t.session_count)), h("div", { class: "stat-l" }, "sessions")));
    mount(dayBox, bars("day", everyDay(data.days), "per day (UTC)"));
    mount(modelBox, bars("model", data.models, "per model"));
    mount(legend, state.metric === "tokens" ? [h("span", { class: "lg lg-read" }, "cache read"), h("span", { class: "lg lg-write" }, "cache write"),
      h("span", { class: "lg lg-uncached" }, "uncached input"), h("span", { class: "lg lg-output" }, "output")] : null,
    h("span", {}, "click a bar for the sessions behind it"));
    drawSessions();
  }

  async function load() {
    try {
      data = await getJSON("/usage", { days: state.days });
      if (disposed) return;
      draw();
      root.dataset.ready = "1";
    } catch (e) {
      if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not load usage: " + e.message));
    }
  }
  delete root.dataset.ready;
  load();
  let timer = null;
  return {
    onCalls() { clearTimeout(timer); timer = setTimeout(load, 1000); },
    dispose() { disposed = true; clearTimeout(timer); delete root.dataset.ready; },
  };
}
