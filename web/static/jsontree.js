// Collapsible views that build their content only when opened, and the text renderer that
// highlights <system-reminder> blocks. Long texts are cut with a "show all" button, so a
// megabyte tool result does not land in the DOM until someone asks for it.

import { h, clear, appendAll } from "./dom.js";

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

export function textView(text, opts = {}) {
  const s = typeof text === "string" ? text : String(text);
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
  const ensure = () => { if (!built) { built = true; appendAll(body, [build()]); } };
  d.addEventListener("toggle", () => { if (d.open) ensure(); });
  d._ensure = ensure;
  if (open) { d.open = true; ensure(); }
  return d;
}

function preview(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return `[${v.length}]`;
  if (typeof v === "object") { const k = Object.keys(v); return `{${k.slice(0, 4).join(", ")}${k.length > 4 ? ", …" : ""}}`; }
  if (typeof v === "string") return JSON.stringify(v.length > 80 ? v.slice(0, 80) + "…" : v);
  return String(v);
}

function esc(k) { return String(k).replace(/~/g, "~0").replace(/\//g, "~1"); }

function jsonLeaf(value, ptr) {
  if (typeof value === "string") {
    if (value.length > 200 || value.includes("\n")) return h("div", { class: "jv-str-block", dataset: { ptr } }, textView(value));
    return h("span", { class: "jv-str", dataset: { ptr } }, JSON.stringify(value));
  }
  return h("span", { class: "jv-" + (value === null ? "null" : typeof value), dataset: { ptr } }, String(value));
}

function jsonChildren(value, ptr, depth) {
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  return h("div", { class: "jv-children" }, entries.map(([k, v]) => {
    const cptr = ptr + "/" + esc(k);
    const key = h("span", { class: "jv-key" }, String(k));
    if (v !== null && typeof v === "object") {
      return lazy([key, ": ", h("span", { class: "jv-prev" }, preview(v))], () => jsonChildren(v, cptr, depth + 1),
        { ptr: cptr, open: depth < 1 && entries.length <= 12 });
    }
    return h("div", { class: "jv-row", dataset: { ptr: cptr } }, key, ": ", jsonLeaf(v, cptr));
  }));
}

// A collapsible JSON viewer; nested objects are built when opened.
export function jsonTree(value, ptr = "", { open = true } = {}) {
  if (value === null || typeof value !== "object") return jsonLeaf(value, ptr);
  return lazy(h("span", { class: "jv-prev" }, preview(value)), () => jsonChildren(value, ptr, 0), { ptr, open, cls: "jv" });
}

// Open the nodes along a pointer (building lazy bodies on the way) and highlight the deepest one.
export function reveal(container, pointer) {
  if (pointer == null) return null;
  const parts = pointer.split("/").slice(1);
  let found = null;
  const byPtr = (p) => [...container.querySelectorAll("[data-ptr]")].find((e) => e.dataset.ptr === p);
  for (let i = 0; i <= parts.length; i++) {
    const p = i === 0 ? "" : "/" + parts.slice(0, i).join("/");
    let el = byPtr(p);
    if (!el && i > 0) { // inside a folded range of a long list? unfold it and look again
      const base = "/" + parts.slice(0, i - 1).join("/").replace(/^\/$/, "");
      const idx = Number(parts[i - 1]);
      const fold = [...container.querySelectorAll("[data-range-ptr]")].find((e) =>
        (e.dataset.rangePtr === base || (base === "/" && e.dataset.rangePtr === "")) && idx >= Number(e.dataset.rangeFrom) && idx < Number(e.dataset.rangeTo));
      if (fold) { fold.open = true; if (fold._ensure) fold._ensure(); el = byPtr(p); }
    }
    if (!el) continue;
    found = el;
    for (let a = el; a && a !== container; a = a.parentElement) {
      if (a.tagName === "DETAILS" && !a.open) { a.open = true; if (a._ensure) a._ensure(); }
    }
    if (el.tagName === "DETAILS" && !el.open) { el.open = true; if (el._ensure) el._ensure(); }
  }
  if (found) {
    container.querySelectorAll(".revealed").forEach((e) => e.classList.remove("revealed"));
    found.classList.add("revealed");
    found.scrollIntoView({ block: "center" });
  }
  return found;
}
