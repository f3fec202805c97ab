"""The transcript page on the demo session in Debian's chromium at 1024 and 1440 px: every turn of
/api/sessions/<id>/transcript in order, tool calls and results named, compactions marked, each
turn's pointer opening the call at that place, and the tab titled after the session."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect

WIDTHS = (1024, 1440)


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def wpage(request, page):
    page.set_viewport_size({"width": request.param, "height": 768})
    return page


def test_the_transcript_page_lists_every_turn_of_the_api_in_order(demo_daemon, wpage):
    url, result, _calls = demo_daemon
    with urllib.request.urlopen(f"{url}/_ctxscope/api/sessions/{result.session}/transcript", timeout=30) as resp:
        data = json.loads(resp.read())
    turns = data["turns"]
    wpage.goto(f"{url}/#/session/{result.session}")
    wpage.locator("#app[data-ready='1'] a.btn", has_text="transcript").click()
    shown = wpage.locator("#app[data-ready='1'] .turn")
    expect(shown).to_have_count(len(turns))
    assert shown.evaluate_all("ts => ts.map((t) => [t.dataset.role, t.dataset.kind])") == [
        [t["role"], t["kind"]] for t in turns
    ]
    kinds = {t["kind"] for t in turns}
    assert {"tool_call", "tool_result", "compaction"} <= kinds, kinds
    first_tool = next(i for i, t in enumerate(turns) if t["kind"] == "tool_call")
    expect(shown.nth(first_tool).locator(".turn-head code").first).to_have_text(turns[first_tool]["tool_name"])
    title = data.get("title") or result.session
    assert wpage.evaluate("document.title") == f"transcript · {title} · ctxscope"
    last_user = max(i for i, t in enumerate(turns) if t["role"] == "user" and t.get("source", "request") == "request")
    shown.nth(last_user).locator("a.ptr").click()
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text(f"Call #{data['seq']}")
    expect(wpage.locator(".reqview .revealed")).to_have_count(1)
