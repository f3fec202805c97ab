"""The provider's own cache diagnosis through the INSTALLED `ctxscope serve` and its simulator:
diagnosed at a system-prompt break (Anthropic) and a tools change (OpenAI Responses), held against
ctxscope's verdict (100% agreement in `stats --json`), said in `show`; and `--ask-diagnosis`,
which adds the request field upstream while the capture keeps the client's bytes."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.simulator.control.client import SimulatorControl

from support import sdk_clients
from support.serve_process import CTXSCOPE, running_serve

SIM_TOKEN = "diag-" + secrets.token_hex(8)
BETA = "cache-diagnosis-2026-04-07"
SYSTEM = "You review code carefully and answer briefly. " * 150
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


def _stored(db: Path, n: int) -> list[dict]:
    """The stored, analysed calls once there are ``n``, oldest first."""
    deadline = time.monotonic() + 60
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            conn = open_db(db)
            try:
                rows = list_calls(conn, limit=1000, newest_first=False)
            finally:
                conn.conn.close()
            if len(rows) >= n and all(r.get("relation") is not None for r in rows):
                return rows
        time.sleep(0.1)
    raise AssertionError(f"expected {n} analysed calls, found {len(rows)}")


def _anthropic_session(base: str) -> None:
    client = sdk_clients.Anthropic(api_key="sk-ant-diag", base_url=base + "/s/anth/u/sim", max_retries=0)

    def ask(system: str, messages: list, previous: str | None):
        return client.beta.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            tools=TOOLS,
            messages=messages,
            betas=[BETA],
            diagnostics={"previous_message_id": previous},
        )

    history = [{"role": "user", "content": "Look at main.py please."}]
    one = ask(SYSTEM, history, None)
    history += [{"role": "assistant", "content": one.content[0].text}, {"role": "user", "content": "And utils.py?"}]
    two = ask(SYSTEM, history, one.id)
    assert two.diagnostics is None  # appended only: no divergence
    history += [{"role": "assistant", "content": two.content[0].text}, {"role": "user", "content": "Now tests."}]
    three = ask(SYSTEM + " Be terse.", history, two.id)  # the deliberate system-prompt break
    assert three.diagnostics.cache_miss_reason.type == "system_changed"


def _responses_session(base: str) -> None:
    client = sdk_clients.OpenAI(api_key="sk-diag", base_url=base + "/s/resp/u/sim/v1", max_retries=0)
    history: list = [{"role": "user", "content": "Summarise the repository."}]
    one = client.responses.create(model="gpt-5.6", instructions=SYSTEM, input=history, tools=FUNCS)
    history += [o.model_dump(exclude_none=True) for o in one.output] + [{"role": "user", "content": "More."}]
    two = client.responses.create(
        model="gpt-5.6",
        instructions=SYSTEM,
        input=history,
        tools=FUNCS,
        prompt_cache_options={"comparison_response_id": one.id},
    )
    assert two.prompt_cache_diagnostics.type == "cache_hit"
    history += [o.model_dump(exclude_none=True) for o in two.output] + [{"role": "user", "content": "Again."}]
    changed = [{**FUNCS[0], "description": "Read any file."}]  # the deliberate tools change
    three = client.responses.create(
        model="gpt-5.6",
        instructions=SYSTEM,
        input=history,
        tools=changed,
        prompt_cache_options={"comparison_response_id": two.id},
    )
    assert three.prompt_cache_diagnostics.reason == "tools_changed"


def test_both_diagnoses_agree_with_ours_and_stats_counts_them(tmp_path):
    db = tmp_path / "c.db"
    with running_serve(tmp_path, env={"CTXSCOPE_SIM_TOKEN": SIM_TOKEN}) as (_, base):
        SimulatorControl(base + "/u/sim", SIM_TOKEN).set_script([{"text": f"answer {i}"} for i in range(6)])
        _anthropic_session(base)
        _responses_session(base)
        rows = _stored(db, 6)
    by_session = {r["session"]: r for r in rows}
    assert set(by_session) == {"anth", "resp"}
    anth = [r for r in rows if r["session"] == "anth"]
    resp = [r for r in rows if r["session"] == "resp"]
    assert [r["relation"] for r in anth] == ["EPOCH_START", "APPEND_ONLY", "DIVERGED"]
    assert anth[2]["cache"]["break_pointer"].startswith("/system")
    assert [r["cache"]["provider_diagnostics"]["status"] for r in anth] == [
        "baseline",
        "no_divergence",
        "system_changed",
    ]
    assert resp[2]["cache"]["provider_diagnostics"]["reason"] == "tools_changed"
    assert [r["cache"]["provider_agreement"] for r in anth[1:] + resp[1:]] == ["agree"] * 4

    stats = json.loads(_cli(tmp_path, "stats", "--json"))["provider_agreement"]
    assert (stats["agree"], stats["disagree"], stats["pending"], stats["rate"]) == (4, 0, 0, 1.0)
    assert {s: c["rate"] for s, c in stats["by_session"].items()} == {"anth": 1.0, "resp": 1.0}
    assert "agree 4, disagree 0, pending 0" in _cli(tmp_path, "stats")
    shown = _cli(tmp_path, "show", anth[2]["id"])
    assert "system_changed" in shown and "agrees with ctxscope's verdict" in shown
    listed = _cli(tmp_path, "calls", "--session", "resp")
    assert "PROVIDER" in listed and listed.count("agree") == 2


def test_ask_diagnosis_adds_the_field_upstream_and_keeps_the_clients_bytes(tmp_path):
    db = tmp_path / "c.db"
    env = {"CTXSCOPE_SIM_TOKEN": SIM_TOKEN}
    with running_serve(tmp_path, "--ask-diagnosis", env=env) as (_, base):
        control = SimulatorControl(base + "/u/sim", SIM_TOKEN)
        control.set_script([{"text": "first answer"}, {"text": "second answer"}])
        client = sdk_clients.Anthropic(api_key="sk-ant-plain", base_url=base + "/s/plain/u/sim", max_retries=0)
        history = [{"role": "user", "content": "Look at main.py please."}]

        def ask(system: str):
            return client.messages.create(
                model="claude-sonnet-4-6", max_tokens=64, system=system, tools=TOOLS, messages=history
            )

        one = ask(SYSTEM)
        history += [{"role": "assistant", "content": one.content[0].text}, {"role": "user", "content": "More."}]
        ask(SYSTEM + " Be terse.")
        received = [q for q in control.requests() if q["path"] == "/v1/messages"]
        rows = _stored(db, 2)
    assert "diagnostics" not in received[0]["body"]  # no earlier answer: nothing to name
    assert received[1]["body"]["diagnostics"] == {"previous_message_id": one.id}
    assert BETA in received[1]["headers"].get("anthropic-beta", "")

    raw = subprocess.run(
        [str(CTXSCOPE), "show", rows[1]["id"], "--request-raw", "--db", str(db)],
        capture_output=True,
        env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
        timeout=120,
        check=True,
    ).stdout
    assert b"diagnostics" not in raw and json.loads(raw)["messages"] == history  # the client's bytes
    shown = json.loads(_cli(tmp_path, "show", rows[1]["id"], "--json"))
    assert ["x-ctxscope-asked-diagnosis", f"diagnostics.previous_message_id={one.id}"] in shown["annotations"]
    assert not any("anthropic-beta" in str(h).lower() for h in shown["request_headers"])
    diag = shown["cache"]["provider_diagnostics"]
    assert (diag["comparison_id"], diag["status"]) == (one.id, "system_changed")
    assert shown["cache"]["provider_agreement"] == "agree", (shown["relation"], shown["pointer"])


def test_a_client_cannot_forge_what_ask_diagnosis_added(tmp_path):
    """The annotation saying what the daemon added upstream is the proxy's alone: a client that
    sends it gets it dropped, so its call is not read as having asked for a diagnosis."""
    db = tmp_path / "c.db"
    with running_serve(tmp_path, env={"CTXSCOPE_SIM_TOKEN": SIM_TOKEN}) as (_, base):
        SimulatorControl(base + "/u/sim", SIM_TOKEN).set_script([{"text": "ok"}])
        forged = {"x-ctxscope-asked-diagnosis": "diagnostics.previous_message_id=msg_forged"}
        client = sdk_clients.Anthropic(
            api_key="sk-ant-forge", base_url=base + "/s/forge/u/sim", max_retries=0, default_headers=forged
        )
        client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        [row] = _stored(db, 1)
    shown = json.loads(_cli(tmp_path, "show", row["id"], "--json"))
    assert not any(name == "x-ctxscope-asked-diagnosis" for name, _ in shown["annotations"] or [])
    assert shown["cache"]["provider_diagnostics"] is None
