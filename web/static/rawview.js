// Raw bytes of a body, loaded in 64 KiB ranges on demand. At most MAX_CHUNKS ranges stay in the
// DOM: loading further drops the oldest, so a 100 MB body never lands on the page at once.
// The daemon masks key-like values in them, length for length; only "exact bytes" has them as sent.

import { h, mount, fmtBytes } from "./dom.js";
import { getJSON, rawUrl } from "./api.js";

const CHUNK = 64 * 1024;
const MAX_CHUNKS = 16;

export function rawView(call, kind) {
  const encoding = kind === "request" ? call.request_encoding : call.response_encoding;
  let form = "decoded";
  let next = 0;
  let chunks = [];
  const pre = h("pre", { class: "raw", tabindex: "0" });
  const info = h("span", { class: "muted" });
  const more = h("button", { type: "button", onclick: () => load() }, "load more");
  const dropped = h("div", { class: "muted small", hidden: true });
  const download = h("span", {},
    h("a", { class: "btn", href: rawUrl(call.id, kind, "wire"), download: "",
      title: "The body as sent, with key-like values masked" }, "download (keys masked)"), " ",
    h("a", { class: "btn", href: rawUrl(call.id, kind, "wire", true), download: "",
      title: "The exact bytes as sent: they may contain keys the client put in the body" }, "exact bytes"));
  const formSel = encoding ? h("select", { "aria-label": "byte form", onchange: (e) => { form = e.target.value; reset(); } },
    h("option", { value: "decoded" }, `decoded (${encoding} undone)`), h("option", { value: "wire" }, `as on the wire (${encoding})`)) : null;

  let formGen = 0; // bumped when the byte form changes: a range asked for in the old form is dropped
  function reset() { formGen += 1; next = 0; chunks = []; mount(pre); dropped.hidden = true; load(); }

  async function load() {
    if (next == null) return;
    const mine = formGen;
    more.disabled = true;
    try {
      const r = await getJSON("/raw", { id: call.id, kind, form, offset: next, length: CHUNK });
      if (mine !== formGen) return;
      if (r.undecodable) { mount(pre, "(the body could not be decoded; download the bytes)"); info.textContent = ""; more.hidden = true; return; }
      const span = h("span", { class: "chunk", dataset: { offset: r.offset } }, r.text);
      pre.appendChild(span);
      chunks.push(span);
      if (chunks.length > MAX_CHUNKS) {
        chunks.shift().remove();
        dropped.hidden = false;
        dropped.textContent = `earlier bytes hidden (showing from byte ${chunks[0].dataset.offset}) — only ${MAX_CHUNKS} × 64 KiB stay on the page`;
      }
      next = r.next_offset;
      const shown = next == null ? r.total : next;
      info.textContent = r.total === 0 ? "empty body" : `${fmtBytes(shown)} of ${fmtBytes(r.total)}${r.binary ? " · hex dump (not UTF-8)" : ""}`;
      more.hidden = next == null;
    } catch (e) {
      if (mine === formGen) info.textContent = "could not load: " + e.message;
    } finally {
      if (mine === formGen) more.disabled = false; // else the new form's first range is on its way
    }
  }

  load();
  return h("div", { class: "rawview" }, h("div", { class: "toolbar small" }, formSel, info, h("span", { class: "spacer" }), download), dropped, pre, more);
}

export function headersTable(pairs, title) {
  const rows = Array.isArray(pairs) ? pairs : [];
  return h("div", {}, h("div", { class: "card-title" }, title),
    rows.length ? h("table", { class: "kvtable" }, h("tbody", {}, rows.map((p) => h("tr", {},
      h("th", {}, String(Array.isArray(p) ? p[0] : "")), h("td", { class: /redacted/.test(String(p[1])) ? "redacted" : null }, String(Array.isArray(p) ? p[1] : p))))))
      : h("p", { class: "muted" }, "none"));
}
