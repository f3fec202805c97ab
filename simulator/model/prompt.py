"""Linearise a request's prompt into blocks in the order the provider caches it.

Anthropic renders tools → system → messages; OpenAI (Chat and Responses) tools/response format →
instructions → messages/input items. Each block has a `meta` string (its identity apart from its
text: section, role, block type, names, ids) and the `text` whose o200k tokens it costs; the cache
model hashes both, so any change to a block (except moving `cache_control`) changes the prefix.
A prompt's token count is the sum of its blocks' counts (no per-message framing overhead).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from ctxscope.vocab.tokens import count_tokens

IMAGE_TOKENS = 1600  # flat cost of one image/document attachment (no pixel maths here)
MAX_BREAKPOINTS = 4


class PromptError(ValueError):
    """A request the provider itself would reject with 400 invalid_request_error."""

    code: str | None = None


@dataclass(frozen=True)
class Block:
    meta: str
    text: str = ""
    ttl: str | None = None  # a breakpoint: Anthropic "5m"/"1h"; OpenAI "30m"/"12h"/"request"; None = none
    extra_tokens: int = 0
    metadata: bool = False  # per-request metadata (Claude Code's billing header), see ``provider_view``
    ignored: bool = False  # left out of the cache key: its text is not hashed (it still costs tokens)

    @functools.cached_property
    def tokens(self) -> int:
        return _count(self.text) + self.extra_tokens

    @functools.cached_property
    def key(self) -> bytes:
        """Content hash of the block, breakpoint marker excluded (and the text of an ignored one)."""
        text = "" if self.ignored else self.text
        return hashlib.sha256(f"{self.meta}\x00{text}\x00{self.extra_tokens}".encode()).digest()


# Claude Code's first system block: ``x-anthropic-billing-header: cc_version=...; cc_entrypoint=...;
# cch=<hex>;``, where cch changes on every request. Anthropic's own API leaves the block out of its
# cache key; an Anthropic-compatible endpoint hashes it like any text. Recognised here on its own
# (the simulator never imports the analysis): a short text that is a header line of key=value pairs.
BILLING_HEADER = re.compile(
    r"x-anthropic-billing-header:(?: ?[\w.-]{1,40}=[^;=\n]{0,200};){0,16}(?: ?[\w.-]{1,40}=[^;=\n]{0,200})? ?"
)
MAX_METADATA_CHARS = 1024


def _is_metadata(text: str) -> bool:
    return len(text) <= MAX_METADATA_CHARS and BILLING_HEADER.fullmatch(text) is not None


def provider_view(prompt: Prompt) -> Prompt:
    """The prompt as Anthropic's own API keys its cache: each per-request metadata block ignored."""
    if not any(b.metadata for b in prompt.blocks):
        return prompt
    blocks = tuple(dataclasses.replace(b, ignored=True) if b.metadata else b for b in prompt.blocks)
    return dataclasses.replace(prompt, blocks=blocks)


# OpenAI's retention, modelled here on its own (the simulator never imports the analysis; a test
# holds the two rules together): in-memory "5 to 10 minutes of inactivity", the short end;
# ``prompt_cache_retention: "24h"``; ``prompt_cache_options.ttl`` (and a breakpoint's ttl) "30m" or
# "12h", which wins over the retention. Anything else is undocumented and changes nothing.
OPENAI_TTL_SECONDS = 300.0
OPENAI_RETENTIONS = {"in_memory": OPENAI_TTL_SECONDS, "24h": 86400.0}
OPENAI_TTLS = {"30m": 1800.0, "12h": 43200.0}


@dataclass(frozen=True)
class OpenAICaching:
    """A request's caching options: where it is routed and how long what it writes lives."""

    route: str = ""  # prompt_cache_key
    ttl: float = OPENAI_TTL_SECONDS
    explicit_only: bool = False  # prompt_cache_options.mode == "explicit": no automatic boundaries


def openai_ttl(name: object, default: float = OPENAI_TTL_SECONDS) -> float:
    return OPENAI_TTLS.get(name, default) if isinstance(name, str) else default


def openai_caching(body: dict[str, Any]) -> OpenAICaching:
    """``prompt_cache_key``, ``prompt_cache_retention`` and ``prompt_cache_options`` of a request."""
    options = body.get("prompt_cache_options")
    options = options if isinstance(options, dict) else {}
    retention = body.get("prompt_cache_retention")
    kept = OPENAI_RETENTIONS.get(retention, OPENAI_TTL_SECONDS) if isinstance(retention, str) else OPENAI_TTL_SECONDS
    ttl = openai_ttl(options.get("ttl"), kept)
    key = body.get("prompt_cache_key")
    return OpenAICaching(key if isinstance(key, str) else "", ttl, options.get("mode") == "explicit")


