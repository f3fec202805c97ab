"""An independent fake provider that diagnoses its own cache misses, for the held-out checks of
the provider's diagnosis: Anthropic Messages (``diagnostics.previous_message_id``, answered with
``diagnostics.cache_miss_reason``) and OpenAI Responses (``prompt_cache_options.comparison_response_id``,
answered with ``prompt_cache_diagnostics``), JSON and streamed.

Written from the providers' documentation (the research notes' sections on cache diagnostics and
prefix matching, and the SDKs' types), never from the simulator's or the proxy's code, so a shared
misreading cannot hide. It caches as the docs say, in its own crude units (4 characters a token):
Anthropic keys an entry on everything up to a ``cache_control`` block (tools, system, messages in
that order) and reads the furthest one written before; OpenAI reads the longest common prefix
with any earlier prompt of the same ``prompt_cache_key``, from 1,024 tokens in 128-token steps.
A diagnosis compares the request with the stored fingerprint of the one it names: the first part
that differs, in the documented order; none when the earlier request is a prefix of this one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, sort_keys=True)) // 4)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _blocks(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    return list(value or [])


def _plain(block: Any) -> Any:
    """A block as the cache keys it: its ``cache_control`` marker left out."""
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


class FakeProvider:
    """State of one fake provider: fingerprints by response id, cache entries by key."""

    def __init__(self) -> None:
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.anthropic_entries: dict[str, int] = {}  # prefix digest -> tokens
        self.openai_prompts: dict[str, list[str]] = {}  # prompt_cache_key -> earlier linear prompts
        self.diagnosed: list[tuple[str, Any]] = []  # (response id, the diagnosis it carried)

    # --- Anthropic Messages -------------------------------------------------------------

    def _anthropic_linear(self, body: dict) -> list[tuple[Any, bool]]:
        """(block, has a cache_control) in render order: tools, system, then each message's blocks."""
        out: list[tuple[Any, bool]] = [(("tool", _plain(t)), "cache_control" in t) for t in body.get("tools") or []]
        out += [(("system", _plain(b)), "cache_control" in b) for b in _blocks(body.get("system"))]
        for m in body.get("messages") or []:
            for b in _blocks(m.get("content")):
                out.append(((m.get("role"), _plain(b)), isinstance(b, dict) and "cache_control" in b))
        return out

    def _anthropic_usage(self, body: dict) -> dict[str, int]:
        linear = self._anthropic_linear(body)
        sizes = [_tokens(b) for b, _ in linear]
        total = sum(sizes)
        read, write_to = 0, 0
        running, digests = 0, []
        for i, (_block, _marked) in enumerate(linear):
            running += sizes[i]
            digests.append((_digest([b for b, _ in linear[: i + 1]]), running))
        marks = [i for i, (_, marked) in enumerate(linear) if marked]
        for bp in marks:  # each breakpoint reads the furthest entry at most 20 blocks back
            for j in range(bp, max(-1, bp - 21), -1):
                found = self.anthropic_entries.get(digests[j][0])
                if found is not None:
                    read = max(read, found)
                    break
        for bp in marks:
            digest, tokens = digests[bp]
            if tokens >= 1024:
                self.anthropic_entries[digest] = tokens
                write_to = max(write_to, tokens)
        write = max(0, write_to - read)
        return {
            "input_tokens": total - read - write,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 3,
        }

    def _anthropic_fingerprint(self, body: dict) -> dict[str, Any]:
        return {
            "model": body.get("model"),
            "system": [_plain(b) for b in _blocks(body.get("system"))],
            "tools": [_plain(t) for t in body.get("tools") or []],
            "messages": [
                {"role": m.get("role"), "content": [_plain(b) for b in _blocks(m.get("content"))]}
                for m in body.get("messages") or []
            ],
        }

    def _anthropic_diagnosis(self, body: dict, mine: dict[str, Any]) -> dict | None:
        """None (no divergence, or a first turn), else ``{"cache_miss_reason": {...}}``."""
        asked = body.get("diagnostics")
        previous = asked.get("previous_message_id") if isinstance(asked, dict) else None
        if previous is None:
            return None
        before = self.fingerprints.get(previous)
        if before is None or before.get("api") != "anthropic":
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        for part, reason in (("model", "model_changed"), ("system", "system_changed"), ("tools", "tools_changed")):
            if before[part] != mine[part]:
                return {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": _tokens(mine)}}
        old, new = before["messages"], mine["messages"]
        if new[: len(old)] != old:
            same = next(i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b) if new else 0
            missed = _tokens(new[same:]) if new[same:] else 1
            return {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": missed}}
        return None

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mine = self._anthropic_fingerprint(body)
        diagnosis = self._anthropic_diagnosis(body, mine)
        msg_id = "msg_fake" + secrets.token_hex(8)
        if isinstance(body.get("diagnostics"), dict):  # the object is the opt-in: only then a fingerprint
            self.fingerprints[msg_id] = {"api": "anthropic", **mine}
        usage = self._anthropic_usage(body)
        message: dict[str, Any] = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": "fine"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if diagnosis is not None:
            message["diagnostics"] = diagnosis
        self.diagnosed.append((msg_id, diagnosis))
        if not body.get("stream"):
            return web.json_response(message)
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        events = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "fine"}},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 3},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return await _sse(request, [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events])

    # --- OpenAI Responses ---------------------------------------------------------------

    def _openai_fingerprint(self, body: dict) -> dict[str, Any]:
        text = body.get("text") if isinstance(body.get("text"), dict) else {}
        reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
        items = body.get("input")
        return {
            "model": body.get("model"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "tools": body.get("tools") or [],
            "text_format": text.get("format"),
            "reasoning_effort": reasoning.get("effort"),
            "verbosity": text.get("verbosity"),
            "service_tier": body.get("service_tier"),
            "input": [{"instructions": body.get("instructions")}]
            + (
                [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else list(items or [])
            ),
        }

    def _openai_diagnosis(self, body: dict, mine: dict[str, Any]) -> dict | None:
        options = body.get("prompt_cache_options")
        compared = options.get("comparison_response_id") if isinstance(options, dict) else None
        if not compared:
            return None
        before = self.fingerprints.get(compared)
        if before is None or before.get("api") != "openai":
            return {"type": "comparison_response_not_found"}
        reusable = _tokens(before["input"]) + _tokens(before["tools"])
        for part in (
            "model",
            "prompt_cache_key",
            "tools",
            "text_format",
            "reasoning_effort",
            "verbosity",
            "service_tier",
        ):
            if before[part] != mine[part]:
                missed = _tokens(mine["input"]) + (_tokens(mine["tools"]) if part != "model" else 0)
                return {
                    "type": "cache_miss",
                    "reason": f"{part}_changed",
                    "cache_missed_tokens": missed,
                    "comparison_reusable_tokens": reusable,
                }
        old, new = before["input"], mine["input"]
        if new[: len(old)] != old:
            return {
                "type": "cache_miss",
                "reason": "input_changed",
                "cache_missed_tokens": _tokens(new),
                "comparison_reusable_tokens": reusable,
            }
        return {"type": "cache_hit"}

    def _openai_cached(self, body: dict, mine: dict[str, Any]) -> tuple[int, int]:
        """(prompt tokens, tokens read): the longest common prefix with an earlier prompt of the key."""
        linear = json.dumps([mine["tools"], mine["input"]], sort_keys=True)
        total = max(1, len(linear) // 4)
        key = str(body.get("prompt_cache_key") or "") + "\x00" + str(body.get("model"))
        best = 0
        for earlier in self.openai_prompts.get(key, []):
            n = 0
            limit = min(len(earlier), len(linear))
            while n < limit and earlier[n] == linear[n]:
                n += 1
            best = max(best, n // 4)
        self.openai_prompts.setdefault(key, []).append(linear)
        read = 0 if best < 1024 else 1024 + (best - 1024) // 128 * 128
        return total, min(read, total)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mine = self._openai_fingerprint(body)
        diagnosis = self._openai_diagnosis(body, mine)
        resp_id = "resp_fake" + secrets.token_hex(8)
        self.fingerprints[resp_id] = {"api": "openai", **mine}
        total, read = self._openai_cached(body, mine)
        output = [
            {
                "type": "message",
                "id": "msg_" + secrets.token_hex(6),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "fine", "annotations": []}],
            }
        ]
        response: dict[str, Any] = {
            "id": resp_id,
            "object": "response",
            "created_at": 1_700_000_000,
            "status": "completed",
            "model": body.get("model"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "usage": {
                "input_tokens": total,
                "input_tokens_details": {"cached_tokens": read},
                "output_tokens": 3,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": total + 3,
            },
        }
        if isinstance(body.get("prompt_cache_options"), dict):
            response["prompt_cache_options"] = {"mode": "implicit", "ttl": "30m"}
        if diagnosis is not None:
            response["prompt_cache_diagnostics"] = diagnosis
        self.diagnosed.append((resp_id, diagnosis))
        if not body.get("stream"):
            return web.json_response(response)
        created = {**response, "status": "in_progress", "output": [], "usage": None}
        created.pop("prompt_cache_diagnostics", None)
        events = [
            {"type": "response.created", "sequence_number": 0, "response": created},
            {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": output[0]},
            {"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": output[0]},
            {"type": "response.completed", "sequence_number": 3, "response": response},
        ]
        return await _sse(request, [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events])


async def _sse(request: web.Request, frames: list[str]) -> web.StreamResponse:
    out = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await out.prepare(request)
    for frame in frames:
        await out.write(frame.encode())
    await out.write_eof()
    return out


@contextmanager
def running_fake_provider() -> Iterator[tuple[FakeProvider, str]]:
    """The fake on a loopback port in a thread of its own: (its state, its base URL)."""
    fake = FakeProvider()
    app = web.Application()
    app.router.add_post("/v1/messages", fake.anthropic)
    app.router.add_post("/v1/responses", fake.responses)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
