// Copy as cURL on the call page: the command comes from the API (the body byte for byte, the key
// as an environment variable); it is shown as text and put on the clipboard when the page may.

import { h, mount } from "./dom.js";
import { getJSON, rawUrl } from "./api.js";

export function curlButton(call) {
  const box = h("div", { class: "card curl-box", hidden: true });
  const viaDaemon = h("input", { type: "checkbox", id: "curl-via" });
  let asked = 0; // the latest request: an answer to an earlier one (the box was ticked since) is dropped
  const load = async () => {
    const mine = ++asked;
    let d;
    try { d = await getJSON("/curl", { id: call.id, via: viaDaemon.checked ? "daemon" : null }); }
    catch (e) {
      if (mine === asked) { mount(box, h("p", { class: "error" }, "Could not build the command: " + e.message)); box.hidden = false; }
      return;
    }
    if (mine !== asked) return;
    let copied = "";
    try { await navigator.clipboard.writeText(d.command); copied = " (copied)"; } catch (e) { copied = ""; }
    mount(box,
      h("div", { class: "card-title" }, "curl command" + copied, " ",
        h("label", { class: "muted small" }, viaDaemon, " through ctxscope (records the answer)")),
      h("div", { class: "muted small" }, `Needs $${d.key_env} in the environment.`,
        d.masked ? " Key-like values in the body are masked." : "",
        d.body_file ? [" The body is read from ", h("code", {}, d.body_file), ": ",
          h("a", { href: rawUrl(call.id, "request", "wire", false), download: d.body_file, id: "curl-body" }, "download it"), " next to where you run it."] : ""),
      h("pre", { id: "curl-command", class: "curl-command" }, d.command));
    box.hidden = false;
  };
  viaDaemon.addEventListener("change", load);
  const button = h("button", { type: "button", class: "btn", id: "curl-button", onclick: load }, "copy as cURL");
  return { button, box };
}
