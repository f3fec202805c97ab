"""Replay: `ctxscope replay` re-sends a captured call through the real daemon to the simulator; the
answer is a new call in a session of its own, linked to the original, shown beside it; the key
comes from the environment and is never stored."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ctxscope.inspector.store.queries import get_call, get_request_raw, open_db
from ctxscope.main import cli

from support import sdk_clients

KEY = "sk-ant-api03-REPLAYKEY-0123456789abcdefghijklmnopqrstuvwxyz"
SYSTEM = "You are a careful assistant who reads every file twice. " * 200


def _original(proxy, sim) -> dict:
    sim.state().set_script([{"text": "first"}])
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/s/orig/anthropic", max_retries=0)
    client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=32,
        messages=[{"role": "user", "content": "go"}],
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
    )
    [row] = proxy.wait_for_calls(1)
    return row


def _replay(proxy, *args: str, env_key: str | None = KEY):
    env = {"ANTHROPIC_API_KEY": env_key} if env_key else {"ANTHROPIC_API_KEY": ""}
    return CliRunner(env=env).invoke(
        cli, ["replay", *args, "--db", str(proxy.db_path), "--daemon", proxy.url, "--json"]
    )


def test_a_replay_is_a_new_linked_call_in_its_own_session_read_from_the_cache(proxy, sim):
    orig = _original(proxy, sim)
    sim.state().set_script([{"text": "second"}])
    result = _replay(proxy, orig["id"][:20])
    assert result.exit_code == 0, result.output
    c = json.loads(result.stdout)
    assert c["original"]["id"] == orig["id"] and c["replay"]["id"] != orig["id"]
    assert (c["replay"]["replay_of"], c["replay"]["session"]) == (orig["id"], f"replay:{orig['id']}")
    assert c["original"]["cache_write"] > 0 and c["replay"]["cache_read"] == c["original"]["cache_write"]
    assert c["replay"]["cost_usd"] < c["original"]["cost_usd"]
    db = open_db(proxy.db_path)
    assert get_request_raw(db, c["replay"]["id"]) == get_request_raw(db, orig["id"])  # the exact body again
    replayed = get_call(db, c["replay"]["id"])
    assert replayed["key_fingerprint"] == get_call(db, orig["id"])["key_fingerprint"]  # the key from the environment
    db.close()
    proxy.stop()
    assert KEY.encode() not in b"".join(p.read_bytes() for p in proxy.db_path.parent.glob("captures.db*"))


def test_edits_and_a_model_change_the_body_sent(proxy, sim):
    orig = _original(proxy, sim)
    sim.state().set_script([{"text": "edited"}])
    result = _replay(
        proxy,
        orig["id"],
        "--model",
        "claude-haiku-4-5",
        "--edit",
        "/system/0/cache_control=null",
        "--edit",
        '/messages/-={"role":"assistant","content":"ok"}',
    )
    assert result.exit_code == 0, result.output
    c = json.loads(result.stdout)
    db = open_db(proxy.db_path)
    body = json.loads(get_request_raw(db, c["replay"]["id"]))
    db.close()
    assert body["model"] == "claude-haiku-4-5" and body["system"][0]["cache_control"] is None
    assert body["messages"][-1] == {"role": "assistant", "content": "ok"}
    assert c["replay"]["model"] == "claude-haiku-4-5"


def test_clear_errors_without_a_key_or_with_a_bad_edit(proxy, sim):
    orig = _original(proxy, sim)
    no_key = _replay(proxy, orig["id"], env_key=None)
    assert no_key.exit_code != 0 and "$ANTHROPIC_API_KEY" in no_key.output
    bad = _replay(proxy, orig["id"], "--edit", "/nowhere/deep=1")
    assert bad.exit_code != 0 and "no 'nowhere'" in bad.output
    not_json = _replay(proxy, orig["id"], "--edit", "/model=claude")
    assert not_json.exit_code != 0 and "not JSON" in not_json.output
    assert len(proxy.wait_for_calls(1)) == 1  # nothing was sent


def test_a_replay_can_go_to_another_upstream(proxy, sim):
    orig = _original(proxy, sim)
    sim.state().set_script([{"text": "elsewhere"}])
    result = _replay(proxy, orig["id"], "--upstream", "sim")
    assert result.exit_code == 0, result.output
    c = json.loads(result.stdout)
    db = open_db(proxy.db_path)
    assert get_call(db, c["replay"]["id"])["provider"] == "u/sim"
    db.close()
