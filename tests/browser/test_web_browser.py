"""The web UI in a real headless browser (Debian's chromium via Playwright), against a real daemon
whose traffic comes from the real SDKs and the simulator. One browser and one daemon per module;
each test uses its own session labels."""

from __future__ import annotations

import gzip
import json
import urllib.request

import pytest
from playwright.sync_api import expect

from support.inspector_bodies import claude_code_turns
from support.web_fixtures import AnswerLast, anthropic_client, openai_client, start_web_daemon

SYSTEM = "You are a careful coding assistant. " * 600
XSS = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    "javascript:window.__pwned=1",
    '</textarea></pre><svg onload="window.__pwned=1">',
    '"><iframe src="javascript:window.__pwned=1"></iframe>',
]
PAYLOAD = " ".join(XSS)


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = start_web_daemon(tmp_path_factory.mktemp("webui"))
    yield d
    d.stop()


def _conversation(web, session, turns, system=SYSTEM):
    client = anthropic_client(web.url, session)
    msgs = [{"role": "user", "content": "start"}]
    for i in range(turns):
        r = client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=50,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=msgs,
        )
        msgs = msgs + [
            {"role": "assistant", "content": r.content[0].text},
            {"role": "user", "content": f"turn {i} <system-reminder>keep it short</system-reminder>"},
        ]
    return client, msgs


def _wait_session(web, session, n):
    return list(web.wait_for_calls(n, session=session))


def test_sessions_to_session_to_call_to_diff_opens_at_the_first_difference(web, page):
    client, msgs = _conversation(web, "nav", turns=3)
    client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=50,
        messages=msgs,
        system=[
            {"type": "text", "text": SYSTEM.replace("careful", "careless", 1), "cache_control": {"type": "ephemeral"}}
        ],
    )
    rows = _wait_session(web, "nav", 4)

    page.goto(web.url + "/")
    page.get_by_role("link", name="nav", exact=True).click()
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(4)
    last = page.locator("tr.call-row").nth(3)
    expect(last.locator(".rel")).to_contain_text("diverged")
    expect(last.locator(".rel .ptr")).to_have_text("/system/0/text")
    expect(last.locator(".cache")).to_contain_text("break")
    expect(page.locator("tr.call-row").nth(1).locator(".cache")).to_contain_text("hit")
    expect(page.locator(".chart path.s-read")).to_have_count(1)

    last.locator("a", has_text="#4").click()
    expect(page.locator("h1")).to_have_text("Call #4")
    expect(page.locator(".reqview")).to_contain_text("messages")
    # a reminder block in the request is highlighted
    expect(page.locator(".reqview .reminder").first).to_contain_text("<system-reminder>keep it short</system-reminder>")

    page.locator("#diff-link").click()
    detail = page.locator(".change-detail")
    expect(detail).to_contain_text("first difference")
    expect(detail.locator(".ptr.big")).to_have_text("/system/0/text")
    expect(detail.locator("mark.del").first).to_have_text("careful")
    expect(detail.locator("mark.ins").first).to_have_text("careless")
    expect(page.locator(".changes .change.on")).to_contain_text("/system/0/text")
    assert page.url.endswith("#/diff/" + rows[3]["id"])


def test_marker_click_reveals_its_place_in_the_request(web, page):
    _conversation(web, "markers", turns=2)
    rows = _wait_session(web, "markers", 2)
    page.goto(f"{web.url}/#/call/{rows[1]['id']}")
    chip = page.locator(".marker-list button.chip.m-reminder")
    expect(chip).to_have_count(1)
    chip.click()
    revealed = page.locator(".reqview .revealed")
    expect(revealed).to_have_count(1)
    expect(revealed).to_contain_text("keep it short")


def test_new_calls_appear_live_without_reload(web, page):
    client = openai_client(web.url, "livewire")
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "first"}])
    _wait_session(web, "livewire", 1)
    page.goto(web.url + "/#/session/livewire")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(1)
    expect(page.locator("#live.on")).to_have_count(1)
    page.evaluate("window.__sameDocument = true")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
    )
    expect(page.locator("tr.call-row")).to_have_count(2)
    expect(page.locator("tr.call-row").nth(1)).to_contain_text("#2")
    # and a brand-new session shows up on the sessions page
    page.goto(web.url + "/#/")
    expect(page.locator(".session-link", has_text="livewire")).to_have_count(1)
    openai_client(web.url, "latecomer").chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    expect(page.locator(".session-link", has_text="latecomer")).to_have_count(1)
    assert page.evaluate("window.__sameDocument") is True  # no reload happened


