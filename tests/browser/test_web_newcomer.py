"""The UI a newcomer meets, on the demo's session in Debian's chromium at 1024 and 1440 px: the diff
list names a removed segment by its old pointer and says what the client declared, the filters
speak the table's words, a call's chips show each kind once, the table keeps its last columns,
model names stay on one line, and an error page does not keep the previous page's breadcrumb."""

from __future__ import annotations

import json
import re
from itertools import pairwise

import pytest
from playwright.sync_api import expect

from ctxscope.vocab.kinds import CacheVerdict, RelationKind
from ctxscope.vocab.words import WORDS

WIDTHS = (1024, 1440)


@pytest.fixture(scope="module")
def demo(demo_daemon):
    """The shared demo session (conftest.py)."""
    return demo_daemon


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def wpage(request, page):
    page.set_viewport_size({"width": request.param, "height": 900})
    return page


def _checkpoint_call(calls):
    return next(
        c
        for c in calls
        if c["relation"] == "DIVERGED" and any(m["kind"] == "checkpoint" for m in c.get("markers") or [])
    )


def test_the_diff_list_names_removed_segments_by_their_old_pointer(demo, wpage):
    url, _, calls = demo
    call = _checkpoint_call(calls)
    wpage.goto(f"{url}/#/diff/{call['id']}")
    expect(wpage.locator("#app[data-ready='1'] ol.changes li").first).to_be_visible()
    rows = wpage.locator("ol.changes li").all_inner_texts()
    removed = [r.split(None, 1)[1] for r in rows if r.lower().startswith("removed")]
    assert len(removed) > 3 and len(set(removed)) == len(removed), removed[:6]  # not 46 x "/messages/1"
    note = wpage.locator(".declared-note")
    expect(note).to_contain_text("Declared by the client")
    expect(note).to_contain_text("checkpoint")
    for ptr in wpage.locator("ol.changes li code.ptr").all():  # pointers are never cut short
        assert ptr.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    dels = wpage.locator("mark.del")
    if dels.count():  # removed text is coloured, not struck through
        assert dels.first.evaluate("e => getComputedStyle(e).textDecorationLine") == "none"


def test_filters_speak_the_words_of_the_table(demo, wpage):
    url, result, _ = demo
    wpage.goto(f"{url}/#/session/{result.session}")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row").first).to_be_visible()
    rel = wpage.get_by_label("relation", exact=True).locator("option")
    texts, values = rel.all_inner_texts(), rel.evaluate_all("els => els.map((e) => e.value)")
    assert values[1:] == [k.value for k in RelationKind]
    assert texts[1:] == [WORDS[RelationKind][k] for k in RelationKind]
    cache = wpage.get_by_label("cache", exact=True).locator("option").all_inner_texts()
    assert cache[1:] == [WORDS[CacheVerdict][v] for v in CacheVerdict]
    table_words = set(wpage.locator("td.rel .badge").all_inner_texts())
    assert table_words <= set(texts[1:]), table_words
    expect(wpage.locator("th", has_text="latency")).to_contain_text("first byte")


def test_a_call_shows_each_marker_kind_once(demo, wpage):
    url, result, calls = demo
    wpage.goto(f"{url}/#/session/{result.session}")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row")).to_have_count(result.calls)
    for row in wpage.locator("tr.call-row").all():
        kinds = row.locator("td.markers .chip").evaluate_all("els => els.map((e) => e.dataset.kind)")
        assert len(kinds) == len(set(kinds)), kinds
    repeated = next((c for c in calls if len(c["markers"] or []) != len({m["kind"] for m in c["markers"] or []})), None)
    if repeated is not None:
        row = wpage.locator(f"tr.call-row[data-id='{repeated['id']}']")
        expect(row.locator("td.markers .chip", has_text=re.compile("×\\d")).first).to_be_visible()


