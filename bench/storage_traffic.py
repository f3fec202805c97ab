"""Synthetic Claude-Code-like traffic for ``bench/storage.py``: requests and their streamed answers.

One main session whose context grows call after call (assistant text and tool_use blocks, tool
results from a few hundred bytes to tens of KB), a compaction now and then (the next context is the
summary the model streamed), and a few subagent sessions with their own session id but the same
system prompt (~15 KB) and 18 tool definitions; the last message carries Claude Code's moving
``cache_control`` marker. ``Traffic`` also counts the distinct content, without the store's code:
the bytes of every distinct JSON value sent, once however many requests carried it, plus every
response body as streamed. The same seed always gives the same bytes.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field

MODEL = "claude-sonnet-4-5-20250929"
HEADERS = {
    "accept": "application/json",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
    "anthropic-dangerous-direct-browser-access": "true",
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
    "user-agent": "claude-cli/2.0.14 (external, cli)",
    "x-api-key": "sk-ant-api03-bench-not-a-real-key-000000000000000000000000000000000000",
    "x-app": "cli",
    "x-stainless-arch": "x64",
    "x-stainless-helper-method": "stream",
    "x-stainless-lang": "js",
    "x-stainless-os": "Linux",
    "x-stainless-package-version": "0.60.0",
    "x-stainless-retry-count": "0",
    "x-stainless-runtime": "node",
    "x-stainless-runtime-version": "v22.19.0",
    "x-stainless-timeout": "600",
}


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Text:
    """Pseudo-English and pseudo-code from a fixed vocabulary: compresses about as well as real text."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(4000)]
        self.weights = [1.0 / (i + 1) for i in range(len(self.words))]

    def prose(self, n: int) -> str:
        out, size = [], 0
        while size < n:
            words = self.rng.choices(self.words, self.weights, k=self.rng.randint(6, 18))
            sentence = " ".join(words).capitalize() + ". "
            out.append(sentence)
            size += len(sentence)
        return "".join(out)[:n]

    def code(self, n: int) -> str:
        out, size, line = [], 0, 1
        while size < n:
            w = self.rng.choices(self.words, self.weights, k=self.rng.randint(2, 7))
            indent = "    " * self.rng.randint(0, 3)
            text = f"{line:>6}\t{indent}{w[0]}_{w[-1]} = {'.'.join(w[1:]) or w[0]}({self.rng.randint(0, 999)})\n"
            out.append(text)
            size += len(text)
            line += 1
        return "".join(out)[:n]


def tool_defs(t: Text) -> list[dict]:
    names = [
        "Task",
        "Bash",
        "Glob",
        "Grep",
        "ExitPlanMode",
        "Read",
        "Edit",
        "MultiEdit",
        "Write",
        "NotebookEdit",
        "WebFetch",
        "TodoWrite",
        "WebSearch",
        "BashOutput",
        "KillShell",
        "SlashCommand",
        "ListMcpResources",
        "ReadMcpResource",
    ]
    out = []
    for name in names:
        props = {
            w: {"type": "string", "description": t.prose(t.rng.randint(40, 200))}
            for w in t.rng.sample(t.words[:300], t.rng.randint(1, 5))
        }
        out.append(
            {
                "name": name,
                "description": t.prose(t.rng.randint(300, 1800)),
                "input_schema": {
                    "type": "object",
                    "properties": props,
                    "required": list(props)[:1],
                    "additionalProperties": False,
                    "$schema": "http://json-schema.org/draft-07/schema#",
                },
            }
        )
    return out


def tool_result_size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.70:
        return rng.randint(200, 2000)
    if r < 0.95:
        return rng.randint(2000, 10000)
    return rng.randint(10000, 40000)


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode()


def stream_of(blocks: list[dict], rng: random.Random, usage_in: int) -> bytes:
    """An Anthropic SSE stream that produces ``blocks``."""
    msg_id = "msg_01" + "".join(
        rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789") for _ in range(22)
    )
    parts = [
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 4,
                        "cache_creation_input_tokens": 500,
                        "cache_read_input_tokens": usage_in,
                        "output_tokens": 1,
                        "service_tier": "standard",
                    },
                },
            },
        )
    ]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            parts.append(
                sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
            )
            text = block["text"]
            for j in range(0, len(text), 60):
                parts.append(
                    sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": text[j : j + 60]},
                        },
                    )
                )
        else:
            parts.append(
                sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                    },
                )
            )
            raw = dumps(block["input"])
            for j in range(0, len(raw), 80):
                parts.append(
                    sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": raw[j : j + 80]},
                        },
                    )
                )
        parts.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
    parts.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 300},
            },
        )
    )
    parts.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(parts)


