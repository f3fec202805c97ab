"""Identity at the edges, through the real writer and analyzer with recorded times: lineage holds
only from a thread's latest call within the idle gap, so two runs of an id-less script are never
one thread, and a model switch starts an epoch whose cost is the switch's."""

from __future__ import annotations

import json

from ctxscope.inspector.store import queries

from support.factories import analysed as run
from support.factories import anthropic_response
from support.factories import exchange_at as ex
from support.inspector_bodies import (
    assistant,
    claude_code_turns,
    default_system,
    long_text,
    make_anthropic_body,
    user,
)


def script_run() -> list[dict]:
    """What an id-less anthropic SDK script sends: a question, then a follow-up on the answer."""
    first = [user("What is the capital of France?")]
    second = [*first, assistant("Paris."), user("And of Italy?")]
    return [make_anthropic_body("You are terse.", None, first), make_anthropic_body("You are terse.", None, second)]


def calls(db):
    return [queries.get_call(db, r["id"]) for r in queries.list_calls(db, limit=None, newest_first=False)]


def test_two_runs_of_an_id_less_script_20s_apart_are_two_threads(tmp_path):
    bodies = script_run()
    db, _ = run(tmp_path / "c.db", [ex(bodies[0], 0), ex(bodies[1], 3), ex(bodies[0], 23), ex(bodies[1], 26)])
    a1, a2, b1, b2 = calls(db)
    assert a2["thread"] == a1["thread"] == a1["id"] and a2["grouped_by"] == "lineage"
    assert b1["thread"] == b1["id"] != a1["thread"] and b1["predecessor"] is None
    assert (b1["grouped_by"], b1["relation"], b1["epoch_reason"]) == ("client_gap", "EPOCH_START", "thread_start")
    assert b2["thread"] == b1["id"] and b2["predecessor"] == b1["id"] and b2["relation"] == "APPEND_ONLY"
    assert "DIVERGED" not in {c["relation"] for c in (a1, a2, b1, b2)}


def test_a_run_past_the_idle_gap_is_a_session_of_its_own(tmp_path):
    bodies = script_run()
    db, _ = run(tmp_path / "c.db", [ex(bodies[0], 0), ex(bodies[1], 3), ex(bodies[1], 3 + 16 * 60)])
    a1, _a2, late = calls(db)
    assert late["session"] != a1["session"] and late["grouped_by"] == "new" and late["predecessor"] is None


def test_a_turn_extending_the_latest_call_stays_in_its_thread(tmp_path):
    bodies = script_run()
    db, _ = run(tmp_path / "c.db", [ex(bodies[0], 0), ex(bodies[1], 14 * 60)])
    a1, a2 = calls(db)
    assert (a2["thread"], a2["predecessor"], a2["grouped_by"]) == (a1["id"], a1["id"], "lineage")


def test_a_model_switch_is_an_epoch_whose_cost_is_the_switchs_not_a_break(tmp_path):
    bodies = claude_code_turns(3, system=default_system(long_text(1500)))
    bodies[2]["model"] = "claude-opus-4-1"
    reads = [None, 1600, None]  # the switched call reads nothing: the other model has a cache of its own
    exchanges = [
        ex(
            body,
            10 * i,
            session_label="s",
            response_body=json.dumps(
                anthropic_response(
                    usage={"input_tokens": 30, "output_tokens": 5}
                    | ({"cache_read_input_tokens": reads[i]} if reads[i] else {"cache_creation_input_tokens": 1600})
                )
            ).encode(),
        )
        for i, body in enumerate(bodies)
    ]
    db, _ = run(tmp_path / "c.db", exchanges)
    _first, second, switched = calls(db)
    assert (second["relation"], second["cache_verdict"]) == ("APPEND_ONLY", "hit")
    assert (switched["relation"], switched["epoch_reason"]) == ("EPOCH_START", "model_change")
    assert switched["cache_verdict"] == "model_switch" and switched["cache_lost_tokens"] > 1000
    assert switched["predecessor"] == second["id"]
    [summary] = [s for s in queries.list_sessions(db) if s["session"] == "s"]
    assert summary["breaks"] == 0


def gemini(system: str, contents: list, tools: bool) -> dict:
    body: dict = {"systemInstruction": {"parts": [{"text": system}]}, "contents": contents}
    if tools:
        body["tools"] = [{"functionDeclarations": [{"name": "read_file", "description": "Read a file."}]}]
    return body


def gemini_call(body: dict, t: float, model: str):
    return ex(
        body,
        t,
        provider="gemini",
        upstream="https://generativelanguage.googleapis.com",
        path=f"/v1beta/models/{model}:generateContent",
        response_body=json.dumps(
            {
                "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}}],
                "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 2},
            }
        ).encode(),
    )


def test_a_router_call_with_its_own_system_prompt_is_a_side_thread_not_a_turn(tmp_path):
    """Gemini CLI: a routing call (its own system prompt, no tools) on the user's first turn, then the
    agent loop on the very same contents; the agent call shares no prompt prefix with the router's."""
    first_turn = [
        {"role": "user", "parts": [{"text": "This is the Gemini CLI. Today is Monday. " + long_text(200)}]},
        {"role": "user", "parts": [{"text": "Fix the failing test."}]},
    ]
    router = gemini("You are a routing classifier. Answer with the model tier to use.", first_turn, False)
    agent = gemini("You are an interactive CLI agent. " + long_text(800, "agent"), first_turn, True)
    agent2 = gemini(
        agent["systemInstruction"]["parts"][0]["text"],
        [
            *first_turn,
            {"role": "model", "parts": [{"text": "Reading it."}]},
            {"role": "user", "parts": [{"text": "Go."}]},
        ],
        True,
    )
    db, _ = run(
        tmp_path / "c.db",
        [
            gemini_call(router, 0, "gemini-2.5-flash-lite"),
            gemini_call(agent, 1, "gemini-2.5-pro"),
            gemini_call(agent2, 5, "gemini-2.5-pro"),
        ],
    )
    routed, loop, loop2 = calls(db)
    assert loop["predecessor"] is None and loop["thread"] == loop["id"] != routed["thread"]
    assert (loop["relation"], loop["epoch_reason"], loop["grouped_by"]) == ("EPOCH_START", "thread_start", "client_gap")
    assert loop["session"] == routed["session"]
    assert (loop2["relation"], loop2["predecessor"], loop2["thread"]) == ("APPEND_ONLY", loop["id"], loop["id"])
    assert "DIVERGED" not in {c["relation"] for c in (routed, loop, loop2)}


def test_an_edited_system_prompt_keeps_its_thread(tmp_path):
    contents = [
        {"role": "user", "parts": [{"text": "Context. " + long_text(100)}]},
        {"role": "user", "parts": [{"text": "Go."}]},
    ]
    before = gemini("You are an agent. " + long_text(300, "rules"), contents, False)
    after = gemini("You are an agent. Be terse. " + long_text(300, "rules"), contents, False)
    db, _ = run(tmp_path / "c.db", [gemini_call(before, 0, "gemini-2.5-pro"), gemini_call(after, 3, "gemini-2.5-pro")])
    first, edited = calls(db)
    assert (edited["relation"], edited["predecessor"], edited["thread"]) == ("DIVERGED", first["id"], first["id"])
