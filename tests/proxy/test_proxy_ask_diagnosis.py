"""``serve --ask-diagnosis``'s asker: what it adds to the bytes sent upstream, what it leaves alone,
and how it learns a conversation's latest answer id (plain and gzip answers)."""

from __future__ import annotations

import gzip
import json

from ctxscope.proxy.forward.ask_diagnosis import BETA, DiagnosisAsker
from ctxscope.proxy.forward.forwarder import Forwarder, ProxySettings

FIRST = {"role": "user", "content": "hello"}
HEADERS = [("Content-Type", "application/json"), ("x-api-key", "sk-ant-x")]


def _body(**extra) -> bytes:
    return json.dumps({"model": "m", "messages": [FIRST], **extra}, indent=1).encode()


def _learn(asker, asked, answer: bytes, encoding=None) -> None:
    asker.learn(asked, 200, [answer[:7], answer[7:]], encoding)


def test_the_first_call_is_sent_as_is_and_the_next_names_its_answer():
    asker = DiagnosisAsker()
    body = _body()
    first = asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, body, None)
    assert first is not None and first.added is None and first.body is body and first.headers is HEADERS
    _learn(asker, first, b'{"id":"msg_01abc","type":"message","content":[{"type":"tool_use","id":"toolu_1"}]}')
    second = asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, _body(system="changed"), None)
    assert second.added == "diagnostics.previous_message_id=msg_01abc"
    sent = json.loads(second.body)
    assert sent["diagnostics"] == {"previous_message_id": "msg_01abc"} and sent["system"] == "changed"
    assert second.body.startswith(_body(system="changed").rstrip()[:-1].rstrip())  # the client's bytes, then ours
    assert ("anthropic-beta", BETA) in second.headers and ("anthropic-beta", BETA) not in HEADERS


def test_a_beta_header_already_sent_gains_the_diagnosis_beta_once():
    asker = DiagnosisAsker()
    headers = [*HEADERS, ("anthropic-beta", "prompt-caching-2024-07-31")]
    first = asker.prepare("POST", "anthropic", "/v1/messages", headers, _body(), None)
    _learn(asker, first, b'{"id":"msg_1"}')
    second = asker.prepare("POST", "anthropic", "/v1/messages", headers, _body(), None)
    assert [v for n, v in second.headers if n == "anthropic-beta"] == [f"prompt-caching-2024-07-31,{BETA}"]


def test_what_it_leaves_alone():
    asker = DiagnosisAsker()
    first = asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, _body(), None)
    _learn(asker, first, b'{"id":"msg_1"}')
    own = _body(diagnostics={"previous_message_id": None})
    assert asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, own, None).added is None  # the client asked
    zipped = gzip.compress(_body())
    encoded = [*HEADERS, ("Content-Encoding", "gzip")]
    assert asker.prepare("POST", "anthropic", "/v1/messages", encoded, zipped, None) is None
    assert asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, b"[1, 2]", None) is None
    assert asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, b"{not json", None) is None
    assert asker.prepare("POST", "anthropic", "/v1/chat/completions", HEADERS, _body(), None) is None
    other = asker.prepare("POST", "anthropic", "/v1/messages", HEADERS, _body(), "another-label")
    assert other.added is None  # another conversation: its own answers only


def test_responses_learn_from_a_gzip_stream_and_keep_the_clients_own_options():
    asker = DiagnosisAsker()
    body = json.dumps({"model": "gpt-5.6", "input": "hi"}).encode()
    first = asker.prepare("POST", "openai", "/v1/responses", [], body, "lab")
    stream = b'event: response.created\ndata: {"response":{"id":"resp_77","output":[{"id":"msg_9"}]}}\n\n'
    _learn(asker, first, gzip.compress(stream), "gzip")
    second = asker.prepare("POST", "openai", "/v1/responses", [], body, "lab")
    assert json.loads(second.body)["prompt_cache_options"] == {"comparison_response_id": "resp_77"}
    own = json.dumps({"model": "gpt-5.6", "input": "hi", "prompt_cache_options": {"ttl": "12h"}}).encode()
    assert asker.prepare("POST", "openai", "/v1/responses", [], own, "lab").added is None


def test_off_by_default_the_forwarder_holds_no_asker():
    assert Forwarder(ProxySettings(upstreams={}, salt=b"s"), sink=None).asker is None  # type: ignore[arg-type]
    on = Forwarder(ProxySettings(upstreams={}, salt=b"s", ask_diagnosis=True), sink=None)  # type: ignore[arg-type]
    assert isinstance(on.asker, DiagnosisAsker)