def test_the_session_table_keeps_its_last_columns_and_models_stay_on_one_line(demo, wpage):
    url, result, _ = demo
    wpage.goto(f"{url}/#/session/{result.session}")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row").first).to_be_visible()
    status = wpage.locator("table.calls th").last
    expect(status).to_have_text(re.compile("status", re.I))
    # The findings panel loads after the first screen and redraws the table with its badges: measure after.
    expect(wpage.locator(".findings .card-title")).to_contain_text("Findings (")
    box = status.bounding_box()
    assert box["x"] + box["width"] <= wpage.viewport_size["width"], box  # on screen, not cut off to the right
    heights = wpage.locator("table.calls td .model").evaluate_all("els => els.map((e) => e.getClientRects().length)")
    assert heights and max(heights) == 1, heights


def test_an_error_page_drops_the_previous_breadcrumb(demo, wpage):
    url, result, _ = demo
    wpage.goto(f"{url}/#/session/{result.session}")
    expect(wpage.locator("#crumbs")).to_contain_text(result.session)
    wpage.goto(f"{url}/#/call/nope-no-such-call")
    expect(wpage.locator(".error")).to_be_visible()
    expect(wpage.locator("#crumbs")).not_to_contain_text(result.session)
    wpage.problems.clear()  # the failed fetch of the unknown call is logged: it is what this test asks for


def test_the_page_prints_the_words_the_api_serves(demo, page):
    """The badges and the filters read their words from the vocabulary API (the CLI's table): an
    altered word on its way to the page is the word the page prints, so the script keeps no copy."""
    url, result, calls = demo

    def altered(route):
        answer = route.fetch()
        data = answer.json()
        data["words"]["RelationKind"]["APPEND_ONLY"] = "grows"
        data["words"]["CacheVerdict"]["client_break"] = "snap"
        route.fulfill(response=answer, body=json.dumps(data))

    page.route("**/_ctxscope/api/vocabulary", altered)
    page.goto(f"{url}/#/session/{result.session}")
    expect(page.locator("#app[data-ready='1'] tr.call-row").first).to_be_visible()
    rel = page.get_by_label("relation", exact=True).locator("option[value='APPEND_ONLY']")
    expect(rel).to_have_text("grows")
    expect(page.get_by_label("cache", exact=True).locator("option[value='client_break']")).to_have_text("snap")
    shown = set(page.locator("td.rel .badge").all_inner_texts())
    assert "grows" in shown and "append" not in shown, shown
    if any((c.get("cache") or {}).get("verdict") == "client_break" for c in calls):
        expect(page.locator("tr.call-row .badge.v-client_break").first).to_have_text("snap")


def test_the_session_head_links_every_break_and_a_break_call_shows_its_difference_in_one_click(demo, wpage):
    url, result, calls = demo
    breaks = [c for c in calls if c["relation"] == "DIVERGED"]
    wpage.goto(f"{url}/#/session/{result.session}?offset=0")  # a page that need not hold the breaks
    links = wpage.locator("#app[data-ready='1'] .break-links a")
    expect(links).to_have_count(min(len(breaks), 12))
    assert links.all_inner_texts() == [f"#{c['seq']}" for c in breaks][:12]
    brk = breaks[0]
    wpage.goto(f"{url}/#/call/{brk['id']}")
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text(f"Call #{brk['seq']}")
    expect(wpage.locator(".revealed")).to_have_count(0)  # it opens on its summary
    wpage.locator("#first-diff-btn").click()  # the first difference is one click away
    revealed = wpage.locator(".revealed")
    expect(revealed).to_have_count(1)
    assert revealed.evaluate("e => e.dataset.ptr") in {brk["pointer"]} | {
        "/" + "/".join(brk["pointer"].split("/")[1:i]) for i in range(2, brk["pointer"].count("/") + 1)
    }


def test_pages_take_a_unique_prefix_and_list_the_candidates_of_an_ambiguous_one(demo, page):
    url, result, calls = demo
    page.goto(f"{url}/#/session/{result.session[:16]}")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(result.calls)
    ids = sorted(c["id"] for c in calls)
    prefix = next(a[:n] for a, b in pairwise(ids) for n in range(len(a), 0, -1) if b.startswith(a[:n]))
    page.goto(f"{url}/#/call/{prefix}")
    error = page.locator(".error")
    expect(error).to_contain_text(f"call id prefix {prefix!r} matches more than one call")
    expect(error).to_contain_text(next(i for i in ids if i.startswith(prefix)))
    page.problems.clear()  # the refused fetch is logged: it is what this test asks for