@dataclass(frozen=True)
class Prompt:
    blocks: tuple[Block, ...]
    last_text: str  # all text of the last message/item (what a step's `match` sees)
    last_user_text: str  # text the user typed last (tool results excluded)
    openai: OpenAICaching = OpenAICaching()  # an OpenAI request's caching options

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


@functools.lru_cache(maxsize=8192)
def _count(text: str) -> int:
    return count_tokens(text)


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:16]


def _without_cache_control(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "cache_control"}


# ---------------------------------------------------------------- Anthropic Messages


def _ttl(block: Any) -> str | None:
    cc = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(cc, dict):
        return None
    return "1h" if cc.get("ttl") == "1h" else "5m"


def _anthropic_inner_text(content: Any) -> tuple[str, int]:
    """Text and attachment tokens inside a tool_result's content."""
    if isinstance(content, str):
        return content, 0
    texts, extra = [], 0
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") in ("image", "document"):
            extra += IMAGE_TOKENS
        else:
            texts.append(canonical(part))
    return "\n".join(texts), extra


def _anthropic_block(block: Any, head: str) -> Block:
    if not isinstance(block, dict):
        return Block(f"{head}|raw", canonical(block))
    kind = block.get("type")
    ttl = _ttl(block)
    if kind == "text":
        return Block(f"{head}|text", str(block.get("text", "")), ttl)
    if kind in ("image", "document"):
        source = block.get("source") or {}
        if kind == "document" and isinstance(source, dict) and source.get("type") == "text":
            return Block(f"{head}|document", str(source.get("data", "")), ttl)
        return Block(f"{head}|{kind}|{_digest(source)}", "", ttl, IMAGE_TOKENS)
    if kind == "tool_use":
        return Block(f"{head}|tool_use|{block.get('id')}|{block.get('name')}", canonical(block.get("input", {})), ttl)
    if kind == "tool_result":
        text, extra = _anthropic_inner_text(block.get("content", ""))
        meta = f"{head}|tool_result|{block.get('tool_use_id')}|{bool(block.get('is_error'))}"
        return Block(meta, text, ttl, extra)
    if kind == "thinking":
        return Block(f"{head}|thinking|{_digest(block.get('signature'))}", str(block.get("thinking", "")), ttl)
    if kind == "redacted_thinking":
        return Block(f"{head}|redacted_thinking|{_digest(block.get('data'))}", "", ttl)
    return Block(f"{head}|{kind}", canonical(_without_cache_control(block)), ttl)


def _message_text(content: Any, *, include_results: bool) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("text", "input_text", "output_text"):
            texts.append(str(part.get("text", "")))
        elif include_results and part.get("type") == "tool_result":
            texts.append(_anthropic_inner_text(part.get("content", ""))[0])
    return "\n".join(texts)


