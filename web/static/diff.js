// Diff page: a call against its predecessor. Opens at the first difference (the inspector's
// pointer when it has one), both sides shown with the changed span marked; cache_control moves
// and parameter changes are listed apart because they do not change the prompt. The API sends
// each change cut to its changed region: the identical text around it loads when its "… N
// identical chars …" is clicked, and a change the answer deferred loads when it is selected.

import { h, mount, fmtInt, fmtCost, relationBadge, verdictBadge } from "./dom.js";
import { getJSON } from "./api.js";
import { vocab, sentence } from "./vocab.js";
import { diffText } from "./textdiff.js";

const CONTEXT = 300; // characters kept around a change
const MIDDLE = 120; // kept at each end of an unchanged run between two changes

function elided(n) { return h("span", { class: "elided" }, ` … ${fmtInt(n)} identical chars … `); }

function equalRun(text, first, last) {
  if (first && last) return [text];
  if (first) return text.length > CONTEXT ? [elided(text.length - CONTEXT), text.slice(-CONTEXT)] : [text];
  if (last) return text.length > CONTEXT ? [text.slice(0, CONTEXT), elided(text.length - CONTEXT)] : [text];
  return text.length > 2 * MIDDLE + 40 ? [text.slice(0, MIDDLE), elided(text.length - 2 * MIDDLE), text.slice(-MIDDLE)] : [text];
}

// Both sides of a change: unchanged runs shared (and elided when long), deletions marked on the
// left, insertions on the right.
function sidesOf(a, b) {
  if (a == null) return [h("pre", { class: "text absent" }, "(absent)"), h("pre", { class: "text side" }, h("mark", { class: "ins" }, b))];
  if (b == null) return [h("pre", { class: "text side" }, h("mark", { class: "del" }, a)), h("pre", { class: "text absent" }, "(absent)")];
  const left = h("pre", { class: "text side" });
  const right = h("pre", { class: "text side" });
  const runs = diffText(a, b);
  runs.forEach(([op, text], i) => {
    if (op === "=") {
      left.append(...equalRun(text, i === 0, i === runs.length - 1).map((x) => (typeof x === "string" ? document.createTextNode(x) : x)));
      right.append(...equalRun(text, i === 0, i === runs.length - 1).map((x) => (typeof x === "string" ? document.createTextNode(x) : x)));
    } else if (op === "-") left.appendChild(h("mark", { class: "del" }, text));
    else right.appendChild(h("mark", { class: "ins" }, text));
  });
  return [left, right];
}

// Each side in words: "this call #12" against "its predecessor #11", or, across sessions, each
// call with its session, so "call #1 vs #1" never leaves the reader guessing which is which.
export function sideNames(d) {
  const n = d.new, o = d.old;
  const cross = d.same_session === false || (n.session && o.session && n.session !== o.session);
  const consecutive = d.break ? d.break.consecutive : n.predecessor === o.id;
  const short = (s) => (s && s.length > 24 ? "…" + s.slice(-20) : s);
  if (cross) {
    return { cross: true, older: `base: call #${o.seq} of session ${short(o.session)}`, newer: `compared: call #${n.seq} of session ${short(n.session)}`,
      olderBtn: `open the base (#${o.seq}, ${short(o.session)})`, newerBtn: `open the compared call (#${n.seq}, ${short(n.session)})`,
      heading: `Diff · call #${n.seq} of ${short(n.session)} against call #${o.seq} of ${short(o.session)}` };
  }
  const what = consecutive ? "its predecessor" : "the earlier call";
  return { cross: false, older: `before: ${what} #${o.seq}`, newer: `after: this call #${n.seq}`,
    olderBtn: `open ${what} (#${o.seq})`, newerBtn: `open this call (#${n.seq})`,
    heading: `Diff · call #${n.seq} against ${what} #${o.seq}` };
}

// The identical text a change's window left out, on both sides: "… N identical chars …", loaded
// 64 Ki characters at a time from the newer call (it is the same in both) when clicked.
const PAGE = 65536;
function identical(sides, ch, d, where) {
  let left = where === "head" ? ch.head_chars : ch.tail_chars;
  if (!left || !ch.old_is_text || !ch.new_is_text) return;
  const spans = sides.map(() => h("button", { type: "button", class: "elided more", dataset: { identical: where } }));
  const label = () => spans.forEach((b) => { b.textContent = ` … ${fmtInt(left)} identical chars … `; b.title = "load the identical text"; });
  const load = async () => {
    const offset = where === "head" ? Math.max(0, left - PAGE) : ch.new_chars - left;
    const limit = Math.min(PAGE, left);
    spans.forEach((b) => { b.disabled = true; });
    try {
      const r = await getJSON("/node", { id: d.new.id, kind: "request", ptr: ch.pointer, offset, limit });
      spans.forEach((b) => (where === "head" ? b.after(document.createTextNode(r.text)) : b.before(document.createTextNode(r.text))));
      left -= r.text.length;
      if (left > 0) label(); else spans.forEach((b) => b.remove());
    } catch (e) { spans.forEach((b) => { b.title = "could not load: " + e.message; }); }
    spans.forEach((b) => { b.disabled = false; });
  };
  spans.forEach((b) => b.addEventListener("click", load));
  label();
  sides.forEach((pre, i) => (where === "head" ? pre.prepend(spans[i]) : pre.append(spans[i])));
}

