// Search page: full-text hits over every captured prompt and response; each opens its call
// unfolded at the hit's JSON pointer. Snippets arrive with two mark characters around the
// matches: the page splits on them and builds text nodes and <mark> elements, never HTML.

import { h, mount, fmtDateTime, ptrParts } from "./dom.js";
import { getJSON } from "./api.js";
import { vocab } from "./vocab.js";
import { sortState, sortRows, headerCell } from "./sortable.js";

// The hits table's columns: each sorts (by relevance, the API's order, until a header is clicked).
const COLUMNS = [
  { key: "session", label: "session", value: (hit) => String(hit.session_title || hit.session).toLowerCase() },
  { key: "call", label: "call", num: true, value: (hit) => hit.started_at },
  { key: "where", label: "where", value: (hit) => hit.area + " " + hit.pointer },
  { key: "text", label: "text", value: (hit) => String(hit.snippet || "").toLowerCase() },
];

function snippet(text, marks) {
  const [start, end] = marks;
  const out = [];
  let rest = String(text || "");
  while (rest) {
    const a = rest.indexOf(start);
    if (a < 0) { out.push(rest); break; }
    if (a > 0) out.push(rest.slice(0, a));
    const b = rest.indexOf(end, a + 1);
    const word = b < 0 ? rest.slice(a + 1) : rest.slice(a + 1, b);
    out.push(h("mark", {}, word));
    rest = b < 0 ? "" : rest.slice(b + 1);
  }
  return out;
}

export function callHref(hit) {
  const q = new URLSearchParams({ ptr: hit.pointer });
  if (hit.body === "response") q.set("body", "response");
  return "#/call/" + encodeURIComponent(hit.call) + "?" + q.toString();
}

export function renderSearch(root, params, ctx) {
  let disposed = false;
  const text = params.get("q") || "";
  const session = params.get("s") || "";
  const area = params.get("in") || "";
  ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: "search" }]);
  ctx.setTitle(text.trim() ? `search “${text.trim().slice(0, 40)}”` : "search");
  const box = document.getElementById("search-q");
  if (box && box.value !== text) box.value = text;
  if (!text.trim()) {
    mount(root, h("p", { class: "muted pad" }, "Type words in the search box: every prompt and response is searched."));
    return { dispose() { disposed = true; } };
  }
  mount(root, h("p", { class: "muted pad" }, "Searching…"));
  const sort = sortState(null);
  const thead = h("thead");
  const tbody = h("tbody");
  let hits = null;
  let marks = null;
  getJSON("/search", { q: text, s: session, in: area, limit: 200 }).then((d) => {
    if (disposed) return;
    hits = d.hits;
    marks = d.marks;
    const areaSel = h("select", { id: "search-area", onchange: (e) => {
      const q = new URLSearchParams({ q: text });
      if (session) q.set("s", session);
      if (e.target.value) q.set("in", e.target.value);
      ctx.navigate("#/search?" + q.toString());
    } }, h("option", { value: "" }, "everywhere"), Object.values(vocab.SearchArea || {}).map((a) => h("option", { value: a, selected: a === area }, a.replace("_", " "))));
    mount(root,
      h("div", { class: "toolbar" }, h("h1", {}, "Search"), h("span", { class: "muted" }, `“${text}”`),
        session ? h("span", { class: "tag" }, "session " + session, " ", h("a", { href: "#/search?" + new URLSearchParams({ q: text }).toString(), title: "search every session" }, "×")) : null, areaSel,
        h("span", { class: "muted", id: "search-count" }, `${d.hits.length} hit${d.hits.length === 1 ? "" : "s"}`)),
      d.hits.length ? h("div", { class: "card flush" }, h("table", { class: "grid search-hits" }, thead, tbody))
        : h("p", { class: "muted pad" }, "No call holds these words. Captures made before the search index existed are indexed by `ctxscope reindex`."));
    drawHits();
    root.dataset.ready = "1";
  }).catch((e) => { if (!disposed) mount(root, h("p", { class: "error pad" }, "Search failed: " + e.message)); });
  delete root.dataset.ready;
  return { dispose() { disposed = true; delete root.dataset.ready; } };

  function drawHits() {
    if (!hits) return;
    mount(thead, h("tr", {}, COLUMNS.map((c) => headerCell(c, sort, drawHits))));
    mount(tbody, sortRows(hits, COLUMNS, sort).map((hit) => h("tr", { class: "search-hit" },
          h("td", { class: "session-cell" }, h("a", { class: "session-link", title: hit.session, href: "#/session/" + encodeURIComponent(hit.session) }, hit.session_title || hit.session),
            session ? null : h("div", {}, h("a", { class: "muted small only-session", href: "#/search?" + new URLSearchParams({ q: text, s: hit.session }).toString() }, "only this session"))),
          h("td", {}, h("a", { class: "hit-link", href: callHref(hit) }, "#" + hit.seq), h("div", { class: "muted small" }, fmtDateTime(hit.started_at))),
          h("td", {}, h("div", { class: "muted small" }, hit.area.replace("_", " ")), h("code", { class: "ptr", title: hit.pointer }, hit.body === "response" ? "response " : "", ptrParts(hit.pointer))),
          h("td", { class: "snippet" }, snippet(hit.snippet, marks)))));
  }
}

// The search box in the top bar: a form, so Enter submits it.
export function bindSearchBox(ctx) {
  const form = document.getElementById("search-form");
  if (!form) return;
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = document.getElementById("search-q").value;
    if (q.trim()) ctx.navigate("#/search?" + new URLSearchParams({ q }).toString());
  });
}
