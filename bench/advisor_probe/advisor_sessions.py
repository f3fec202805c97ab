"""Sessions with one cache-hostile cause each, for Anthropic Messages and OpenAI Responses, and the
same session without that cause (what the advice should come close to when re-sent).

Causes: ``timestamp`` (a changing minute in the system prompt), ``tool_order`` (the tools
serialised in another order once, half-way), ``billing_header`` (Claude Code's billing header, a
new hash each call, to a third-party upstream), ``ttl_gaps`` (6-minute gaps on a 5-minute TTL).
Pure dicts and captured calls: ``bench/advisor.py`` and the tests (through
``tests/support/advisor_sessions.py``) store or send them.
"""

from __future__ import annotations

import json
from typing import Any

from ctxscope.proxy.exchange import Exchange

CAUSES = ("timestamp", "tool_order", "billing_header", "ttl_gaps")
PROVIDERS = ("anthropic", "responses")
T0 = 1_760_000_000.0
CALLS = 8
TOOL_NAMES = ("Read", "Edit", "Bash", "Grep", "Glob", "Write")


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _billing(i: int) -> str:
    return f"x-anthropic-billing-header: cc_version=2.1.{i}.c4f; cc_entrypoint=cli; cch={(i * 7919) % 65536:05x};"


def _stamp(i: int) -> str:
    return f"Current time: 2026-12-01T10:{i:02d}:00Z."


def _tools(provider: str, reordered: bool) -> list[dict]:
    names = list(reversed(TOOL_NAMES)) if reordered else list(TOOL_NAMES)
    if provider == "anthropic":
        return [{"name": n, "description": words(180, n), "input_schema": {"type": "object"}} for n in names]
    return [
        {"type": "function", "name": n, "description": words(180, n), "parameters": {"type": "object"}} for n in names
    ]


def bodies(provider: str, cause: str, *, fixed: bool = False) -> list[dict]:
    """The session's request bodies, call by call (``fixed``: without the cause)."""
    out = []
    rounds: list[tuple[str, str, str]] = []  # (call id, path, result text) of the earlier tool rounds
    for i in range(CALLS):
        head = _stamp(0 if fixed else i) + " " if cause == "timestamp" else ""
        reordered = cause == "tool_order" and not fixed and i >= CALLS // 2
        billing = cause == "billing_header" and not fixed
        ttl = "1h" if cause == "ttl_gaps" and fixed else None
        if provider == "anthropic":
            out.append(_anthropic(i, head, reordered, billing, ttl, rounds))
        else:
            out.append(_responses(i, head, reordered, billing, ttl is not None, rounds))
        rounds.append((f"call_{i}", f"src/f{i}.py", words(400, f"line{i}x")))
    return json.loads(json.dumps(out))


def _anthropic(i: int, head: str, reordered: bool, billing: bool, ttl: str | None, rounds: list) -> dict:
    marker: dict[str, Any] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    system = [
        {"type": "text", "text": head + "You are a coding agent working in the user's repository."},
        {"type": "text", "text": words(2200, "policy"), "cache_control": marker},
    ]
    if billing:
        system.insert(0, {"type": "text", "text": _billing(i)})
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "fix the failing test"}]}]
    for call_id, path, result in rounds:
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call_id, "name": "Read", "input": {"path": path}}],
            }
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}]}
        )
    messages[-1]["content"][-1]["cache_control"] = dict(marker)
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": system,
        "tools": _tools("anthropic", reordered),
        "messages": messages,
    }


def _responses(i: int, head: str, reordered: bool, billing: bool, long_ttl: bool, rounds: list) -> dict:
    instructions = head + "You are a coding agent working in the user's repository.\n" + words(2200, "policy")
    if billing:
        instructions = _billing(i) + "\n" + instructions
    items: list[dict] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the failing test"}]}
    ]
    for call_id, path, result in rounds:
        items.append(
            {"type": "function_call", "call_id": call_id, "name": "Read", "arguments": json.dumps({"path": path})}
        )
        items.append({"type": "function_call_output", "call_id": call_id, "output": result})
    body: dict[str, Any] = {
        "model": "gpt-5",
        "instructions": instructions,
        "tools": _tools("responses", reordered),
        "input": items,
        "prompt_cache_key": "advisor-session",
        "store": False,
    }
    if long_ttl:
        body["prompt_cache_options"] = {"ttl": "30m"}
    return body


def gaps(cause: str) -> float:
    return 360.0 if cause == "ttl_gaps" else 20.0


def times(cause: str) -> list[float]:
    return [T0 + i * gaps(cause) for i in range(CALLS)]


def expected(provider: str, cause: str) -> tuple[str, str]:
    """The cause the top advice names and the pointer it points at."""
    system = "/system/0" if provider == "anthropic" else "/instructions"
    return {
        "timestamp": ("changing_span", system),
        "tool_order": ("tool_order", "/tools/0"),
        "billing_header": ("billing_header", system),
        "ttl_gaps": ("ttl_gaps", "/system/1" if provider == "anthropic" else "/prompt_cache_options/ttl"),
    }[cause]


def _response(provider: str, i: int) -> dict:
    if provider == "anthropic":
        return {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 3},
        }
    return {
        "id": f"resp_{i}",
        "object": "response",
        "model": "gpt-5",
        "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
        "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
    }


def exchanges(provider: str, cause: str, label: str) -> list[Exchange]:
    """The session as captured calls (one API key), labelled ``label``; the billing header's calls go
    to a third-party upstream."""
    upstream = {"anthropic": "https://api.anthropic.com", "responses": "https://api.openai.com"}[provider]
    if cause == "billing_header":
        upstream = "https://llm-gateway.example.com"
    out = []
    for i, (body, t) in enumerate(zip(bodies(provider, cause), times(cause), strict=True)):
        out.append(
            Exchange(
                id=f"{int(t) * 1000:016x}{provider[:3]}{cause[:3]}{i:03d}",
                provider="anthropic" if provider == "anthropic" else "openai",
                upstream=upstream,
                method="POST",
                path="/v1/messages" if provider == "anthropic" else "/v1/responses",
                query="",
                session_label=label,
                annotations=(),
                request_headers=(("content-type", "application/json"),),
                key_fingerprint="a" * 16,
                request_body=json.dumps(body).encode(),
                status=200,
                response_headers=(("content-type", "application/json"),),
                response_body=json.dumps(_response(provider, i)).encode(),
                started_at=t,
                first_byte_at=t + 0.2,
                ended_at=t + 0.4,
                outcome="ok",
                error=None,
                client="advisor-sessions/1.0",
            )
        )
    return out
