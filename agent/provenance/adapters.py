"""Adapters: one per tool kind, each turns a successful tool call into the sources it drew on.

- files: ``read`` (path + the line range shown) and ``grep`` (one source per file with hits, the
  hit lines as its range);
- web: tools named ``fetch``, ``web_fetch`` or ``webfetch`` whose ``url`` argument is http(s);
- MCP: tools named ``mcp__<server>__<tool>``; the resource is taken from the result's details,
  a JSON result, or the arguments (``uri``, ``url``, ``path``), else the tool itself is the source.

Each ``Found`` also carries the text the model saw of the source (line numbers and grep prefixes
stripped), for the quote test, and whether the result gets a marker block: web and MCP results do,
since the model cannot tell where such a text came from otherwise; file results already name their
path and lines. Failed calls give no sources. User input resolves the same way: an ``@path`` that
names a text file inside the workspace is a file source of origin ``user``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..core.messages import ToolCall, ToolResult
from .refs import FILE, MCP, WEB, SourceReference, clean_title, file_locator, norm_path, sha256_text

MAX_TEXT_CHARS = 256 * 1024  # of one source, for the quote test
GREP_MAX_FILES = 20
USER_FILE_MAX_BYTES = 1024 * 1024
READ_TOOLS = frozenset({"read", "read_file"})
GREP_TOOLS = frozenset({"grep"})
WEB_TOOLS = frozenset({"fetch", "web_fetch", "webfetch"})

_READ_LINE = re.compile(r"^\s*(\d+)\t(.*)$")
_READ_NOTE = re.compile(r"^\[lines \d+-\d+ of \d+; continue with offset=\d+\]$")
_GREP_LINE = re.compile(r"^(.+?):(\d+): (.*)$")
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_MENTION = re.compile(r"(?<![\w@/])@((?:[\w.~-]+/)*[\w.-]*\w)")


@dataclass(frozen=True)
class Found:
    ref: SourceReference  # without an id yet
    text: str  # what the model saw of the source
    marker: bool  # append a host marker block to the result


def _is_http(url: object) -> bool:
    if not isinstance(url, str):
        return False
    parts = urlsplit(url.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def display_path(path: str, workspace: Path) -> str:
    """Workspace-relative when inside it, else absolute; compared with ``norm_path``."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = workspace / p
    try:
        return norm_path(str(p.resolve().relative_to(workspace.resolve())))
    except (ValueError, OSError):
        return norm_path(str(p))


# --- files ----------------------------------------------------------------------------------------


def _read(call: ToolCall, result: ToolResult, workspace: Path) -> list[Found]:
    path = call.arguments.get("path")
    if not isinstance(path, str) or not path.strip() or result.content == "(empty file)":
        return []
    numbers, text = [], []
    for line in result.content.splitlines():
        m = _READ_LINE.match(line)
        if m:
            numbers.append(int(m.group(1)))
            text.append(m.group(2))
        elif not _READ_NOTE.match(line):
            text.append(line)
    details = result.details or {}
    first, last = details.get("first_line"), details.get("last_line")
    if isinstance(first, int) and isinstance(last, int) and first <= last:
        lines: tuple[int, int] | None = (first, last)
    else:
        lines = (numbers[0], numbers[-1]) if numbers else None
    body = "\n".join(text)
    shown = display_path(path, workspace)
    ref = SourceReference(
        FILE,
        file_locator(shown, lines),
        clean_title(Path(shown).name or shown),
        sha256_text(body),
        tool=call.name,
        path=shown,
        lines=lines,
    )
    return [Found(ref, body[:MAX_TEXT_CHARS], marker=False)]


def _grep(call: ToolCall, result: ToolResult, workspace: Path) -> list[Found]:
    hits: dict[str, list[tuple[int, str]]] = {}
    for line in result.content.splitlines():
        m = _GREP_LINE.match(line)
        if m and (m.group(1) in hits or len(hits) < GREP_MAX_FILES):
            hits.setdefault(m.group(1), []).append((int(m.group(2)), m.group(3)))
    out = []
    for path, rows in hits.items():
        body = "\n".join(text for _, text in rows)
        numbers = [n for n, _ in rows]
        shown = display_path(path, workspace)
        lines = (min(numbers), max(numbers))
        ref = SourceReference(
            FILE,
            file_locator(shown, lines),
            clean_title(Path(shown).name or shown),
            sha256_text(body),
            tool=call.name,
            path=shown,
            lines=lines,
        )
        out.append(Found(ref, body[:MAX_TEXT_CHARS], marker=False))
    return out


# --- web ------------------------------------------------------------------------------------------


def _page_title(content: str, details: Mapping[str, Any], fallback: str) -> str:
    if isinstance(details.get("title"), str) and details["title"].strip():
        return clean_title(details["title"])
    head = content[:20_000]
    m = _HTML_TITLE.search(head)
    if m and m.group(1).strip():
        return clean_title(m.group(1))
    for line in head.splitlines()[:40]:
        if line.startswith("#") and line.lstrip("#").strip():
            return clean_title(line.lstrip("#"))
    return clean_title(fallback)