@dataclass
class Call:
    body: bytes
    response: bytes


@dataclass
class Traffic:
    calls: list[Call] = field(default_factory=list)
    distinct: set[str] = field(default_factory=set)  # distinct JSON values sent
    response_bytes: int = 0

    @property
    def distinct_bytes(self) -> int:
        return sum(len(v.encode()) for v in self.distinct) + self.response_bytes


def _with_marker(message: dict) -> dict:
    content = list(message["content"])
    content[-1] = {**content[-1], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": content}


class Agent:
    """One session: its id, its messages, and how it grows."""

    def __init__(self, t: Text, system: list[dict], tools: list[dict], traffic: Traffic, first_prompt: str):
        self.t, self.system, self.tools, self.traffic = t, system, tools, traffic
        self.session = str(uuid.UUID(int=t.rng.getrandbits(128)))
        self.messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": first_prompt}]}]
        self.n_tool = 0

    def send(self, blocks: list[dict]) -> None:
        """One call: the current messages go out, ``blocks`` come back (and join the messages)."""
        # Claude Code's moving cache marker: on the last block of the last message only.
        marked = self.messages[:-1] + [_with_marker(self.messages[-1])]
        body = {
            "model": MODEL,
            "messages": marked,
            "temperature": 1,
            "system": self.system,
            "tools": self.tools,
            "metadata": {"user_id": f"user_{'a' * 64}_account__session_{self.session}"},
            "max_tokens": 32000,
            "stream": True,
        }
        raw = dumps(body).encode()
        response = stream_of(blocks, self.t.rng, len(raw) // 4)
        self.traffic.calls.append(Call(raw, response))
        self.traffic.distinct.update(dumps(v) for v in self.system)
        self.traffic.distinct.update(dumps(v) for v in self.tools)
        self.traffic.distinct.update(dumps(v) for v in self.messages)
        self.traffic.response_bytes += len(response)
        self.messages = self.messages + [{"role": "assistant", "content": blocks}]

    def step(self) -> None:
        """The model says a little and calls a tool; its result comes back in a user message."""
        t = self.t
        self.n_tool += 1
        tool_id = f"toolu_01{self.session[:8]}{self.n_tool:06d}"
        name = t.rng.choice([tool["name"] for tool in self.tools])
        blocks = [
            {"type": "text", "text": t.prose(t.rng.randint(80, 700))},
            {
                "type": "tool_use",
                "id": tool_id,
                "name": name,
                "input": {
                    "file_path": "/src/" + "/".join(t.rng.sample(t.words[:500], 3)) + ".py",
                    "pattern": t.prose(t.rng.randint(10, 200)),
                },
            },
        ]
        self.send(blocks)
        size = tool_result_size(t.rng)
        content = t.code(size) if t.rng.random() < 0.6 else t.prose(size)
        self.messages = self.messages + [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": content}]}
        ]

    def compact(self) -> None:
        """Ask for a summary of the whole context; the next context is that summary."""
        self.messages = self.messages + [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Your task is to create a detailed summary of the conversation so far."}
                ],
            }
        ]
        summary = self.t.prose(self.t.rng.randint(3000, 8000))
        self.send([{"type": "text", "text": summary}])
        self.messages = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "This session is being continued from a previous conversation. " + summary}
                ],
            }
        ]


def generate(n_calls: int, seed: int = 22) -> Traffic:
    rng = random.Random(seed)
    t = Text(rng)
    system = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": t.prose(15000), "cache_control": {"type": "ephemeral"}},
    ]
    tools = tool_defs(t)
    traffic = Traffic()
    main = Agent(t, system, tools, traffic, t.prose(400))
    subagents_at = set(rng.sample(range(20, max(21, n_calls - 40)), k=max(1, n_calls // 250)))
    next_compaction = rng.randint(60, 110)
    since = 0
    while len(traffic.calls) < n_calls:
        if len(traffic.calls) in subagents_at:
            sub = Agent(t, system, tools, traffic, t.prose(rng.randint(200, 1200)))
            for _ in range(min(rng.randint(8, 20), n_calls - len(traffic.calls))):
                sub.step()
            continue
        if since >= next_compaction:
            main.compact()
            since, next_compaction = 0, rng.randint(60, 110)
            continue
        main.step()
        since += 1
    return traffic