def test_a_burst_shows_calls_waiting_then_stored(web, page):
    import threading
    import time

    page.goto(web.url + "/#/")
    expect(page.locator("#store-status")).to_contain_text("stored")
    client = openai_client(web.url, "burst")
    sent = []

    def burst():  # a call every ~10 ms for 1.5 s, never a 50 ms pause: the daemon keeps them in its spool
        began = time.monotonic()
        while time.monotonic() - began < 1.5:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": f"b{len(sent)}"}])
            sent.append(1)
            time.sleep(0.01)

    thread = threading.Thread(target=burst)
    thread.start()
    try:
        expect(page.locator("#store-status")).to_contain_text("waiting", timeout=5000)
    finally:
        thread.join()
    rows = web.wait_for_calls(len(sent), session="burst", timeout=60)
    assert len(rows) == len(sent) > 20
    expect(page.locator("#store-status")).not_to_contain_text("waiting")


def test_captured_markup_is_shown_as_text_and_never_runs(web, page):
    session_header = {"x-ctxscope-session": 'xss<img src=x onerror="window.__pwned=1">'}
    client = anthropic_client(web.url)
    tools = [
        {
            "name": "read",
            "description": PAYLOAD,
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]
    msgs = [{"role": "user", "content": "please read " + PAYLOAD}]
    r1 = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=50,
        system=PAYLOAD,
        tools=tools,
        messages=msgs,
        extra_headers=session_header,
    )
    msgs += [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": r1.content[0].text},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": PAYLOAD}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "file says " + PAYLOAD}],
        },
    ]
    client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=50,
        system=PAYLOAD + " edited",
        tools=tools,
        messages=msgs,
        extra_headers=session_header,
    )
    rows = list(web.wait_for_calls(2, session=session_header["x-ctxscope-session"]))
    assert len(rows) == 2

    def check(where: str) -> None:
        assert page.evaluate("window.__pwned") is None, where
        bad = page.evaluate("""() => document.querySelectorAll(
            '#app img, #app script, #app iframe, #app svg[onload], #crumbs img, a[href^="javascript:"], '
            + '[onerror], [onload]').length""")
        assert bad == 0, where

    page.goto(web.url + "/")
    expect(page.locator(".session-link").first).to_be_visible()
    expect(page.locator("#app")).to_contain_text('xss<img src=x onerror="window.__pwned=1">')
    check("sessions")
    page.locator(".session-link", has_text="xss").click()
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(2)
    expect(page.locator("#crumbs")).to_contain_text("xss<img")
    check("session")

    page.goto(f"{web.url}/#/call/{rows[1]['id']}")
    expect(page.locator("#app[data-ready='1'] .reqview")).to_be_visible()
    for _ in range(6):  # open everything: system, tools, every message (opening builds the next level)
        closed = page.locator(".reqview details:not([open]) > summary").all()
        if not closed:
            break
        for summary in closed:
            summary.click()
    for payload in XSS:
        expect(page.locator(".reqview")).to_contain_text(payload)
    expect(page.locator(".reqview .tool-result")).to_contain_text("file says " + XSS[0])
    check("call request")
    for tab in ("response", "raw request", "headers"):
        page.get_by_role("button", name=tab, exact=True).click()
        check("call " + tab)
    expect(page.locator("pre.raw")).to_have_count(0)
    page.get_by_role("button", name="raw request", exact=True).click()
    expect(page.locator("pre.raw")).to_contain_text(json.dumps(XSS[1])[1:-1])
    check("raw")

    page.goto(f"{web.url}/#/diff/{rows[1]['id']}")
    expect(page.locator(".change-detail .ptr.big")).to_have_text("/system")
    expect(page.locator(".change-detail")).to_contain_text(XSS[0])
    check("diff")


