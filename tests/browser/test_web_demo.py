"""The demo session in a real headless browser: every effect marker is on its call in the session
timeline, and clicking it opens the call with the exact text the effect added or replaced."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from ctxscope.demo_script import EXPECTED

from support.demo_fixtures import MARKER_TEXT

# A piece of the text each marker points at in its request (the receipt, the summary, the block ...).
TEXT = {**MARKER_TEXT, "compaction": "Older tool result moved to a file"}  # the first compaction is the archive stage


@pytest.fixture(scope="module")
def demo(demo_daemon):
    """The shared demo session (conftest.py)."""
    url, result, _ = demo_daemon
    return url, result


def test_walk_the_demo_session_and_open_each_marker(demo, page):
    url, result = demo
    assert not result.missing and result.discipline["violations"] == 0
    for kind in EXPECTED:
        page.goto(f"{url}/#/session/{result.session}")
        rows = page.locator("#app[data-ready='1'] tr.call-row")
        expect(rows).to_have_count(result.calls)
        chip = page.locator(f"td.markers button.chip[data-kind='{kind}']").first
        expect(chip).to_be_visible()
        row_seq = chip.locator("xpath=ancestor::tr").locator("td.num a").first.inner_text()
        assert row_seq == f"#{result.found[kind]}", (kind, row_seq)  # the call the demo reported
        chip.click()
        expect(page.locator("h1")).to_have_text(f"Call {row_seq}")
        box = page.locator(f".marker-detail[data-kind='{kind}']")
        expect(box).to_be_visible()
        expect(box.locator("pre.marker-text").first).to_contain_text(TEXT[kind])
        expect(page.locator(".reqview .revealed")).to_have_count(1)  # and the request view opened there


def test_marker_chips_say_declared_or_inferred_and_the_filter_finds_them(demo, page):
    url, result = demo
    page.goto(f"{url}/#/session/{result.session}")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(result.calls)
    guard = page.locator("td.markers button.chip.declared[data-kind='guard_reminder']")
    expect(guard).to_have_count(1)
    assert "declared by the client" in guard.get_attribute("title")
    assert "same_error_family" in guard.get_attribute("title")
    tools = page.locator("td.markers button.chip[data-kind='tools_executed']").first
    assert "inferred from the prompt" in tools.get_attribute("title")
    page.locator("select[aria-label='marker']").select_option("checkpoint")
    expect(page.locator("tr.call-row")).to_have_count(2)  # the automatic checkpoint and the /compact one
