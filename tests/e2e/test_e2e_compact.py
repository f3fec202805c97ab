"""OpenAI's compaction endpoint through the daemon: the real SDK's responses.compact() is recorded,
and the next call that carries its output is marked `compaction`, pointing at the item."""

from __future__ import annotations

import pytest

from support import sdk_clients
from support.inspector_bodies import long_text

KEY = "sk-test-compact-0123456789abcdef"
MODEL = "gpt-5"
HISTORY = long_text(800, "history")


@pytest.fixture(autouse=True)
def _analysis_never_fails(proxy):
    yield
    stats_now = proxy.daemon.writer.stats()
    assert stats_now.analysis_failed == 0 and stats_now.failed == 0, stats_now.last_error


def test_compact_is_recorded_and_its_output_marks_the_next_call(proxy, sim):
    client = sdk_clients.OpenAI(api_key=KEY, base_url=proxy.url + "/openai/v1", max_retries=0)
    sim.state().set_script(
        [{"text": "first answer " + HISTORY}, {"text": "A short summary of the work."}, {"text": "carrying on"}]
    )
    history: list = [{"role": "user", "content": "Start the task."}]
    first = client.responses.create(model=MODEL, input=history)
    answer = [{"type": "output_text", "text": first.output_text}]
    history += [
        {"type": "message", "role": "assistant", "content": answer},
        {"role": "user", "content": "Now compact."},
    ]
    raw = client.responses.with_raw_response.compact(model=MODEL, input=history)
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    [item] = [o for o in compacted.output if o.type == "compaction"]
    # The output as sent (the SDK's models would re-serialise the user messages as output messages).
    following = [*raw.http_response.json()["output"], {"role": "user", "content": "Go on."}]
    client.responses.create(model=MODEL, input=following)

    rows = proxy.wait_for_calls(3)
    compact_row, after = rows[1], rows[2]
    assert compact_row["path"] == "/v1/responses/compact" and compact_row["api"] == "openai.responses"
    assert compact_row["outcome"] == "ok" and compact_row["usage"]["input"] == compacted.usage.input_tokens
    assert compact_row["usage"]["output"] == compacted.usage.output_tokens
    assert compact_row["tokens_estimated"] > 0
    index = next(i for i, o in enumerate(following) if o.get("type") == "compaction")
    [marker] = [m for m in after["markers"] or [] if m["kind"] == "compaction"]
    assert marker["pointer"] == f"/input/{index}" and marker["detail"]["evidence"] == "compaction_item"
    assert item.id and after["session"] == compact_row["session"] == rows[0]["session"]
