// DOM helpers. Every captured string is untrusted: it only ever reaches the page as a text node
// or an attribute value set through the DOM API. Nothing here parses HTML (and the page's
// Trusted Types policy would make any innerHTML assignment throw).

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

export function shortId(id) {
  if (!id) return "–";
  return id.length > 12 ? id.slice(-10) : id;
}

// -- shared bits of UI ---------------------------------------------------------------------

const RELATION_SHORT = {
  IDENTICAL: "identical", APPEND_ONLY: "append", DIVERGED: "diverged",
  NOT_COMPARABLE: "n/c", EPOCH_START: "epoch",
};

export function relationBadge(relation, extra) {
  if (!relation) return h("span", { class: "badge b-none", title: "no prefix analysis for this call" }, "–");
  const cls = "badge rel-" + relation.toLowerCase().replace(/[^a-z_]/g, "");
  return h("span", { class: cls, title: relation + (extra ? " · " + extra : "") }, RELATION_SHORT[relation] || relation);
}

const VERDICT_SHORT = {
  hit: "hit", expected_write: "write", client_break: "break", ttl_expired: "ttl",
  below_minimum: "small", provider_miss: "miss", not_requested: "off", unknown: "?",
};

export function verdictBadge(cache) {
  if (!cache || !cache.verdict) return h("span", { class: "badge b-none", title: "no cache verdict" }, "–");
  const v = String(cache.verdict);
  let title = v;
  if (cache.lost_tokens) title += ` · lost ${fmtInt(cache.lost_tokens)} tokens`;
  if (cache.lost_cost_usd) title += ` (${fmtCost(cache.lost_cost_usd)})`;
  if (cache.detail) title += " · " + cache.detail;
  return h("span", { class: "badge v-" + v.replace(/[^a-z_]/g, ""), title }, VERDICT_SHORT[v] || v);
}

// Token categories as the inspector names them (accounting.CATEGORIES).
export const CATEGORIES = ["system", "tools", "user_text", "assistant_text", "tool_call", "tool_result", "reminder", "image", "thinking", "other"];
export const CATEGORY_LABEL = {
  system: "system", tools: "tools", user_text: "user text", assistant_text: "assistant text", tool_call: "tool calls",
  tool_result: "tool results", reminder: "reminders", image: "images", thinking: "thinking", other: "other",
};

const MARKER_LABEL = {
  reminder: "reminder", compaction: "compaction", retry: "retry", tools_executed: "tools",
  tool_output_externalized: "externalised", tool_results_archived: "archived", checkpoint: "checkpoint",
  todo_reminder: "todo", guard_signal: "guard signal", guard_reminder: "guard", empty_answer_retry: "empty retry",
};

export function markerChip(m, onclick) {
  const kind = String((m && m.kind) || "marker");
  let title = kind;
  if (m && m.pointer) title += " at " + m.pointer;
  if (m && m.detail != null) title += "\n" + markerText(m);
  let label = MARKER_LABEL[kind] || kind;
  if (kind === "tools_executed" && m.detail && Array.isArray(m.detail.tools)) {
    const names = m.detail.tools.map((t) => (t && typeof t === "object" ? t.name : t)).filter(Boolean);
    label = "tools: " + [...new Set(names)].slice(0, 3).join(", ") + (new Set(names).size > 3 ? ", …" : "");
  }
  return h(onclick ? "button" : "span", {
    class: "chip m-" + kind.replace(/[^a-z_]/g, ""), title, type: onclick ? "button" : null, onclick,
  }, label);
}

// A marker's detail in one readable line: "preview" texts, tool names, key: value pairs.
export function markerText(m) {
  const d = m && m.detail;
  if (d == null) return "";
  if (typeof d !== "object") return String(d).slice(0, 300);
  const parts = [];
  if (typeof d.preview === "string") parts.push("“" + d.preview + (d.chars > d.preview.length ? "…" : "") + "”");
  if (Array.isArray(d.tools)) parts.push(d.tools.map((t) => (t && typeof t === "object" ? t.name || t.ref : t)).filter(Boolean).join(", "));
  if (d.prev_tokens != null && d.cur_tokens != null) parts.push(`${fmtInt(d.prev_tokens)} → ${fmtInt(d.cur_tokens)} tokens`);
  for (const [k, v] of Object.entries(d)) {
    if (["preview", "tools", "prev_tokens", "cur_tokens", "segment", "count", "chars"].includes(k)) continue;
    if (v == null || v === false || typeof v === "object") continue;
    parts.push(`${k.replace(/_/g, " ")}: ${v}`);
  }
  const text = parts.join(" · ");
  return text.length > 300 ? text.slice(0, 300) + "…" : text;
}

export function callMarkers(call) {
  const out = Array.isArray(call.markers) ? call.markers.filter((m) => m && typeof m === "object") : [];
  const kinds = new Set(out.map((m) => m.kind));
  if (call.has_compaction_before && !kinds.has("compaction")) out.unshift({ kind: "compaction", pointer: null, detail: "first call after a compaction" });
  if ((call.attempt || 1) > 1 && !kinds.has("retry")) out.push({ kind: "retry", pointer: null, detail: `attempt ${call.attempt} of ${call.retry_of}` });
  return out;
}

export function outcomeBadge(call) {
  const ok = call.outcome === "ok" && (call.status || 0) < 400;
  if (ok) return h("span", { class: "badge o-ok", title: "status " + call.status }, String(call.status || "ok"));
  const label = call.outcome === "http_error" ? String(call.status) : String(call.outcome || "?").replace(/_/g, " ");
  return h("span", { class: "badge o-bad", title: (call.outcome || "") + (call.error ? ": " + call.error : "") }, label);
}

export function stat(label, value, title) {
  return h("div", { class: "stat", title: title || null }, h("div", { class: "stat-v" }, value), h("div", { class: "stat-l" }, label));
}
