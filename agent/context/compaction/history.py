"""Pure history transforms the compaction stages share: rounds, placeholders, media, middle removal, user inputs.

A *tool round* is an assistant message with tool calls plus the tool message holding their
results; it is *finished* when every call has a result. A *segment* (for ``hmid``) is a run of
user messages, or one assistant message with its tool results. Every transform returns new
message objects with the same ids; the input is never changed (messages are frozen).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ...core.estimate import SUMMARY_KIND, media_items
from ...core.messages import Message, ToolResult, user_message

COMPUTER_TOOLS = frozenset({"computer", "computer_use", "screenshot"})


@dataclass(frozen=True)
class ToolRound:
    assistant: int  # index of the assistant message with the calls
    tool: int | None  # index of the tool message with the results
    finished: bool


def tool_rounds(messages: Sequence[Message]) -> list[ToolRound]:
    rounds = []
    for i, m in enumerate(messages):
        if m.role != "assistant" or not m.tool_calls:
            continue
        nxt = i + 1 if i + 1 < len(messages) and messages[i + 1].role == "tool" else None
        have = {r.tool_call_id for r in messages[nxt].tool_results} if nxt is not None else set()
        rounds.append(ToolRound(i, nxt, all(c.id in have for c in m.tool_calls)))
    return rounds


def map_results(messages: Sequence[Message], fn: Callable[[int, int, ToolResult], ToolResult]) -> list[Message]:
    """Apply ``fn(message_index, result_index, result)`` to every tool result."""
    out = []
    for i, m in enumerate(messages):
        if m.role != "tool":
            out.append(m)
            continue
        blocks = tuple(fn(i, j, b) if isinstance(b, ToolResult) else b for j, b in enumerate(m.content))
        out.append(m if blocks == m.content else replace(m, content=blocks))
    return out


def result_bytes(result: ToolResult) -> int:
    return len(result.content.encode("utf-8"))


def tool_result_bytes(messages: Sequence[Message]) -> int:
    return sum(result_bytes(r) for m in messages if m.role == "tool" for r in m.tool_results)


def placeholder_all(messages: Sequence[Message]) -> list[Message]:
    """``hall``: every tool result's text replaced by a one-line placeholder (calls and media stay)."""

    def swap(_i: int, _j: int, r: ToolResult) -> ToolResult:
        text = (
            f"[{r.name} result left out of this checkpoint input ({result_bytes(r)} bytes)"
            + (", it was an error" if r.is_error else "")
            + "]"
        )
        return replace(r, content=text)

    return map_results(messages, swap)


def has_media(messages: Sequence[Message]) -> bool:
    return any(media_items(r) for m in messages if m.role == "tool" for r in m.tool_results)


def _drop_media(r: ToolResult, keep: Callable[[int, dict], bool], note: str) -> ToolResult:
    items = media_items(r)
    kept = [m for k, m in enumerate(items) if keep(k, dict(m))]
    if len(kept) == len(items):
        return r
    details = {**r.details, "media": kept}
    if not kept:
        details.pop("media")
    return replace(r, content=f"{r.content}\n[{len(items) - len(kept)} {note}]", details=details)


def strip_media(messages: Sequence[Message]) -> list[Message]:
    """``hvideo``: images and video removed from every tool result (a note says how many)."""
    return map_results(
        messages, lambda _i, _j, r: _drop_media(r, lambda _k, _m: False, "image/video attachment(s) removed")
    )


def _is_screenshot(result: ToolResult, item: dict) -> bool:
    return item.get("type", "image") == "image" and (
        item.get("origin") == "computer_use" or result.name in COMPUTER_TOOLS
    )


def prune_screenshots(messages: Sequence[Message], keep: int = 2) -> tuple[list[Message], int]:
    """The last ``keep`` computer-use screenshots stay; older ones leave a note. Returns (messages, dropped)."""
    positions = [
        (i, j, k)
        for i, m in enumerate(messages)
        if m.role == "tool"
        for j, r in enumerate(m.content)
        if isinstance(r, ToolResult)
        for k, item in enumerate(media_items(r))
        if _is_screenshot(r, dict(item))
    ]
    drop = set(positions[: max(0, len(positions) - keep)])
    if not drop:
        return list(messages), 0

    def prune(i: int, j: int, r: ToolResult) -> ToolResult:
        return _drop_media(r, lambda k, _m: (i, j, k) not in drop, "older screenshot(s) removed")

    return map_results(messages, prune), len(drop)


def segments(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """[start, end) index ranges: runs of user messages, and assistant messages with their tool results."""
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(messages) + 1):
        if i == len(messages):
            out.append((start, i))
            break
        m, prev = messages[i], messages[i - 1]
        if m.role == "assistant" or (m.role == "user" and prev.role != "user"):
            out.append((start, i))
            start = i
    return [s for s in out if s[0] < s[1]]


def reduce_middle(messages: Sequence[Message], fits: Callable[[list[Message]], bool]) -> list[Message] | None:
    """``hmid``: drop whole segments from the middle outwards, never the first nor any with a user message."""
    segs = segments(messages)
    removable = [
        k for k, (a, b) in enumerate(segs) if k > 0 and not any(messages[i].role == "user" for i in range(a, b))
    ]
    if not removable:
        return None
    middle = (len(segs) - 1) / 2
    order = sorted(removable, key=lambda k: (abs(k - middle), k))
    gone: set[int] = set()
    for k in order:
        gone.add(k)
        kept = [messages[i] for s, (a, b) in enumerate(segs) if s not in gone for i in range(a, b)]
        if fits(kept):
            return kept
    return None


# --- genuine user inputs ---------------------------------------------------------------------------


def _is_compact_command(text: str) -> bool:
    return text.strip().split(" ", 1)[0] == "/compact"


def genuine_inputs(messages: Sequence[Message]) -> list[str]:
    """The user's own words, oldest first: turn inputs, user steers, and those a previous summary carried."""
    out: list[str] = []
    for m in messages:
        kind = m.meta.get("kind")
        if kind == SUMMARY_KIND:
            out.extend(t for t in m.meta.get("recent_inputs") or [] if isinstance(t, str))
        elif m.role == "user" and kind == "input" and isinstance(m.meta.get("genuine_text"), str):
            out.append(m.meta["genuine_text"])
        elif m.role == "user" and kind == "steer" and "source" in m.meta:
            out.append(m.text)
    return [t for t in out if t.strip() and not _is_compact_command(t)]


def last_input_only(messages: Sequence[Message]) -> list[Message]:
    """``hmin``: only the last genuine user input."""
    inputs = genuine_inputs(messages)
    return [user_message(inputs[-1], kind="input", genuine_text=inputs[-1])] if inputs else []
