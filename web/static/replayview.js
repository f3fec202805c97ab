// Replay on the call page: re-send the call through the daemon (the key from the daemon's
// environment), then show the original and the replay side by side: cache read, cost.

import { h, mount, fmtInt, fmtCost } from "./dom.js";
import { replayCall } from "./api.js";

const ROWS = [["model", "model"], ["status", "status"], ["cache verdict", "cache_verdict"], ["input", "input", fmtInt],
  ["cache read", "cache_read", fmtInt], ["cache write", "cache_write", fmtInt], ["output", "output", fmtInt], ["cost", "cost_usd", fmtCost]];

export function replayButton(call) {
  const box = h("div", { class: "card replay-box", hidden: true });
  const model = h("input", { type: "text", id: "replay-model", placeholder: "model (default: the same)", title: "replay with another model", size: 24 });
  const run = async () => {
    button.disabled = true;
    mount(box, h("p", { class: "muted" }, "Replaying…"));
    box.hidden = false;
    try {
      const d = await replayCall(call.id, model.value.trim() ? { model: model.value.trim() } : {});
      mount(box,
        h("div", { class: "card-title" }, "Replay ", h("a", { href: "#/call/" + encodeURIComponent(d.replay.id), id: "replay-link" }, d.replay.id),
          " in session ", h("a", { href: "#/session/" + encodeURIComponent(d.session) }, d.session), " · ",
          h("a", { href: "#/diff/" + encodeURIComponent(d.replay.id) + "/" + encodeURIComponent(d.original.id), id: "replay-diff" }, "compare the prompts")),
        h("table", { class: "kvtable replay-compare" },
          h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", { class: "num" }, "original"), h("th", { class: "num" }, "replay"))),
          h("tbody", {}, ROWS.map(([label, key, fmt]) => h("tr", { dataset: { key } }, h("th", {}, label),
            [d.original, d.replay].map((side) => h("td", { class: "num", title: key === "cost_usd" && side.unpriced ? "unpriced: " + side.unpriced : null },
              side[key] == null ? (key === "cost_usd" && side.unpriced ? "unpriced" : "–") : fmt ? fmt(side[key]) : String(side[key]))))))));
    } catch (e) {
      mount(box, h("p", { class: "error" }, "Replay failed: " + e.message));
    } finally {
      button.disabled = false;
    }
  };
  const button = h("button", { type: "button", class: "btn", id: "replay-button", onclick: run,
    title: "re-send this request through ctxscope (the key comes from the daemon's environment)" }, "replay");
  return { controls: [model, button], box };
}
