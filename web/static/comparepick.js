// Compare any two calls: pick one on its call page, open another (of any session), and compare.
// The pick is kept in this browser's sessionStorage: it holds a call id, nothing captured.

import { h } from "./dom.js";

const KEY = "ctxscope.compare";

function picked() {
  try { return JSON.parse(sessionStorage.getItem(KEY) || "null"); } catch (e) { return null; }
}

export function compareControls(call) {
  const other = picked();
  const pick = h("button", { type: "button", class: "btn", id: "pick-compare", title: "remember this call, then open another and compare them" },
    other && other.id === call.id ? "picked for compare" : "pick to compare");
  pick.addEventListener("click", () => {
    sessionStorage.setItem(KEY, JSON.stringify({ id: call.id, seq: call.seq, session: call.session }));
    pick.textContent = "picked for compare";
  });
  const compare = other && other.id !== call.id
    ? h("a", { class: "btn primary", id: "compare-picked", href: "#/diff/" + encodeURIComponent(call.id) + "/" + encodeURIComponent(other.id),
      title: `compare with the picked call (${other.session} #${other.seq})` }, `compare with ${other.session} #${other.seq}`)
    : null;
  return [pick, compare];
}