function changeDetail(ch, first, d) {
  const names = sideNames(d);
  const [left, right] = sidesOf(ch.old, ch.new);
  if (ch.old != null && ch.new != null) { identical([left, right], ch, d, "head"); identical([left, right], ch, d, "tail"); }
  return h("div", { class: "change-detail", id: "first-diff" },
    h("div", { class: "toolbar" }, h("span", { class: "op op-" + ch.op }, ch.op),
      first ? h("b", {}, "first difference") : h("b", {}, "difference"), h("code", { class: "ptr big" }, changePointer(ch)),
      h("span", { class: "spacer" }), h("span", { class: "muted small" }, ch.area ? "area: " + ch.area : "")),
    ch.truncated ? h("p", { class: "muted small" }, "The changed run is long: its first 8,000 characters are shown (the raw bytes have it all).") : null,
    h("div", { class: "cols2 sides" },
      h("div", {}, h("div", { class: "side-title", title: d.old.session ? "session " + d.old.session : null }, names.older, ch.old_pointer ? h("code", { class: "ptr" }, " " + ch.old_pointer) : null), left),
      h("div", {}, h("div", { class: "side-title", title: d.new.session ? "session " + d.new.session : null }, names.newer, h("code", { class: "ptr" }, " " + (ch.pointer || "/"))), right)));
}

function changePointer(ch) {
  return (ch.op === "removed" ? ch.old_pointer || ch.pointer : ch.pointer) || "/";
}

// The effects the client declared on this call (x-ctxscope-event): a break it announced itself.
function declaredNote(n) {
  const declared = [...new Set((Array.isArray(n.markers) ? n.markers : [])
    .filter((m) => m && m.detail && typeof m.detail === "object" && m.detail.declared).map((m) => String(m.kind)))];
  if (!declared.length) return null;
  return h("p", { class: "declared-note" }, h("b", {}, "Declared by the client: "), declared.join(", "),
    n.relation === vocab.RelationKind.DIVERGED ? " — the client announced this change of its prompt." : "");
}

function pickFocus(changes, focus) {
  if (!focus) return 0;
  let best = -1;
  changes.forEach((c, i) => {
    if (best >= 0) return;
    if (c.pointer === focus || focus.startsWith(c.pointer + "/") || c.pointer.startsWith(focus + "/")) best = i;
  });
  return best >= 0 ? best : 0;
}

function markerMoves(m) {
  const items = [
    ...m.removed.map((x) => ["removed", x.pointer]),
    ...m.added.map((x) => ["added", x.pointer]),
    ...m.changed.map((x) => ["changed", x.pointer]),
  ];
  if (!items.length) return h("p", { class: "muted small" }, `cache_control markers unchanged (${m.new.length} in this call).`);
  return h("div", {}, h("p", { class: "muted small" }, "Breakpoints moved. This alone does not change the prompt; a moved breakpoint changes what gets written to the cache."),
    h("ul", { class: "moves" }, items.map(([op, ptr]) => h("li", {}, h("span", { class: "op op-" + op }, op), " ", h("code", { class: "ptr" }, ptr)))));
}

// Whether the break was meant: declared by the client (a compaction or an archive effect),
// inferred from the prompts, or accidental.
const CAUSE_TEXT = {
  none: "No break: the later prompt continues the earlier one.",
  declared: "The break was declared by the client: ",
  inferred: "The break was inferred from the prompts: ",
  accidental: "The break is accidental: nothing the client declared or that the prompts show explains it.",
  unknown: "These calls are not a call and its predecessor, so what broke between them is not known.",
};

function breakLine(d) {
  const b = d.break;
  if (!b) return null;
  const effects = b.effects.map((e) => `${e.kind.replace(/_/g, " ")}${e.declared ? "" : " (inferred)"}`).join(", ");
  return h("p", { class: "break-cause cause-" + b.cause, id: "break-cause", dataset: { cause: b.cause } },
    CAUSE_TEXT[b.cause] || b.cause, b.cause === "declared" || b.cause === "inferred" ? effects + "." : "",
    d.same_session === false ? h("span", { class: "muted" }, " (the calls are from different sessions)") : null);
}

