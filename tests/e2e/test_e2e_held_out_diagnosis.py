"""The provider-diagnosis held-out check, against an INDEPENDENT fake provider (``support/fake_diagnosing_provider.py``,
written from the providers' docs, not the simulator) behind the INSTALLED `ctxscope serve`: real SDKs
send an Anthropic session with a system-prompt break and a Responses session with a tools change,
JSON and streamed; the provider's diagnosis is visible on every call that had one (`show`, `calls`,
the call and session API), agrees with ctxscope's verdict, and `stats` counts 100% agreement.
Also: two runs of an id-less SDK script are never one thread (docs/architecture.md, "Cache
verdicts", "Sessions and threads")."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from ctxscope.inspector.store import queries

from support import sdk_clients
from support.fake_diagnosing_provider import running_fake_provider
from support.serve_process import CTXSCOPE, running_serve

BETA = "cache-diagnosis-2026-04-07"
SYSTEM = "You review code carefully, cite the lines you mean and answer briefly. " * 90
TOOLS = [{"name": "read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}}]
FUNCS = [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}, "strict": False}]


def _cli(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [str(CTXSCOPE), *args, "--db", str(tmp_path / "c.db")],
        capture_output=True,
        text=True,
        env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def _api(base: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}/_ctxscope/api/{path}", timeout=20) as resp:
        return json.loads(resp.read())


def _answer_id(call: dict) -> str:
    """The provider's id of the answer the call API shows."""
    return call["response"]["id"]


def _stored(db: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 60
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            conn = queries.open_db(db)
            try:
                rows = [queries.get_call(conn, r["id"]) for r in queries.list_calls(conn, newest_first=False)]
            finally:
                conn.conn.close()
            if len(rows) >= n and all(r.get("relation") for r in rows):
                return rows
        time.sleep(0.1)
    raise AssertionError(f"expected {n} analysed calls, found {len(rows)}")


def _anthropic_session(base: str) -> list[str]:
    client = sdk_clients.Anthropic(
        api_key="sk-ant-heldout-" + secrets.token_hex(8), base_url=base + "/s/anth/u/fake", max_retries=0
    )
    ids: list[str] = []

    def ask(system: str, history: list, stream: bool) -> str:
        kwargs = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "tools": TOOLS,
            "messages": history,
            "betas": [BETA],
            "diagnostics": {"previous_message_id": ids[-1] if ids else None},
        }
        if stream:
            with client.beta.messages.stream(**kwargs) as s:
                final = s.get_final_message()
        else:
            final = client.beta.messages.create(**kwargs)
        ids.append(final.id)
        history += [{"role": "assistant", "content": final.content[0].text}]
        return final

    history: list = [{"role": "user", "content": "Look at main.py please."}]
    assert ask(SYSTEM, history, False).diagnostics is None  # the first turn: nothing to compare
    history.append({"role": "user", "content": "And utils.py?"})
    assert ask(SYSTEM, history, True).diagnostics is None  # appended only: no divergence
    history.append({"role": "user", "content": "Now the tests."})
    broke = ask(SYSTEM + " Be terse.", history, False)  # the deliberate system-prompt break
    assert broke.diagnostics.cache_miss_reason.type == "system_changed"
    history.append({"role": "user", "content": "Thanks, and the README?"})
    assert ask(SYSTEM + " Be terse.", history, True).diagnostics is None
    return ids


def _responses_session(base: str) -> None:
    client = sdk_clients.OpenAI(
        api_key="sk-heldout-" + secrets.token_hex(8), base_url=base + "/s/resp/u/fake/v1", max_retries=0
    )
    history: list = [{"role": "user", "content": "Summarise the repository."}]
    previous: str | None = None

    def ask(tools: list, stream: bool):
        nonlocal previous, history
        kwargs: dict = {
            "model": "gpt-5.6",
            "instructions": SYSTEM,
            "input": history,
            "tools": tools,
            "prompt_cache_key": "heldout",
        }
        if previous:
            kwargs["prompt_cache_options"] = {"comparison_response_id": previous}
        if stream:
            with client.responses.stream(**kwargs) as s:
                final = s.get_final_response()
        else:
            final = client.responses.create(**kwargs)
        previous = final.id
        history = history + [o.model_dump(exclude_none=True) for o in final.output]
        return final

    assert ask(FUNCS, False).prompt_cache_diagnostics is None
    history.append({"role": "user", "content": "More."})
    assert ask(FUNCS, False).prompt_cache_diagnostics.type == "cache_hit"
    history.append({"role": "user", "content": "Again."})
    changed = [{**FUNCS[0], "description": "Read any file."}]  # the deliberate tools change
    assert ask(changed, True).prompt_cache_diagnostics.reason == "tools_changed"
    history.append({"role": "user", "content": "Once more."})
    assert ask(changed, True).prompt_cache_diagnostics.type == "cache_hit"


@pytest.fixture
def fake():
    with running_fake_provider() as running:
        yield running


