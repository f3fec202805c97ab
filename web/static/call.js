// Call page: overview (timings, outcome, usage reported vs estimated, cache verdict, prefix
// relation, markers), then tabs: structured request, response, raw bytes, headers.

import { groupedLabel, h, mount, fmtInt, fmtTokens, fmtMs, fmtBytes, fmtCost, fmtDateTime, relationBadge, verdictBadge, providerBadge, markerChip, markerText,
  markerContent, callMarkers, outcomeBadge, resolvePointer, CATEGORIES, CATEGORY_LABEL } from "./dom.js";
import { getJSON } from "./api.js";
import { vocab, sentence } from "./vocab.js";
import { requestView, responseView } from "./reqview.js";
import { rawView, headersTable } from "./rawview.js";
import { reveal, textView } from "./jsontree.js";
import { curlButton } from "./curlview.js";
import { replayButton } from "./replayview.js";
import { compareControls } from "./comparepick.js";
import { showFirstDifference } from "./firstdiff.js";
import { bodySource } from "./lazybody.js";

// What the text at a marker's pointer is, by kind.
const MARKER_CAPTION = {
  reminder: "the reminder block it added", todo_reminder: "the todo reminder it appended",
  guard_reminder: "the guard's reminder, sent as a steering message", guard_signal: "the latest tool result the guard judged",
  empty_answer_retry: "the follow-up that asks again", retry: "the follow-up that asks again",
  tool_output_externalized: "the receipt that replaced the tool output", tool_results_archived: "the receipts that replaced old tool results",
  checkpoint: "the summary that replaced the history", compaction: "where the replaced history starts",
  checkpoint_request: "the checkpoint request's control message", steer: "the steering message", tools_executed: "the tool result",
  source_citation_retry: "the follow-up that asks for a citation",
};

// The full values at a marker's pointers that the outline holds only in part (a cut text, an
// item of a folded list): fetched when the marker is opened.
async function markerValues(src, request, m) {
  const d = m.detail && typeof m.detail === "object" ? m.detail : {};
  const ptrs = Array.isArray(d.pointers) && d.pointers.length ? d.pointers : m.pointer ? [m.pointer] : [];
  const out = new Map();
  for (const ptr of ptrs.slice(0, 20)) {
    const partial = src.texts[ptr] || Object.keys(src.texts).some((p) => p.startsWith(ptr + "/"))
      || Object.keys(src.folds).some((f) => ptr.startsWith(f + "/")) || resolvePointer(request, ptr) === undefined;
    if (!partial) continue;
    try { out.set(ptr, await src.value(ptr)); } catch (e) { /* left as the outline has it */ }
  }
  return out;
}

function kv(rows) {
  return h("table", { class: "kvtable" }, h("tbody", {}, rows.filter(Boolean).map(([k, v, title]) =>
    h("tr", { title: title || null }, h("th", {}, k), h("td", {}, v == null || v === "" ? "–" : v)))));
}

function usageTable(call) {
  const u = call.usage || {};
  const unc = u.input != null ? Math.max(0, u.input - (u.cache_read || 0) - (u.cache_write || 0)) : null;
  const cats = call.tokens_by_category && typeof call.tokens_by_category === "object" ? call.tokens_by_category : null;
  const est = call.tokens_estimated;
  const rows = [
    ["prompt", fmtInt(u.input), est != null ? fmtInt(est) : "–", null, sentence("prompt_tokens")],
    ["  cache read", fmtInt(u.cache_read), "", "s-read"],
    ["  cache write", fmtInt(u.cache_write), "", "s-write"],
    ["  uncached", fmtInt(unc), "", "s-uncached"],
    ["output", fmtInt(u.output), ""],
  ];
  const table = h("table", { class: "kvtable usage" },
    h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", { class: "num" }, "reported"), h("th", { class: "num" }, "estimated (o200k)"))),
    h("tbody", {}, rows.map(([k, a, b, cls, title]) => h("tr", {}, h("th", { title: title || null }, cls ? h("span", { class: "dot " + cls }) : null, k.trim()), h("td", { class: "num" }, a), h("td", { class: "num" }, b)))));
  const catList = cats ? h("div", { class: "cats" }, CATEGORIES.filter((c) => cats[c]).map((c) =>
    h("div", { class: "cat" }, h("span", { class: "dot c-" + c }), h("span", {}, CATEGORY_LABEL[c]), h("span", { class: "num" }, fmtInt(cats[c]))))) : null;
  return h("div", {}, call.usage ? table : h("p", { class: "muted" }, "The provider reported no usage for this call."), catList);
}

