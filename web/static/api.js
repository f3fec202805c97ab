// The UI's only door to the daemon: JSON reads under /_ctxscope/api, one token-guarded delete.

export const API = "/_ctxscope/api";

export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v != null && v !== "") u.set(k, String(v));
  const s = u.toString();
  return s ? "?" + s : "";
}

export async function getJSON(path, params) {
  const resp = await fetch(API + path + qs(params), { headers: { Accept: "application/json" }, credentials: "same-origin" });
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) throw new Error((data && data.error) || `HTTP ${resp.status}`);
  return data;
}

// The page's token, under the header name the daemon wrote beside it (one spelling: vocab/headers.py).
function tokenHeader() {
  const m = document.querySelector('meta[name="ctxscope-token"]');
  return m ? { [m.getAttribute("data-header")]: m.getAttribute("content") } : {};
}

export async function deleteSession(session) {
  const resp = await fetch(API + "/session" + qs({ s: session }), {
    method: "DELETE", credentials: "same-origin", headers: tokenHeader(),
  });
  const data = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error((data && data.error) || `HTTP ${resp.status}`);
  return data;
}

// A body download: key-like values masked, unless ``exact`` asks for the bytes as sent.
export function rawUrl(id, kind, form, exact) {
  return API + "/raw.bin" + qs({ id, kind, form, exact: exact ? 1 : null });
}

// Re-send a call through the daemon: a write, so it carries the page's token like a delete.
export async function replayCall(id, options) {
  const resp = await fetch(API + "/replay" + qs({ id }), {
    method: "POST", credentials: "same-origin",
    headers: { ...tokenHeader(), "Content-Type": "application/json" },
    body: JSON.stringify(options || {}),
  });
  const data = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error((data && data.error) || `HTTP ${resp.status}`);
  return data;
}