def test_the_diagnosis_of_an_independent_provider_is_shown_and_agrees(tmp_path, fake):
    provider, url = fake
    config = tmp_path / "ctxscope.toml"
    config.write_text(f'[upstreams]\nfake = "{url}"\n')
    with running_serve(tmp_path, "--config", str(config)) as (_, base):
        _anthropic_session(base)
        _responses_session(base)
        rows = _stored(tmp_path / "c.db", 8)
        diagnosed = {cid for cid, d in provider.diagnosed if d is not None}
        session_api = {s: _api(base, f"session?s={s}&limit=50") for s in ("anth", "resp")}
        call_api = {r["id"]: _api(base, f"call?id={r['id']}") for r in rows}
    anth = [r for r in rows if r["session"] == "anth"]
    resp = [r for r in rows if r["session"] == "resp"]
    assert [r["relation"] for r in anth] == ["EPOCH_START", "APPEND_ONLY", "DIVERGED", "APPEND_ONLY"]
    assert [r["relation"] for r in resp] == ["EPOCH_START", "APPEND_ONLY", "DIVERGED", "APPEND_ONLY"]
    assert anth[2]["cache_verdict"] == "client_break" and anth[2]["cache"]["break_pointer"].startswith("/system")
    assert resp[2]["cache"]["break_pointer"].startswith("/tools"), resp[2]["cache"]

    statuses = [r["cache"]["provider_diagnostics"]["status"] for r in anth]
    assert statuses == ["baseline", "no_divergence", "system_changed", "no_divergence"]
    assert [(r["cache"]["provider_diagnostics"] or {}).get("status") for r in resp] == [
        None,
        "cache_hit",
        "cache_miss",
        "cache_hit",
    ]
    assert resp[2]["cache"]["provider_diagnostics"]["reason"] == "tools_changed"
    # every call the provider diagnosed, and only those with a comparison, is held against ours: all agree
    compared = anth[1:] + resp[1:]
    assert [r["cache"]["provider_agreement"] for r in compared] == ["agree"] * 6
    assert diagnosed == {_answer_id(call_api[r["id"]]) for r in (anth[2], resp[1], resp[2], resp[3])}, call_api

    # visible on every call that had one: show, calls, the call and session API
    for r in compared:
        shown = _cli(tmp_path, "show", r["id"])
        assert "agrees with ctxscope's verdict" in shown, shown
        assert r["cache"]["provider_diagnostics"] == call_api[r["id"]]["call"]["cache"]["provider_diagnostics"]
        sentence = call_api[r["id"]]["call"]["cache"]["provider_sentence"]
        assert sentence and "agree" in sentence, sentence  # the call page says it in words
    for s, page in session_api.items():
        assert page["summary"]["provider_agreement"]["agree"] == 3, (s, page["summary"])
        assert [c.get("cache", {}).get("provider_agreement") for c in page["calls"]][1:] == ["agree"] * 3, page["calls"]
    assert _cli(tmp_path, "calls", "--session", "anth").count("agree") == 3

    stats = json.loads(_cli(tmp_path, "stats", "--json"))["provider_agreement"]
    assert (stats["agree"], stats["disagree"], stats["pending"], stats["rate"]) == (6, 0, 0, 1.0)
    assert {s: c["rate"] for s, c in stats["by_session"].items()} == {"anth": 1.0, "resp": 1.0}


def _id_less_script(base: str) -> None:
    """What a user's script does: a fresh SDK client, no session id, two turns of one chat."""
    client = sdk_clients.Anthropic(api_key="sk-ant-script-0123456789", base_url=base + "/u/fake", max_retries=0)
    history: list = [{"role": "user", "content": "Plan the refactor of the parser."}]
    for follow_up in ("Go on.", "Finish."):
        answer = client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            messages=history,
        )
        history += [{"role": "assistant", "content": answer.content[0].text}, {"role": "user", "content": follow_up}]


def test_two_runs_of_an_id_less_script_are_never_one_thread(tmp_path, fake):
    _provider, url = fake
    config = tmp_path / "ctxscope.toml"
    config.write_text(f'[upstreams]\nfake = "{url}"\n')
    with running_serve(tmp_path, "--config", str(config)) as (_, base):
        _id_less_script(base)
        first = _stored(tmp_path / "c.db", 2)
        _id_less_script(base)  # the same script again: its first call repeats the first run's first call
        rows = _stored(tmp_path / "c.db", 4)
    assert [r["id"] for r in rows[:2]] == [r["id"] for r in first]
    one, two = rows[:2], rows[2:]
    assert len({r["thread"] for r in one}) == 1 and len({r["thread"] for r in two}) == 1
    assert one[0]["thread"] != two[0]["thread"], [(r["session"], r["thread"], r["relation"]) for r in rows]
    assert two[0]["relation"] == "EPOCH_START" and two[1]["relation"] == "APPEND_ONLY"
    assert two[1]["predecessor"] == two[0]["id"]
