"""The tool-output budget: a text result over ``maxInlineKiB`` goes to an artifact and a receipt takes its place.

A host builtin on ``after_tool_call``, so it sees every other extension's rewrite first. It acts
only when the turn has a ``read`` tool: the receipt is useful only if the model can page the
artifact back (``read(path, offset, limit)``; ``grep`` searches it). Media attached to a result
(``details["media"]``) stay. If the artifact cannot be written, the result keeps its first and
last KiB with a line saying what was cut. MCP tools' ``details`` over ``mcpDetailsMaxInlineKiB``
go to an artifact too (they never reach the model, but they bloat history.jsonl).

Long lines: ``read`` shows at most 2000 characters of a line, so an artifact whose lines are longer
is written wrapped at 1000 characters (the exact bytes are kept next to it as ``.raw``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxscope.vocab.kinds import MarkerKind

from ..core.budget import ContextSettings
from ..core.events import Event, RewriteResult, ToolResultContext
from ..core.messages import ToolResult
from ..core.settings import HostOptions
from ..core.spi import Extension, ExtensionAPI
from ..core.state import SessionView
from .compaction.events import record
from .settings import settings_from

EXTENSION_ID = "tool-output-budget"
FALLBACK_KEEP_BYTES = 2048  # head + tail when the artifact cannot be written
WRAP_AT = 1000
READ_LINE_LIMIT = 2000  # tools_fs.LINE_MAX_CHARS
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Artifact:
    path: Path
    relative: str  # relative to the session directory, for annotations
    bytes: int
    lines: int
    wrapped: bool


def _name(turn: int, step: int, tool: str, call_id: str, suffix: str) -> str:
    return f"t{turn}s{step}-{_SAFE.sub('_', tool)[:24]}-{_SAFE.sub('_', call_id)[-12:]}{suffix}"


def write_artifact(
    view: SessionView,
    text: str,
    *,
    turn: int,
    step: int,
    tool: str,
    call_id: str,
    suffix: str = ".txt",
    wrap: bool = True,
) -> Artifact:
    """Write ``text`` under the session's artifacts folder (unique name); raises OSError on failure."""
    folder = view.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    base = _name(turn, step, tool, call_id, "")
    path, n = folder / f"{base}{suffix}", 1
    while path.exists():
        n += 1
        path = folder / f"{base}-{n}{suffix}"
    lines = text.split("\n")
    wrapped = wrap and any(len(line) > READ_LINE_LIMIT for line in lines)
    data = text.encode("utf-8")
    if wrapped:
        path.with_suffix(".raw").write_bytes(data)
        text = "\n".join(line[i : i + WRAP_AT] for line in lines for i in range(0, max(len(line), 1), WRAP_AT))
    path.write_text(text, encoding="utf-8")
    try:
        rel = str(path.relative_to(view.dir))
    except ValueError:
        rel = path.name
    return Artifact(path, rel, len(data), text.count("\n") + 1, wrapped)


def recovery_steps(path: Path) -> str:
    return (
        f"Get the facts you need from this file now, before you answer, guess, or look in another source:\n"
        f'- search it first with grep (pattern=..., path="{path}", a small max_results);\n'
        f'- then read just the relevant ranges with read(path="{path}", offset=..., limit=...);\n'
        f"- without grep, page through it with bounded read calls.\n"
        f"Never read or print the whole file in one call; if you need all of it, keep paging with offset "
        f"until the end.\n"
        f"This notice only tells you where the output is. It is not evidence of what the output says."
    )


def receipt(tool: str, artifact: Artifact, *, is_error: bool, why: str) -> str:
    """Our receipt wording: which tool, where the full text is, how to get facts back from it."""
    lines = [f"[{why}]", f"Tool: {tool}"]
    if is_error:
        lines.append("The tool reported this result as an error.")
    if artifact.wrapped:
        lines.append(
            f"Lines longer than {WRAP_AT} characters were wrapped in this copy; the exact bytes are in "
            f"{artifact.path.with_suffix('.raw')}."
        )
    lines += [
        recovery_steps(artifact.path),
        f"Saved at: {artifact.path} ({artifact.bytes} bytes, {artifact.lines} lines)",
    ]  # last: displays show it
    return "\n".join(lines)


def _cut_utf8(data: bytes, n: int, *, from_end: bool) -> str:
    part = data[-n:] if from_end else data[:n]
    return part.decode("utf-8", errors="ignore")


def head_and_tail(text: str, keep: int = FALLBACK_KEEP_BYTES) -> str:
    """First and last ``keep/2`` bytes with a truncation line between (the artifact could not be written)."""
    data = text.encode("utf-8")
    if len(data) <= keep:
        return text
    half = keep // 2
    omitted = len(data) - 2 * half
    return (
        _cut_utf8(data, half, from_end=False)
        + f"\n[... {omitted} bytes cut here: the output was too large to keep and could not be saved to a "
        "file ...]\n" + _cut_utf8(data, half, from_end=True)
    )


