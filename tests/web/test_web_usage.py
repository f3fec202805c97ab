"""The usage API on a real daemon fed by the real SDKs: tokens, cache reads and dollars per day and
per model add up to the captured calls, each bar names the sessions behind it, the sessions
ctxscope made itself stay out, and a bad ``days`` is a one-line 400."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest

from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.web.fields import usage_cost

from support.web_fixtures import anthropic_client, openai_client, start_web_daemon

SYSTEM = "You are a careful coding assistant. " * 600
pytestmark = pytest.mark.slow  # the module starts a daemon and sends five calls through it


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = start_web_daemon(tmp_path_factory.mktemp("usage"))
    claude = anthropic_client(d.url, "usage-claude")
    msgs = [{"role": "user", "content": "start"}]
    for i in range(3):  # a cached system prompt: the second and third calls read the cache
        r = claude.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=50,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            messages=msgs,
        )
        msgs += [{"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"turn {i}"}]
    gpt = openai_client(d.url, "usage-gpt")
    gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
    own = openai_client(d.url, "replay:usage-own")  # a session ctxscope made itself: not the user's spend
    own.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "replayed"}])
    d.wait_for_calls(5)
    yield d
    d.stop()


def _get(web, query=""):
    try:
        with urllib.request.urlopen(f"{web.url}/_ctxscope/api/usage{query}", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _calls(web, session):
    db = open_db(web.db_path)
    try:
        return list_calls(db, session=session, limit=None, newest_first=False)
    finally:
        db.close()


def test_usage_per_model_and_day_adds_up_to_the_calls_and_names_their_sessions(web):
    status, usage = _get(web, "?days=7")
    assert status == 200
    claude_calls = _calls(web, "usage-claude")
    by_model = {b["key"]: b for b in usage["models"]}
    assert set(by_model) == {"claude-sonnet-4-6", "gpt-4o"}  # the replay's own gpt-4o call is not counted
    claude = by_model["claude-sonnet-4-6"]
    assert claude["calls"] == 3
    usages = [c["usage"] for c in claude_calls]
    assert claude["input"] == sum(u["input"] for u in usages)
    assert claude["cache_read"] == sum(u["cache_read"] or 0 for u in usages) > 0
    expected = sum(
        usage_cost("claude-sonnet-4-6", u["input"], u["output"], u["cache_read"], u["cache_write"])[0] for u in usages
    )
    assert claude["cost_usd"] == pytest.approx(expected, abs=1e-6) and expected > 0
    assert [s["session"] for s in claude["sessions"]] == ["usage-claude"]
    assert by_model["gpt-4o"]["calls"] == 1 and [s["session"] for s in by_model["gpt-4o"]["sessions"]] == ["usage-gpt"]
    today = datetime.now(UTC).date().isoformat()
    assert [d["key"] for d in usage["days"]] == [today]
    day = usage["days"][0]
    assert day["calls"] == 4 and day["session_count"] == 2
    assert {s["session"] for s in day["sessions"]} == {"usage-claude", "usage-gpt"}
    assert usage["total"]["calls"] == 4 and usage["total"]["session_count"] == 2
    assert usage["total"]["cost_usd"] == pytest.approx(sum(b["cost_usd"] or 0 for b in usage["models"]), abs=1e-5)


@pytest.mark.parametrize("days", ["0", "-3", "abc", "1e9999"])
def test_a_bad_days_is_a_one_line_error(web, days):
    status, body = _get(web, f"?days={days}")
    assert status == 400 and "days" in body["error"] and "\n" not in body["error"]
