// ctxscope UI: hash router, breadcrumbs, live updates (Server-Sent Events) and store status.

import { h, mount, fmtInt } from "./dom.js";
import { API } from "./api.js";
import { loadVocabulary } from "./vocab.js";
import { renderSessions } from "./sessions.js";
import { renderSession } from "./session.js";
import { renderCall } from "./call.js";
import { renderDiff } from "./diff.js";
import { renderSearch, bindSearchBox } from "./search.js";
import { renderAdvice } from "./findings.js";
import { renderUsage } from "./usage.js";
import { renderTranscript } from "./transcript.js";
import { bindKeys } from "./keys.js";

const app = document.getElementById("app");
const crumbsEl = document.getElementById("crumbs");
let current = null; // the view on screen: { onCalls?, dispose? }

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  return { parts, params: new URLSearchParams(query || "") };
}

function setCrumbs(items) {
  mount(crumbsEl, ...items.flatMap((it, i) => [
    i ? h("span", { class: "sep" }, "/") : null,
    it.href ? h("a", { href: it.href }, it.label) : h("span", { class: "here" }, it.label),
  ]));
}

// The tab's title: the page and what it shows (a session's title when it has one), then the app.
function setTitle(...parts) {
  document.title = [...parts.filter(Boolean).map(String), "ctxscope"].join(" · ");
}

const ctx = { setCrumbs, setTitle, navigate: (hash) => { location.hash = hash; } };

function route() {
  if (current && current.dispose) current.dispose();
  current = null;
  setCrumbs([{ label: "sessions", href: "#/" }]);  // each view sets its own; a view that fails keeps this one
  setTitle();
  const { parts, params } = parseHash();
  window.scrollTo(0, 0);
  try {
    if (parts[0] === "session" && parts[1]) current = renderSession(app, parts[1], params, ctx);
    else if (parts[0] === "call" && parts[1]) current = renderCall(app, parts[1], params, ctx);
    else if (parts[0] === "diff" && parts[1]) current = renderDiff(app, parts[1], parts[2] || null, ctx);
    else if (parts[0] === "search") current = renderSearch(app, params, ctx);
    else if (parts[0] === "advice" && parts[1]) current = renderAdvice(app, parts[1], params, ctx);
    else if (parts[0] === "usage") current = renderUsage(app, params, ctx);
    else if (parts[0] === "transcript" && parts[1]) current = renderTranscript(app, parts[1], params, ctx);
    else current = renderSessions(app, params, ctx);
  } catch (e) {
    setCrumbs([{ label: "sessions", href: "#/" }, { label: "error" }]);  // never the previous page's trail
    mount(app, h("p", { class: "error pad" }, "Error: " + e.message));
  }
}

// -- live updates ----------------------------------------------------------------------------

const liveEl = document.getElementById("live");
const statusEl = document.getElementById("store-status");

function showStatus(s) {
  if (!s) { statusEl.hidden = true; return; }
  const failures = s.failures || 0;
  statusEl.hidden = false;
  const down = s.store_down_since || !s.running;
  statusEl.className = "store-status" + (failures || down ? " bad" : "");
  const waiting = s.queued ? ` · ${fmtInt(s.queued)} waiting` : "";
  statusEl.textContent = down
    ? `⚠ capture not storing${waiting}`
    : failures
    ? `⚠ ${fmtInt(failures)} capture failure${failures > 1 ? "s" : ""}`
    : `${fmtInt(s.written)} stored${waiting}`;
  statusEl.title = down || failures
    ? (down ? `capture store unavailable since ${s.store_down_since || "start"}; ` : "") +
      `store failures ${s.store_failures || 0}, failed ${s.failed}, dropped ${s.dropped}` +
      (s.dropped_spool_full ? ` (${s.dropped_spool_full} because the spool was full: its disk, or max_spool_bytes)` : "") +
      (s.last_error ? ` — last: ${s.last_error}` : "")
    : `capture writer: ${s.written} calls stored since start; ${s.queued} captured calls wait to be ` +
      "stored (kept safe in a spool file while traffic flows, stored in the next pause)";
}

function connectLive() {
  if (!window.EventSource) return;
  const es = new EventSource(API + "/events");
  es.addEventListener("open", () => { liveEl.className = "live on"; liveEl.title = "live updates: connected"; });
  es.addEventListener("error", () => { liveEl.className = "live off"; liveEl.title = "live updates: reconnecting"; });
  es.addEventListener("calls", (ev) => {
    let rows = [];
    try { rows = JSON.parse(ev.data); } catch (e) { return; }
    if (current && current.onCalls) current.onCalls(rows);
  });
  es.addEventListener("resync", () => { if (current && current.onCalls) current.onCalls(null); });
  es.addEventListener("status", (ev) => { try { showStatus(JSON.parse(ev.data)); } catch (e) { /* ignore */ } });
}

// The views list and compare the vocabulary's words, so it is read before the first view renders.
loadVocabulary().then(() => {
  window.addEventListener("hashchange", route);
  bindSearchBox(ctx);
  bindKeys(() => current);
  route();
  connectLive();
}, (e) => mount(app, h("p", { class: "error pad" }, "Error: the vocabulary could not be read: " + e.message)));
