"""Tables, timeline, keyboard, usage and first screens in Debian's chromium at 1024 and 1440 px,
against a real daemon fed by the real SDKs: headers sort the rows, a range filters them, the
session page draws one waterfall bar per call with overlapping calls on separate lanes, j/k and
n/p move, "/" searches, the usage page draws its bars per day and per model, the call page's
first screen holds its summary and tabs, every stat card explains itself, and each tab has a title."""

from __future__ import annotations

import json
import threading

import pytest
from playwright.sync_api import expect

from support.web_fixtures import anthropic_client, openai_client, start_web_daemon

WIDTHS = (1024, 1440)
SYSTEM = "You are a careful coding assistant. " * 600
LONG_LABEL = "key-a9933f9c4491-18edb0e2d6c8c90970dba0-and-a-long-automatic-tail-0123456789abcdef"


def _conversation(url, session, turns, *, break_at=None):
    client = anthropic_client(url, session)
    msgs = [{"role": "user", "content": "start"}]
    for i in range(turns):
        system = SYSTEM.replace("careful", "careless") if break_at is not None and i >= break_at else SYSTEM
        r = client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=50,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=msgs,
        )
        msgs = msgs + [{"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"turn {i}"}]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = start_web_daemon(tmp_path_factory.mktemp("tables"))
    _conversation(d.url, "tables-alpha", 4, break_at=2)  # four calls, a break at #3
    openai_client(d.url, "tables-beta").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "one call"}]
    )
    _conversation(d.url, LONG_LABEL, 2)
    # Two calls at once in one session, each held 600 ms by the simulator: they overlap in time.
    d.sim_state().set_script([{"text": "slow one", "delay_ms": 600}, {"text": "slow two", "delay_ms": 600}])
    client = openai_client(d.url, "tables-parallel")

    def ask(text):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": text}])

    threads = [threading.Thread(target=ask, args=(f"parallel {i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ask("after both")
    d.wait_for_calls(4 + 1 + 2 + 3)
    yield d
    d.stop()


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def wpage(request, page):
    page.set_viewport_size({"width": request.param, "height": 768})
    return page


def _session_names(page):
    return page.locator("tr.session-row .session-link").all_inner_texts()


def test_the_sessions_list_sorts_by_a_clicked_header_and_filters_by_a_range(web, wpage):
    wpage.goto(web.url + "/")
    expect(wpage.locator("tr.session-row")).to_have_count(4)
    calls = wpage.locator("th.sortable", has_text="calls").locator("button")
    calls.click()  # numbers: the biggest first
    names = _session_names(wpage)
    assert names[0] == "tables-alpha" and names[-1] == "tables-beta", names
    expect(wpage.locator("th.sortable[aria-sort='descending']")).to_have_text("calls ▼")
    calls.click()
    assert _session_names(wpage)[0] == "tables-beta"
    wpage.locator("th.sortable", has_text="session").locator("button").click()
    assert _session_names(wpage) == sorted(_session_names(wpage), key=str.lower)
    wpage.get_by_label("range column").select_option(label="calls")
    wpage.get_by_label("range minimum").fill("3")
    expect(wpage.locator("tr.session-row")).to_have_count(2)  # alpha (4) and parallel (3)
    wpage.get_by_label("range maximum").fill("3")
    assert _session_names(wpage) == ["tables-parallel"]


def test_titles_show_in_the_list_and_long_names_keep_to_one_line(web, wpage):
    hostile = '<img src=x onerror="window.__pwned=1"> Fix the flaky login test'

    def with_titles(route):  # the sessions API's ``title`` (the first user message), hostile as captured text is
        resp = route.fetch()
        data = resp.json()
        for s in data["sessions"]:
            if s["session"] == "tables-alpha":
                s["title"] = hostile
            if s["session"] == LONG_LABEL:
                s["title"] = None  # a session without a title shows its name
        route.fulfill(response=resp, body=json.dumps(data))

    wpage.route("**/_ctxscope/api/sessions*", with_titles)
    wpage.goto(web.url + "/")
    link = wpage.locator("tr.session-row[data-session='tables-alpha'] .session-link")
    expect(link).to_have_text(hostile)  # text, never markup
    assert "tables-alpha" in link.get_attribute("title")
    long = wpage.locator(f"tr.session-row[data-session='{LONG_LABEL}'] .session-link")
    expect(long).to_be_visible()
    line = long.evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || 18")
    assert long.bounding_box()["height"] <= line * 1.5  # one line, cut with an ellipsis
    assert long.evaluate("e => e.scrollWidth > e.clientWidth")  # it is cut, the whole name in the tooltip
    box = wpage.locator("table.sessions").evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
    assert box[0] <= box[1] + 1, box  # the table fits: no sideways scrolling
    assert wpage.evaluate("window.__pwned") is None


def test_the_session_page_draws_one_waterfall_bar_per_call_with_overlaps_on_lanes(web, wpage):
    wpage.goto(web.url + "/#/session/tables-parallel")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row")).to_have_count(3)
    bars = wpage.locator("#waterfall svg.waterfall rect.wf-bar")
    expect(bars).to_have_count(3)
    ys = sorted(float(y) for y in bars.evaluate_all("els => els.map((e) => e.getAttribute('y'))"))
    assert ys[0] < ys[-1], ys  # the two calls sent at once lie on two lanes
    expect(wpage.locator("#waterfall")).to_contain_text("at most 2 calls at once")
    # The two parallel calls start in the same millisecond, so either may be drawn first.
    first = wpage.locator("#waterfall rect.wf-bar[data-seq='1'] title").text_content()
    assert first.startswith("#1 · starts") and "latency" in first
    title = wpage.locator("h1.session-title").text_content()  # its first user message
    assert title and wpage.evaluate("document.title") == f"{title} · ctxscope"
    # The context chart has an x axis of call numbers.
    assert wpage.locator(".chart text.x-tick").all_text_contents()[0] == "#1"
    wpage.locator("#waterfall rect.wf-bar[data-seq='3']").click()
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text("Call #3")


def test_the_calls_table_sorts_and_filters_by_latency(web, wpage):
    wpage.goto(web.url + "/#/session/tables-parallel")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row")).to_have_count(3)
    wpage.locator("th.sortable", has_text="latency").locator("button").click()
    seqs = wpage.locator("tr.call-row").evaluate_all("rs => rs.map((r) => Number(r.dataset.seq))")
    assert seqs[-1] == 3, seqs  # the quick one after the two held 600 ms comes last
    wpage.get_by_label("range column").select_option(label="latency")
    wpage.get_by_label("range minimum").fill("0.5s")
    expect(wpage.locator("tr.call-row")).to_have_count(2)


def test_keys_move_between_calls_and_breaks_and_slash_searches(web, wpage):
    wpage.goto(web.url + "/#/session/tables-alpha")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row")).to_have_count(4)
    selected = wpage.locator("tr.call-row.selected")
    wpage.keyboard.press("j")
    expect(selected).to_have_attribute("data-seq", "1")
    wpage.keyboard.press("j")
    wpage.keyboard.press("j")
    expect(selected).to_have_attribute("data-seq", "3")
    wpage.keyboard.press("k")
    expect(selected).to_have_attribute("data-seq", "2")
    wpage.keyboard.press("n")  # the next break: #3 changed its system prompt
    expect(selected).to_have_attribute("data-seq", "3")
    wpage.keyboard.press("Enter")
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text("Call #3")
    wpage.keyboard.press("j")  # on a call: the next call
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text("Call #4")
    wpage.keyboard.press("/")
    assert wpage.evaluate("document.activeElement.id") == "search-q"
    wpage.keyboard.type("j")  # typing in a field is never taken as a key
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text("Call #4")


def test_the_usage_page_draws_bars_per_day_and_per_model_with_their_sessions(web, wpage):
    wpage.goto(web.url + "/")
    wpage.locator(".topbar a", has_text="usage").click()
    days = wpage.locator("#app[data-ready='1'] #usage-days .bar-row")
    # one bar per UTC day the module's calls were made on (two when the module ran across midnight)
    expect(days).to_have_count(len({row["started_at"][:10] for row in web.wait_for_calls(10)}))
    models = wpage.locator("#usage-models .bar-row")
    expect(models).to_have_count(2)
    assert set(models.evaluate_all("rs => rs.map((r) => r.dataset.key)")) == {"claude-sonnet-4-6", "gpt-4o"}
    for row in models.all():  # each bar has a width: tokens split into read, write, uncached, output
        assert row.locator(".bar-track").evaluate(
            "t => [...t.children].some((s) => s.getBoundingClientRect().width > 1)"
        )
    wpage.get_by_label("metric").select_option("cost")
    expect(models.first.locator(".bar-value")).to_contain_text("$")
    models.filter(has_text="gpt-4o").click()
    behind = wpage.locator("#usage-sessions .session-link")
    assert sorted(behind.all_inner_texts()) == ["tables-beta", "tables-parallel"]
    assert wpage.evaluate("document.title") == "usage · ctxscope"


def test_the_call_page_opens_on_its_summary_and_the_first_difference_is_one_key_away(web, wpage):
    calls = web.wait_for_calls(4, session="tables-alpha")
    brk = calls[2]
    assert brk["relation"] == "DIVERGED"
    wpage.goto(f"{web.url}/#/call/{brk['id']}")
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text("Call #3")
    height = wpage.viewport_size["height"]
    for what in (".card:has-text('Exchange')", ".card:has-text('Prefix and cache')", ".tabs"):
        box = wpage.locator(what).first.bounding_box()
        assert box["y"] >= 0 and box["y"] + min(box["height"], 60) <= height, (what, box, height)
    assert wpage.evaluate("window.scrollY") == 0
    expect(wpage.locator(".revealed")).to_have_count(0)
    assert wpage.evaluate("document.title") == "call #3 · tables-alpha · ctxscope"
    wpage.keyboard.press("f")
    expect(wpage.locator(".reqview .revealed")).to_have_count(1)
    changed = wpage.locator(".reqview pre.text[data-changed='1']")
    expect(changed.locator("mark.ins").first).to_have_text("careless")
    assert "careful" in changed.locator(".del-caret").first.get_attribute("title")


def test_every_stat_card_explains_itself(web, wpage):
    wpage.goto(web.url + "/#/session/tables-alpha")
    expect(wpage.locator("#app[data-ready='1'] tr.call-row")).to_have_count(4)
    cards = wpage.locator(".stats .stat")
    assert cards.count() >= 8
    titles = dict(
        zip(cards.locator(".stat-l").all_inner_texts(), cards.evaluate_all("cs => cs.map((c) => c.title)"), strict=True)
    )
    assert all(len(t) > 20 for t in titles.values()), titles
    assert "calls" in titles["HIT RATE"].lower() and "tokens" in titles["CACHED INPUT"].lower()
    assert "session" in titles["GROUPED BY"]


def test_the_diff_says_which_side_is_which_in_words(web, wpage):
    calls = web.wait_for_calls(4, session="tables-alpha")
    wpage.goto(f"{web.url}/#/diff/{calls[2]['id']}")
    expect(wpage.locator("#app[data-ready='1'] h1")).to_have_text("Diff · call #3 against its predecessor #2")
    expect(wpage.locator("#open-older")).to_have_text("open its predecessor (#2)")
    expect(wpage.locator("#open-newer")).to_have_text("open this call (#3)")
    expect(wpage.locator(".side-title").first).to_contain_text("before: its predecessor #2")


def test_search_hits_sit_in_a_table_like_the_others_and_pointers_wrap_only_after_a_slash(web, wpage):
    wpage.goto(web.url + "/#/search?q=turn")
    hits = wpage.locator("#app[data-ready='1'] .card table.grid.search-hits tr.search-hit")
    expect(hits.first).to_be_visible()
    assert wpage.evaluate("document.title") == "search “turn” · ctxscope"
    ptr = hits.first.locator("code.ptr")
    # squeezed into 70 px, "/messages/2/content" breaks onto several lines, each piece whole
    pieces = ptr.evaluate(
        """p => { p.style.display = "inline-block"; p.style.width = "70px";
           const lines = Math.round(p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight));
           const texts = [...p.childNodes].filter((n) => n.nodeType === 3 && n.data.trim() && n.data !== "/");
           return [lines, texts.map((n) => { const r = document.createRange(); r.selectNodeContents(n);
             return [n.data, r.getClientRects().length]; })]; }"""
    )
    lines, words = pieces
    assert lines >= 2, pieces
    assert words and all(n == 1 for _, n in words), words  # no "mess" + "ages"


def test_search_hits_and_a_bars_sessions_sort_by_their_headers(web, wpage):
    wpage.goto(web.url + "/#/search?q=turn")
    expect(wpage.locator("#app[data-ready='1'] tr.search-hit").first).to_be_visible()
    wpage.locator("th.sortable", has_text="session").locator("button").click()
    names = wpage.locator("tr.search-hit .session-link").all_inner_texts()
    assert names == sorted(names, key=str.lower) and len(set(names)) > 1, names
    wpage.goto(web.url + "/#/usage")
    wpage.locator("#app[data-ready='1'] #usage-days .bar-row").first.click()
    wpage.locator("#usage-sessions th.sortable", has_text="calls").locator("button").click()
    rows = wpage.locator("#usage-sessions tbody tr")
    calls = [
        int(t)
        for t in rows.locator("td.num").evaluate_all("tds => tds.filter((_, i) => i % 3 === 0).map((t) => t.innerText)")
    ]
    assert calls == sorted(calls, reverse=True) and len(calls) == 4, calls
