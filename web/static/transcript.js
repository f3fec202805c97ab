// Transcript page: a session's conversation as the model saw it at its last call (or at the call
// ``?at=``), turn by turn: who said what, tool calls and their results, reminders and
// compactions marked; ``?as_seen=1`` leaves out the turns a compaction replaced. Data:
// /api/sessions/<id>/transcript ({session, title, call, seq, calls, note, turns}), turns of
// {role, kind (text|tool_call|tool_result|reminder|compaction|system), text, tool_name?, call_id?,
// pointer, source (request|response)}.
// Every text is captured, untrusted: it reaches the page as text nodes only.

import { h, mount, fmtInt } from "./dom.js";
import { getJSON } from "./api.js";
import { textView } from "./jsontree.js";

const KIND_LABEL = { text: "", tool_call: "tool call", tool_result: "tool result", reminder: "reminder", compaction: "compaction", system: "system" };

function turnView(t, i, callHref) {
  const role = String(t.role || "?");
  const kind = String(t.kind || "text");
  const text = t.text == null ? "" : String(t.text);
  return h("div", { class: `turn role-${role.replace(/[^a-z_]/g, "")} k-${kind.replace(/[^a-z_]/g, "")}`, dataset: { kind, role, index: i } },
    h("div", { class: "turn-head" }, h("span", { class: "role r-" + role.replace(/[^a-z_]/g, "") }, role),
      KIND_LABEL[kind] ? h("span", { class: "kind" }, KIND_LABEL[kind]) : null,
      t.tool_name ? h("code", {}, String(t.tool_name)) : null,
      t.call_id ? h("code", { class: "muted small", title: "tool call id" }, String(t.call_id)) : null,
      h("span", { class: "spacer" }),
      t.pointer ? h("a", { class: "ptr", href: callHref(t.pointer, t.source), title: `open the ${t.source === "response" ? "answer" : "request"} at this place` },
        t.source === "response" ? "answer " : "", String(t.pointer)) : null),
    textView(text, { cls: "turn-text" }));
}

export function renderTranscript(root, session, params, ctx) {
  let disposed = false;
  const at = params.get("at") || "";
  const asSeen = params.get("as_seen") === "1";
  ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: session, href: "#/session/" + encodeURIComponent(session) }, { label: "transcript" }]);
  ctx.setTitle("transcript", session);
  mount(root, h("p", { class: "muted pad" }, "Loading transcript…"));
  delete root.dataset.ready;
  getJSON("/sessions/" + encodeURIComponent(session) + "/transcript", { at, as_seen: asSeen ? "1" : "" }).then((d) => {
    if (disposed) return;
    const turns = Array.isArray(d) ? d : Array.isArray(d && d.turns) ? d.turns : [];
    const title = d && !Array.isArray(d) && typeof d.title === "string" ? d.title : null;
    const callId = d && !Array.isArray(d) ? d.call || d.call_id || at || null : at || null;
    if (title) {
      ctx.setTitle("transcript", title);
      ctx.setCrumbs([{ label: "sessions", href: "#/" }, { label: title, href: "#/session/" + encodeURIComponent(session) }, { label: "transcript" }]);
    }
    const callHref = (ptr, source) => {
      if (!callId) return "#/session/" + encodeURIComponent(session);
      const q = new URLSearchParams({ ptr });
      if (source === "response") q.set("body", "response");
      return "#/call/" + encodeURIComponent(String(callId)) + "?" + q.toString();
    };
    const seq = d && !Array.isArray(d) && d.seq != null ? d.seq : null;
    const toggle = new URLSearchParams(at ? { at } : {});
    if (!asSeen) toggle.set("as_seen", "1");
    const toggleHref = "#/transcript/" + encodeURIComponent(session) + (toggle.toString() ? "?" + toggle.toString() : "");
    const counts = {};
    for (const t of turns) counts[t.kind || "text"] = (counts[t.kind || "text"] || 0) + 1;
    mount(root,
      h("div", { class: "toolbar" }, h("h1", { class: "session-title", title: session }, "Transcript · ", title || session),
        h("span", { class: "muted" }, `${fmtInt(turns.length)} turns` + Object.entries(counts).filter(([k]) => k !== "text").map(([k, n]) => ` · ${n} ${KIND_LABEL[k] || k}`).join("")),
        h("span", { class: "spacer" }),
        h("a", { class: "btn", id: "transcript-toggle", href: toggleHref, title: "a compaction replaces earlier turns with a summary: show them, or the prompt alone" },
          asSeen ? "with the turns compactions replaced" : "as the model saw it"),
        callId ? h("a", { class: "btn", href: "#/call/" + encodeURIComponent(String(callId)) }, seq != null ? `read at call #${seq}` : "the call it is read from") : null),
      d && d.note ? h("p", { class: "note" }, String(d.note)) : null,
      turns.length ? h("div", { class: "card transcript" }, turns.map((t, i) => turnView(t, i, callHref)))
        : h("p", { class: "muted pad" }, "This session has no conversation to show."));
    root.dataset.ready = "1";
  }).catch((e) => { if (!disposed) mount(root, h("p", { class: "error pad" }, "Could not load the transcript: " + e.message)); });
  return { dispose() { disposed = true; delete root.dataset.ready; } };
}