export function renderCall(root, id, params, ctx) {
  let disposed = false;
  let keys = null; // set by draw: the page's keys (keys.js)
  mount(root, h("p", { class: "muted pad" }, "Loading call…"));

  function draw(d) {
    const c = d.call;
    ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: c.session_title || c.session, href: "#/session/" + encodeURIComponent(c.session) }, { label: "#" + c.seq }]);
    ctx.setTitle("call #" + c.seq, c.session_title || c.session);
    const nav = d.navigation || {};
    const tabsBox = h("div", { class: "tab-body" });
    const tabs = {};
    const built = {};
    let reqEl = null;
    // The API sent outlines: a block's text comes by pointer when it is opened (lazybody.js).
    const reqSrc = bodySource(c.id, "request", d.request_outline);
    const respSrc = bodySource(c.id, "response", d.response_outline);
    const show = (name) => {
      for (const [k, b] of Object.entries(tabs)) b.classList.toggle("on", k === name);
      if (!built[name]) built[name] = builders[name]();
      mount(tabsBox, built[name]);
      return built[name];
    };
    const builders = {
      request: () => (reqEl = d.request != null ? requestView(d.request, c.api, reqSrc) : h("p", { class: "muted pad" }, d.request_note || "No request body.")),
      response: () => responseView(d.response, respSrc),
      "raw request": () => rawView(c, "request"),
      "raw response": () => rawView(c, "response"),
      headers: () => h("div", { class: "cols2" }, headersTable(c.request_headers, "request headers (secrets redacted)"),
        headersTable(c.response_headers, "response headers"), c.annotations && c.annotations.length ? headersTable(c.annotations, "ctxscope annotations") : null),
    };
    const goPtr = (ptr) => { show("request"); if (reqEl && ptr != null) reveal(reqEl, ptr); };
    const goResponsePtr = (ptr) => { const el = show("response"); if (el && ptr != null) reveal(el, ptr); };
    const markerBox = h("div", { class: "card marker-detail", hidden: true });
    const selectMarker = async (i) => {
      const m = markers[i];
      if (!m) return;
      const pieces = markerContent(d.request, m, await markerValues(reqSrc, d.request, m));
      const caption = MARKER_CAPTION[m.kind] || "the text at its pointer";
      mount(markerBox,
        h("div", { class: "card-title" }, markerChip(m), " ", pieces.length ? caption : "no text in the request",
          pieces.length > 1 ? h("span", { class: "muted" }, ` (${pieces.length})`) : null),
        h("div", { class: "muted small" }, markerText(m)),
        pieces.length ? pieces.slice(0, 20).map((c) => h("div", { class: "marker-piece" },
          h("div", { class: "muted small" }, "at ", ptrLink(c.pointer), c.range ? ` · characters ${fmtInt(c.range[0])}–${fmtInt(c.range[1])} of ${fmtInt(c.whole.length)}` : ""),
          textView(c.text, { cls: "marker-text" })))
          : h("p", { class: "muted" }, m.pointer ? "The request body is not available here (see the raw bytes)."
            : "This effect added no text to the request: it is what the client reported about this call."),
        pieces.length > 20 ? h("p", { class: "muted small" }, `… and ${pieces.length - 20} more`) : null);
      markerBox.hidden = false;
      markerBox.dataset.kind = m.kind;
      if (m.pointer) goPtr(m.pointer);
    };
    const ptrLink = (ptr) => ptr ? h("a", { href: "#", class: "ptr", onclick: (e) => { e.preventDefault(); goPtr(ptr); } }, ptr) : null;
    const markers = callMarkers(c);
    const cache = c.cache || {};
    const curl = curlButton(c);
    const replay = replayButton(c);
    mount(root,
      h("div", { class: "toolbar" },
        h("h1", {}, "Call #" + c.seq), h("code", { class: "muted", title: "call id" }, c.id), c.model ? h("span", { class: "tag" }, c.model) : null,
        h("span", { class: "muted" }, c.api || c.path || ""), c.relation ? relationBadge(c.relation, c.pointer || c.epoch_reason) : null, c.cache ? verdictBadge(c.cache) : null, outcomeBadge(c),
        h("span", { class: "spacer" }), compareControls(c), replay.controls, curl.button,
        h("a", { class: "btn" + (nav.previous ? "" : " disabled"), href: nav.previous ? "#/call/" + encodeURIComponent(nav.previous) : "#/call/" + encodeURIComponent(c.id) }, "‹ previous"),
        h("a", { class: "btn" + (nav.next ? "" : " disabled"), href: nav.next ? "#/call/" + encodeURIComponent(nav.next) : "#/call/" + encodeURIComponent(c.id) }, "next ›"),
        firstDiffButton(c, () => reqEl, show, d.changed_region),
        d.diff_base ? h("a", { class: "btn primary", id: "diff-link", href: "#/diff/" + encodeURIComponent(c.id) },
          d.diff_base_is_predecessor ? "diff with predecessor" : "diff with previous call") : null),
      h("div", { class: "cards" },
        h("div", { class: "card" }, h("div", { class: "card-title" }, "Exchange"), kv([
          ["started", fmtDateTime(c.started_at)], ["first byte", fmtMs(c.ttfb_ms)], ["total", fmtMs(c.duration_ms)],
          ["outcome", [outcomeBadge(c), c.error ? h("span", { class: "err" }, " " + c.error) : null]],
          ["stop reason", c.stop_reason], ["stream", c.stream == null ? null : c.stream ? `yes (${fmtInt(c.event_count)} events)` : "no"],
          ["endpoint", `${c.method} ${c.provider || ""} ${c.path || ""}`], ["client", c.client_name, c.client],
          ["bytes", `${fmtBytes(c.request_bytes)} → ${fmtBytes(c.response_bytes)}`],
          (c.attempt || 1) > 1 ? ["retry", [`attempt ${c.attempt} of `, h("a", { href: "#/call/" + encodeURIComponent(c.retry_of) }, c.retry_of)]] : null,
          c.parse_error ? ["parse error", c.parse_error] : null,
        ])),
        h("div", { class: "card" }, h("div", { class: "card-title" }, "Usage: reported vs estimated"), usageTable(c)),
        h("div", { class: "card" }, h("div", { class: "card-title" }, "Prefix and cache"), kv([
          ["relation", [relationBadge(c.relation), c.relation === vocab.RelationKind.DIVERGED ? [" at ", ptrLink(c.pointer)] : null]],
          c.epoch_reason ? ["epoch", String(c.epoch_reason).replace(/_/g, " ")] : null,
          ["predecessor", c.predecessor ? h("a", { href: "#/call/" + encodeURIComponent(c.predecessor) }, c.predecessor) : null],
          ["session", [h("a", { href: "#/session/" + encodeURIComponent(c.session) }, c.session),
            c.grouped_by ? h("span", { class: "muted", title: "why the call landed in this session" }, " grouped by " + groupedLabel(c.grouped_by)) : null]],
          c.thread ? ["thread", [c.thread_index != null ? `${c.thread_main ? "main" : "side"} T${c.thread_index + 1} ` : "", h("code", {}, c.thread)]] : null,
          ["cache verdict", [verdictBadge(c.cache), cache.detail ? h("span", { class: "muted" }, " " + cache.detail) : null]],
          cache.lost_tokens ? ["lost to the break", h("span", { title: sentence("loss_pricing") }, `${fmtInt(cache.lost_tokens)} tokens` +
            (cache.lost_cost_usd != null ? ` · ${fmtCost(cache.lost_cost_usd)}` : cache.unpriced ? ` · unpriced (${cache.unpriced})` : ""))] : null,
          cache.break_pointer ? ["first difference", ptrLink(cache.break_pointer)] : null,
          cache.before_prev_last_breakpoint != null ? ["inside cached prefix", cache.before_prev_last_breakpoint ? "yes" : "no"] : null,
          cache.provider_diagnostics ? ["provider says", [providerBadge(cache), " ", cache.provider_sentence || "",
            cache.provider_agreement === "disagree" ? h("div", { class: "note" }, "The provider compared the prompts it cached: where it and ctxscope disagree, the provider is the reference.") : null]] : null,
        ]),
        markers.length ? h("div", { class: "marker-list" }, markers.map((m, i) => h("div", { class: "marker-item" },
          markerChip(m, () => selectMarker(i)), m.pointer ? h("code", { class: "ptr" }, m.pointer) : null,
          m.detail != null ? h("span", { class: "muted small" }, " " + markerText(m)) : null))) : null)),
      markerBox, curl.box, replay.box,
      h("div", { class: "tabs" }, Object.keys(builders).map((name) => (tabs[name] = h("button", { type: "button", class: "tab", onclick: () => show(name) }, name)))),
      tabsBox);
    show("request");
    root.dataset.ready = "1";
    const ptr = params.get("ptr");
    const mi = params.get("m");
    if (mi != null && markers[Number(mi)]) selectMarker(Number(mi));
    else if (ptr && params.get("body") === "response") goResponsePtr(ptr);
    else if (ptr) goPtr(ptr);
    // A break opens on its summary; its first difference is one click (the button) or key (f) away.
    keys = (k) => {
      if (k === "f" && c.relation === vocab.RelationKind.DIVERGED && c.pointer) { document.getElementById("first-diff-btn").click(); return true; }
      if (k === "j" && nav.next) { ctx.navigate("#/call/" + encodeURIComponent(nav.next)); return true; }
      if (k === "k" && nav.previous) { ctx.navigate("#/call/" + encodeURIComponent(nav.previous)); return true; }
      return false;
    };
  }

  getJSON("/call", { id }).then((d) => { if (!disposed) draw(d); })
    .catch((e) => { if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not load call: " + e.message)); });
  delete root.dataset.ready;
  return { dispose() { disposed = true; delete root.dataset.ready; }, onKey: (k) => !!(keys && keys(k)) };
}

// The button to a break's first difference: the request tab, unfolded there, the changed
// characters marked (firstdiff.js).
function firstDiffButton(c, reqEl, show, region) {
  if (c.relation !== vocab.RelationKind.DIVERGED || !c.pointer) return null;
  return h("button", { type: "button", class: "btn", id: "first-diff-btn", title: `show the first difference, ${c.pointer}, with the changed characters marked (key: f)`,
    onclick: () => { show("request"); if (reqEl()) showFirstDifference(reqEl(), c.id, c.pointer, region); } }, "first difference ↓");
}