def test_raw_view_shows_only_the_byte_form_last_chosen(web, page):
    """A range asked for in the decoded form that answers after the switch to the wire form is
    dropped, not appended to the wire form's text."""
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "zipped " * 50}]}).encode()
    urllib.request.urlopen(
        urllib.request.Request(
            f"{web.url}/s/rawform/openai/v1/chat/completions",
            data=gzip.compress(body),
            method="POST",
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip", "Authorization": "Bearer sk-test"},
        )
    )
    [row] = _wait_session(web, "rawform", 1)
    decoded = AnswerLast(page, lambda url: "/api/raw?" in url and "form=decoded" in url)
    page.goto(f"{web.url}/#/call/{row['id']}")
    page.get_by_role("button", name="raw request", exact=True).click()
    raw = page.locator("pre.raw")
    page.get_by_label("byte form").select_option("wire")
    expect(raw.locator("span.chunk")).to_have_count(1)
    decoded.release()
    expect(raw.locator("span.chunk")).to_have_count(1)
    expect(raw).not_to_contain_text("zipped")


def test_raw_bytes_load_in_ranges_not_all_at_once(web, page):
    big = "line of captured output\n" * 20000  # ~470 KB request body
    openai_client(web.url, "bigbody").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": big}]
    )
    [row] = _wait_session(web, "bigbody", 1)
    page.goto(f"{web.url}/#/call/{row['id']}")
    page.get_by_role("button", name="raw request", exact=True).click()
    raw = page.locator("pre.raw")
    expect(raw.locator("span.chunk")).to_have_count(1)
    first = len(raw.inner_text())
    assert 60_000 < first <= 65_536 < row["request_bytes"]
    page.locator(".rawview > button", has_text="load more").click()
    expect(raw.locator("span.chunk")).to_have_count(2)
    assert len(raw.inner_text()) > first
    # the structured view cuts the long text too until asked
    page.get_by_role("button", name="request", exact=True).click()
    expect(page.locator(".reqview button.more")).to_contain_text("show all")


def test_delete_a_session_from_the_page(web, page):
    openai_client(web.url, "to-delete").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "bye"}]
    )
    _wait_session(web, "to-delete", 1)
    page.goto(web.url + "/")
    row = page.locator("tr.session-row", has=page.locator(".session-link", has_text="to-delete"))
    expect(row).to_have_count(1)
    page.once("dialog", lambda d: d.accept())
    row.locator("button.icon-btn").click()
    expect(row).to_have_count(0)
    sessions = json.loads(urllib.request.urlopen(web.url + "/_ctxscope/api/sessions").read())["sessions"]
    assert "to-delete" not in {s["session"] for s in sessions}


def test_filters_narrow_the_timeline(web, page):
    _conversation(web, "filters", turns=4, system="A system prompt of its own, so the first call cannot hit. " * 300)
    _wait_session(web, "filters", 4)
    page.goto(web.url + "/#/session/filters")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(4)
    page.get_by_label("relation", exact=True).select_option("EPOCH_START")
    expect(page.locator("tr.call-row")).to_have_count(1)
    expect(page.locator("tr.call-row .rel")).to_contain_text("session start")
    # The answer to the first of two quick filter changes comes last; the page keeps the second's.
    unfiltered = AnswerLast(
        page, lambda url: "/api/session?" in url and "relation=" not in url and "verdict=" not in url
    )
    page.get_by_label("relation", exact=True).select_option("")
    page.get_by_label("cache", exact=True).select_option("hit")
    expect(page.locator("tr.call-row")).to_have_count(3)
    unfiltered.release()
    expect(page.locator("tr.call-row")).to_have_count(3)
    expect(page.get_by_label("cache", exact=True)).to_have_value("hit")
    page.get_by_label("search calls").fill("zzz-no-such-call")
    expect(page.locator("tr.call-row")).to_have_count(0)
    expect(page.locator("#app")).to_contain_text("No calls match")


