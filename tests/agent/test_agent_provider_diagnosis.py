"""ctxscope's own agent asks the providers for their cache diagnosis: real HTTP to the simulator,
which finds the answer the second request names."""

from __future__ import annotations

from ctxscope.agent.core.messages import user_message
from ctxscope.agent.core.model import ModelRequest
from ctxscope.agent.providers.anthropic import DIAGNOSIS_BETA, AnthropicClient
from ctxscope.agent.providers.openai_responses import OpenAIResponsesClient

from support.sim_fixtures import loop_simulator


async def _two_turns(client, state, path):
    first = ModelRequest(system="Be brief.", messages=(user_message("hello"),), tools=(), max_output_tokens=64)
    answer = await client.send(client.prepare(first))
    said = answer.message.with_meta(provider=client.provider, response_id=answer.response_id)
    second = ModelRequest(
        system="Be brief.", messages=(user_message("hello"), said, user_message("more")), tools=(), max_output_tokens=64
    )
    await client.send(client.prepare(second))
    sent = [q for q in state.requests() if q["path"].endswith(path)]
    return answer.response_id, sent


async def test_the_anthropic_client_names_the_previous_answer_with_the_beta_header():
    async with loop_simulator() as (state, url):
        client = AnthropicClient(base_url=url, model="claude-sim", api_key="sk-ant-test")
        try:
            first_id, sent = await _two_turns(client, state, "/v1/messages")
        finally:
            await client.aclose()
    assert [q["body"]["diagnostics"] for q in sent] == [
        {"previous_message_id": None},
        {"previous_message_id": first_id},
    ]
    assert all(DIAGNOSIS_BETA in q["headers"].get("anthropic-beta", "") for q in sent)
    assert first_id in state.fingerprints  # the simulator could compare with the answer named


async def test_the_responses_client_names_the_previous_response():
    async with loop_simulator() as (state, url):
        client = OpenAIResponsesClient(base_url=url + "/v1", model="gpt-5.6", api_key="sk-test")
        try:
            first_id, sent = await _two_turns(client, state, "/v1/responses")
        finally:
            await client.aclose()
    assert "prompt_cache_options" not in sent[0]["body"]  # nothing to compare on the first turn
    assert sent[1]["body"]["prompt_cache_options"] == {"comparison_response_id": first_id}
    assert first_id in state.fingerprints
