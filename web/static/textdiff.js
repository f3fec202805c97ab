// Word-level text diff (Myers' O(ND) algorithm) for the two sides of a change, so an edit that
// touches many places in a long system prompt marks exactly those places. Falls back to one
// replaced span (common prefix and suffix kept) when the texts are too large or too different.

const TOKEN_RE = /\s+|[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu;
const MAX_TOKENS = 30000;
const MAX_D = 1200;

function tokens(s) { return s.match(TOKEN_RE) || []; }

function myers(a, b) {
  const n = a.length, m = b.length;
  const offset = MAX_D + 1;
  const v = new Int32Array(2 * MAX_D + 3);
  const trace = [];
  for (let d = 0; d <= MAX_D; d++) {
    trace.push(v.slice(offset - d - 1, offset + d + 2)); // only the diagonals round d can read
    for (let k = -d; k <= d; k += 2) {
      let x = (k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1])) ? v[offset + k + 1] : v[offset + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) { x++; y++; }
      v[offset + k] = x;
      if (x >= n && y >= m) return backtrack(trace, a, b);
    }
  }
  return null;
}

function backtrack(trace, a, b) {
  let x = a.length, y = b.length;
  const ops = [];
  for (let d = trace.length - 1; d >= 0; d--) {
    const slice = trace[d];
    const at = (k) => slice[k + d + 1]; // slice starts at diagonal -d-1
    const k = x - y;
    const prevK = (k === -d || (k !== d && at(k - 1) < at(k + 1))) ? k + 1 : k - 1;
    const prevX = at(prevK), prevY = prevX - prevK;
    while (x > prevX && y > prevY) { ops.push(["=", a[x - 1]]); x--; y--; }
    if (d > 0) { if (x === prevX) ops.push(["+", b[y - 1]]); else ops.push(["-", a[x - 1]]); }
    x = prevX; y = prevY;
  }
  return ops.reverse();
}

function merge(ops) {
  const out = [];
  for (const [op, t] of ops) {
    if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += t;
    else out.push([op, t]);
  }
  return out;
}

// [["=", text], ["-", text], ["+", text], ...] turning `a` into `b`.
export function diffText(a, b) {
  if (a === b) return [["=", a]];
  const ta = tokens(a), tb = tokens(b);
  let p = 0;
  while (p < ta.length && p < tb.length && ta[p] === tb[p]) p++;
  let s = 0;
  while (s < ta.length - p && s < tb.length - p && ta[ta.length - 1 - s] === tb[tb.length - 1 - s]) s++;
  const head = ta.slice(0, p).join(""), tail = ta.slice(ta.length - s).join("");
  const ma = ta.slice(p, ta.length - s), mb = tb.slice(p, tb.length - s);
  let mid = null;
  if (ma.length + mb.length <= MAX_TOKENS) mid = myers(ma, mb);
  if (!mid) mid = [["-", ma.join("")], ["+", mb.join("")]];
  return merge([["=", head], ...mid, ["=", tail]].filter(([, t]) => t));
}
