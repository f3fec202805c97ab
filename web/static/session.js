// Session page: summary, the context/cache chart over every call, filters, and the timeline of
// calls one page at a time (relation, pointer, markers, tokens by category, cache, latency).

import { groupedLabel, h, mount, clear, fmtInt, fmtTokens, fmtCost, fmtPct, fmtMs, fmtTime, stat, relationBadge, verdictBadge, providerBadge,
  markerChip, markerGroups, callMarkers, outcomeBadge, CATEGORIES, CATEGORY_LABEL, MARKER_LABEL } from "./dom.js";
import { getJSON } from "./api.js";
import { sessionChart } from "./chart.js";
import { vocab, kinds, words, sentence } from "./vocab.js";
import { findingsCard, findingBadges } from "./findings.js";
import { waterfall } from "./waterfall.js";
import { rowCursor } from "./keys.js";
import { sortState, sortRows, headerCell, inRange, rangeControl, parseMs, parseCount } from "./sortable.js";

// What each stat card counts, in words: its tooltip.
const STAT_HELP = {
  calls: "model calls captured in this session (all threads)",
  tokens: "input + output tokens of every call, as the provider reported them",
  hit: "hit rate: of the calls that could read the cache (the cache was written before and still warm), " +
    "the share that did read it. Counts calls, not tokens: see cached input.",
  cached: "cached input: the share of all input tokens that were read from the cache (cache read / input). " +
    "Counts tokens, so a few large misses pull it below the hit rate.",
  breaks: "calls whose cache was broken by the client: the prompt changed inside the cached prefix (cache verdict client_break)",
  cost: "what the session's reported usage costs at the list prices of each call's date; the simulator is free",
  errors: "calls that failed: an HTTP status of 400 or more, a timeout, a reset or a refused connection",
  threads: "conversations inside the session: the main agent loop plus side threads (sub-agents, title calls)",
};

function groupedHelp(grouped) {
  return "how ctxscope put these calls into one session (each call's reason, with its count):\n" +
    Object.entries(grouped).map(([k, n]) => `${k}: ${groupedLabel(k)} — ${n} call${n === 1 ? "" : "s"}`).join("\n");
}

// A filter: each option's value is the API's value, its text the word the table shows for it.
function select(label, options, value, onchange, labels) {
  return h("select", { "aria-label": label, onchange },
    h("option", { value: "" }, label + ": all"),
    options.map((o) => h("option", { value: o, selected: o === value ? true : null }, (labels && labels[o]) || o)));
}

export function tokenBar(call, scale) {
  const cats = call.tokens_by_category;
  const total = call.tokens_estimated != null ? call.tokens_estimated : (call.usage && call.usage.input);
  const width = scale > 0 && total ? Math.max(2, Math.round((total / scale) * 100)) : 0;
  const bar = h("span", { class: "stack", style: { width: width + "%" } });
  const parts = [];
  if (cats && typeof cats === "object") {
    const sum = CATEGORIES.reduce((a, c) => a + (cats[c] || 0), 0) || 1;
    for (const c of CATEGORIES) {
      if (!cats[c]) continue;
      bar.appendChild(h("span", { class: "seg c-" + c, style: { width: ((cats[c] / sum) * 100).toFixed(2) + "%" } }));
      parts.push(`${CATEGORY_LABEL[c]} ${fmtInt(cats[c])}`);
    }
  } else if (width) {
    bar.appendChild(h("span", { class: "seg c-plain", style: { width: "100%" } }));
  }
  const title = (call.tokens_estimated != null ? `estimated ${fmtInt(call.tokens_estimated)} tokens` : `reported input ${fmtInt(total)}`) +
    (parts.length ? "\n" + parts.join("\n") : "");
  return h("div", { class: "tok", title }, h("span", { class: "tok-n" }, fmtTokens(total)), h("span", { class: "stack-box" }, bar));
}

// The provider's diagnoses against ours over the session; shown only when a call had one.
function agreementStat(p) {
  if (!p || !(p.agree || p.disagree || p.pending)) return null;
  const title = `agree ${p.agree} · disagree ${p.disagree} · pending ${p.pending} · none ${p.none}` +
    (p.disagree ? " · where they disagree, the provider is the reference" : "");
  return stat("provider agrees", p.rate == null ? "–" : fmtPct(p.rate), title);
}

