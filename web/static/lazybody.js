// Where a body's contents come from once the page has its outline: the call API sends the
// structure with long texts cut to previews (``texts``) and the middle of long lists left out
// (``folds``); this fetches one node by JSON pointer when the page opens it (/api/node, a page of
// at most 64 Ki characters or 100 items a request).

import { getJSON } from "./api.js";

const PAGE_CHARS = 65536;
export const PAGE_ITEMS = 100;

export function bodySource(callId, kind, outline) {
  const o = outline || {};
  const src = {
    callId, kind,
    texts: { ...(o.texts || {}) },
    folds: { ...(o.folds || {}) },
    sizes: { ...(o.sizes || {}) },
    // The string at ptr, from its first character up to ``upto`` (all of it by default).
    async text(ptr, upto = Infinity) {
      const parts = [];
      let off = 0;
      while (off != null && off < upto) {
        const r = await getJSON("/node", { id: callId, kind, ptr, offset: off, limit: Math.min(PAGE_CHARS, upto - off) });
        if (r.type !== "string") throw new Error("not a text");
        parts.push(r.text);
        off = r.next_offset;
      }
      return parts.join("");
    },
    // Items [from, to) of the list at ptr, as outlines (their own cut texts noted here).
    async items(ptr, from, to) {
      const out = [];
      let at = from;
      while (at < to) {
        const r = await getJSON("/node", { id: callId, kind, ptr, from: at, limit: Math.min(PAGE_ITEMS, to - at) });
        Object.assign(src.texts, r.texts || {});
        Object.assign(src.folds, r.folds || {});
        Object.assign(src.sizes, r.sizes || {});
        out.push(...r.items);
        if (r.to <= at) break;
        at = r.to;
      }
      return out;
    },
    // The value at ptr as the page shows it in full: a whole text, or a container's outline.
    async value(ptr) {
      const r = await getJSON("/node", { id: callId, kind, ptr, limit: PAGE_CHARS });
      if (r.type !== "string") { // a container: its cut texts filled in, up to about 1 MB of them
        let budget = 1 << 20;
        for (const [p, info] of Object.entries(r.texts || {})) {
          if (budget <= 0) { src.texts[p] = info; continue; }
          budget -= info.bytes;
          setAt(r.tree, p.slice(ptr.length), await src.text(p));
        }
        Object.assign(src.folds, r.folds || {});
        return r.tree;
      }
      return r.next_offset == null ? r.text : r.text + (await src.textFrom(ptr, r.next_offset));
    },
    async textFrom(ptr, off) {
      const parts = [];
      while (off != null) {
        const r = await getJSON("/node", { id: callId, kind, ptr, offset: off, limit: PAGE_CHARS });
        parts.push(r.text);
        off = r.next_offset;
      }
      return parts.join("");
    },
  };
  return src;
}

function setAt(tree, rel, value) {
  const parts = rel.split("/").slice(1).map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
  let v = tree;
  for (const t of parts.slice(0, -1)) { if (v == null || typeof v !== "object") return; v = v[t]; }
  if (v && typeof v === "object" && parts.length) v[parts[parts.length - 1]] = value;
}

// The item at index i of a list the server folded: head items, then the tail after the fold.
export function itemAt(items, fold, i) {
  if (!fold) return items[i];
  if (i < fold.from) return items[i];
  if (i >= fold.to) return items[fold.from + (i - fold.to)];
  return undefined;
}
