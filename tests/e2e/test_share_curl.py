"""Copy as cURL: the command printed by `ctxscope curl`, run by bash against the simulator (through the
daemon, so the re-sent request is captured too), sends the same bytes with the same key and gets the
same answer; the command itself holds no key."""

from __future__ import annotations

import json
import os
import subprocess

from click.testing import CliRunner

from ctxscope.inspector.store.queries import get_final_response, get_request_raw, open_db
from ctxscope.main import cli

from support import sdk_clients

KEY = "sk-ant-api03-CURLTEST-0123456789abcdefghijklmnopqrstuvwxyz"


def _curl(*args: str) -> str:
    result = CliRunner().invoke(cli, ["curl", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def _run(command: str, cwd, env_key: str | None = KEY) -> str:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    if env_key:
        env["ANTHROPIC_API_KEY"] = env_key
    done = subprocess.run(["bash", "-c", command], capture_output=True, cwd=cwd, env=env, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def _first_call(proxy, sim, content: str) -> dict:
    sim.state().set_script([{"text": "the same answer"}])
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/s/curl/anthropic", max_retries=0)
    client.messages.create(
        model="claude-sonnet-4-6", max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": content}]
    )
    [row] = proxy.wait_for_calls(1)
    return row


def _check_resent(proxy, sim, row, command: str, tmp_path) -> None:
    assert KEY not in command and "$ANTHROPIC_API_KEY" in command
    sim.state().set_script([{"text": "the same answer"}])
    answer = json.loads(_run(command, tmp_path))
    assert answer["content"][0]["text"] == "the same answer"
    first, again = proxy.wait_for_calls(2)
    db = open_db(proxy.db_path)
    assert get_request_raw(db, again["id"]) == get_request_raw(db, first["id"])
    assert get_final_response(db, again["id"])["content"] == get_final_response(db, first["id"])["content"]
    fingerprints = [r[0] for r in db.execute("SELECT key_fingerprint FROM calls ORDER BY started_at").fetchall()]
    assert fingerprints[0] is not None and fingerprints[0] == fingerprints[1]  # the key came from the environment


def test_the_printed_command_resends_the_exact_body_with_the_key_from_the_environment(proxy, sim, tmp_path):
    row = _first_call(proxy, sim, "what is 'quoted' $HOME `and` \"this\"?\nsecond line")
    command = _curl(row["id"], "--db", str(proxy.db_path), "--via", proxy.url + "/s/curl/anthropic")
    assert "<<'CTXSCOPE_BODY_" in command  # a small text body rides in a heredoc
    _check_resent(proxy, sim, row, command, tmp_path)


def test_a_big_body_goes_through_a_file(proxy, sim, tmp_path, monkeypatch):
    row = _first_call(proxy, sim, "long " * 20_000)
    monkeypatch.chdir(tmp_path)
    command = _curl(row["id"], "--db", str(proxy.db_path), "--via", proxy.url + "/s/curl/anthropic")
    assert f"--data-binary @{row['id']}-request.bin" in command
    assert (tmp_path / f"{row['id']}-request.bin").stat().st_mode & 0o777 == 0o600
    _check_resent(proxy, sim, row, command, tmp_path)


def test_the_captured_upstream_is_the_default_target(proxy, sim, tmp_path):
    row = _first_call(proxy, sim, "direct")
    command = _curl(row["id"], "--db", str(proxy.db_path))
    assert command.split("curl -sS -X POST ", 1)[1].startswith(f"{sim.url}/v1/messages")
    sim.state().set_script([{"text": "the same answer"}])
    assert json.loads(_run(command, tmp_path))["content"][0]["text"] == "the same answer"


def test_an_openai_call_gets_its_bearer_key_from_openai_api_key(proxy, sim, tmp_path):
    sim.state().set_script([{"text": "chat answer"}])
    client = sdk_clients.OpenAI(
        api_key="sk-proj-CURLOPENAI-0123456789abcdefghijklmnop",
        base_url=proxy.url + "/s/curl-oa/openai/v1",
        max_retries=0,
    )
    client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hello"}])
    [row] = proxy.wait_for_calls(1)
    command = _curl(row["id"], "--db", str(proxy.db_path), "--via", proxy.url + "/s/curl-oa/openai")
    assert ': Bearer $OPENAI_API_KEY"' in command and "CURLOPENAI" not in command
    sim.state().set_script([{"text": "chat answer"}])
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["OPENAI_API_KEY"] = "sk-proj-CURLOPENAI-0123456789abcdefghijklmnop"
    done = subprocess.run(["bash", "-c", command], capture_output=True, cwd=tmp_path, env=env, timeout=30, check=False)
    assert json.loads(done.stdout)["choices"][0]["message"]["content"] == "chat answer"
    first, again = proxy.wait_for_calls(2)
    assert (again["session"], again["api"]) == (first["session"], first["api"])