export function cacheCell(call) {
  const u = call.usage;
  const kids = [verdictBadge(call.cache), providerBadge(call.cache, true)];
  if (u && u.input) {
    const read = Math.min(u.input, u.cache_read || 0);
    const write = Math.min(u.input - read, u.cache_write || 0);
    const unc = Math.max(0, u.input - read - write);
    const pct = (v) => ((v / u.input) * 100).toFixed(1) + "%";
    kids.push(h("span", { class: "mini", title: `read ${fmtInt(read)} · write ${fmtInt(write)} · uncached ${fmtInt(unc)}` },
      h("span", { class: "seg s-read", style: { width: pct(read) } }), h("span", { class: "seg s-write", style: { width: pct(write) } }),
      h("span", { class: "seg s-uncached", style: { width: pct(unc) } })));
    kids.push(h("span", { class: "muted small" }, fmtPct(read / u.input)));
  }
  if (call.cache && call.cache.lost_tokens) kids.push(h("span", { class: "lost", title: "tokens lost to this break" }, "−" + fmtTokens(call.cache.lost_tokens)));
  return h("td", { class: "cache" }, kids);
}

export function relationCell(call) {
  const rel = call.relation;
  const { EPOCH_START, DIVERGED } = vocab.RelationKind;
  const extra = rel === EPOCH_START ? call.epoch_reason : rel === DIVERGED ? call.pointer : null;
  const kids = [relationBadge(rel, extra)];
  if (rel === DIVERGED && call.pointer) kids.push(h("code", { class: "ptr", title: "first difference: " + call.pointer }, call.pointer));
  else if (rel === EPOCH_START && call.epoch_reason) kids.push(h("span", { class: "reason" }, String(call.epoch_reason).replace(/_/g, " ")));
  return h("td", { class: "rel" }, kids);
}

// The calls table's columns: each sorts (the rows of the page on screen); those with ``range``
// filter by a range of values.
const lostOf = (c) => (c.cache && c.cache.lost_tokens) || null;
const readShare = (c) => (c.usage && c.usage.input ? Math.min(c.usage.input, c.usage.cache_read || 0) / c.usage.input : null);
export const COLUMNS = [
  { key: "seq", label: "#", num: true, range: true, value: (c) => c.seq },
  { key: "time", label: "time", cls: "col-time", value: (c) => c.started_at },
  { key: "thread", label: "thread", value: (c) => c.thread_index },
  { key: "model", label: "model", value: (c) => c.model || c.path },
  { key: "relation", label: "prefix relation", value: (c) => c.relation },
  { key: "markers", label: "markers", value: (c) => callMarkers(c).length || null, title: "how many effects the call carries" },
  { key: "tokens", label: "tokens", num: true, range: true, unit: "tokens (12k, 1.5M)", parse: parseCount,
    value: (c) => (c.tokens_estimated != null ? c.tokens_estimated : c.usage && c.usage.input) },
  { key: "cache", label: "cache", value: (c) => (lostOf(c) ? -lostOf(c) : readShare(c)), title: "sorts by the tokens lost to a break, then the share read from the cache" },
  { key: "lost", label: "lost", num: true, range: true, hidden: true, value: lostOf },
  { key: "latency", label: "latency", sub: "total / first byte", num: true, range: true, unit: "ms (or 2s)", parse: parseMs, cls: "wrap",
    title: "total time / time to the first byte", value: (c) => c.duration_ms },
  { key: "ttfb", label: "first byte", num: true, range: true, hidden: true, unit: "ms (or 2s)", parse: parseMs, value: (c) => c.ttfb_ms },
  { key: "status", label: "status", value: (c) => c.status },
];

