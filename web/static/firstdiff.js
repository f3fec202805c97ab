// A break's first difference on the call page: the request tree unfolds at the pointer and the
// block there shows which characters changed against the call it is compared with (inserted text
// marked, a removal shown as a caret whose tooltip holds the removed text). Apart from the page's
// data loading: the call API sends the changed region (``changed_region``: the change cut to a
// window, ``head_chars``/``tail_chars`` of identical text left out); the diff is read only when the
// region is not the one asked for.

import { h, clear, fmtInt } from "./dom.js";
import { getJSON } from "./api.js";
import { reveal } from "./jsontree.js";
import { diffText } from "./textdiff.js";

let cached = { id: null, changes: null }; // the last call's diff changes (a promise): read once per call

function changeAt(list, ptr) {
  return list.find((c) => c.pointer === ptr) || list.find((c) => c.pointer && (ptr.startsWith(c.pointer + "/") || c.pointer.startsWith(ptr + "/"))) || null;
}

// The text block of ``el`` (itself or the first inside it) rewritten with the change's runs.
export function markChange(el, ch) {
  if (!el || !ch || typeof ch.old !== "string" || typeof ch.new !== "string") return false;
  const pre = el.matches("pre.text") ? el : el.querySelector("pre.text");
  if (!pre) return false;
  pre.dataset.changed = "1"; // a cut text loading its first screen must not write over the marks
  clear(pre);
  if (ch.head_chars) pre.appendChild(h("span", { class: "elided" }, ` … ${fmtInt(ch.head_chars)} identical chars … `));
  for (const [op, text] of diffText(ch.old, ch.new)) {
    if (op === "=") pre.appendChild(document.createTextNode(text));
    else if (op === "+") pre.appendChild(h("mark", { class: "ins", title: "added in this call" }, text));
    else pre.appendChild(h("span", { class: "caret del-caret", title: "removed here: " + (text.length > 400 ? text.slice(0, 400) + "…" : text) }, "‸"));
  }
  if (ch.truncated) pre.appendChild(h("span", { class: "elided" }, " … (the change goes on: see the diff page) "));
  if (ch.tail_chars) pre.appendChild(h("span", { class: "elided" }, ` … ${fmtInt(ch.tail_chars)} identical chars … `));
  return true;
}

// Unfold the request at ``ptr`` and mark what changed there; resolves to the element shown.
export async function showFirstDifference(reqEl, callId, ptr, region = null) {
  const el = await reveal(reqEl, ptr);
  if (!el) return null;
  let ch = region ? changeAt([region], ptr) : null;
  if (!ch) {
    if (cached.id !== callId) cached = { id: callId, changes: getJSON("/diff", { id: callId }).then((d) => (d && d.diff ? d.diff.changes : []), () => []) };
    ch = changeAt(await cached.changes, ptr);
  }
  if (ch && markChange(el, ch)) el.scrollIntoView({ block: "center" });
  return el;
}
