"""The investigation pieces of the web UI in a real browser, against a real daemon fed by the SDKs:
the search box, and the JSON API behind it."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request

import pytest
from playwright.sync_api import expect

from support.web_fixtures import AnswerLast, anthropic_client, start_web_daemon

UNIQUE = "obsidian-marmot-9182"
XSS = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = start_web_daemon(tmp_path_factory.mktemp("webinv"))
    yield d
    d.stop()


def _agent_loop(web, session: str, tool_output: str) -> list[dict]:
    client = anthropic_client(web.url, session)
    msgs: list = [{"role": "user", "content": "look around"}]
    for turn in range(3):
        r = client.messages.create(model="claude-sonnet-4-6", max_tokens=50, system="Be brief.", messages=msgs)
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": r.content[0].text}]})
        if turn == 0:
            result = {"type": "tool_result", "tool_use_id": "t0", "content": tool_output}
            msgs.append({"role": "user", "content": [result]})
        else:
            msgs.append({"role": "user", "content": f"next {turn}"})
    return web.wait_for_calls(3, session=session)


def _get(web, path: str, **params) -> dict:
    with urllib.request.urlopen(f"{web.url}/_ctxscope/api/{path}?{urllib.parse.urlencode(params)}") as r:
        return json.loads(r.read())


def test_search_box_finds_a_tool_result_and_opens_the_call_at_it(web, page):
    rows = _agent_loop(web, "inv-search", f"{XSS} found {UNIQUE} here")
    page.goto(web.url + "/")
    page.fill("#search-q", UNIQUE)
    page.press("#search-q", "Enter")
    expect(page.locator("#app[data-ready='1'] tr.search-hit")).to_have_count(1)
    hit = page.locator("tr.search-hit").first
    expect(hit.locator("mark")).to_have_text(UNIQUE)
    expect(hit.locator(".snippet")).to_contain_text(XSS)  # shown as text, never run
    expect(hit.locator(".ptr")).to_have_text("/messages/2/content/0")
    hit.locator("a.only-session").click()
    expect(page.locator("#app[data-ready='1'] .tag")).to_contain_text("session inv-search")
    hit = page.locator("tr.search-hit").first
    hit.locator("a.hit-link").click()
    expect(page.locator("#app[data-ready='1'] h1")).to_have_text("Call #2")
    assert page.url.endswith(urllib.parse.quote(rows[1]["id"]) + "?ptr=%2Fmessages%2F2%2Fcontent%2F0")
    expect(page.locator(".revealed")).to_contain_text(UNIQUE)
    assert page.evaluate("window.__pwned") is None


def test_a_response_hit_opens_the_response_at_its_pointer(web, page):
    web.sim_state().set_script([{"text": "the ocelot-lantern answer"}])
    client = anthropic_client(web.url, "inv-resp")
    client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    [row] = web.wait_for_calls(1, session="inv-resp")
    page.goto(web.url + "/#/search?q=ocelot-lantern&in=responses")
    expect(page.locator("#app[data-ready='1'] tr.search-hit .ptr")).to_have_text("response /content/0/text")
    page.click("a.hit-link")
    expect(page.locator("#app[data-ready='1'] h1")).to_have_text("Call #1")
    assert row["id"] in page.url and "body=response" in page.url
    expect(page.locator(".tab.on")).to_have_text("response")
    expect(page.locator(".revealed")).to_contain_text("ocelot-lantern")


def test_search_api_filters_by_area_and_refuses_unknown_ones(web):
    _agent_loop(web, "inv-api", f"see {UNIQUE}-api")
    assert [h["area"] for h in _get(web, "search", q=f"{UNIQUE}-api")["hits"]] == ["tool_results"]
    assert _get(web, "search", q=f"{UNIQUE}-api", **{"in": "system"})["hits"] == []
    with pytest.raises(urllib.error.HTTPError) as bad:
        _get(web, "search", q="x", **{"in": "nowhere"})
    assert bad.value.code == 400
    bad.value.close()


def test_copy_as_curl_shows_a_command_that_runs_through_the_daemon(web, page, tmp_path):
    from support.web_fixtures import KEY

    rows = _agent_loop(web, "inv-curl", "files: a b c")
    page.goto(f"{web.url}/#/call/{rows[2]['id']}")
    page.click("#app[data-ready='1'] #curl-button")
    expect(page.locator("#curl-command")).to_contain_text("$ANTHROPIC_API_KEY")
    page.check("#curl-via")
    expect(page.locator("#curl-command")).to_contain_text(f"{web.url}/s/inv-curl/anthropic/v1/messages")
    command = page.locator("#curl-command").text_content()
    assert KEY not in command
    web.sim_state().set_script([{"text": "again"}])
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")} | {"ANTHROPIC_API_KEY": KEY}
    done = subprocess.run(["bash", "-c", command], capture_output=True, env=env, cwd=tmp_path, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["content"][0]["text"] == "again"
    again = web.wait_for_calls(4, session="inv-curl")[3]
    assert again["usage"] is not None and again["outcome"] == "ok"


def test_copy_as_curl_shows_the_command_for_the_box_as_it_is_now(web, page):
    """Ticked then unticked quickly: the answer for the ticked box, arriving last, is dropped."""
    rows = _agent_loop(web, "inv-curl-race", "files: d e f")
    page.goto(f"{web.url}/#/call/{rows[2]['id']}")
    page.click("#app[data-ready='1'] #curl-button")
    through = f"{web.url}/s/inv-curl-race/"
    expect(page.locator("#curl-command")).to_contain_text("$ANTHROPIC_API_KEY")
    expect(page.locator("#curl-command")).not_to_contain_text(through)
    via = AnswerLast(page, lambda url: "/api/curl?" in url and "via=daemon" in url)
    page.check("#curl-via")
    with page.expect_response(lambda r: "/api/curl?" in r.url and "via=" not in r.url):
        page.uncheck("#curl-via")
    via.release()
    expect(page.locator("#curl-command")).to_contain_text("$ANTHROPIC_API_KEY")
    expect(page.locator("#curl-command")).not_to_contain_text(through)


def _post(web, path: str, body: bytes, headers: dict) -> int:
    req = urllib.request.Request(f"{web.url}/_ctxscope/api/{path}", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def test_replay_button_shows_the_replay_beside_the_original(web, page, monkeypatch):
    from support.web_fixtures import KEY

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)  # the daemon's environment: it runs in this process
    client = anthropic_client(web.url, "inv-replay")
    text = "You are a careful assistant who reads every file twice. " * 200
    system = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    web.sim_state().set_script([{"text": "first"}])
    client.messages.create(
        model="claude-sonnet-4-6", max_tokens=20, system=system, messages=[{"role": "user", "content": "go"}]
    )
    [orig] = web.wait_for_calls(1, session="inv-replay")
    page.goto(f"{web.url}/#/call/{orig['id']}")
    web.sim_state().set_script([{"text": "again"}])
    page.click("#app[data-ready='1'] #replay-button")
    expect(page.locator(".replay-compare")).to_be_visible(timeout=20_000)
    read = page.locator(".replay-compare tr[data-key='cache_read'] td")
    expect(read.nth(0)).to_have_text("0")
    assert read.nth(1).text_content() not in ("0", "–")
    [replay] = web.wait_for_calls(1, session=f"replay:{orig['id']}")
    assert replay["id"] != orig["id"]
    page.click("#replay-diff")
    expect(page.locator("#app[data-ready='1']")).to_be_visible()
    assert f"#/diff/{replay['id']}/{orig['id']}" in urllib.parse.unquote(page.url)


def test_replay_needs_the_token_json_and_the_same_origin(web, page):
    [orig] = _agent_loop(web, "inv-replay-guard", "x")[:1]
    page.goto(web.url + "/")
    token = page.locator('meta[name="ctxscope-token"]').get_attribute("content")
    path = f"replay?id={orig['id']}"
    json_type = {"Content-Type": "application/json"}
    assert _post(web, path, b"{}", json_type) == 403
    assert _post(web, path, b"{}", json_type | {"X-Ctxscope-Token": token, "Origin": "http://evil.example"}) == 403
    assert _post(web, path, b"{}", {"Content-Type": "text/plain", "X-Ctxscope-Token": token}) == 415
    assert _post(web, path, b'{"edits": 3}', json_type | {"X-Ctxscope-Token": token}) == 400
    assert len(web.wait_for_calls(3, session="inv-replay-guard")) == 3  # nothing was replayed


def _three_then(web, session: str, last_messages, headers=None) -> list[dict]:
    """Two calls of a growing conversation, then one with ``last_messages`` (and ``headers``)."""
    client = anthropic_client(web.url, session)
    msgs: list = [{"role": "user", "content": "read the plan " * 50}]
    for i in range(2):
        web.sim_state().set_script([{"text": f"step {i}"}])
        r = client.messages.create(model="claude-sonnet-4-6", max_tokens=20, system="Be brief.", messages=msgs)
        msgs = msgs + [{"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"go {i}"}]
    web.sim_state().set_script([{"text": "after"}])
    client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=20,
        system="Be brief.",
        messages=last_messages(msgs),
        extra_headers=headers or {},
    )
    return web.wait_for_calls(3, session=session)


def test_the_diff_says_whether_a_break_was_declared_or_accidental(web):
    def compacted(msgs):
        return [{"role": "user", "content": "Summary of the work so far: the plan was read."}] + msgs[-1:]

    def edited(msgs):
        return [{"role": "user", "content": "read the plan " * 49 + "read the PLAN"}] + msgs[1:]

    declared = _three_then(web, "inv-declared", compacted, {"x-ctxscope-event": "compaction; reason=budget"})
    accident = _three_then(web, "inv-accident", edited)
    d = _get(web, "diff", id=declared[2]["id"])
    assert d["break"]["cause"] == "declared" and d["break"]["effects"][0]["kind"] == "compaction"
    a = _get(web, "diff", id=accident[2]["id"])
    assert (a["break"]["cause"], a["new"]["relation"]) == ("accidental", "DIVERGED")
    assert _get(web, "diff", id=accident[1]["id"])["break"]["cause"] == "none"
    across = _get(web, "diff", id=accident[2]["id"], base=declared[0]["id"])
    assert (across["break"]["cause"], across["same_session"]) == ("unknown", False)


def test_any_two_calls_of_different_sessions_can_be_compared(web, page):
    one = _agent_loop(web, "inv-cmp-a", "alpha output")
    two = _agent_loop(web, "inv-cmp-b", "beta output")
    page.goto(f"{web.url}/#/call/{one[1]['id']}")
    page.click("#app[data-ready='1'] #pick-compare")
    expect(page.locator("#pick-compare")).to_have_text("picked for compare")
    page.goto(f"{web.url}/#/call/{two[1]['id']}")
    expect(page.locator("#app[data-ready='1'] #compare-picked")).to_have_text("compare with inv-cmp-a #2")
    page.click("#compare-picked")
    expect(page.locator("#app[data-ready='1'] #break-cause")).to_contain_text("different sessions")
    expect(page.locator("#app h1")).to_have_text("Diff · call #2 of inv-cmp-b against call #2 of inv-cmp-a")
    expect(page.locator("#open-older")).to_have_text("open the base (#2, inv-cmp-a)")
    expect(page.locator("#open-newer")).to_have_text("open the compared call (#2, inv-cmp-b)")
    expect(page.locator("#first-diff")).to_contain_text("beta output")
