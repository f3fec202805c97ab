"""The web API says the provider's cache diagnosis beside ctxscope's verdict: the call page's
sentence, and the session page's agreement counts."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from support.web_fixtures import anthropic_client, start_web_daemon

BETA = "cache-diagnosis-2026-04-07"
SYSTEM = "You are a careful coding assistant. " * 300


@pytest.fixture
def web(tmp_path):
    d = start_web_daemon(tmp_path)
    yield d
    d.stop()


def _json(web, path):
    with urllib.request.urlopen(web.url + path, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_call_and_session_pages_say_the_diagnosis_and_the_agreement(web):
    client = anthropic_client(web.url, "diag")
    msgs, previous = [{"role": "user", "content": "start"}], None
    for i, system in enumerate([SYSTEM, SYSTEM, SYSTEM + " Now terse."]):
        r = client.beta.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=50,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=msgs,
            betas=[BETA],
            diagnostics={"previous_message_id": previous},
        )
        previous = r.id
        msgs = msgs + [{"role": "assistant", "content": r.content[0].text}, {"role": "user", "content": f"turn {i}"}]
    assert r.diagnostics.cache_miss_reason.type == "system_changed"
    rows = web.wait_for_calls(3)
    deadline = time.monotonic() + 60
    while (call := _json(web, f"/_ctxscope/api/call?id={rows[2]['id']}")["call"])["relation"] is None:
        assert time.monotonic() < deadline, "the call was never analysed"
        time.sleep(0.1)
    assert call["relation"] == "DIVERGED"
    assert call["cache"]["provider_sentence"].startswith("system_changed, ")
    assert call["cache"]["provider_sentence"].endswith("agrees with ctxscope's verdict")
    summary = _json(web, "/_ctxscope/api/session?s=diag")["summary"]["provider_agreement"]
    assert (summary["agree"], summary["disagree"], summary["none"], summary["rate"]) == (2, 0, 1, 1.0)