def test_every_page_names_the_agent_loop_the_main_thread(web, page):
    """A title call first, the agent loop (tool rounds) next: the sessions page, the session page and
    the call page all call the agent's thread "main T1" and the title "side T2", and say why the
    calls landed in the session (docs/architecture.md, "Sessions and threads")."""
    client = anthropic_client(web.url, "roles")
    client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=20,
        system="You write titles.",
        messages=[{"role": "user", "content": "Title for: Fix the bug."}],
    )
    for body in claude_code_turns(4, model="claude-sonnet-4-6"):
        client.messages.create(**body)
    rows = _wait_session(web, "roles", 5)

    page.goto(web.url + "/")
    session_row = page.locator("tr.session-row", has=page.locator(".session-link", has_text="roles"))
    expect(session_row).to_have_count(1)
    threads = page.locator("tr.thread-row", has=page.locator('a[href^="#/session/roles?thread="]'))
    expect(threads).to_have_count(2)
    expect(threads.filter(has_text="main T1")).to_have_count(1)
    expect(threads.filter(has_text="main T1")).to_contain_text("#2")  # the agent's first call is the 2nd
    expect(threads.filter(has_text="side T2")).to_contain_text("#1")
    page.goto(web.url + "/#/session/roles")
    expect(page.locator("#app[data-ready='1'] tr.call-row")).to_have_count(5)
    expect(page.get_by_label("thread", exact=True).locator("option")).to_have_text(
        ["thread: all", "main T1 (4)", "side T2 (1)"]
    )
    expect(page.locator(".stats")).to_contain_text("label")
    page.goto(f"{web.url}/#/call/{rows[0]['id']}")
    card = page.locator(".card", has_text="Prefix and cache")
    expect(card).to_contain_text("side T2")
    expect(card).to_contain_text("grouped by path label")
    page.goto(f"{web.url}/#/call/{rows[1]['id']}")
    expect(page.locator(".card", has_text="Prefix and cache")).to_contain_text("main T1")


def test_long_conversations_fold_the_middle_and_a_pointer_unfolds_it(web, page):
    _conversation(web, "folded", turns=10, system="Fold test system. " * 200)
    rows = _wait_session(web, "folded", 10)
    page.goto(f"{web.url}/#/call/{rows[-1]['id']}")
    expect(page.locator("details.fold > summary")).to_contain_text("more messages")
    expect(page.locator("details.msg")).to_have_count(7)  # the first message and the last six
    page.goto(f"{web.url}/#/call/{rows[-1]['id']}?ptr=/messages/6/content")
    revealed = page.locator(".reqview .revealed")
    expect(revealed).to_have_count(1)
    expect(revealed).to_contain_text("turn 2")
    expect(page.locator("details.fold[open]")).to_have_count(1)


def test_the_page_says_capture_is_not_storing_while_the_store_cannot_be_opened(tmp_path, page):
    bad = tmp_path / "captures.db"
    bad.write_bytes(b"not a database at all " * 500)
    down = start_web_daemon(tmp_path)
    try:
        page.goto(down.url + "/#/")
        status = page.locator("#store-status")
        expect(status).to_contain_text("capture not storing", timeout=10000)
        reply = openai_client(down.url, "down").chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "still forwarded?"}]
        )
        assert reply.choices[0].message.content  # forwarding goes on
        expect(status).to_contain_text("1 waiting", timeout=10000)
        assert "not a database" in (status.get_attribute("title") or "")
        bad.unlink()  # the store can be opened again
        expect(status).to_contain_text("failure", timeout=30000)  # storing again; the failures stay counted
        down.wait_for_calls(1, session="down")
    finally:
        page.goto("about:blank")  # leave first: the live feed would reconnect to the stopped daemon and log it
        down.stop()
    # The sessions list could not load while the store was unreadable (a 503 that says why): expected here.
    page.problems[:] = [p for p in page.problems if "status of 503" not in p]


def test_sessions_made_by_ctxscope_show_only_when_asked_and_under_their_purpose(web, page):
    openai_client(web.url, "replay:made-by-ctxscope").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "again"}]
    )
    openai_client(web.url, "beside-it").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "later"}]
    )
    _wait_session(web, "replay:made-by-ctxscope", 1)
    _wait_session(web, "beside-it", 1)
    page.goto(web.url + "/")
    own = page.locator("tr.session-row", has=page.locator(".session-link", has_text="replay:made-by-ctxscope"))
    expect(page.locator("tr.session-row", has=page.locator(".session-link", has_text="beside-it"))).to_have_count(1)
    expect(own).to_have_count(0)  # the list has loaded (beside-it is there) without it
    page.locator("#sessions-own").check()
    expect(own).to_have_count(1)
    expect(own.locator(".chip.purpose")).to_have_text("replay")
