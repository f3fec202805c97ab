// Collapsible views that build their content only when opened, and the text renderer that
// highlights <system-reminder> blocks. Long texts are cut with a "show all" button, so a
// megabyte tool result does not land in the DOM until someone asks for it. A text the call API
// sent only as a preview (``src.texts``, lazybody.js) loads its first TEXT_CUT characters when it
// scrolls into view and the rest on "show all"; a list the API folded loads its items a page at a time.

import { h, clear, appendAll, fmtBytes } from "./dom.js";
import { itemAt, PAGE_ITEMS } from "./lazybody.js";

const TEXT_CUT = 4000;
const REMINDER_RE = /<system-reminder>[\s\S]*?<\/system-reminder>/g;

function reminderSpans(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(REMINDER_RE)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    out.push(h("span", { class: "reminder", title: "<system-reminder> block" }, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

// Load a cut text's first screen once it is near the viewport (one observer for the page).
const seen = typeof IntersectionObserver === "function"
  ? new IntersectionObserver((entries) => entries.forEach((e) => { if (e.isIntersecting && e.target._onSeen) e.target._onSeen(); }), { rootMargin: "200px" })
  : null;

function remoteText(preview, cut, opts) {
  const pre = h("pre", { class: "text" + (opts.cls ? " " + opts.cls : ""), dataset: { remote: "1", chars: String(cut.chars) } });
  const more = (label, all) => h("button", { type: "button", class: "more", onclick: () => load(all) }, label);
  const show = (text, whole) => {
    if (pre.dataset.changed) return; // firstdiff.js marked the change here
    clear(pre);
    pre.append(...reminderSpans(text));
    if (!whole) pre.appendChild(more(`… show all ${cut.chars.toLocaleString("en-US")} chars (${fmtBytes(cut.bytes)})`, true));
    pre.dataset.loaded = whole ? "all" : "head";
  };
  let pending = null;
  const load = (all) => {
    if (pre.dataset.loaded === "all" || (!all && pre.dataset.loaded)) return pending;
    if (seen) seen.unobserve(pre);
    pending = opts.src.text(opts.ptr, all ? Infinity : TEXT_CUT)
      .then((t) => show(t, all || t.length >= cut.chars), (e) => { pre.dataset.error = e.message; });
    return pending;
  };
  show(preview, false);
  delete pre.dataset.loaded;
  pre._onSeen = () => load(false);
  pre._loadAll = () => load(true);
  if (seen) seen.observe(pre);
  return pre;
}

export function textView(text, opts = {}) {
  const s = typeof text === "string" ? text : String(text);
  const cut = opts.src && opts.ptr != null ? opts.src.texts[opts.ptr] : null;
  if (cut) return remoteText(s, cut, opts);
  const pre = h("pre", { class: "text" + (opts.cls ? " " + opts.cls : "") });
  const full = () => { clear(pre); pre.append(...reminderSpans(s)); };
  if (s.length > TEXT_CUT && !opts.full) {
    pre.append(...reminderSpans(s.slice(0, TEXT_CUT)));
    pre.appendChild(h("button", { type: "button", class: "more", onclick: full }, `… show all ${s.length.toLocaleString("en-US")} chars`));
  } else full();
  return pre;
}

// A <details> whose body is built on first open; registered under a JSON pointer for reveal().
export function lazy(summary, build, { open = false, ptr = null, cls = "" } = {}) {
  const body = h("div", { class: "lazy-body" });
  const d = h("details", { class: "node " + cls }, h("summary", {}, summary), body);
  if (ptr != null) d.dataset.ptr = ptr;
  let built = false;
  const ensure = () => {
    if (built) return d._loading || null;
    built = true;
    const made = build();
    if (!made || typeof made.then !== "function") { appendAll(body, [made]); return null; }
    body.appendChild(h("p", { class: "muted small" }, "loading…"));
    d._loading = made.then((x) => { clear(body); appendAll(body, [x]); },
      (e) => { clear(body); body.appendChild(h("p", { class: "error" }, "could not load: " + e.message)); built = false; d._loading = null; });
    return d._loading;
  };
  d.addEventListener("toggle", () => { if (d.open) ensure(); });
  d._ensure = ensure;
  if (open) { d.open = true; ensure(); }
  return d;
}

function preview(v, fold) {
  if (v === null) return "null";
  if (Array.isArray(v)) return `[${fold ? fold.length : v.length}]`;
  if (typeof v === "object") { const k = Object.keys(v); return `{${k.slice(0, 4).join(", ")}${k.length > 4 ? ", …" : ""}}`; }
  if (typeof v === "string") return JSON.stringify(v.length > 80 ? v.slice(0, 80) + "…" : v);
  return String(v);
}

function esc(k) { return String(k).replace(/~/g, "~0").replace(/\//g, "~1"); }

function jsonLeaf(value, ptr, src) {
  if (typeof value === "string") {
    if (value.length > 200 || value.includes("\n") || (src && src.texts[ptr])) return h("div", { class: "jv-str-block", dataset: { ptr } }, textView(value, { src, ptr }));
    return h("span", { class: "jv-str", dataset: { ptr } }, JSON.stringify(value));
  }
  return h("span", { class: "jv-" + (value === null ? "null" : typeof value), dataset: { ptr } }, String(value));
}

function jsonEntry(k, v, ptr, depth, many, src) {
  const cptr = ptr + "/" + esc(k);
  const key = h("span", { class: "jv-key" }, String(k));
  if (v !== null && typeof v === "object") {
    return lazy([key, ": ", h("span", { class: "jv-prev" }, preview(v, src && src.folds[cptr]))], () => jsonChildren(v, cptr, depth + 1, src),
      { ptr: cptr, open: depth < 1 && !many });
  }
  return h("div", { class: "jv-row", dataset: { ptr: cptr } }, key, ": ", jsonLeaf(v, cptr, src));
}

function jsonChildren(value, ptr, depth, src) {
  const fold = Array.isArray(value) && src ? src.folds[ptr] : null;
  if (fold) {
    const one = (v, i) => jsonEntry(i, v, ptr, depth, true, src);
    return h("div", { class: "jv-children" }, value.slice(0, fold.from).map(one),
      foldView(src, ptr, fold, one), value.slice(fold.from).map((v, k) => one(v, fold.to + k)));
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  return h("div", { class: "jv-children" }, entries.map(([k, v]) => jsonEntry(k, v, ptr, depth, entries.length > 12, src)));
}

// A collapsible JSON viewer; nested objects are built when opened.
export function jsonTree(value, ptr = "", { open = true, src = null } = {}) {
  if (value === null || typeof value !== "object") return jsonLeaf(value, ptr, src);
  return lazy(h("span", { class: "jv-prev" }, preview(value, src && src.folds[ptr])), () => jsonChildren(value, ptr, 0, src), { ptr, open, cls: "jv" });
}

// Items [fold.from, fold.to) of a list the call API left out: one folded group, opened a page
// (PAGE_ITEMS) at a time; each page fetches its items when it is opened.
export function foldView(src, ptr, fold, render, label = "items") {
  const n = fold.to - fold.from;
  const page = (a, b) => {
    const slot = lazy(h("span", { class: "muted" }, `${label} ${a}–${b - 1}`),
      () => src.items(ptr, a, b).then((items) => items.map((m, k) => render(m, a + k))), { cls: "fold page" });
    Object.assign(slot.dataset, { rangePtr: ptr, rangeFrom: String(a), rangeTo: String(b) });
    return slot;
  };
  const group = lazy(h("span", { class: "muted" }, `${n} more ${label} (${fold.from}–${fold.to - 1})`), () => {
    if (n <= PAGE_ITEMS) return src.items(ptr, fold.from, fold.to).then((items) => items.map((m, k) => render(m, fold.from + k)));
    const slots = [];
    for (let a = fold.from; a < fold.to; a += PAGE_ITEMS) slots.push(page(a, Math.min(fold.to, a + PAGE_ITEMS)));
    return slots;
  }, { cls: "fold" });
  Object.assign(group.dataset, { rangePtr: ptr, rangeFrom: String(fold.from), rangeTo: String(fold.to), remote: "1" });
  return group;
}

export { itemAt };

// Open the nodes along a pointer (building lazy bodies on the way, and waiting for those the call
// API left out to load) and highlight the deepest one; resolves to it.
export async function reveal(container, pointer) {
  if (pointer == null) return null;
  const parts = pointer.split("/").slice(1);
  let found = null;
  const byPtr = (p) => [...container.querySelectorAll("[data-ptr]")].find((e) => e.dataset.ptr === p);
  const open = async (el) => { if (el.tagName === "DETAILS" && !el.open) el.open = true; if (el._ensure) await el._ensure(); };
  for (let i = 0; i <= parts.length; i++) {
    const p = i === 0 ? "" : "/" + parts.slice(0, i).join("/");
    let el = byPtr(p);
    const base = i > 0 ? "/" + parts.slice(0, i - 1).join("/") : null;
    const idx = i > 0 ? Number(parts[i - 1]) : NaN;
    // inside a folded range of a long list (a group, then a page of it)? unfold it and look again
    const tried = new Set();
    for (let tries = 0; !el && i > 0 && tries < 3; tries++) {
      const fold = [...container.querySelectorAll("[data-range-ptr]")].find((e) => !tried.has(e) &&
        (e.dataset.rangePtr === base || (base === "/" && e.dataset.rangePtr === "")) && idx >= Number(e.dataset.rangeFrom) && idx < Number(e.dataset.rangeTo));
      if (!fold) break;
      tried.add(fold);
      await open(fold);
      el = byPtr(p);
    }
    if (!el) continue;
    found = el;
    for (let a = el; a && a !== container; a = a.parentElement) {
      if (a.tagName === "DETAILS" && !a.open) await open(a);
    }
    if (el.tagName === "DETAILS" && !el.open) await open(el);
  }
  if (found) {
    container.querySelectorAll(".revealed").forEach((e) => e.classList.remove("revealed"));
    found.classList.add("revealed");
    found.scrollIntoView({ block: "center" });
  }
  return found;
}
