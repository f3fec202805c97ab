"""The call page of a 4 MB prompt in Debian's chromium at 1024 and 1440 px: the page fetches under
1 MB to show it, a block's text loads when it is opened (and all of it on "show all"), captured
markup stays text, and the break's first difference opens deep inside the folded middle."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ctxscope.inspector.store.queries import open_db

from support.big_calls import big_session
from support.web_fixtures import start_web_daemon

WIDTHS = (1024, 1440)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bigpage")
    _first, second = big_session(tmp, 4_000_000)
    db = open_db(tmp / "captures.db")
    ids = [r["id"] for r in db.query("SELECT id FROM calls ORDER BY seq")]
    db.close()
    web = start_web_daemon(tmp)
    yield web, ids[1], second
    web.stop()


@pytest.fixture(params=WIDTHS)
def wide(request, page):
    page.set_viewport_size({"width": request.param, "height": 900})
    return page


def _fetched(page) -> list:
    """The page's responses, but the live feed (an event stream that never ends)."""
    responses: list = []
    page.on("response", lambda r: None if "/api/events" in r.url else responses.append(r))
    return responses


def test_the_call_page_of_a_4mb_prompt_fetches_under_1mb_and_loads_blocks_when_opened(big, wide):
    web, call_id, second = big
    page = wide
    responses = _fetched(page)
    page.goto(f"{web.url}/#/call/{call_id}")
    expect(page.locator("#app[data-ready='1'] .reqview")).to_be_visible(timeout=30_000)
    expect(page.locator("pre.text[data-remote='1'][data-loaded='head']").first).to_be_attached()  # first screens
    page.wait_for_timeout(500)
    fetched = sum(len(r.body()) for r in responses if r.ok)
    assert fetched < 1_000_000, fetched  # the page, its scripts and the call: was 4 MB of body alone
    fold = page.locator("details.fold[data-range-ptr='/messages']").first
    expect(fold).to_contain_text(f"{len(second['messages']) - 7} more messages")
    fold.locator("summary").first.click()
    fold.locator("details.page").first.locator("summary").click()
    message = page.locator("details.msg[data-ptr='/messages/2']")
    message.locator("summary").first.click()
    text = message.locator("pre.text[data-remote='1']")
    expect(text).to_have_attribute("data-loaded", "head")  # its first screen loaded as it came into view
    text.get_by_role("button", name="show all").click()
    expect(text).to_have_attribute("data-loaded", "all")
    whole = second["messages"][2]["content"][0]["content"]
    assert text.inner_text() == whole  # markup and multi-byte text as text, exactly
    assert page.locator(".reqview script, .reqview img").count() == 0
    assert page.evaluate("window.__pwned") is None
    before = len(responses)
    page.locator("#first-diff-btn").click()  # deep in the folded middle: found, loaded, marked
    changed = page.locator("pre.text[data-changed='1']")
    expect(changed.locator("mark.ins")).to_contain_text("EDITED BY THE CLIENT", timeout=15_000)
    expect(changed).to_contain_text("identical chars")
    assert not [r for r in responses[before:] if "/api/diff" in r.url]  # the call API sent the region


def test_the_diff_page_of_two_4mb_prompts_loads_identical_text_on_demand(big, wide):
    web, call_id, second = big
    page = wide
    responses = _fetched(page)
    page.goto(f"{web.url}/#/diff/{call_id}")
    # two 4 MB bodies walked: about 0.5 s of CPU, longer on a shared, busy machine
    expect(page.locator("#first-diff mark.ins")).to_contain_text("EDITED BY THE CLIENT", timeout=30_000)
    fetched = sum(len(r.body()) for r in responses if r.ok and "/api/" in r.url)
    assert fetched < 256 * 1024, fetched
    head = page.locator("#first-diff button[data-identical='head']").first
    expect(head).to_contain_text("identical chars")
    head.click()
    expect(page.locator("#first-diff button[data-identical='head']")).to_have_count(0)  # under 64 Ki: all loaded
    ptr = page.locator("#first-diff .side-title code.ptr").last.inner_text().strip()
    whole = second["messages"][int(ptr.split("/")[2])]["content"][0]["content"]
    assert page.locator("#first-diff pre.text.side").last.inner_text().startswith(whole[:3000])
    assert page.evaluate("window.__pwned") is None
