"""Big calls for the call and diff pages' tests: a session of two calls whose prompt is ``size``
bytes of agent-shaped messages (tool calls and results), the second with an edit in the middle
(a break) and two more messages, with hostile markup and multi-byte text inside the blocks."""

from __future__ import annotations

import json
from pathlib import Path

from support.factories import T0, analysed, anthropic_request, anthropic_response, make_exchange

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
MULTI = "héllo — 你好 🎉 "
RESULT_CHARS = 6000


def _result(i: int) -> str:
    head = f"result {i}: {HOSTILE} {MULTI}"
    return (head + f"line {i} of a file the tool read. " * (RESULT_CHARS // 30))[:RESULT_CHARS]


def big_messages(size: int) -> list[dict]:
    """About ``size`` bytes of user / assistant turns, each a tool call and its result."""
    messages: list[dict] = [{"role": "user", "content": "Fix the failing test. " + MULTI * 10}]
    total, i = len(json.dumps(messages)), 0
    while total < size:
        pair = [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"path": f"f{i}.py"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": _result(i)}]},
        ]
        messages += pair
        total += len(json.dumps(pair))
        i += 1
    return messages


def big_session(tmp: Path, size: int, session: str = "big") -> tuple[dict, dict]:
    """A store at ``tmp/captures.db`` holding the two calls; returns their request bodies."""
    system = [{"type": "text", "text": "You are a coding agent. " * 400, "cache_control": {"type": "ephemeral"}}]
    first = anthropic_request(big_messages(size), system=system)
    edited = json.loads(json.dumps(first["messages"]))
    middle = (len(edited) // 2) & ~1  # an even index: a tool result
    block = edited[middle]["content"][0]
    block["content"] = block["content"][:3000] + " EDITED BY THE CLIENT " + block["content"][3000:]
    edited += [
        {"role": "assistant", "content": "I read them all."},
        {"role": "user", "content": "Now the last one: " + HOSTILE},
    ]
    second = {**first, "messages": edited}
    exchanges = [
        make_exchange(request=body, response=anthropic_response(f"done {n}"), session_label=session, started_at=T0 + n)
        for n, body in enumerate((first, second), 1)
    ]
    db, _ = analysed(tmp / "captures.db", exchanges)
    db.conn.close()
    return first, second
