"""The simulator's cache diagnosis protocols (Anthropic's beta ``diagnostics`` and OpenAI's
``prompt_cache_diagnostics``), judged by the real SDKs: their typed fields are populated."""

from __future__ import annotations

import json

from support import sdk_clients

BETA = "cache-diagnosis-2026-04-07"
SYSTEM = " ".join(["policy"] * 1200)
TOOL = {"name": "read", "description": "read a file", "input_schema": {"type": "object", "properties": {}}}


def _anthropic(sim_alone):
    return sdk_clients.Anthropic(base_url=sim_alone.base_url, api_key="sk-ant-test", max_retries=0)


def _ask(client, previous, *, system=SYSTEM, model="claude-sim", messages=None, tools=None):
    return client.beta.messages.create(
        model=model,
        max_tokens=64,
        system=system,
        tools=tools or [TOOL],
        messages=messages or [{"role": "user", "content": "hello"}],
        betas=[BETA],
        diagnostics={"previous_message_id": previous},
    )


def test_anthropic_diagnosis_json_each_reason(sim_alone):
    client = _anthropic(sim_alone)
    first = _ask(client, None)
    assert first.diagnostics is None  # opted in with null: nothing to compare
    history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": first.content[0].text}]
    appended = _ask(client, first.id, messages=[*history, {"role": "user", "content": "more"}])
    assert appended.diagnostics is None  # only appended: no divergence
    system = _ask(client, first.id, system=SYSTEM + " changed")
    reason = system.diagnostics.cache_miss_reason
    assert reason.type == "system_changed" and reason.cache_missed_input_tokens >= 1200
    tools = _ask(client, first.id, tools=[{**TOOL, "description": "read any file"}])
    assert tools.diagnostics.cache_miss_reason.type == "tools_changed"
    model = _ask(client, first.id, model="claude-sim-2")
    assert model.diagnostics.cache_miss_reason.type == "model_changed"
    edited = _ask(client, appended.id, messages=[{"role": "user", "content": "hello!"}])
    assert edited.diagnostics.cache_miss_reason.type == "messages_changed"
    lost = _ask(client, "msg_01unknown")
    assert lost.diagnostics.cache_miss_reason.type == "previous_message_not_found"


def test_anthropic_diagnosis_needs_the_beta_header(sim_alone):
    client = _anthropic(sim_alone)
    first = _ask(client, None)
    raw = client.messages.with_raw_response.create(
        model="claude-sim",
        max_tokens=64,
        system=SYSTEM + " changed",
        messages=[{"role": "user", "content": "hello"}],
        extra_body={"diagnostics": {"previous_message_id": first.id}},
    )
    assert "diagnostics" not in json.loads(raw.http_response.text)


def test_anthropic_diagnosis_streamed_on_message_start_and_pending(sim_alone):
    client = _anthropic(sim_alone)
    first = _ask(client, None)
    kwargs = {
        "model": "claude-sim",
        "max_tokens": 64,
        "system": SYSTEM + " v2",
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "hello"}],
        "betas": [BETA],
        "diagnostics": {"previous_message_id": first.id},
    }
    with client.beta.messages.stream(**kwargs) as stream:
        starts = [e for e in stream if e.type == "message_start"]
        final = stream.get_final_message()
    assert starts[0].message.diagnostics.cache_miss_reason.type == "system_changed"
    assert final.diagnostics.cache_miss_reason.type == "system_changed"
    sim_alone.state.set_script([{"text": "later", "diagnosis_pending": True}])
    pending = client.beta.messages.create(**kwargs)
    assert pending.diagnostics is not None and pending.diagnostics.cache_miss_reason is None


def _openai(sim_alone):
    return sdk_clients.OpenAI(base_url=sim_alone.base_url + "/v1", api_key="sk-test", max_retries=0)


FUNC = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}, "strict": False}
INSTR = " ".join(["rules"] * 1200)


def test_responses_diagnosis_json_and_sse(sim_alone):
    client = _openai(sim_alone)
    first = client.responses.create(model="gpt-5.6", instructions=INSTR, input="hello", tools=[FUNC])
    options = {"comparison_response_id": first.id}
    history = [{"role": "user", "content": "hello"}, *[o.model_dump() for o in first.output]]
    hit = client.responses.create(
        model="gpt-5.6",
        instructions=INSTR,
        input=[*history, {"role": "user", "content": "more"}],
        tools=[FUNC],
        prompt_cache_options=options,
    )
    assert hit.prompt_cache_diagnostics.type == "cache_hit"
    assert hit.prompt_cache_options.comparison_response_id == first.id and hit.prompt_cache_options.ttl == "30m"
    changed = {**FUNC, "description": "now described"}
    with client.responses.stream(
        model="gpt-5.6", instructions=INSTR, input="hello", tools=[changed], prompt_cache_options=options
    ) as stream:
        final = stream.get_final_response()
    diag = final.prompt_cache_diagnostics
    assert diag.type == "cache_miss" and diag.reason == "tools_changed"
    assert diag.cache_missed_tokens >= 1200 and diag.comparison_reusable_tokens == 0
    edited = client.responses.create(
        model="gpt-5.6", instructions=INSTR + " edited", input="hello", tools=[FUNC], prompt_cache_options=options
    )
    assert edited.prompt_cache_diagnostics.reason == "input_changed"
    assert edited.prompt_cache_diagnostics.comparison_reusable_tokens > 0
    missing = client.responses.create(
        model="gpt-5.6", input="hello", prompt_cache_options={"comparison_response_id": "resp_nope"}
    )
    assert missing.prompt_cache_diagnostics.type == "comparison_response_not_found"
    plain = client.responses.create(model="gpt-5.6", input="hello")
    assert plain.prompt_cache_diagnostics is None and plain.prompt_cache_options is None


def test_responses_diagnosis_over_websocket(sim_alone):
    client = _openai(sim_alone)
    first = client.responses.create(model="gpt-5.6", instructions=INSTR, input="hello", tools=[FUNC])
    with client.responses.connect() as conn:
        conn.send(
            {
                "type": "response.create",
                "model": "gpt-5.6",
                "instructions": INSTR,
                "input": "hello",
                "tools": [{**FUNC, "description": "changed"}],
                "prompt_cache_options": {"comparison_response_id": first.id},
            }
        )
        for event in conn:
            if event.type == "response.completed":
                diag = event.response.prompt_cache_diagnostics
                break
    assert diag.type == "cache_miss" and diag.reason == "tools_changed"
