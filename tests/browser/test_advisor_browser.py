"""Findings and the cache advisor in the web UI: the panel, the badges and the advisor page in a real
headless browser, against a real daemon fed by the real Anthropic SDK and the simulator."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect

from support.web_fixtures import anthropic_client, start_web_daemon

RULES = "Follow the house rules carefully. " * 500
TOOLS = [
    {"name": n, "description": f"The {n} tool. " * 40, "input_schema": {"type": "object", "properties": {}}}
    for n in ("write_file", "web_search")
]
HOSTILE = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = start_web_daemon(tmp_path_factory.mktemp("advisorui"))
    yield d
    d.stop()


def _churning_session(web, session: str, turns: int = 3) -> None:
    """A system prompt whose first block carries a clock (and captured text that looks like HTML)
    before the cached rules, two tools that are never called."""
    client = anthropic_client(web.url, session)
    web.sim_state().set_script([{"text": f"answer {i}"} for i in range(turns)])
    msgs: list = [{"role": "user", "content": "start"}]
    for i in range(turns):
        system = [
            {"type": "text", "text": f"{HOSTILE} Now: 2026-12-01T10:0{i}:00Z"},
            {"type": "text", "text": RULES, "cache_control": {"type": "ephemeral"}},
        ]
        r = client.messages.create(model="claude-sonnet-4-6", max_tokens=50, system=system, tools=TOOLS, messages=msgs)
        msgs = [*msgs, {"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"go on {i}"}]
    client.close()


def _get(web, path):
    with urllib.request.urlopen(web.url + path, timeout=30) as resp:
        return json.loads(resp.read())


def test_the_session_page_shows_findings_with_badges_and_links_to_the_advisor(web, page):
    _churning_session(web, "adv")
    rows = web.wait_for_calls(3, session="adv")

    data = _get(web, "/_ctxscope/api/findings?s=adv")
    kinds = {f["kind"] for f in data["findings"]}
    assert {"cache_churn", "unused_tools"} <= kinds
    churn = next(f for f in data["findings"] if f["kind"] == "cache_churn")
    assert churn["evidence"]["pointer"] == "/system/0" and churn["evidence"]["call"] == rows[1]["id"]

    page.goto(web.url + "/#/session/adv")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(3)
    items = page.locator(".findings .finding-item")
    expect(items).to_have_count(len(data["findings"]))
    churn_item = page.locator(".finding-item[data-kind='cache_churn']")
    expect(churn_item.locator("a.evidence code.ptr")).to_have_text("/system/0")
    expect(churn_item.locator(".churn")).to_contain_text("10:00")
    unused = page.locator(".finding-item[data-kind='unused_tools']")
    expect(unused).to_have_count(1)  # one cause, one finding, listing both tools
    expect(unused.locator(".tools a.tool code")).to_have_text(["web_search", "write_file"])
    # the calls the churn concerns carry its badge; the first call (nothing changed yet) carries none of it
    expect(page.locator("tr.call-row").nth(1).locator(".chip.f-cache_churn")).to_have_count(1)
    expect(page.locator("tr.call-row").nth(0).locator(".chip.f-cache_churn")).to_have_count(0)
    expect(page.locator("tr.call-row").nth(0).locator(".chip.f-unused_tools")).to_have_count(1)
    assert page.evaluate("window.__pwned") is None  # captured text shown as text, never run

    page.locator("a.advisor-link").click()
    expect(page.locator("#app[data-ready='1'] table.advisor tr.alt")).to_have_count(4)
    expect(page.locator("tr.alt.best")).to_have_count(1)
    advice = _get(web, "/_ctxscope/api/advice?s=adv")["advice"]
    expect(page.locator("p.advice")).to_have_text(advice["advice"])
    expect(page.locator(f"tr.alt[data-name='{advice['best']}']")).to_have_class("alt best")
    # every alternative explained in the legend; every advice listed with its cause, top first
    expect(page.locator("dl.legend dt")).to_have_count(len(advice["alternatives"]))
    expect(page.locator("dl.legend dd").first).to_have_text(advice["alternatives"][0]["explanation"])
    expect(page.locator("li.cause-advice")).to_have_count(len(advice["advices"]))
    assert advice["advices"], advice
    expect(page.locator("li.cause-advice").first).to_have_attribute("data-cause", advice["top"]["cause"])
    assert page.problems == []


def test_an_unknown_session_is_a_404(web):
    for path in ("/_ctxscope/api/findings?s=nope", "/_ctxscope/api/advice?s=nope"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(web.url + path, timeout=10)
        assert err.value.code == 404
        err.value.close()


def test_every_lost_figure_says_how_it_is_priced(web, page):
    """The sessions list, the session page and the call page show the one loss figure with the one
    sentence that says how it is priced (served by the API from analyses/cache/loss.py)."""
    from ctxscope.inspector.analyses.cache.loss import LOSS_PRICING

    client = anthropic_client(web.url, "lossui")
    web.sim_state().set_script([{"text": f"ok {i}"} for i in range(3)])
    rules = "Keep every answer short and exact. " * 400
    msgs: list = [{"role": "user", "content": "begin"}]
    for i in range(3):
        system = [
            {"type": "text", "text": rules + (" Be terse." if i == 2 else ""), "cache_control": {"type": "ephemeral"}}
        ]
        r = client.messages.create(model="claude-sonnet-4-6", max_tokens=50, system=system, messages=msgs)
        msgs = [*msgs, {"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"next {i}"}]
    client.close()
    rows = web.wait_for_calls(3, session="lossui")
    row = next(s for s in _get(web, "/_ctxscope/api/sessions")["sessions"] if s["session"] == "lossui")
    assert row["lost_tokens"] > 1000 and row["lost_usd"] > 0 and row["cost_usd"] > 0

    page.goto(web.url + "/#/")
    cell = page.locator("tr.session-row[data-session='lossui'] td.warn")
    expect(cell).to_have_count(1)
    title = cell.get_attribute("title") or ""
    assert title.endswith(": " + LOSS_PRICING) and f"{row['lost_tokens']:,} tokens lost to breaks" in title

    page.goto(web.url + "/#/session/lossui")
    expect(page.locator(f".stat[title='{LOSS_PRICING}']")).to_contain_text("lost to breaks")

    brk = next(r for r in rows if r["cache_verdict"] == "client_break")
    page.goto(web.url + "/#/call/" + brk["id"])
    expect(page.locator(f"span[title='{LOSS_PRICING}']")).to_contain_text("tokens")
    assert page.problems == []
