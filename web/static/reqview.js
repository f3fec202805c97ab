// Structured, collapsible views of a request (system, tools, messages with roles, tool calls and
// results, reminders highlighted) and of the reassembled response, for Anthropic Messages,
// OpenAI Chat Completions and Responses; anything else falls back to the JSON tree. Every
// element that stands for a part of the body carries data-ptr (its RFC 6901 pointer).

import { h, fmtInt } from "./dom.js";
import { textView, lazy, jsonTree, foldView, itemAt } from "./jsontree.js";

const PROMPT_KEYS = new Set(["system", "tools", "messages", "instructions", "input", "contents", "systemInstruction"]);

function esc(k) { return String(k).replace(/~/g, "~0").replace(/\//g, "~1"); }

function oneLine(s, n = 110) {
  const t = String(s == null ? "" : s).replace(/\s+/g, " ").trim();
  return t.length > n ? t.slice(0, n) + "…" : t;
}

function cacheMark(obj) {
  return obj && typeof obj === "object" && obj.cache_control
    ? h("span", { class: "chip cc", title: "cache_control " + JSON.stringify(obj.cache_control) }, "cache_control") : null;
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((b) => (b && typeof b === "object" ? b.text || b.content && textOf(b.content) || "" : "")).join(" ");
}

function jsonArgs(args) {
  if (typeof args !== "string") return args;
  try { return JSON.parse(args); } catch (e) { return args; }
}

// A tool call's arguments: parsed when the whole string is here, else its text, loaded on demand.
function jsonArgsView(args, ptr, src) {
  if (typeof args === "string" && src && src.texts[ptr]) return textView(args, { src, ptr });
  return jsonTree(jsonArgs(args), ptr, { src });
}

// -- content blocks (all APIs) -----------------------------------------------------------------

function block(b, ptr, src) {
  if (typeof b === "string") return h("div", { class: "blk", dataset: { ptr } }, textView(b, { src, ptr }));
  if (!b || typeof b !== "object") return h("div", { class: "blk", dataset: { ptr } }, jsonTree(b, ptr, { src }));
  const t = b.type;
  const head = (label, cls, ...extra) => h("div", { class: "blk-head" }, h("span", { class: "btype " + (cls || "") }, label), ...extra, cacheMark(b));
  if (t === "text" || t === "input_text" || t === "output_text") {
    return h("div", { class: "blk", dataset: { ptr } }, head(t), h("div", { dataset: { ptr: ptr + "/text" } }, textView(b.text ?? "", { src, ptr: ptr + "/text" })));
  }
  if (t === "tool_use" || t === "server_tool_use") {
    return h("div", { class: "blk tool-call", dataset: { ptr } }, head("tool call", "bt-call", h("b", {}, String(b.name)), h("span", { class: "muted mono" }, String(b.id || ""))),
      jsonTree(b.input, ptr + "/input", { src }));
  }
  if (t === "tool_result") {
    const content = b.content;
    return h("div", { class: "blk tool-result" + (b.is_error ? " is-error" : ""), dataset: { ptr } },
      head(b.is_error ? "tool result (error)" : "tool result", "bt-result", h("span", { class: "muted mono" }, String(b.tool_use_id || ""))),
      typeof content === "string" ? h("div", { dataset: { ptr: ptr + "/content" } }, textView(content, { src, ptr: ptr + "/content" }))
        : Array.isArray(content) ? content.map((c, i) => block(c, `${ptr}/content/${i}`, src)) : jsonTree(content, ptr + "/content", { src }));
  }
  if (t === "image" || t === "input_image" || t === "image_url") {
    const media = b.source || b.image_url || {};
    const cut = src && src.texts[ptr + "/source/data"];
    const chars = cut ? cut.chars : typeof media.data === "string" ? media.data.length : null;
    const size = chars != null ? ` · ${fmtInt(Math.round(chars * 0.75))} bytes` : "";
    return h("div", { class: "blk", dataset: { ptr } }, head("image", "bt-media"), h("span", { class: "muted" }, `[${media.media_type || media.type || "image"}${size}] (not rendered)`));
  }
  if (t === "thinking" || t === "redacted_thinking" || t === "reasoning") {
    return h("div", { class: "blk", dataset: { ptr } }, lazy(head(t, "bt-think"), () => (b.thinking != null ? textView(b.thinking, { src, ptr: ptr + "/thinking" }) : jsonTree(b, ptr, { src })), { ptr: ptr + "/thinking" }));
  }
  return h("div", { class: "blk", dataset: { ptr } }, head(String(t || "block")), jsonTree(b, ptr, { open: false, src }));
}

function contentView(content, ptr, src) {
  if (typeof content === "string") return h("div", { class: "blk", dataset: { ptr } }, textView(content, { src, ptr }));
  if (Array.isArray(content)) return content.map((b, i) => block(b, `${ptr}/${i}`, src));
  if (content == null) return h("span", { class: "muted" }, "(no content)");
  return jsonTree(content, ptr, { src });
}

// -- one message (Anthropic / Chat / Responses item) -----------------------------------------------

function roleBadge(role) {
  return h("span", { class: "role r-" + String(role || "item").replace(/[^a-z_]/g, "") }, String(role || "item"));
}

function messageSummary(m, i, size) {
  if (!m || typeof m !== "object") return [h("span", { class: "idx" }, String(i)), " ", oneLine(m)];
  const role = m.role || m.type;
  let text = textOf(m.content);
  const calls = m.tool_calls || (Array.isArray(m.content) ? m.content.filter((b) => b && b.type === "tool_use") : []);
  const results = Array.isArray(m.content) ? m.content.filter((b) => b && b.type === "tool_result").length : 0;
  if (m.type === "function_call") text = `${m.name}(${oneLine(m.arguments, 60)})`;
  if (m.type === "function_call_output") text = "→ " + oneLine(typeof m.output === "string" ? m.output : JSON.stringify(m.output));
  const reminder = /<system-reminder>/.test(typeof m.content === "string" ? m.content : JSON.stringify(m.content || ""));
  return [h("span", { class: "idx" }, String(i)), roleBadge(role),
    calls.length ? h("span", { class: "chip" }, `${calls.length} tool call${calls.length > 1 ? "s" : ""}`) : null,
    results ? h("span", { class: "chip" }, `${results} tool result${results > 1 ? "s" : ""}`) : null,
    m.role === "tool" ? h("span", { class: "chip" }, "tool result") : null,
    reminder ? h("span", { class: "chip m-reminder" }, "reminder") : null,
    Array.isArray(m.content) && m.content.some((b) => b && b.cache_control) ? h("span", { class: "chip cc" }, "cache_control") : null,
    size != null && size > 2000 ? h("span", { class: "chip size", title: "characters of text in this message" }, `${fmtInt(size)} chars`) : null,
    h("span", { class: "summ" }, oneLine(text))];
}

function messageBody(m, ptr, src) {
  if (!m || typeof m !== "object") return jsonTree(m, ptr, { src });
  const out = [];
  if (m.type === "function_call") {
    out.push(h("div", { class: "blk tool-call", dataset: { ptr } }, h("div", { class: "blk-head" }, h("span", { class: "btype bt-call" }, "tool call"), h("b", {}, String(m.name)), h("span", { class: "muted mono" }, String(m.call_id || ""))),
      jsonArgsView(m.arguments, ptr + "/arguments", src)));
    return out;
  }
  if (m.type === "function_call_output") {
    out.push(h("div", { class: "blk tool-result", dataset: { ptr } }, h("div", { class: "blk-head" }, h("span", { class: "btype bt-result" }, "tool result"), h("span", { class: "muted mono" }, String(m.call_id || ""))),
      typeof m.output === "string" ? h("div", { dataset: { ptr: ptr + "/output" } }, textView(m.output, { src, ptr: ptr + "/output" })) : contentView(m.output, ptr + "/output", src)));
    return out;
  }
  if (m.role === "tool" && m.tool_call_id) out.push(h("div", { class: "muted mono small" }, "for tool call " + m.tool_call_id));
  if ("content" in m) out.push(contentView(m.content, ptr + "/content", src));
  if (Array.isArray(m.tool_calls)) {
    m.tool_calls.forEach((c, j) => {
      const f = (c && c.function) || {};
      const cptr = `${ptr}/tool_calls/${j}`;
      out.push(h("div", { class: "blk tool-call", dataset: { ptr: cptr } },
        h("div", { class: "blk-head" }, h("span", { class: "btype bt-call" }, "tool call"), h("b", {}, String(f.name)), h("span", { class: "muted mono" }, String(c.id || ""))),
        jsonArgsView(f.arguments, cptr + "/function/arguments", src)));
    });
  }
  const rest = Object.keys(m).filter((k) => !["role", "content", "tool_calls", "type"].includes(k));
  if (rest.length) out.push(h("div", { class: "kv small" }, rest.map((k) => h("div", {}, h("span", { class: "muted" }, k + ": "), typeof m[k] === "object" ? JSON.stringify(m[k]) : String(m[k])))));
  return out;
}

const KEEP_HEAD = 1;
const KEEP_TAIL = 6;

function messageList(items, ptr, openLast = 3, src = null) {
  if (typeof items === "string") return h("div", { class: "blk", dataset: { ptr } }, textView(items, { src, ptr }));
  if (!Array.isArray(items)) return jsonTree(items, ptr, { src });
  const fold = src ? src.folds[ptr] : null;
  const length = fold ? fold.length : items.length;
  const one = (m, i) => lazy(messageSummary(m, i, src ? src.sizes[`${ptr}/${i}`] : null), () => messageBody(m, `${ptr}/${i}`, src),
    { ptr: `${ptr}/${i}`, open: i >= length - openLast, cls: "msg role-" + String((m && (m.role || m.type)) || "x").replace(/[^a-z_]/g, "") });
  if (fold) { // the call API left the middle out: it loads a page at a time when unfolded
    const tail = [];
    for (let i = fold.to; i < length; i++) tail.push(one(itemAt(items, fold, i), i));
    return h("div", { class: "msgs", dataset: { ptr } }, items.slice(0, fold.from).map(one), foldView(src, ptr, fold, one, "messages"), tail);
  }
  if (items.length <= KEEP_HEAD + KEEP_TAIL + 4) return h("div", { class: "msgs", dataset: { ptr } }, items.map(one));
  // A long conversation: the first message, the middle folded into one group, the last few.
  const from = KEEP_HEAD, to = items.length - KEEP_TAIL;
  const middle = lazy(h("span", { class: "muted" }, `${to - from} more messages (${from}–${to - 1})`),
    () => items.slice(from, to).map((m, k) => one(m, from + k)), { cls: "fold" });
  Object.assign(middle.dataset, { rangePtr: ptr, rangeFrom: String(from), rangeTo: String(to) });
  return h("div", { class: "msgs", dataset: { ptr } }, items.slice(0, from).map(one), middle, items.slice(to).map((m, k) => one(m, to + k)));
}

// -- tools --------------------------------------------------------------------------------------

function toolList(tools, ptr, src) {
  if (!Array.isArray(tools)) return jsonTree(tools, ptr, { src });
  return h("div", { class: "tools" }, tools.map((t, i) => {
    const f = (t && t.function) || t || {};
    const name = f.name || t.type || "tool";
    return lazy([h("span", { class: "idx" }, String(i)), h("b", {}, String(name)), h("span", { class: "summ" }, oneLine(f.description, 90)), cacheMark(t)],
      () => [f.description ? textView(f.description, { src, ptr: `${ptr}/${i}` + (t.function ? "/function" : "") + "/description" }) : null, jsonTree(f.input_schema || f.parameters || t, `${ptr}/${i}` + (t.function ? "/function" : "") + (f.input_schema ? "/input_schema" : f.parameters ? "/parameters" : ""), { open: false, src })],
      { ptr: `${ptr}/${i}`, cls: "tool" });
  }));
}

function section(title, count, body, { open = false, ptr = null } = {}) {
  return lazy([h("span", { class: "sec-title" }, title), count != null ? h("span", { class: "muted" }, " " + count) : null], body, { open, ptr, cls: "section" });
}

// -- request ------------------------------------------------------------------------------------

export function requestView(body, api, src = null) {
  if (!body || typeof body !== "object" || Array.isArray(body)) return h("div", { class: "pad" }, jsonTree(body, "", { src }));
  const params = Object.keys(body).filter((k) => !PROMPT_KEYS.has(k));
  const parts = [];
  parts.push(h("div", { class: "params" }, params.map((k) => h("span", { class: "param", dataset: { ptr: "/" + esc(k) } },
    h("span", { class: "muted" }, k + " "), h("code", {}, oneLine(typeof body[k] === "object" ? JSON.stringify(body[k]) : String(body[k]), 80))))));
  if ("tools" in body) parts.push(section("tools", Array.isArray(body.tools) ? body.tools.length : null, () => toolList(body.tools, "/tools", src), { ptr: "/tools" }));
  if ("system" in body) parts.push(section("system", typeof body.system === "string" ? `${fmtInt(src && src.texts["/system"] ? src.texts["/system"].chars : body.system.length)} chars` : Array.isArray(body.system) ? `${body.system.length} blocks` : null,
    () => contentView(body.system, "/system", src), { ptr: "/system" }));
  if ("systemInstruction" in body) parts.push(section("system instruction", null, () => jsonTree(body.systemInstruction, "/systemInstruction", { src }), { ptr: "/systemInstruction" }));
  if ("instructions" in body) parts.push(section("instructions", null, () => contentView(body.instructions, "/instructions", src), { ptr: "/instructions" }));
  for (const key of ["messages", "input", "contents"]) {
    if (key in body) parts.push(section(key, Array.isArray(body[key]) ? (src && src.folds["/" + key] ? src.folds["/" + key].length : body[key].length) : null, () => messageList(body[key], "/" + key, 3, src), { open: true, ptr: "/" + key }));
  }
  return h("div", { class: "reqview", dataset: { ptr: "" } }, parts);
}

// -- response -----------------------------------------------------------------------------------

export function responseView(resp, src = null) {
  if (!resp || typeof resp !== "object") return h("p", { class: "muted pad" }, "No parsed response (see the raw bytes).");
  const parts = [];
  const facts = [];
  for (const k of ["model", "stop_reason", "status", "id"]) if (resp[k] != null) facts.push(h("span", { class: "param" }, h("span", { class: "muted" }, k + " "), h("code", {}, String(resp[k]))));
  if (Array.isArray(resp.choices)) {
    resp.choices.forEach((c, i) => {
      if (c && c.finish_reason) facts.push(h("span", { class: "param" }, h("span", { class: "muted" }, `finish_reason[${i}] `), h("code", {}, String(c.finish_reason))));
      parts.push(section(`choice ${i}`, null, () => messageBody(c.message || c.delta || c, `/choices/${i}/message`, src), { open: true }));
    });
  } else if (Array.isArray(resp.content)) {
    parts.push(section("content", `${resp.content.length} blocks`, () => resp.content.map((b, i) => block(b, `/content/${i}`, src)), { open: true }));
  } else if (Array.isArray(resp.output)) {
    parts.push(section("output", `${resp.output.length} items`, () => messageList(resp.output, "/output", 20, src), { open: true }));
  } else if (Array.isArray(resp.candidates)) {
    parts.push(section("candidates", null, () => jsonTree(resp.candidates, "/candidates", { src }), { open: true }));
  }
  if (resp.error) parts.push(section("error", null, () => jsonTree(resp.error, "/error", { src }), { open: true }));
  parts.push(section("response JSON", null, () => jsonTree(resp, "", { src }), {}));
  return h("div", { class: "respview" }, h("div", { class: "params" }, facts), parts);
}