export function renderDiff(root, id, base, ctx) {
  let disposed = false;
  let keys = null; // j/k (and n/p) between the changes, once they are on screen
  mount(root, h("p", { class: "muted pad" }, "Computing diff…"));
  getJSON("/diff", { id, base }).then((d) => {
    if (disposed) return;
    const n = d.new;
    ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: n.session, href: "#/session/" + encodeURIComponent(n.session) },
      { label: "#" + n.seq, href: "#/call/" + encodeURIComponent(n.id) }, { label: "diff" }]);
    if (!d.diff) {
      mount(root, h("div", { class: "toolbar" }, h("h1", {}, `Diff · call #${n.seq}`)), h("p", { class: "muted pad" }, d.reason || "Nothing to compare."));
      root.dataset.ready = "1";
      return;
    }
    const diff = d.diff;
    const detail = h("div");
    const list = h("ol", { class: "changes" });
    let selected = null;
    const focusIndex = diff.changes.length ? pickFocus(diff.changes, d.focus) : -1;
    const select = (i) => {
      if (selected) selected.classList.remove("on");
      selected = list.children[i];
      if (selected) selected.classList.add("on");
      const ch = diff.changes[i];
      if (!ch.deferred) { mount(detail, changeDetail(ch, i === focusIndex, d)); return; }
      mount(detail, h("p", { class: "muted pad" }, "Loading this change…"));
      getJSON("/diff", { id, base, change: i }).then((one) => {
        diff.changes[i] = one.diff.changes[0];
        if (selected === list.children[i]) mount(detail, changeDetail(diff.changes[i], i === focusIndex, d));
      }).catch((e) => mount(detail, h("p", { class: "error pad" }, "Could not load this change: " + e.message)));
    };
    // A removed segment exists only on the old side: its place is the old pointer, not the new one.
    diff.changes.forEach((c, i) => { const ptr = changePointer(c); list.appendChild(h("li", { class: "change", onclick: () => select(i) },
      h("span", { class: "op op-" + c.op }, c.op), " ", h("code", { class: "ptr", title: ptr }, ptr))); });
    const analysed = n.pointer && n.relation === vocab.RelationKind.DIVERGED ? h("span", { class: "muted" }, "inspector: first difference at ", h("code", { class: "ptr" }, n.pointer)) : null;
    const insp = d.inspector && !d.inspector.error ? d.inspector : null;
    const cache = n.cache || null;
    const impact = [
      insp && insp.shared_tokens != null ? `shared prefix ${fmtInt(insp.shared_tokens)} tokens` + (insp.tokens ? ` of ${fmtInt(insp.tokens.a)}` : "") : null,
      cache && cache.lost_tokens ? `${fmtInt(cache.lost_tokens)} tokens lost to the cache` + (cache.lost_cost_usd ? ` (${fmtCost(cache.lost_cost_usd)})` : "") : null,
      cache && cache.before_prev_last_breakpoint != null ? (cache.before_prev_last_breakpoint ? "the change lies inside the previously cached prefix" : "the change lies after the previous breakpoint") : null,
    ].filter(Boolean);
    const names = sideNames(d);
    ctx.setTitle(`diff #${n.seq}`, n.session);
    mount(root,
      h("div", { class: "toolbar" }, h("h1", {}, names.heading), n.relation ? relationBadge(n.relation, n.pointer || n.epoch_reason) : null,
        analysed, h("span", { class: "spacer" }),
        h("a", { class: "btn", id: "open-older", href: "#/call/" + encodeURIComponent(d.old.id) }, names.olderBtn),
        h("a", { class: "btn", id: "open-newer", href: "#/call/" + encodeURIComponent(n.id) }, names.newerBtn)),
      breakLine(d),
      impact.length || cache ? h("div", { class: "impact" }, cache ? verdictBadge(cache) : null, impact.map((t) => h("span", { title: /lost to the cache/.test(t) ? sentence("loss_pricing") : null }, t))) : null,
      declaredNote(n),
      h("p", { class: "muted" }, diff.identical_prompt
        ? "The prompts are identical (ignoring cache_control markers and string vs text-block re-serialisation)."
        : `${diff.changes.length}${diff.truncated ? "+" : ""} prompt change${diff.changes.length === 1 ? "" : "s"}, in cache order (tools → system → messages).`),
      diff.changes.length ? h("div", { class: "diff-layout" }, h("div", { class: "card flush change-list" }, list), h("div", { class: "card" }, detail)) : null,
      h("div", { class: "cols2" },
        h("div", { class: "card" }, h("div", { class: "card-title" }, "cache_control moves (not prompt changes)"), markerMoves(diff.marker_moves)),
        h("div", { class: "card" }, h("div", { class: "card-title" }, "parameters (outside the prompt)"),
          diff.params.length ? h("table", { class: "kvtable" }, h("tbody", {}, diff.params.map((p) => h("tr", {}, h("th", {}, p.key),
            h("td", {}, h("code", {}, JSON.stringify(p.old))), h("td", {}, "→"), h("td", {}, h("code", {}, JSON.stringify(p.new)))))))
            : h("p", { class: "muted small" }, "unchanged"))));
    if (focusIndex >= 0) select(focusIndex);
    keys = (k) => {
      const at = selected ? Array.prototype.indexOf.call(list.children, selected) : -1;
      if ((k === "j" || k === "n") && at + 1 < diff.changes.length) { select(at + 1); selected.scrollIntoView({ block: "nearest" }); return true; }
      if ((k === "k" || k === "p") && at > 0) { select(at - 1); selected.scrollIntoView({ block: "nearest" }); return true; }
      return false;
    };
    root.dataset.ready = "1";
  }).catch((e) => { if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not compute the diff: " + e.message)); });
  delete root.dataset.ready;
  return { dispose() { disposed = true; delete root.dataset.ready; }, onKey: (k) => !!(keys && keys(k)) };
}