_KEEP_INLINE = ("media", "externalized", "source_references", "source_marker")  # small; read by later steps


def _is_mcp(tool: str) -> bool:
    return tool.startswith(("mcp__", "mcp_", "mcp."))


MarkerSplit = Callable[[ToolResult], tuple[str, str]]


def no_marker(result: ToolResult) -> tuple[str, str]:
    """The default split: the whole content is the tool's own text."""
    return result.content, ""


class ToolOutputBudget:
    """``split_marker`` separates a host-appended suffix (the provenance feature's source marker) from the
    tool's own text, so the suffix stays with the receipt; the host composition passes it in."""

    def __init__(self, settings: ContextSettings, *, split_marker: MarkerSplit = no_marker) -> None:
        self.settings = settings
        self.split_marker = split_marker

    def __call__(self, ctx: ToolResultContext) -> RewriteResult | None:
        if "read" not in ctx.tool_names:
            return None
        result = ctx.result
        details: dict[str, Any] = dict(result.details)
        content: str | None = None
        body, marker = self.split_marker(result)  # a host-appended marker stays with the receipt
        size = len(body.encode("utf-8"))
        if size > self.settings.max_inline_bytes:
            try:
                art = write_artifact(
                    ctx.session, body, turn=ctx.turn, step=ctx.step, tool=result.name, call_id=result.tool_call_id
                )
            except OSError as e:
                content = head_and_tail(body) + marker
                details["externalized"] = {"failed": f"{type(e).__name__}: {e}", "bytes": size}
                record(
                    ctx.session,
                    MarkerKind.TOOL_OUTPUT_EXTERNALIZED,
                    turn=ctx.turn,
                    step=ctx.step,
                    tool=result.name,
                    bytes=size,
                    artifact=None,
                    error=str(e),
                )
                ctx.effects.declare(
                    MarkerKind.TOOL_OUTPUT_EXTERNALIZED,
                    tool=result.name,
                    bytes=size,
                    artifact="none",
                    fallback="head_tail",
                )
            else:
                content = (
                    receipt(
                        result.name,
                        art,
                        is_error=result.is_error,
                        why="Tool output moved to a file: it is too large for the conversation",
                    )
                    + marker
                )
                # the content hash lets the runaway guard see the same output behind receipts that name
                # different files (docs/architecture.md, "The guard sees through receipts")
                details["externalized"] = {
                    "artifact": str(art.path),
                    "bytes": art.bytes,
                    "wrapped": art.wrapped,
                    "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
                }
                record(
                    ctx.session,
                    MarkerKind.TOOL_OUTPUT_EXTERNALIZED,
                    turn=ctx.turn,
                    step=ctx.step,
                    tool=result.name,
                    bytes=art.bytes,
                    artifact=str(art.path),
                )
                ctx.effects.declare(
                    MarkerKind.TOOL_OUTPUT_EXTERNALIZED, tool=result.name, bytes=art.bytes, artifact=art.relative
                )
        moved_details = self._mcp_details(ctx, details)
        if content is None and moved_details is None:
            return None
        return RewriteResult(content=content, details=moved_details if moved_details is not None else details)

    def _mcp_details(self, ctx: ToolResultContext, details: dict[str, Any]) -> dict[str, Any] | None:
        if not _is_mcp(ctx.result.name):
            return None
        rest = {k: v for k, v in details.items() if k not in _KEEP_INLINE}
        text = json.dumps(rest, ensure_ascii=False)
        if len(text.encode()) <= self.settings.mcp_details_max_inline_kib * 1024:
            return None
        try:
            art = write_artifact(
                ctx.session,
                text,
                turn=ctx.turn,
                step=ctx.step,
                tool=ctx.result.name,
                call_id=ctx.result.tool_call_id,
                suffix=".details.json",
                wrap=False,
            )
        except OSError:
            return None
        kept = {k: details[k] for k in _KEEP_INLINE if k in details}
        return {**kept, "details_artifact": str(art.path), "details_bytes": art.bytes}


def create_tool_output_budget(options: HostOptions, *, split_marker: MarkerSplit = no_marker) -> Extension:
    """The host builtin's factory (the host composition passes the provenance marker split)."""
    return tool_output_budget_extension(options, split_marker=split_marker)


def tool_output_budget_extension(
    options: HostOptions | None = None,
    settings: ContextSettings | None = None,
    *,
    split_marker: MarkerSplit = no_marker,
) -> Extension:
    """The host builtin; ``options`` is the runtime's HostOptions, ``settings`` override what they say."""
    if settings is None:
        settings = settings_from(options)
    budget = ToolOutputBudget(settings, split_marker=split_marker)

    def init(api: ExtensionAPI) -> None:
        api.on(Event.AFTER_TOOL_CALL, budget)

    return Extension(EXTENSION_ID, init, "large tool outputs go to session artifacts, replaced by a receipt")
