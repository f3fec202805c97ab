// A break's first difference on the call page: the request tree unfolds at the pointer and the
// block there shows which characters changed against the call it is compared with (inserted text
// marked, a removal shown as a caret whose tooltip holds the removed text). Apart from the page's
// data loading: it reads the diff itself, once, when asked.

import { h, clear } from "./dom.js";
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
  clear(pre);
  for (const [op, text] of diffText(ch.old, ch.new)) {
    if (op === "=") pre.appendChild(document.createTextNode(text));
    else if (op === "+") pre.appendChild(h("mark", { class: "ins", title: "added in this call" }, text));
    else pre.appendChild(h("span", { class: "caret del-caret", title: "removed here: " + (text.length > 400 ? text.slice(0, 400) + "…" : text) }, "‸"));
  }
  pre.dataset.changed = "1";
  return true;
}

// Unfold the request at ``ptr`` and mark what changed there; resolves to the element shown.
export async function showFirstDifference(reqEl, callId, ptr) {
  const el = reveal(reqEl, ptr);
  if (!el) return null;
  if (cached.id !== callId) cached = { id: callId, changes: getJSON("/diff", { id: callId }).then((d) => (d && d.diff ? d.diff.changes : []), () => []) };
  const ch = changeAt(await cached.changes, ptr);
  if (ch && markChange(el, ch)) el.scrollIntoView({ block: "center" });
  return el;
}
