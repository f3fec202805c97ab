// Sessions page: every session with client, models, calls, tokens, hit rate, breaks, cost and
// last activity; side threads nested under their session; filter as you type; live refresh.

import { h, mount, clear, fmtInt, fmtTokens, fmtCost, fmtPct, fmtAgo } from "./dom.js";
import { getJSON, deleteSession } from "./api.js";
import { sentence } from "./vocab.js";
import { sortState, sortRows, headerCell, inRange, rangeControl, parseCount, parseUsd } from "./sortable.js";

const HIT_TITLE = "hit rate: of the calls that could read the cache (a cache write was expected or possible), " +
  "the share that did. Hover a cell for the share of input tokens read from the cache, which can differ.";

export function renderSessions(root, params, ctx) {
  ctx.setCrumbs([{ label: "sessions" }]);
  ctx.setTitle("sessions");
  let data = [];
  let timer = null;
  let disposed = false;
  const search = h("input", {
    type: "search", class: "search", placeholder: "filter: session, model, client…", "aria-label": "filter sessions",
    value: params.get("q") || "", oninput: () => draw(),
  });
  const onlyBreaks = h("input", { type: "checkbox", onchange: () => draw() });
  const onlyErrors = h("input", { type: "checkbox", onchange: () => draw() });
  // Sessions ctxscope made itself (replays, advise --verify, non-model requests) are left out
  // unless asked for, and then shown under their purpose.
  const withOwn = h("input", { type: "checkbox", id: "sessions-own", onchange: () => load() });
  const count = h("span", { class: "muted" });
  const tbody = h("tbody");
  const thead = h("thead");
  const table = h("table", { class: "grid sessions" }, thead, tbody);
  // Every column sorts (click its header); the numeric ones filter by a range, last activity by age.
  const ratio = (s) => (s.hit_rate ? s.hit_rate.ratio : s.cached_share ? s.cached_share.ratio : null);
  const columns = [
    { key: "session", label: "session", value: (s) => (s.title || s.session).toLowerCase() },
    { key: "client", label: "client", value: (s) => (s.clients || []).join(", ").toLowerCase() || null },
    { key: "models", label: "models", value: (s) => (s.models || []).join(", ") || null },
    { key: "calls", label: "calls", num: true, range: true, value: (s) => s.calls },
    { key: "tokens", label: "tokens", num: true, range: true, unit: "tokens (12k, 1.5M)", parse: parseCount, value: (s) => s.tokens },
    { key: "hit", label: "hit rate", num: true, title: HIT_TITLE, value: ratio },
    { key: "breaks", label: "breaks", num: true, range: true, title: "cache breaks caused by the client (cache verdict client_break)", value: (s) => s.breaks },
    { key: "errors", label: "errors", num: true, range: true, title: "failed calls", value: (s) => s.errors, hidden: true },
    { key: "cost", label: "cost", num: true, range: true, unit: "USD", parse: parseUsd, value: (s) => s.cost_usd },
    { key: "last", label: "last activity", num: true, cls: "wrap", value: (s) => s.last_started_at },
  ];
  const sort = sortState(params.get("sort") || "last", params.get("dir") || "desc");
  const since = h("select", { "aria-label": "active since", title: "only the sessions active in this time", onchange: () => draw() },
    [["", "any time"], ["3600", "last hour"], ["86400", "last 24 hours"], ["604800", "last 7 days"], ["2592000", "last 30 days"]]
      .map(([v, t]) => h("option", { value: v }, t)));
  const range = rangeControl(columns, sort, () => draw());
  const empty = h("div", { class: "empty", hidden: true },
    h("p", {}, "No calls captured yet."),
    h("p", { class: "muted" }, "Point your agent's base URL at this daemon, e.g. ", h("code", {}, location.origin + "/anthropic"),
      " or ", h("code", {}, location.origin + "/openai/v1"), " — or try the built-in simulator at ", h("code", {}, location.origin + "/u/sim"), "."));
  mount(root,
    h("div", { class: "toolbar" }, h("h1", {}, "Sessions"), count, h("span", { class: "spacer" }), search,
      h("label", { class: "check" }, onlyBreaks, " with breaks"), h("label", { class: "check" }, onlyErrors, " with errors"),
      h("label", { class: "check", title: "replays, advise --verify and non-model requests of known clients" },
        withOwn, " made by ctxscope")),
    h("div", { class: "toolbar filters" }, since, range),
    h("div", { class: "card flush" }, table), empty);

  function matches(s, q) {
    if (!inRange(s, columns, sort.range)) return false;
    const age = Number(since.value);
    if (age && !(s.last_started_at && Date.now() - new Date(s.last_started_at).getTime() <= age * 1000)) return false;
    if (onlyBreaks.checked && !(s.breaks > 0)) return false;
    if (onlyErrors.checked && !(s.errors > 0)) return false;
    if (!q) return true;
    const hay = [s.title || "", s.session, ...(s.models || []), ...(s.clients || []), ...(s.threads || []).map((t) => t.thread)].join(" ").toLowerCase();
    return q.split(/\s+/).every((w) => hay.includes(w));
  }

  function hitCell(s) {
    const hr = s.hit_rate, share = s.cached_share;
    const ratio = hr ? hr.ratio : share ? share.ratio : null;
    if (ratio == null) return h("td", { class: "num muted" }, "–");
    const title = (hr ? `${fmtInt(hr.hits)} hits of ${fmtInt(hr.eligible)} calls that could read the cache\n` : "") +
      (share ? `${fmtInt(share.read)} of ${fmtInt(share.input)} input tokens read from cache (${fmtPct(share.ratio)})` : "");
    const bar = h("span", { class: "meter" }, h("span", { class: "meter-fill", style: { width: Math.round(ratio * 100) + "%" } }));
    return h("td", { class: "num", title }, bar, " ", fmtPct(ratio));
  }

  function row(s) {
    const href = "#/session/" + encodeURIComponent(s.session);
    const del = h("button", {
      type: "button", class: "icon-btn", title: "delete this session's captures",
      onclick: async (ev) => {
        ev.preventDefault();
        if (!window.confirm(`Delete session ${s.session} (${s.calls} calls)? This cannot be undone.`)) return;
        try { await deleteSession(s.session); load(); } catch (e) { window.alert("Delete failed: " + e.message); }
      },
    }, "✕");
    const name = s.title || s.session;
    const rows = [h("tr", { class: "session-row", dataset: { session: s.session } },
      h("td", { class: "session-cell" }, h("a", { href, class: "session-link", title: s.title ? `${s.title}\nsession ${s.session}` : s.session }, name),
        s.purpose ? h("span", { class: "chip purpose", title: "a session ctxscope made itself" }, s.purpose) : null,
        s.compactions ? h("span", { class: "chip m-compaction", title: "compactions" }, `${s.compactions} compaction${s.compactions > 1 ? "s" : ""}`) : null),
      h("td", { class: "muted" }, (s.clients || []).join(", ") || "–"),
      h("td", {}, (s.models || []).map((m) => h("span", { class: "tag" }, m))),
      h("td", { class: "num" }, fmtInt(s.calls), s.errors ? h("span", { class: "err-count", title: "failed calls" }, ` (${s.errors}✗)`) : null),
      h("td", { class: "num", title: s.usage ? `input ${fmtInt(s.usage.input)} · output ${fmtInt(s.usage.output)}` : null }, fmtTokens(s.tokens)),
      hitCell(s),
      h("td", { class: "num" + (s.breaks > 0 ? " warn" : " muted"), title: s.lost_tokens ? `${fmtInt(s.lost_tokens)} tokens lost to breaks` + (s.lost_usd != null ? ` (${fmtCost(s.lost_usd)})` : "") + ": " + sentence("loss_pricing") : null },
        s.breaks == null ? "–" : fmtInt(s.breaks)),
      h("td", { class: "num", title: s.cost_unpriced ? "unpriced: " + s.cost_unpriced : s.cost_estimated ? "some models are priced by your price file's default: estimated" : "from reported usage" },
        s.cost_usd == null && s.cost_unpriced ? "unpriced" : fmtCost(s.cost_usd, s.cost_estimated)),
      h("td", { class: "num muted", title: s.last_started_at }, fmtAgo(s.last_started_at)),
      h("td", {}, del))];
    const threads = s.threads || [];
    if (threads.length > 1) {
      for (const t of threads) {
        rows.push(h("tr", { class: "thread-row" + (t.main ? " main" : "") },
          h("td", { colspan: 2 }, h("span", { class: "indent", style: { paddingLeft: 10 + 16 * (t.depth || 0) + "px" } },
            `└ ${t.main ? "main" : "side"} T${(t.index ?? 0) + 1} `),
            h("a", { href: href + "?thread=" + encodeURIComponent(t.thread) }, "#" + t.first_seq)),
          h("td", {}, (t.models || []).map((m) => h("span", { class: "tag" }, m))),
          h("td", { class: "num" }, fmtInt(t.calls)),
          h("td", {}), h("td", { class: "num muted" }, t.usage_input ? fmtPct((t.usage_cache_read || 0) / t.usage_input) : "–"),
          h("td", {}), h("td", {}), h("td", { class: "num muted" }, fmtAgo(t.last_started_at)), h("td", {})));
      }
    }
    return rows;
  }

  function draw() {
    const q = search.value.trim().toLowerCase();
    const shown = sortRows(data.filter((s) => matches(s, q)), columns, sort);
    mount(thead, h("tr", {}, columns.filter((c) => !c.hidden).map((c) => headerCell(c, sort, draw)), h("th", {}, "")));
    clear(tbody);
    for (const s of shown) for (const r of row(s)) tbody.appendChild(r);
    count.textContent = shown.length === data.length ? `${data.length} session${data.length === 1 ? "" : "s"}` : `${shown.length} of ${data.length}`;
    empty.hidden = data.length > 0;
    table.parentElement.hidden = data.length === 0;
  }

  async function load() {
    try {
      const res = await getJSON("/sessions", withOwn.checked ? { all: "1" } : undefined);
      if (disposed) return;
      data = res.sessions || [];
      draw();
    } catch (e) {
      if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not load sessions: " + e.message));
    }
  }

  load();
  return {
    onCalls() { clearTimeout(timer); timer = setTimeout(load, 300); },
    dispose() { disposed = true; clearTimeout(timer); },
  };
}
