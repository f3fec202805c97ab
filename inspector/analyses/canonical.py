"""The canonical view of a prompt: ordered segments as the provider caches them.

A request body becomes a tuple of segments in cache order (Anthropic: tools, system, messages;
OpenAI Chat: tools, messages; OpenAI Responses: tools, instructions, input; Gemini: tools,
systemInstruction, contents), one per tool
definition, system block, message content block / tool call, or Responses item (one per content
part inside message items). Each segment keeps an RFC 6901 pointer into the *actual* body, so a
difference can always be shown where the client wrote it.

Each segment's hash covers only what the model sees. Normalised away: cache markers
(``cache_control``, ``prompt_cache_breakpoint``: kept beside the segment as ``breakpoint``),
key order, keys whose value is null or an empty list, the string form of content (``"hi"`` is
the single text block ``{"type": "text", "text": "hi"}``; Claude Code re-sends an earlier last
message as a plain string once it is no longer last), and echoed item ``status``/message ``id``
fields in Responses. Role and message-level fields (``tool_call_id``, ``name``) are part of the
hash. Everything that steers caching without being prompt text goes into ``cache_policy``;
other parameters into ``params``: neither is hashed into segments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxscope.inspector.analyses.canonical_prompt import (
    POLICY_KEYS,
    CanonicalPrompt,
    canonical_json,
)
from ctxscope.inspector.analyses.canonical_segments import (
    SegmentBuilder,
    add_block,
    nested_text,
    strip_block,
    text_block,
)
from ctxscope.inspector.analyses.hashes import Hashes
from ctxscope.vocab.apis import Api

_PROMPT_KEYS: dict[str, set[str]] = {
    Api.ANTHROPIC_MESSAGES: {"model", "messages", "system", "tools"},
    Api.ANTHROPIC_COUNT_TOKENS: {"model", "messages", "system", "tools"},
    Api.OPENAI_CHAT: {"model", "messages", "tools", "functions"},
    Api.OPENAI_RESPONSES: {"model", "input", "instructions", "tools", "previous_response_id"},
    Api.GEMINI_GENERATE: {"model", "contents", "systemInstruction", "system_instruction", "tools"},
}


def _anthropic(body: dict, b: SegmentBuilder) -> bool:
    if not isinstance(body.get("messages"), list) or not b.tools(body, "tools"):
        return False
    system = body.get("system")
    if isinstance(system, str):
        b.add("/system", "system", "system", system, text_block(system), "system")
    elif isinstance(system, list):
        for j, block in enumerate(system):
            add_block(b, f"/system/{j}", "system", block, "system")
    elif system is not None:
        return False
    for n, msg in enumerate(body["messages"]):
        if not isinstance(msg, dict):
            return False
        role, content = msg.get("role"), msg.get("content")
        if isinstance(content, str):
            b.text(f"/messages/{n}/content", role, content, text_block(content), "messages")
        elif isinstance(content, list) and content:
            for k, block in enumerate(content):
                add_block(b, f"/messages/{n}/content/{k}", role, block, "messages")
        else:
            norm, marker = strip_block(msg)
            b.add(f"/messages/{n}", "other", role, canonical_json(norm), norm, "messages", marker)
    return True


def _chat(body: dict, b: SegmentBuilder) -> bool:
    if not isinstance(body.get("messages"), list) or not b.tools(body, "tools") or not b.tools(body, "functions"):
        return False
    for n, msg in enumerate(body["messages"]):
        if not isinstance(msg, dict):
            return False
        role, content, calls = msg.get("role"), msg.get("content"), msg.get("tool_calls")
        extras, _ = strip_block({k: v for k, v in msg.items() if k not in ("role", "content", "tool_calls")})
        before = len(b.segments)
        ref = msg.get("tool_call_id")
        if isinstance(content, str) and not (content == "" and (calls or msg.get("function_call"))):
            if role in ("tool", "function"):
                b.add(
                    f"/messages/{n}/content",
                    "tool_result",
                    role,
                    content,
                    text_block(content),
                    "messages",
                    ref=ref,
                    extras=extras,
                )
            else:
                b.text(f"/messages/{n}/content", role, content, text_block(content), "messages", extras=extras)
        elif isinstance(content, list):
            for k, part in enumerate(content):
                if role in ("tool", "function"):
                    norm, marker = strip_block(part)
                    text, images = nested_text([part])
                    kind = "image" if images and not text else "tool_result"
                    b.add(
                        f"/messages/{n}/content/{k}",
                        kind,
                        role,
                        text,
                        norm,
                        "messages",
                        marker,
                        ref=ref,
                        images=images,
                        extras=extras,
                    )
                else:
                    add_block(b, f"/messages/{n}/content/{k}", role, part, "messages", extras)
        for k, call in enumerate(calls if isinstance(calls, list) else []):
            add_block(b, f"/messages/{n}/tool_calls/{k}", role, call, "messages", extras)
        if isinstance(msg.get("function_call"), dict):
            call = dict(msg["function_call"], type="function_call")
            norm, _ = strip_block(call)
            b.add(
                f"/messages/{n}/function_call",
                "tool_call",
                role,
                canonical_json(norm),
                norm,
                "messages",
                name=call.get("name"),
                extras=extras,
            )
        if len(b.segments) == before:
            norm, marker = strip_block(msg)
            b.add(f"/messages/{n}", "other", role, canonical_json(norm), norm, "messages", marker)
    return True


def _responses(body: dict, b: SegmentBuilder) -> bool:
    if not b.tools(body, "tools"):
        return False
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        b.add("/instructions", "system", "system", instructions, text_block(instructions), "instructions")
    elif isinstance(instructions, list):
        for j, item in enumerate(instructions):
            _item(b, f"/instructions/{j}", item, "instructions")
    items = body.get("input")
    if isinstance(items, str):
        msg = {"type": "message", "role": "user"}
        b.text("/input", "user", items, text_block(items, "input_text"), "input", extras=msg)
        return True
    if items is None:
        return body.get("previous_response_id") is not None or body.get("conversation") is not None
    if not isinstance(items, list):
        return False
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            return False
        _item(b, f"/input/{n}", item, "input")
    return True


def _item(b: SegmentBuilder, pointer: str, item: Any, area: str) -> None:
    if not isinstance(item, dict):
        add_block(b, pointer, None, item, area)
        return
    typ = item.get("type") or ("message" if "role" in item else "")
    if typ != "message":
        add_block(b, pointer, None, {k: v for k, v in item.items() if k != "status"}, area)
        return
    role, content = item.get("role"), item.get("content")
    extras, _ = strip_block({k: v for k, v in item.items() if k not in ("content", "id", "status")})
    extras["type"] = "message"
    part_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        b.text(f"{pointer}/content", role, content, text_block(content, part_type), area, extras=extras)
    elif isinstance(content, list) and content:
        for k, part in enumerate(content):
            add_block(b, f"{pointer}/content/{k}", role, part, area, extras)
    else:
        norm, marker = strip_block(item)
        b.add(pointer, "other", role, canonical_json(norm), norm, area, marker)


_GEMINI_ROLES = {"model": "assistant", "user": "user", "function": "tool", "tool": "tool"}


def _gemini_part(b: SegmentBuilder, pointer: str, role: str | None, part: Any, area: str) -> None:
    """One Gemini part: text, functionCall, functionResponse, inlineData / fileData (media); see
    (docs/architecture.md, "Gemini prompts")."""
    norm, _ = strip_block(part)
    if not isinstance(part, dict):
        add_block(b, pointer, role, part, area)
        return
    call = part.get("functionCall", part.get("function_call"))
    result = part.get("functionResponse", part.get("function_response"))
    if isinstance(part.get("text"), str) and part.get("thought") is True:
        b.add(pointer, "thinking", role, part["text"], norm, area)
    elif isinstance(part.get("text"), str):
        b.text(pointer, role, part["text"], norm, area)
    elif isinstance(call, dict):
        b.add(pointer, "tool_call", role, canonical_json(norm), norm, area, name=call.get("name"), ref=call.get("id"))
    elif isinstance(result, dict):
        response = result.get("response")
        text = response if isinstance(response, str) else canonical_json(response)
        b.add(pointer, "tool_result", role, text, norm, area, name=result.get("name"), ref=result.get("id"))
    elif any(k in part for k in ("inlineData", "inline_data", "fileData", "file_data")):
        b.add(pointer, "image", role, "", norm, area, images=1)
    else:
        b.add(pointer, "other", role, canonical_json(norm), norm, area)


def _gemini(body: dict, b: SegmentBuilder) -> bool:
    """Gemini generateContent: tools, systemInstruction (a Content), contents (Contents of parts)."""
    if not isinstance(body.get("contents"), list) or not body["contents"] or not b.tools(body, "tools"):
        return False
    key = "systemInstruction" if "systemInstruction" in body else "system_instruction"
    system = body.get(key)
    if isinstance(system, str):
        b.add(f"/{key}", "system", "system", system, text_block(system), "system")
    elif isinstance(system, dict) and isinstance(system.get("parts"), list):
        for j, part in enumerate(system["parts"]):
            _gemini_part(b, f"/{key}/parts/{j}", "system", part, "system")
    elif system is not None:
        return False
    for n, content in enumerate(body["contents"]):
        if not isinstance(content, dict):
            return False
        parts = content.get("parts")
        role = _GEMINI_ROLES.get(content.get("role") or "user", content.get("role"))
        if any(isinstance(p, dict) and ("functionResponse" in p or "function_response" in p) for p in parts or ()):
            role = "tool"
        if isinstance(parts, list) and parts:
            for k, part in enumerate(parts):
                _gemini_part(b, f"/contents/{n}/parts/{k}", role, part, "contents")
        else:
            norm, _ = strip_block(content)
            b.add(f"/contents/{n}", "other", role, canonical_json(norm), norm, "contents")
    return True


_PARSERS: dict[str, Callable[[dict, SegmentBuilder], bool]] = {
    Api.ANTHROPIC_MESSAGES: _anthropic,
    Api.ANTHROPIC_COUNT_TOKENS: _anthropic,
    Api.OPENAI_CHAT: _chat,
    Api.OPENAI_RESPONSES: _responses,
    Api.GEMINI_GENERATE: _gemini,
}


def canonicalize(api: str | None, body: Any) -> CanonicalPrompt | None:
    """The canonical prompt of a request body, or None for an unknown API or shape."""
    parse = _PARSERS.get(api or "")
    if parse is None or not isinstance(body, dict):
        return None
    b = SegmentBuilder()
    try:
        if not parse(body, b):
            return None
    except (AttributeError, TypeError):  # a field of an unexpected type somewhere deep
        return None
    segments = tuple(b.segments)
    breakpoints = [
        {"segment": i, "pointer": s.pointer, "ttl": (s.breakpoint or {}).get("ttl")}
        for i, s in enumerate(segments)
        if s.breakpoint is not None
    ]
    policy: dict = {"breakpoints": breakpoints}
    policy.update({k: body[k] for k in POLICY_KEYS if body.get(k) is not None})
    assert api is not None  # a parser was found for it
    prompt_keys = _PROMPT_KEYS[api]
    params = {k: v for k, v in body.items() if k not in prompt_keys and k not in POLICY_KEYS}
    model = body.get("model") if isinstance(body.get("model"), str) else None
    prev = body.get("previous_response_id") if api == Api.OPENAI_RESPONSES else None
    return CanonicalPrompt(
        api,
        model,
        segments,
        policy,
        params,
        prev if isinstance(prev, str) else None,
        hashes=Hashes.from_digests(b"".join(b.digests)),
    )
