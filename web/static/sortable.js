// Tables that sort by any column and filter by a range of one of them. A page describes its
// columns ({key, label, value(row), num?, cls?, title?}); this module keeps the sort and range
// state and builds the header cells and the range control. Rows stay the page's: sorting and
// filtering work on its data, never on the DOM. A missing value (null) sorts last either way.

import { h } from "./dom.js";

export function sortState(key, dir) {
  return { key: key || null, dir: dir === "desc" ? "desc" : "asc", range: { key: "", min: "", max: "" } };
}

function compare(a, b) {
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), "en", { numeric: true, sensitivity: "base" });
}

// The rows in the state's order (a copy); ``group`` rows (a session's threads) are not separate.
export function sortRows(rows, columns, state) {
  const col = columns.find((c) => c.key === state.key);
  if (!col) return rows.slice();
  const sign = state.dir === "desc" ? -1 : 1;
  const keyed = rows.map((r, i) => [col.value(r), i, r]);
  keyed.sort((x, y) => {
    const a = x[0], b = y[0];
    const na = a == null || a === "", nb = b == null || b === "";
    if (na || nb) return na && nb ? x[1] - y[1] : na ? 1 : -1;
    return sign * compare(a, b) || x[1] - y[1];
  });
  return keyed.map((k) => k[2]);
}

// A header cell that sorts by its column: first click ascending (numbers: descending, the big
// ones first), the next one reverses. ``aria-sort`` says the order to assistive technology.
export function headerCell(col, state, onchange) {
  const on = state.key === col.key;
  const arrow = on ? (state.dir === "asc" ? " ▲" : " ▼") : "";
  return h("th", {
    class: [col.num ? "num" : "", "sortable", on ? "sorted" : "", col.cls || ""].filter(Boolean).join(" "),
    title: (col.title ? col.title + "\n" : "") + "click to sort by " + col.label,
    "aria-sort": on ? (state.dir === "asc" ? "ascending" : "descending") : "none",
    dataset: { key: col.key },
  }, h("button", { type: "button", class: "sort-btn", onclick: () => {
    if (state.key === col.key) state.dir = state.dir === "asc" ? "desc" : "asc";
    else { state.key = col.key; state.dir = col.num ? "desc" : "asc"; }
    onchange();
  } }, col.label, col.sub ? [h("br"), h("span", { class: "sub" }, col.sub)] : null, h("span", { class: "arrow" }, arrow)));
}

// Whether the row's value of the range's column lies within [min, max] (either may be empty).
// ``col.parse`` turns what was typed into the column's unit (e.g. "2s" into milliseconds).
export function inRange(row, columns, range) {
  const col = columns.find((c) => c.key === range.key);
  if (!col) return true;
  const parse = col.parse || Number;
  const lo = range.min === "" ? null : parse(range.min);
  const hi = range.max === "" ? null : parse(range.max);
  if ((lo == null || Number.isNaN(lo)) && (hi == null || Number.isNaN(hi))) return true;
  const v = col.value(row);
  if (v == null || v === "") return false;
  if (lo != null && !Number.isNaN(lo) && v < lo) return false;
  if (hi != null && !Number.isNaN(hi) && v > hi) return false;
  return true;
}

// The range control: a column (those marked ``range``) and a minimum and a maximum.
export function rangeControl(columns, state, onchange) {
  const ranged = columns.filter((c) => c.range);
  const min = h("input", { type: "text", class: "range-in", placeholder: "min", "aria-label": "range minimum", value: state.range.min,
    oninput: () => { state.range.min = min.value.trim(); onchange(); } });
  const max = h("input", { type: "text", class: "range-in", placeholder: "max", "aria-label": "range maximum", value: state.range.max,
    oninput: () => { state.range.max = max.value.trim(); onchange(); } });
  const pick = h("select", { "aria-label": "range column", onchange: () => { state.range.key = pick.value; hint(); onchange(); } },
    h("option", { value: "" }, "range: none"),
    ranged.map((c) => h("option", { value: c.key, selected: c.key === state.range.key ? true : null }, c.label)));
  const unit = h("span", { class: "muted small" });
  const hint = () => {
    const col = ranged.find((c) => c.key === pick.value);
    unit.textContent = col && col.unit ? col.unit : "";
    min.disabled = max.disabled = !col;
  };
  hint();
  return h("span", { class: "range", title: "show only the rows whose value lies between min and max" }, pick, min, "–", max, unit);
}

// A duration typed as "1500", "1500ms", "2s" or "1.5 s", in milliseconds.
export function parseMs(text) {
  const m = /^\s*([0-9.]+)\s*(ms|s|m)?\s*$/i.exec(String(text));
  if (!m) return NaN;
  const n = Number(m[1]);
  const u = (m[2] || "ms").toLowerCase();
  return u === "s" ? n * 1000 : u === "m" ? n * 60000 : n;
}

// A token count typed as "1200", "12k" or "1.5M".
export function parseCount(text) {
  const m = /^\s*([0-9.]+)\s*([kKmM])?\s*$/.exec(String(text));
  if (!m) return NaN;
  const n = Number(m[1]);
  return m[2] ? n * (m[2].toLowerCase() === "k" ? 1e3 : 1e6) : n;
}

// A cost typed as "0.5" or "$0.5".
export function parseUsd(text) {
  return Number(String(text).replace(/^\s*\$/, ""));
}
