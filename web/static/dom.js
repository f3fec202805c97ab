// DOM helpers. Every captured string is untrusted: it only ever reaches the page as a text node
// or an attribute value set through the DOM API. Nothing here parses HTML (and the page's
// Trusted Types policy would make any innerHTML assignment throw).

import { vocab, words, sentence } from "./vocab.js";

const SVG_NS = "http://www.w3.org/2000/svg";

// Append nodes, strings (as text nodes) and nested arrays of them.
export function appendAll(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) appendAll(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === "class") el.setAttribute("class", v);
    else if (k === "text") el.textContent = String(v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style") Object.assign(el.style, v); // CSSOM, allowed by the CSP
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k.startsWith("on")) throw new Error("event handlers must be functions");
    else if (k === "href") el.setAttribute("href", safeHref(v));
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

// Links only ever point inside the UI: hash routes or our own API.
export function safeHref(v) {
  const s = String(v);
  if (s.startsWith("#") || s.startsWith("/_ctxscope/")) return s;
  return "#";
}

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  return appendAll(el, children);
}

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) {
    if (v == null) continue;
    if (k === "text") el.textContent = String(v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  return appendAll(el, children);
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function mount(el, ...children) {
  clear(el);
  return appendAll(el, children);
}

// -- formatting ----------------------------------------------------------------------------

export function fmtInt(n) {
  return n == null ? "–" : Number(n).toLocaleString("en-US");
}

export function fmtTokens(n) {
  if (n == null) return "–";
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 1 : 2) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(0) + "k";
  if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return String(n);
}

export function fmtBytes(n) {
  if (n == null) return "–";
  if (n >= 1048576) return (n / 1048576).toFixed(1) + " MiB";
  if (n >= 1024) return (n / 1024).toFixed(1) + " KiB";
  return n + " B";
}

export function fmtMs(ms) {
  if (ms == null) return "–";
  if (ms >= 10000) return (ms / 1000).toFixed(0) + " s";
  if (ms >= 1000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms) + " ms";
}

export function fmtCost(usd, estimated) {
  if (usd == null) return "–";
  const s = usd >= 100 ? "$" + usd.toFixed(0) : usd >= 1 ? "$" + usd.toFixed(2) : usd >= 0.01 ? "$" + usd.toFixed(3) : "$" + usd.toFixed(4);
  return estimated ? "≈" + s : s;
}

export function fmtPct(ratio) {
  if (ratio == null) return "–";
  const p = ratio * 100;
  return (p >= 99.5 && p < 100 ? p.toFixed(1) : p < 1 && p > 0 ? p.toFixed(1) : Math.round(p)) + "%";
}

export function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  return d.toLocaleTimeString("en-GB", { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

export function fmtAgo(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  const s = (Date.now() - d.getTime()) / 1000;
  if (isNaN(s)) return String(iso);
  if (s < 5) return "just now";
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return d.toISOString().slice(0, 10);
}

export function fmtDateTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().replace("T", " ").slice(0, 23) + "Z";
}

// A JSON pointer that may break onto the next line only after a "/" (a <wbr> there), never inside
// a key: "/messages/10/content/0" wraps as "/messages/" + "10/content/0", not "/mess" + "ages".
export function ptrParts(pointer) {
  const out = [];
  String(pointer).split("/").forEach((part, i) => {
    if (i) { out.push("/"); out.push(document.createElement("wbr")); }
    if (part) out.push(part);
  });
  return out;
}

export function shortId(id) {
  if (!id) return "–";
  return id.length > 12 ? id.slice(-10) : id;
}

// -- shared bits of UI ---------------------------------------------------------------------

export function relationBadge(relation, extra) {
  if (!relation) return h("span", { class: "badge b-none", title: "no prefix analysis for this call" }, "–");
  const cls = "badge rel-" + relation.toLowerCase().replace(/[^a-z_]/g, "");
  return h("span", { class: cls, title: relation + (extra ? " · " + extra : "") }, words("RelationKind")[relation] || relation);
}

export function verdictBadge(cache) {
  if (!cache || !cache.verdict) return h("span", { class: "badge b-none", title: "no cache verdict" }, "–");
  const v = String(cache.verdict);
  let title = v;
  if (cache.lost_tokens) title += ` · lost ${fmtInt(cache.lost_tokens)} tokens`;
  if (cache.lost_cost_usd != null && cache.lost_tokens) title += ` (${fmtCost(cache.lost_cost_usd)})`;
  if (cache.detail) title += " · " + cache.detail;
  if (cache.lost_tokens) title += " · " + sentence("loss_pricing");
  return h("span", { class: "badge v-" + v.replace(/[^a-z_]/g, ""), title }, words("CacheVerdict")[v] || v);
}

// The provider's own cache diagnosis held against our verdict (inspector/analyses/cache/provider_agreement.py):
// a small badge, its title the provider's words; where they disagree the provider is the reference.
const AGREEMENT_TEXT = { agree: "provider agrees", disagree: "provider disagrees", pending: "provider pending", none: "provider: no diagnosis" };
// ``compact``: a one-character badge for table cells (the words stay in its title).
const AGREEMENT_MARK = { agree: "✓", disagree: "≠", pending: "…", none: "–" };
export function providerBadge(cache, compact = false) {
  const d = cache && cache.provider_diagnostics;
  if (!d) return null;
  const a = String(cache.provider_agreement || "none");
  const said = d.reason || d.status || "";
  let title = "the provider's cache diagnosis: " + String(said).replace(/_/g, " ");
  if (typeof d.missed_tokens === "number") title += ` · ${fmtInt(d.missed_tokens)} tokens missed`;
  if (a === "disagree") title += " · it disagrees with ctxscope's verdict: the provider is the reference";
  const text = AGREEMENT_TEXT[a] || a;
  if (compact) return h("span", { class: "badge p-" + a.replace(/[^a-z]/g, ""), title: text + " · " + title, "aria-label": text }, AGREEMENT_MARK[a] || "?");
  return h("span", { class: "badge p-" + a.replace(/[^a-z]/g, ""), title }, text);
}

// Token categories as the inspector names them (accounting.CATEGORIES).
export const CATEGORIES = ["system", "tools", "user_text", "assistant_text", "tool_call", "tool_result", "reminder", "image", "thinking", "other"];
export const CATEGORY_LABEL = {
  system: "system", tools: "tools", user_text: "user text", assistant_text: "assistant text", tool_call: "tool calls",
  tool_result: "tool results", reminder: "reminders", image: "images", thinking: "thinking", other: "other",
};

export const MARKER_LABEL = {
  reminder: "reminder", compaction: "compaction", retry: "retry", tools_executed: "tools",
  tool_output_externalized: "externalised", tool_results_archived: "archived", checkpoint: "checkpoint",
  todo_reminder: "todo", guard_signal: "guard signal", guard_reminder: "guard", empty_answer_retry: "empty retry",
  checkpoint_request: "checkpoint request", reminder_dropped: "reminder dropped", compaction_failed: "compaction failed",
  compaction_deferred: "compaction deferred", compaction_stopped: "auto-compaction off", steer: "steer",
  compaction_forced: "compaction forced",
  sources_available: "sources", citations: "citations", source_citation_retry: "citation retry",
};

export function markerChip(m, onclick, count) {
  const kind = String((m && m.kind) || "marker");
  const declared = !!(m && m.detail && typeof m.detail === "object" && m.detail.declared);
  let title = kind + (declared ? " (declared by the client)" : m && m.detail && typeof m.detail === "object" ? " (inferred from the prompt)" : "");
  if (m && m.pointer) title += " at " + m.pointer;
  if (m && m.detail != null) title += "\n" + markerText(m);
  let label = MARKER_LABEL[kind] || kind;
  if (kind === vocab.MarkerKind.TOOLS_EXECUTED && m.detail && Array.isArray(m.detail.tools)) {
    const names = m.detail.tools.map((t) => (t && typeof t === "object" ? t.name : t)).filter(Boolean);
    label = "tools: " + [...new Set(names)].slice(0, 3).join(", ") + (new Set(names).size > 3 ? ", …" : "");
  }
  return h(onclick ? "button" : "span", {
    class: "chip m-" + kind.replace(/[^a-z_]/g, "") + (declared ? " declared" : ""), title, type: onclick ? "button" : null, onclick,
    dataset: { kind },
  }, count > 1 ? `${label} ×${count}` : label);
}

// A marker's detail in one readable line: "preview" texts, tool names, key: value pairs.
export function markerText(m) {
  const d = m && m.detail;
  if (d == null) return "";
  if (typeof d !== "object") return String(d).slice(0, 300);
  const parts = [];
  if (typeof d.preview === "string") parts.push("“" + d.preview + (d.chars > d.preview.length ? "…" : "") + "”");
  if (Array.isArray(d.tools)) parts.push(d.tools.map((t) => (t && typeof t === "object" ? t.name || t.ref : t)).filter(Boolean).join(", "));
  if (d.scope) parts.push(d.scope === "round" ? "round reminder" : d.scope === "in_turn" ? "in-turn reminder" : String(d.scope));
  if (Array.isArray(d.providers) && d.providers.length) parts.push("from " + d.providers.map(String).join(", "));
  if (d.tokens_before != null && d.tokens_after != null) parts.push(`${fmtInt(d.tokens_before)} → ${fmtInt(d.tokens_after)} tokens`);
  else if (d.prev_tokens != null && d.cur_tokens != null) parts.push(`${fmtInt(d.prev_tokens)} → ${fmtInt(d.cur_tokens)} tokens`);
  for (const [k, v] of Object.entries(d)) {
    if (["preview", "tools", "prev_tokens", "cur_tokens", "tokens_before", "tokens_after", "segment", "chars", "scope",
      "providers", "declared", "inferred", "span", "spans", "pointers", "replaced"].includes(k)) continue;
    if (k === "count" && !d.declared) continue;
    if (v == null || v === false || typeof v === "object") continue;
    parts.push(`${k.replace(/_/g, " ")}: ${v}`);
  }
  const text = parts.join(" · ");
  return text.length > 300 ? text.slice(0, 300) + "…" : text;
}

// The text a pointer's segment shows: a string, a block's text, a tool result's content (as the
// inspector's effects.block_text reads it, so a marker's span indexes the same string).
export function blockText(v) {
  if (typeof v === "string") return v;
  if (!v || typeof v !== "object") return null;
  for (const key of ["text", "content", "output"]) {
    const x = v[key];
    if (typeof x === "string") return x;
    if (Array.isArray(x)) {
      const parts = x.filter((p) => p && typeof p === "object" && typeof p.text === "string").map((p) => p.text);
      if (parts.length) return parts.join("\n");
    }
  }
  return null;
}

export function resolvePointer(body, pointer) {
  if (pointer == null) return undefined;
  let v = body;
  for (const raw of pointer.split("/").slice(1)) {
    const t = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (Array.isArray(v) && /^\d+$/.test(t) && Number(t) < v.length) v = v[Number(t)];
    else if (v && typeof v === "object" && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, t)) v = v[t];
    else return undefined;
  }
  return v;
}

// What a marker added or replaced in the request: [{pointer, text, whole, range}] (range: [start, end] in whole).
// ``values``: the full value at some pointers where ``request`` is only an outline (call.js).
export function markerContent(request, m, values = null) {
  if (!m || request == null) return [];
  const d = m.detail && typeof m.detail === "object" ? m.detail : {};
  const ptrs = Array.isArray(d.pointers) && d.pointers.length ? d.pointers : m.pointer ? [m.pointer] : [];
  const out = [];
  for (const ptr of ptrs) {
    const v = values && values.has(ptr) ? values.get(ptr) : resolvePointer(request, ptr);
    if (v === undefined) continue;
    const whole = blockText(v);
    if (whole == null) { out.push({ pointer: ptr, text: JSON.stringify(v, null, 2), whole: null, range: null }); continue; }
    const spans = ptr === m.pointer ? (Array.isArray(d.spans) ? d.spans : Array.isArray(d.span) ? [d.span] : []) : [];
    const ok = spans.filter((s) => Array.isArray(s) && s[0] >= 0 && s[1] <= whole.length && s[0] < s[1]);
    if (ok.length) for (const s of ok) out.push({ pointer: ptr, text: whole.slice(s[0], s[1]), whole, range: s });
    else out.push({ pointer: ptr, text: whole, whole, range: null });
  }
  return out;
}

// Markers grouped by kind for chips: one chip per kind, with a count when it repeats ("guard signal ×3").
export function markerGroups(markers) {
  const groups = [];
  const at = new Map();
  markers.forEach((m, i) => {
    const k = String(m.kind);
    if (at.has(k)) groups[at.get(k)].count += 1;
    else { at.set(k, groups.length); groups.push({ marker: m, index: i, count: 1 }); }
  });
  return groups;
}

export function callMarkers(call) {
  const out = Array.isArray(call.markers) ? call.markers.filter((m) => m && typeof m === "object") : [];
  const kinds = new Set(out.map((m) => m.kind));
  const { COMPACTION, RETRY } = vocab.MarkerKind;
  if (call.has_compaction_before && !kinds.has(COMPACTION)) out.unshift({ kind: COMPACTION, pointer: null, detail: "first call after a compaction" });
  if ((call.attempt || 1) > 1 && !kinds.has(RETRY)) out.push({ kind: RETRY, pointer: null, detail: `attempt ${call.attempt} of ${call.retry_of}` });
  return out;
}

export function outcomeBadge(call) {
  const { OK, HTTP_ERROR } = vocab.Outcome;
  const ok = call.outcome === OK && (call.status || 0) < 400;
  if (ok) return h("span", { class: "badge o-ok", title: "status " + call.status }, String(call.status || "ok"));
  const label = call.outcome === HTTP_ERROR ? String(call.status) : String(call.outcome || "?").replace(/_/g, " ");
  return h("span", { class: "badge o-bad", title: (call.outcome || "") + (call.error ? ": " + call.error : "") }, label);
}

export function stat(label, value, title) {
  return h("div", { class: "stat", title: title || null }, h("div", { class: "stat-v" }, value), h("div", { class: "stat-l" }, label));
}

// Why a call landed in its session (the GroupedBy vocabulary), in words.
const GROUPED_LABELS = { label: "path label", header: "session header", metadata: "metadata.user_id",
  prompt_cache_key: "prompt_cache_key", previous_response: "previous_response_id", lineage: "lineage (its prompt continues an earlier call's)",
  client_gap: "client + gap (same client, shortly after)", new: "new (no id, no lineage)" };
export function groupedLabel(value) { return GROUPED_LABELS[value] || String(value); }
