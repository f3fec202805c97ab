// Transcript page: a session's conversation as the model saw it at its last call (or at the call
// ``?call=``), turn by turn: who said what, tool calls and their results, reminders and
// compactions marked. Data: /api/sessions/<id>/transcript, turns of
// {role, kind (text|tool_call|tool_result|reminder|compaction|system), text, tool_name?, call_id?, pointer}.
// Every text is captured, untrusted: it reaches the page as text nodes only.

import { h, mount, fmtInt } from "./dom.js";
import { getJSON } from "./api.js";
import { textView } from "./jsontree.js";

const KIND_LABEL = { text: "", tool_call: "tool call", tool_result: "tool result", reminder: "reminder", compaction: "compaction", system: "system" };

function turnView(t, i, callHref) {
  const role = String(t.role || "?");
  const kind = String(t.kind || "text");
  const text = t.text == null ? "" : String(t.text);
  return h("div", { class: `turn r-${role.replace(/[^a-z_]/g, "")} k-${kind.replace(/[^a-z_]/g, "")}`, dataset: { kind, role, index: i } },
    h("div", { class: "turn-head" }, h("span", { class: "role r-" + role.replace(/[^a-z_]/g, "") }, role),
      KIND_LABEL[kind] ? h("span", { class: "kind" }, KIND_LABEL[kind]) : null,
      t.tool_name ? h("code", {}, String(t.tool_name)) : null,
      t.call_id ? h("code", { class: "muted small", title: "tool call id" }, String(t.call_id)) : null,
      h("span", { class: "spacer" }),
      t.pointer ? h("a", { class: "ptr", href: callHref(t.pointer), title: "open the request at this place" }, String(t.pointer)) : null),
    textView(text, { cls: "turn-text" }));
}

export function renderTranscript(root, session, params, ctx) {
  let disposed = false;
  const at = params.get("call") || "";
  ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: session, href: "#/session/" + encodeURIComponent(session) }, { label: "transcript" }]);
  ctx.setTitle("transcript", session);
  mount(root, h("p", { class: "muted pad" }, "Loading transcript…"));
  delete root.dataset.ready;
  getJSON("/sessions/" + encodeURIComponent(session) + "/transcript", at ? { call: at } : undefined).then((d) => {
    if (disposed) return;
    const turns = Array.isArray(d) ? d : Array.isArray(d && d.turns) ? d.turns : [];
    const title = d && !Array.isArray(d) && typeof d.title === "string" ? d.title : null;
    const callId = d && !Array.isArray(d) ? d.call || d.call_id || at || null : at || null;
    if (title) ctx.setTitle("transcript", title);
    const callHref = (ptr) => (callId ? "#/call/" + encodeURIComponent(String(callId)) + "?" + new URLSearchParams({ ptr }).toString() : "#/session/" + encodeURIComponent(session));
    const counts = {};
    for (const t of turns) counts[t.kind || "text"] = (counts[t.kind || "text"] || 0) + 1;
    mount(root,
      h("div", { class: "toolbar" }, h("h1", { class: "session-title", title: session }, "Transcript · ", title || session),
        h("span", { class: "muted" }, `${fmtInt(turns.length)} turns` + Object.entries(counts).filter(([k]) => k !== "text").map(([k, n]) => ` · ${n} ${KIND_LABEL[k] || k}`).join("")),
        h("span", { class: "spacer" }),
        callId ? h("a", { class: "btn", href: "#/call/" + encodeURIComponent(String(callId)) }, "the call it is read from") : null),
      turns.length ? h("div", { class: "card transcript" }, turns.map((t, i) => turnView(t, i, callHref)))
        : h("p", { class: "muted pad" }, "This session has no conversation to show."));
    root.dataset.ready = "1";
  }).catch((e) => { if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not load the transcript: " + e.message)); });
  return { dispose() { disposed = true; delete root.dataset.ready; } };
}