def _web(call: ToolCall, result: ToolResult, workspace: Path) -> list[Found]:
    details = result.details or {}
    url = next(
        (
            u
            for u in (
                details.get("final_url"),
                details.get("url"),
                call.arguments.get("url"),
                call.arguments.get("uri"),
            )
            if _is_http(u)
        ),
        None,
    )
    if url is None or not result.content.strip():
        return []
    url = url.strip()
    parts = urlsplit(url)
    ref = SourceReference(
        WEB,
        url,
        _page_title(result.content, details, parts.netloc + parts.path),
        sha256_text(result.content),
        tool=call.name,
        url=url,
    )
    return [Found(ref, result.content[:MAX_TEXT_CHARS], marker=True)]


# --- MCP ------------------------------------------------------------------------------------------


def mcp_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of an MCP-style tool name ``mcp__server__tool``; None otherwise."""
    parts = name.split("__")
    if len(parts) < 3 or parts[0] != "mcp" or not parts[1] or not "__".join(parts[2:]):
        return None
    return parts[1], "__".join(parts[2:])


def _resource_of(d: object) -> tuple[str | None, str | None]:
    """(resource, title) named by a mapping, if any."""
    if not isinstance(d, Mapping):
        return None, None
    title = next((d[k] for k in ("title", "name") if isinstance(d.get(k), str) and d[k].strip()), None)
    for key in ("uri", "url", "source_url"):
        if isinstance(d.get(key), str) and d[key].strip():
            return d[key].strip(), title
    nested = d.get("resource")
    if isinstance(nested, Mapping):
        res, inner = _resource_of(nested)
        return res, title or inner
    return None, title


def _mcp(call: ToolCall, result: ToolResult, workspace: Path) -> list[Found]:
    named = mcp_name(call.name)
    if named is None or not result.content.strip():
        return []
    server, tool = named
    resource, title = _resource_of(result.details or {})
    if resource is None and result.content.lstrip().startswith("{"):
        try:
            resource, title2 = _resource_of(json.loads(result.content))
            title = title or title2
        except ValueError:
            pass
    if resource is None:
        args = call.arguments
        resource = next(
            (
                args[k].strip()
                for k in ("uri", "url", "path", "file_path", "resource")
                if isinstance(args.get(k), str) and args[k].strip()
            ),
            None,
        )
    url = resource if _is_http(resource) else None
    locator = resource or f"mcp://{server}/{tool}"
    ref = SourceReference(
        MCP,
        clean_title(locator, 500),
        clean_title(title or f"{server}/{tool}"),
        sha256_text(result.content),
        tool=call.name,
        url=url,
    )
    return [Found(ref, result.content[:MAX_TEXT_CHARS], marker=True)]


# --- dispatch -------------------------------------------------------------------------------------

Adapter = Callable[[ToolCall, ToolResult, Path], "list[Found]"]


def adapter_for(tool_name: str) -> Adapter | None:
    if mcp_name(tool_name) is not None:
        return _mcp
    name = tool_name.lower()
    if name in READ_TOOLS:
        return _read
    if name in GREP_TOOLS:
        return _grep
    if name in WEB_TOOLS:
        return _web
    return None


def _inside(path: str, workspace: Path, folder: Path) -> bool:
    p = Path(path) if Path(path).is_absolute() else workspace / path
    try:
        return p.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def adapt(call: ToolCall, result: ToolResult, workspace: Path, *, not_under: Path | None = None) -> list[Found]:
    """The sources of one tool result; [] for failed calls and tools that are not sources.

    Files under ``not_under`` (the session's artifacts: tool outputs the budget moved aside, whose
    sources were recorded when they first arrived) are not sources.
    """
    adapter = adapter_for(call.name)
    if adapter is None or result.is_error:
        return []
    found = adapter(call, result, workspace)
    if not_under is not None:
        found = [f for f in found if not (f.ref.path and _inside(f.ref.path, workspace, not_under))]
    return found


def user_sources(text: str, workspace: Path) -> list[Found]:
    """``@path`` mentions in user input that name a text file inside the workspace, as file sources."""
    out: list[Found] = []
    seen: set[str] = set()
    root = workspace.resolve()
    for m in _MENTION.finditer(text):
        rel = m.group(1)
        try:
            path = (root / rel).resolve()
            path.relative_to(root)
            if not path.is_file() or path.stat().st_size > USER_FILE_MAX_BYTES:
                continue
            data = path.read_bytes()
        except (OSError, ValueError):
            continue
        if b"\0" in data[:8192]:
            continue
        shown = norm_path(str(path.relative_to(root)))
        if shown in seen:
            continue
        seen.add(shown)
        body = data.decode("utf-8", errors="replace")
        count = body.count("\n") + (0 if body.endswith("\n") or not body else 1)
        lines = (1, count) if count else None
        ref = SourceReference(
            FILE,
            file_locator(shown, lines),
            clean_title(path.name),
            sha256_text(body),
            origin="user",
            path=shown,
            lines=lines,
        )
        out.append(Found(ref, body[:MAX_TEXT_CHARS], marker=False))
    return out