export function renderSession(root, session, params, ctx) {
  ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: session }]);
  ctx.setTitle(session);
  const filters = { relation: params.get("relation") || "", verdict: params.get("verdict") || "", marker: params.get("marker") || "",
    thread: params.get("thread") || "", q: params.get("q") || "" };
  let offset = params.has("offset") ? Number(params.get("offset")) : null; // null: the server opens where the story is
  let disposed = false;
  let timer = null;
  let seen = null;
  let last = null;

  const head = h("div");
  const chartBox = h("div", { class: "card" });
  const wfBox = h("div", { class: "card", id: "waterfall", hidden: true });
  const filterBar = h("div", { class: "toolbar filters" });
  const tableBox = h("div", { class: "card flush" });
  const pager = h("div", { class: "pager" });
  let byCall = {}; // call id -> the kinds of the findings that concern it (badges)
  let cursor = null; // j/k and n/p over the table's rows (keys.js)
  const picked = { id: null, scroll: false }; // the row they selected, kept across redraws
  const sort = sortState(params.get("sort") || "seq", params.get("dir") || "asc");
  const findingsBox = findingsCard(session, (m) => { byCall = m; if (last && !disposed) drawTable(last); });
  mount(root, head, chartBox, wfBox, findingsBox, filterBar, tableBox, pager);

  const search = h("input", { type: "search", class: "search", placeholder: "search calls: id, pointer, model, marker…",
    "aria-label": "search calls", value: filters.q,
    oninput: () => { clearTimeout(timer); timer = setTimeout(() => { filters.q = search.value; offset = null; load(); }, 250); } });

  const countEl = h("span", { class: "muted" });
  const threadSel = h("select", { "aria-label": "thread", hidden: true, onchange: (e) => { filters.thread = e.target.value; offset = null; load(); } });
  mount(filterBar,
    select("relation", kinds(vocab.RelationKind), filters.relation, (e) => { filters.relation = e.target.value; offset = null; load(); }, words("RelationKind")),
    select("cache", kinds(vocab.CacheVerdict), filters.verdict, (e) => { filters.verdict = e.target.value; offset = null; load(); }, words("CacheVerdict")),
    select("marker", kinds(vocab.MarkerKind), filters.marker, (e) => { filters.marker = e.target.value; offset = null; load(); }, MARKER_LABEL),
    threadSel, search, rangeControl(COLUMNS, sort, () => { if (last) drawTable(last); }), h("span", { class: "spacer" }), countEl);

  function drawFilters(view) {
    const threads = view.threads || [];
    threadSel.hidden = threads.length < 2;
    const key = threads.map((t) => t.thread + ":" + t.calls).join(",");
    if (threadSel.dataset.key !== key) {
      threadSel.dataset.key = key;
      mount(threadSel, h("option", { value: "" }, "thread: all"),
        threads.map((t) => h("option", { value: t.thread, selected: t.thread === filters.thread ? true : null },
          `${t.main ? "main" : "side"} T${t.index + 1} (${t.calls})`)));
    }
    countEl.textContent = view.total === view.all ? `${fmtInt(view.all)} calls` : `${fmtInt(view.total)} of ${fmtInt(view.all)} calls`;
  }

  function drawHead(view) {
    const s = view.summary;
    const title = view.title || s.title || null;
    ctx.setTitle(title || session);
    if (title) ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: title }]);
    mount(head,
      h("div", { class: "toolbar" }, h("h1", { class: "session-title", title: session }, title || session),
        title ? h("code", { class: "muted small", title: "session id" }, session) : null,
        (s.models || []).map((m) => h("span", { class: "tag" }, m)),
        h("span", { class: "spacer" }),
        h("a", { class: "btn", href: "#/transcript/" + encodeURIComponent(session), title: "the conversation as the model saw it" }, "transcript")),
      h("div", { class: "stats" },
        stat("calls", fmtInt(s.calls), STAT_HELP.calls), stat("tokens", fmtTokens(s.tokens), STAT_HELP.tokens),
        stat("hit rate", fmtPct(s.hit_rate && s.hit_rate.ratio), STAT_HELP.hit + (s.hit_rate ? `\nhere: ${fmtInt(s.hit_rate.hits)} hits of ${fmtInt(s.hit_rate.eligible)} calls that could read the cache` : "\nhere: no cache verdicts")),
        stat("cached input", fmtPct(s.cached_share && s.cached_share.ratio), STAT_HELP.cached + (s.cached_share ? `\nhere: ${fmtInt(s.cached_share.read)} of ${fmtInt(s.cached_share.input)} input tokens read from cache` : "\nhere: no usage reported")),
        stat("breaks", s.breaks == null ? "–" : fmtInt(s.breaks), STAT_HELP.breaks),
        agreementStat(s.provider_agreement),
        s.lost_tokens ? stat("lost to breaks", fmtTokens(s.lost_tokens) + (s.lost_usd != null ? " · " + fmtCost(s.lost_usd) : ""), sentence("loss_pricing")) : null,
        stat("cost", s.cost_usd == null && s.cost_unpriced ? "unpriced" : fmtCost(s.cost_usd, s.cost_estimated), STAT_HELP.cost + (s.cost_unpriced ? "\nunpriced: " + s.cost_unpriced : "")),
        stat("errors", fmtInt(s.errors), STAT_HELP.errors),
        stat("threads", fmtInt(Math.max(1, (view.threads || []).length)), STAT_HELP.threads),
        s.grouped_by && Object.keys(s.grouped_by).length ? stat("grouped by", Object.keys(s.grouped_by).join(" · "), groupedHelp(s.grouped_by)) : null,
        view.analysis ? null : h("div", { class: "note" }, "No prefix analysis in this capture file yet: relations, verdicts and token categories show as –.")),
      breakLinks(view.series));
  }

  // Every break of the session, wherever its page is: each links to its diff, where its story is.
  function breakLinks(series) {
    const at = series.relation.map((r, i) => (r === vocab.RelationKind.DIVERGED ? i : -1)).filter((i) => i >= 0);
    if (!at.length) return null;
    const MAX = 12;
    return h("div", { class: "break-links" }, h("span", { class: "muted" }, `${at.length} break${at.length > 1 ? "s" : ""} (prompt changed): `),
      at.slice(0, MAX).map((i) => h("a", { class: "btn small", href: "#/diff/" + encodeURIComponent(series.id[i]), title: "the diff of this call with its predecessor" }, "#" + series.seq[i])),
      at.length > MAX ? h("span", { class: "muted" }, ` … and ${at.length - MAX} more (filter relation: diverged)`) : null);
  }

  function drawChart(view) {
    const width = Math.max(320, chartBox.clientWidth - 24);
    mount(chartBox, h("div", { class: "card-title" }, "Context size and cache use per call"),
      sessionChart(view.series, { width, mainThread: ((view.threads || []).find((t) => t.main) || {}).index ?? null, onPick: (i) => ctx.navigate("#/call/" + encodeURIComponent(view.series.id[i])) }));
    if (!root.dataset.ready) return; // the first screen: the waterfall follows once it is painted
    drawWaterfall(view, width);
  }

  function drawWaterfall(view, width) {
    wfBox.hidden = false;
    mount(wfBox, h("div", { class: "card-title", title: "every call from its start to its end; calls that overlap in time stack on separate lanes" }, "Timeline (waterfall)"),
      waterfall(view.series, { width, onPick: (i) => ctx.navigate("#/call/" + encodeURIComponent(view.series.id[i])) }));
  }

  function drawTable(view) {
    const scale = Math.max(1, ...view.series.ctx.map((v) => v || 0));
    const threadCount = (view.threads || []).length;
    const tbody = h("tbody");
    cursor = rowCursor(tbody, (tr) => tr.classList.contains("diverged") || tr.classList.contains("client-break"), picked);
    const prevSeen = seen;
    const rowOf = (c) => {
      const href = "#/call/" + encodeURIComponent(c.id);
      const markers = callMarkers(c);
      const fresh = prevSeen && !prevSeen.has(c.id);
      return h("tr", { class: "call-row" + (fresh ? " fresh" : "") + (c.relation === vocab.RelationKind.DIVERGED ? " diverged" : "") +
        (c.cache && c.cache.verdict === vocab.CacheVerdict.CLIENT_BREAK ? " client-break" : ""), dataset: { id: c.id, seq: c.seq },
        onclick: (ev) => { if (!ev.target.closest("a,button")) ctx.navigate(href); } },
        h("td", { class: "num" }, h("a", { href }, "#" + c.seq)),
        h("td", { class: "muted mono col-time", title: c.started_at }, fmtTime(c.started_at)),
        threadCount > 1 ? h("td", {}, c.thread_index != null ? h("span", { class: "thread t" + (c.thread_index % 6), title: "thread " + c.thread }, "T" + (c.thread_index + 1)) : "") : null,
        h("td", {}, h("span", { class: "model" }, c.model || c.path || "–")),
        relationCell(c),
        h("td", { class: "markers" }, markerGroups(markers).map(({ marker: m, index: i, count }) => markerChip(m,
          () => ctx.navigate(href + "?m=" + i + (m.pointer ? "&ptr=" + encodeURIComponent(m.pointer) : "")), count)),
          findingBadges(byCall[c.id])),
        h("td", {}, tokenBar(c, scale)),
        cacheCell(c),
        h("td", { class: "num mono", title: `first byte ${fmtMs(c.ttfb_ms)} · total ${fmtMs(c.duration_ms)}` },
          fmtMs(c.duration_ms), h("span", { class: "muted small" }, c.ttfb_ms != null ? " / " + fmtMs(c.ttfb_ms) : "")),
        h("td", {}, outcomeBadge(c)));
    };
    // The first rows go in at once (the first screen); the rest of the page follows a frame later.
    const FIRST = 30;
    const calls = sortRows(view.calls.filter((c) => inRange(c, COLUMNS, sort.range)), COLUMNS, sort);
    for (const c of calls.slice(0, FIRST)) tbody.appendChild(rowOf(c));
    cursor.restore();
    const rest = calls.slice(FIRST);
    const token = (drawTable.token = (drawTable.token || 0) + 1);
    if (rest.length) requestAnimationFrame(() => requestAnimationFrame(() => {
      if (disposed || token !== drawTable.token) return;
      const frag = document.createDocumentFragment();
      for (const c of rest) frag.appendChild(rowOf(c));
      tbody.appendChild(frag);
      cursor.restore();
    }));
    seen = new Set(view.series.id);
    mount(tableBox, h("table", { class: "grid calls" },
      h("thead", {}, h("tr", {}, COLUMNS.filter((c) => !c.hidden && (c.key !== "thread" || threadCount > 1)).map((c) => headerCell(c, sort, () => drawTable(view))))),
      tbody),
      calls.length ? null : h("p", { class: "muted pad" }, view.calls.length ? "No calls of this page lie in this range." : "No calls match these filters."));
    const pages = Math.max(1, Math.ceil(view.total / view.limit));
    const page = Math.floor(view.offset / view.limit) + 1;
    const go = (o) => { offset = o; load(); };
    mount(pager,
      h("button", { type: "button", disabled: page <= 1 ? true : null, onclick: () => go(0) }, "« first"),
      h("button", { type: "button", disabled: page <= 1 ? true : null, onclick: () => go(Math.max(0, view.offset - view.limit)) }, "‹ prev"),
      h("span", { class: "muted" }, `calls ${fmtInt(view.total ? view.offset + 1 : 0)}–${fmtInt(view.offset + view.calls.length)} of ${fmtInt(view.total)} · page ${page}/${pages}`),
      h("button", { type: "button", disabled: page >= pages ? true : null, onclick: () => go(view.offset + view.limit) }, "next ›"),
      h("button", { type: "button", disabled: page >= pages ? true : null, onclick: () => go(-1) }, "latest »"));
  }

  let loads = 0; // the latest load: an answer to an earlier one (filters changed since) is dropped
  async function load() {
    const mine = ++loads;
    try {
      const view = await getJSON("/session", { s: session, offset: offset == null ? "" : offset, ...filters });
      if (disposed || mine !== loads) return;
      if (last == null) performance.mark("ctxscope:session-data");
      const first = last == null;
      last = view;
      drawHead(view);
      if (first || String(view.series.id.length) !== chartBox.dataset.n) { drawChart(view); chartBox.dataset.n = String(view.series.id.length); }
      drawFilters(view);
      drawTable(view);
      if (first) {
        root.dataset.ready = "1";
        performance.mark("ctxscope:session-ready");
        requestAnimationFrame(() => setTimeout(() => {
          performance.mark("ctxscope:session-painted");
          if (disposed) return;
          drawWaterfall(last, Math.max(320, chartBox.clientWidth - 24));
          findingsBox.load();
        }, 0));
      }
    } catch (e) {
      if (!disposed && mine === loads) mount(root, h("p", { class: "error pad" }, "Could not load session: " + e.message));
    }
  }

  // n/p past the page's last (or first) break: the page of the next (or previous) break of the
  // whole session (the series holds every call), opened with that call selected.
  function breakOnAnotherPage(step) {
    if (!last || filters.relation || filters.verdict || filters.marker || filters.thread || filters.q) return false;
    const sr = last.series;
    const isBreak = (i) => sr.relation[i] === vocab.RelationKind.DIVERGED || sr.verdict[i] === vocab.CacheVerdict.CLIENT_BREAK;
    const here = picked.id ? sr.id.indexOf(picked.id) : step > 0 ? last.offset + last.calls.length - 1 : last.offset;
    for (let i = here + step; i >= 0 && i < sr.id.length; i += step) {
      if (!isBreak(i)) continue;
      picked.id = sr.id[i];
      picked.scroll = true;
      offset = Math.floor(i / last.limit) * last.limit;
      load();
      return true;
    }
    return false;
  }

  let resizeTimer = null;
  const onResize = () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => { if (last) drawChart(last); }, 150); };
  window.addEventListener("resize", onResize);
  delete root.dataset.ready;
  load();
  return {
    onCalls(rows) {
      if (rows && !rows.some((r) => r.session === session)) return;
      clearTimeout(timer);
      timer = setTimeout(load, 200);
    },
    dispose() { disposed = true; clearTimeout(timer); clearTimeout(resizeTimer); window.removeEventListener("resize", onResize); delete root.dataset.ready; },
    onKey(k) { return !!(cursor && cursor.key(k)) || ((k === "n" || k === "p") && breakOnAnotherPage(k === "n" ? 1 : -1)); },
    searchBox: search,
  };
}
