// Findings (what wastes the session's context) as a panel on the session page and badges on the
// calls they concern, and the cache advisor's page. Captured text (excerpts, tool names) only
// reaches the page as text nodes.

import { h, mount, fmtInt, fmtTokens, fmtCost } from "./dom.js";
import { getJSON } from "./api.js";

const KIND_LABEL = {
  unused_tools: "unused tool", oversized_tool_result: "oversized result", duplicate_content: "duplicate",
  overflow_risk: "overflow risk", cache_churn: "cache churn", unpaid_breakpoint: "unpaid breakpoint",
};
const label = (kind) => KIND_LABEL[kind] || String(kind);

export function findingBadges(kinds) {
  return (kinds || []).map((k) => h("span", { class: "chip finding f-" + k, title: "finding: " + label(k) }, label(k)));
}

function evidenceLink(f) {
  const ev = f.evidence || {};
  if (!ev.call) return null;
  const pointer = ev.pointer || (Array.isArray(ev.pointers) ? ev.pointers[0] : null);
  const href = "#/call/" + encodeURIComponent(ev.call) + (pointer ? "?ptr=" + encodeURIComponent(pointer) : "");
  return h("a", { href, class: "evidence" }, pointer ? h("code", { class: "ptr" }, pointer) : "the call");
}

// The tools one unused-tools finding lists, each a link to its definition (names are captured text).
function toolList(f) {
  const tools = (f.evidence || {}).per_tool;
  if (!Array.isArray(tools) || !tools.length) return null;
  return h("div", { class: "tools muted small" }, tools.map((t) => h("a", {
    href: "#/call/" + encodeURIComponent(t.call) + "?ptr=" + encodeURIComponent(t.pointer), class: "tool",
    title: fmtTokens(t.tokens_per_call) + " tokens per call" }, h("code", {}, String(t.tool)))));
}

function changedBytes(ev) {
  if (ev.before == null || ev.after == null) return null;
  return h("div", { class: "churn muted small" }, `at char ${fmtInt(ev.offset)}: `,
    h("code", { class: "before" }, ev.before), " → ", h("code", { class: "after" }, ev.after));
}

// The panel; ``box.load()`` reads the findings (the session page calls it once its first screen is
// up; they are assembled from facts the writer stored, no prompt is read), then ``onByCall``
// receives {call id: [kinds]}.
export function findingsCard(session, onByCall) {
  const box = h("div", { class: "card findings" }, h("div", { class: "card-title" }, "Findings"), h("p", { class: "muted" }, "Reading…"));
  box.load = () => getJSON("/findings", { s: session }).then((data) => {
    onByCall(data.by_call || {});
    const items = data.findings || [];
    mount(box, h("div", { class: "card-title" }, `Findings (${items.length})`,
      h("a", { href: "#/advice/" + encodeURIComponent(session), class: "advisor-link" }, "cache advisor →")),
    items.length ? h("ul", { class: "finding-list" }, items.map((f) => h("li", { class: "finding-item", dataset: { kind: f.kind } },
      h("span", { class: "chip finding f-" + f.kind }, label(f.kind)), " ",
      h("span", { class: "what" }, f.summary), " ",
      h("span", { class: "stake", title: "at stake over the session" }, fmtTokens(f.tokens) + " tokens" + (f.usd ? " · " + fmtCost(f.usd) : "")), " ",
      h("span", { class: "calls muted small" }, `${fmtInt((f.calls || []).length)} call(s)`), " ",
      evidenceLink(f), f.kind === "cache_churn" ? changedBytes(f.evidence || {}) : null,
      f.kind === "unused_tools" ? toolList(f) : null))) :
      h("p", { class: "muted" }, "Nothing found."));
  }, (e) => mount(box, h("div", { class: "card-title" }, "Findings"), h("p", { class: "error" }, "Could not read findings: " + e.message)));
  return box;
}

export function renderAdvice(root, session, params, ctx) {
  ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: session, href: "#/session/" + encodeURIComponent(session) }, { label: "cache advisor" }]);
  mount(root, h("p", { class: "muted pad" }, "Replaying the session…"));
  let disposed = false;
  getJSON("/advice", { s: session }).then((data) => {
    if (disposed) return;
    const a = data.advice;
    if (!a) { mount(root, h("p", { class: "pad" }, "This session has no Anthropic or OpenAI prompt to replay.")); return; }
    const row = (alt) => h("tr", { class: "alt" + (alt.name === a.best ? " best" : ""), dataset: { name: alt.name } },
      h("td", { title: alt.explanation }, alt.name), h("td", {}, alt.description),
      h("td", { class: "num" }, fmtInt(alt.input)), h("td", { class: "num" }, fmtInt(alt.cache_read)), h("td", { class: "num" }, fmtInt(alt.cache_write)),
      h("td", { class: "num" }, fmtCost(alt.cost_usd)), h("td", { class: "num" }, alt.saving_pct.toFixed(1) + "%"));
    const cause = (c) => h("li", { class: "cause-advice", dataset: { cause: c.cause } },
      h("span", { class: "what" }, c.change), " ",
      h("span", { class: "stake" }, `saves ~${fmtTokens(c.saving_tokens)} tokens · ${fmtCost(c.saving_usd)} (${c.saving_pct.toFixed(1)}%)`),
      c.before != null || c.after != null ? h("div", { class: "churn muted small" },
        h("code", { class: "before" }, c.before ?? ""), " → ", h("code", { class: "after" }, c.after ?? "")) : null);
    mount(root,
      h("div", { class: "toolbar" }, h("h1", {}, "Cache advisor"), h("span", { class: "tag" }, a.family)),
      h("p", { class: "advice" }, a.advice),
      (a.advices || []).length ? h("ol", { class: "card advices" }, a.advices.map(cause)) : null,
      h("h2", {}, "Breakpoint placements"),
      h("div", { class: "card flush" }, h("table", { class: "grid advisor" },
        h("thead", {}, h("tr", {}, ["alternative", "placement", "input", "cache read", "cache write", "cost", "saving"].map((t) => h("th", {}, t)))),
        h("tbody", {}, a.alternatives.map(row)))),
      h("dl", { class: "legend muted small pad" }, a.alternatives.flatMap((alt) => [h("dt", {}, alt.name), h("dd", {}, alt.explanation)])),
      h("p", { class: "muted small pad" }, `${fmtInt(a.calls)} calls replayed through the provider's cache rules; ${a.units}. ` +
        "`ctxscope advise SESSION --verify` checks the top advice in the simulator."));
    root.dataset.ready = "1";
  }, (e) => { if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not replay the session: " + e.message)); });
  return { dispose() { disposed = true; delete root.dataset.ready; } };
}