def anthropic_prompt(body: dict[str, Any]) -> Prompt:
    """Blocks of a Messages request; applies the top-level automatic breakpoint and checks the limit."""
    blocks: list[Block] = []
    for tool in body.get("tools") or []:
        tool_dict = tool if isinstance(tool, dict) else {"tool": tool}
        blocks.append(Block("tool", canonical(_without_cache_control(tool_dict)), _ttl(tool_dict)))
    system = body.get("system")
    if isinstance(system, str):
        if system:
            blocks.append(Block("system|text", system))
    elif isinstance(system, list):
        for b in system:
            block = _anthropic_block(b, "system")
            if block.meta == "system|text" and _is_metadata(block.text):
                block = dataclasses.replace(block, metadata=True)
            blocks.append(block)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise PromptError("messages: Field required")
    last_text = last_user = ""
    for message in messages:
        if not isinstance(message, dict):
            raise PromptError("messages: each message must be an object")
        role, content = message.get("role"), message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
        for i, part in enumerate(parts):
            blocks.append(_anthropic_block(part, f"{'msg' if i == 0 else 'cont'}:{role}"))
        last_text = _message_text(content, include_results=True)
        if role == "user" and _message_text(content, include_results=False).strip():
            last_user = _message_text(content, include_results=False)
    auto = body.get("cache_control")
    if isinstance(auto, dict) and blocks and blocks[-1].ttl is None:
        last = blocks[-1]
        blocks[-1] = Block(last.meta, last.text, "1h" if auto.get("ttl") == "1h" else "5m", last.extra_tokens)
    found = sum(1 for b in blocks if b.ttl)
    if found > MAX_BREAKPOINTS:
        raise PromptError(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.")
    return Prompt(tuple(blocks), last_text, last_user)


# ---------------------------------------------------------------- OpenAI (Chat and Responses)


def _openai_parts(content: Any, head: str) -> list[Block]:
    if isinstance(content, str) or content is None:
        return [Block(f"{head}|text", content or "")]
    blocks = []
    for i, part in enumerate(content):
        part_head = head if i == 0 else head.replace("msg:", "cont:", 1)
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", "output_text"):
            mark = part.get("prompt_cache_breakpoint")  # an explicit breakpoint: its ttl, else the request's
            ttl = (str(mark.get("ttl") or "request") if isinstance(mark, dict) else "request") if mark else None
            blocks.append(Block(f"{part_head}|text", str(part.get("text", "")), ttl))
        elif kind == "refusal":
            blocks.append(Block(f"{part_head}|refusal", str(part.get("refusal", ""))))
        elif kind in ("image_url", "input_image", "input_file", "file", "input_audio"):
            blocks.append(Block(f"{part_head}|{kind}|{_digest(part)}", "", None, IMAGE_TOKENS))
        else:
            blocks.append(Block(f"{part_head}|{kind}", canonical(part)))
    return blocks


def _schema_blocks(tools: Any, fmt: Any) -> list[Block]:
    blocks = [Block("tool", canonical(t)) for t in tools or []]
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        blocks.append(Block("response_format", canonical(fmt)))
    return blocks


def chat_prompt(body: dict[str, Any]) -> Prompt:
    blocks = _schema_blocks(body.get("tools"), body.get("response_format"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise PromptError("Missing required parameter: 'messages'.")
    last_text = last_user = ""
    for message in messages:
        if not isinstance(message, dict):
            raise PromptError("Invalid type for 'messages': each message must be an object.")
        role = message.get("role")
        head = f"msg:{role}|{message.get('name', '')}|{message.get('tool_call_id', '')}"
        content = message.get("content")
        if content is not None or not message.get("tool_calls"):
            blocks.extend(_openai_parts(content, head))
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            blocks.append(Block(f"tool_call|{call.get('id')}|{fn.get('name')}", str(fn.get("arguments", ""))))
        last_text = _message_text(content, include_results=False)
        if role == "user" and last_text.strip():
            last_user = last_text
    return Prompt(tuple(blocks), last_text, last_user, openai_caching(body))


def responses_item_blocks(item: Any) -> list[Block]:
    """Blocks of one Responses input or output item (also used to remember previous responses)."""
    if not isinstance(item, dict):
        return [Block("item|raw", canonical(item))]
    kind = item.get("type", "message")
    if kind == "message":
        return _openai_parts(item.get("content"), f"msg:{item.get('role')}")
    if kind == "function_call":
        return [Block(f"function_call|{item.get('call_id')}|{item.get('name')}", str(item.get("arguments", "")))]
    if kind == "custom_tool_call":  # a free-form input, e.g. Codex's code-mode `exec`
        return [Block(f"custom_tool_call|{item.get('call_id')}|{item.get('name')}", str(item.get("input", "")))]
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output", "")
        text = output if isinstance(output, str) else _message_text(output, include_results=False)
        return [Block(f"function_call_output|{item.get('call_id')}", text)]
    if kind == "reasoning":
        summary = "\n".join(str(s.get("text", "")) for s in item.get("summary") or [] if isinstance(s, dict))
        return [Block(f"reasoning|{_digest(item.get('encrypted_content'))}", summary)]
    return [Block(f"item|{kind}", canonical({k: v for k, v in item.items() if k != "id"}))]


def responses_prompt(body: dict[str, Any], previous: tuple[Block, ...] = ()) -> tuple[Prompt, tuple[Block, ...]]:
    """The prompt, plus the conversation part (previous + input) to remember for previous_response_id."""
    text_cfg = body.get("text")
    head = _schema_blocks(body.get("tools"), text_cfg.get("format") if isinstance(text_cfg, dict) else None)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        head.append(Block("instructions", instructions))
    elif isinstance(instructions, list):
        for item in instructions:
            head.extend(responses_item_blocks(item))
    raw_input = body.get("input")
    items = (
        [{"type": "message", "role": "user", "content": raw_input}] if isinstance(raw_input, str) else raw_input or []
    )
    if not isinstance(items, list):
        raise PromptError("Invalid type for 'input': expected a string or an array of input items.")
    conversation = list(previous)
    last_text = last_user = ""
    for item in items:
        conversation.extend(responses_item_blocks(item))
        if isinstance(item, dict):
            if item.get("type", "message") == "message":
                last_text = _message_text(item.get("content"), include_results=False)
                if item.get("role") == "user" and last_text.strip():
                    last_user = last_text
            elif item.get("type") == "function_call_output":
                out = item.get("output", "")
                last_text = out if isinstance(out, str) else _message_text(out, include_results=False)
    return Prompt(tuple(head + conversation), last_text, last_user, openai_caching(body)), tuple(conversation)
