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
from web_fixtures import anthropic_client, start_web_daemon

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
    hit.locator("a.hit-link").click()
    expect(page.locator("#app[data-ready='1'] h1")).to_have_text("Call #2")
    assert page.url.endswith(urllib.parse.quote(rows[1]["id"]) + "?ptr=%2Fmessages%2F2%2Fcontent%2F0")
    expect(page.locator(".revealed")).to_contain_text(UNIQUE)
    assert page.evaluate("window.__pwned") is None


def test_search_api_filters_by_area_and_refuses_unknown_ones(web):
    _agent_loop(web, "inv-api", f"see {UNIQUE}-api")
    assert [h["area"] for h in _get(web, "search", q=f"{UNIQUE}-api")["hits"]] == ["tool_results"]
    assert _get(web, "search", q=f"{UNIQUE}-api", **{"in": "system"})["hits"] == []
    with pytest.raises(urllib.error.HTTPError) as bad:
        _get(web, "search", q="x", **{"in": "nowhere"})
    assert bad.value.code == 400
    bad.value.close()


def test_copy_as_curl_shows_a_command_that_runs_through_the_daemon(web, page, tmp_path):
    from web_fixtures import KEY

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
