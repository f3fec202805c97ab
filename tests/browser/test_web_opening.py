"""Where a long session opens (Debian's chromium via Playwright): a quiet 300-call session with one
break opens on the page holding that break, not on its latest page; an ``offset`` in the URL still
wins, "latest" still goes to the latest page, and a session with a new call opens on its latest page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from support.factories import T0, analysed, anthropic_request, anthropic_response, make_exchange
from support.web_fixtures import anthropic_client, start_web_daemon

SESSION, CALLS, BREAK = "story", 300, 152
SYSTEM = "You are a careful assistant who reads the repository before answering. " * 120


def _story() -> list:
    """300 calls of one growing conversation, long ago; call #152 edits the cached system prompt."""
    exchanges, messages = [], []
    for n in range(1, CALLS + 1):
        messages = [*messages, {"role": "user", "content": f"step {n}"}]
        text = SYSTEM if n < BREAK else SYSTEM + " Today is a new day."
        system = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
        written = 1800 + 10 * n
        usage = (
            {
                "input_tokens": 20,
                "output_tokens": 3,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": written,
            }
            if n in (1, BREAK)
            else {
                "input_tokens": 20,
                "output_tokens": 3,
                "cache_read_input_tokens": written - 10,
                "cache_creation_input_tokens": 10,
            }
        )
        exchanges.append(
            make_exchange(
                request=anthropic_request(messages, system=system),
                response=anthropic_response(f"done {n}", usage),
                session_label=SESSION,
                started_at=T0 + n,
            )
        )
        messages = [*messages, {"role": "assistant", "content": f"done {n}"}]
    return exchanges


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("opening")
    db, _ = analysed(tmp / "captures.db", _story())
    rows = list(db.query("SELECT id, seq FROM calls WHERE session = ? AND cache_verdict = 'client_break'", [SESSION]))
    db.conn.close()
    assert [r["seq"] for r in rows] == [BREAK]  # the store holds the one break the test is about
    d = start_web_daemon(tmp)
    yield d, rows[0]["id"]
    d.stop()


def _pager(page):
    return page.locator("#app[data-ready='1'] .pager span")


def test_a_quiet_session_opens_on_the_page_of_its_last_break(web, page):
    d, break_id = web
    page.goto(f"{d.url}/#/session/{SESSION}")
    expect(_pager(page)).to_contain_text("calls 101–200 of 300")
    expect(page.locator(f"tr.call-row[data-id='{break_id}']")).to_be_visible()
    page.get_by_role("button", name="latest »").click()
    expect(_pager(page)).to_contain_text("calls 201–300 of 300")
    expect(page.locator(f"tr.call-row[data-id='{break_id}']")).to_have_count(0)


def test_an_offset_in_the_url_wins(web, page):
    d, _ = web
    page.goto(f"{d.url}/#/session/{SESSION}?offset=200")
    expect(_pager(page)).to_contain_text("calls 201–300 of 300")
    page.goto(f"{d.url}/#/session/{SESSION}?offset=0")
    expect(_pager(page)).to_contain_text("calls 1–100 of 300")


def test_a_live_session_opens_on_its_latest_page(web, page):
    """Runs last: a new call makes the session live (a call in the last minute)."""
    d, _ = web
    client = anthropic_client(d.url, SESSION)
    client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "more"}])
    d.wait_for_calls(CALLS + 1, session=SESSION)
    page.goto(f"{d.url}/#/session/{SESSION}")
    expect(_pager(page)).to_contain_text("calls 301–301 of 301")
