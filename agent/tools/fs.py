"""File tools: read (ranges), write, edit (exact, unique replace), ls, grep (bounded). Paths are workspace-relative.

Every output is bounded so a tool result stays a reasonable size on its own; ``read`` pages with
``offset``/``limit`` (1-based lines) and says how to continue.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.tools import Tool, ToolContext, ToolError, ToolOutput

READ_MAX_LINES = 2000
READ_MAX_BYTES = 50 * 1024
LINE_MAX_CHARS = 2000
LS_MAX_ENTRIES = 1000
GREP_MAX_RESULTS = 100
GREP_HARD_MAX = 1000
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024
GREP_MAX_FILES = 20_000
SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    ".ruff_cache",
}


def _display(path: Path, ctx: ToolContext) -> str:
    try:
        return str(path.relative_to(ctx.workspace))
    except ValueError:
        return str(path)


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def _text_file(path: Path, ctx: ToolContext) -> str:
    if not path.exists():
        raise ToolError(f"file not found: {_display(path, ctx)}")
    if path.is_dir():
        raise ToolError(f"{_display(path, ctx)} is a directory; use ls")
    data = path.read_bytes()
    if _is_binary(data[:8192]):
        raise ToolError(f"{_display(path, ctx)} is a binary file")
    return data.decode("utf-8", errors="replace")


async def read(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = ctx.resolve(args["path"])
    offset = int(args.get("offset") or 1)
    limit = int(args.get("limit") or READ_MAX_LINES)
    if offset < 1 or limit < 1:
        raise ToolError("offset and limit are 1-based positive line numbers")
    lines = _text_file(path, ctx).splitlines()
    total = len(lines)
    if total == 0:
        return ToolOutput("(empty file)", details={"total_lines": 0})
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of the file ({total} lines)")
    out: list[str] = []
    size = 0
    end = offset - 1
    for n in range(offset, min(total, offset - 1 + min(limit, READ_MAX_LINES)) + 1):
        line = lines[n - 1]
        if len(line) > LINE_MAX_CHARS:
            line = line[:LINE_MAX_CHARS] + " … [line truncated]"
        row = f"{n:>6}\t{line}"
        if out and size + len(row) + 1 > READ_MAX_BYTES:
            break
        out.append(row)
        size += len(row) + 1
        end = n
    text = "\n".join(out)
    if end < total:
        text += f"\n[lines {offset}-{end} of {total}; continue with offset={end + 1}]"
    return ToolOutput(text, details={"total_lines": total, "first_line": offset, "last_line": end})


async def write(args: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.resolve(args["path"])
    content = args["content"]
    if path.is_dir():
        raise ToolError(f"{_display(path, ctx)} is a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode()
    path.write_bytes(data)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return f"wrote {len(data)} bytes ({lines} lines) to {_display(path, ctx)}"


async def edit(args: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.resolve(args["path"])
    old, new = args["old_string"], args["new_string"]
    if not old:
        raise ToolError("old_string must not be empty (use write to create a file)")
    if old == new:
        raise ToolError("old_string and new_string are the same")
    text = _text_file(path, ctx)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"old_string not found in {_display(path, ctx)}; read the file and copy the exact text")
    if count > 1 and not args.get("replace_all"):
        raise ToolError(
            f"old_string occurs {count} times in {_display(path, ctx)}; include more surrounding "
            "text to make it unique, or set replace_all"
        )
    path.write_bytes(text.replace(old, new).encode())
    return f"replaced {count} occurrence{'s' if count > 1 else ''} in {_display(path, ctx)}"


async def ls(args: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.resolve(args.get("path") or ".")
    if not path.exists():
        raise ToolError(f"not found: {_display(path, ctx)}")
    if not path.is_dir():
        raise ToolError(f"{_display(path, ctx)} is a file; use read")
    entries = sorted(path.iterdir(), key=lambda p: p.name)
    rows = [p.name + ("/" if p.is_dir() else "") for p in entries[:LS_MAX_ENTRIES]]
    if len(entries) > LS_MAX_ENTRIES:
        rows.append(f"[{len(entries) - LS_MAX_ENTRIES} more entries not shown]")
    return "\n".join(rows) if rows else "(empty directory)"


def _walk(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            yield Path(dirpath) / name


def _grep(root: Path, rx: re.Pattern[str], glob: str | None, limit: int, ctx: ToolContext) -> tuple[list[str], bool]:
    hits: list[str] = []
    for i, file in enumerate(_walk(root)):
        if i >= GREP_MAX_FILES:
            return hits, True
        rel = _display(file, ctx)
        if glob and not (fnmatch.fnmatch(file.name, glob) or fnmatch.fnmatch(rel, glob)):
            continue
        try:
            if file.stat().st_size > GREP_MAX_FILE_BYTES:
                continue
            data = file.read_bytes()
        except OSError:
            continue
        if _is_binary(data[:8192]):
            continue
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if rx.search(line):
                hits.append(f"{rel}:{n}: {line[:300]}")
                if len(hits) >= limit:
                    return hits, True
    return hits, False


async def grep(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    try:
        rx = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as e:
        raise ToolError(f"invalid regular expression: {e}") from e
    root = ctx.resolve(args.get("path") or ".")
    if not root.exists():
        raise ToolError(f"not found: {_display(root, ctx)}")
    limit = max(1, min(int(args.get("max_results") or GREP_MAX_RESULTS), GREP_HARD_MAX))
    hits, truncated = await asyncio.to_thread(_grep, root, rx, args.get("glob"), limit, ctx)
    if not hits:
        return ToolOutput("No matches found.", details={"matches": 0})
    text = "\n".join(hits)
    if truncated:
        text += f"\n[stopped after {len(hits)} matches; narrow the pattern, path or glob]"
    return ToolOutput(text, details={"matches": len(hits), "truncated": truncated})


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


READ = Tool(
    "read",
    "Read a text file. Lines come numbered; page through long files with offset (1-based line) "
    f"and limit (at most {READ_MAX_LINES} lines or {READ_MAX_BYTES // 1024} KiB per call).",
    _schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace"},
            "offset": {"type": "integer", "description": "First line to read (1-based)"},
            "limit": {"type": "integer", "description": "Number of lines to read"},
        },
        ["path"],
    ),
    read,
)
WRITE = Tool(
    "write",
    "Create or overwrite a file with the given content (parent folders are created).",
    _schema({"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    write,
)
EDIT = Tool(
    "edit",
    "Replace an exact piece of text in a file. old_string must occur exactly once unless "
    "replace_all is true; copy it exactly from read output (without the line numbers).",
    _schema(
        {
            "path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean"},
        },
        ["path", "old_string", "new_string"],
    ),
    edit,
)
LS = Tool(
    "ls",
    "List a directory (folders end with /).",
    _schema({"path": {"type": "string", "description": "Directory, default the workspace"}}, []),
    ls,
)
GREP = Tool(
    "grep",
    "Search file contents with a regular expression; prints path:line: text, at most "
    f"max_results matches (default {GREP_MAX_RESULTS}).",
    _schema(
        {
            "pattern": {"type": "string"},
            "path": {"type": "string"},
            "glob": {"type": "string", "description": "File name filter, e.g. *.py"},
            "ignore_case": {"type": "boolean"},
            "max_results": {"type": "integer"},
        },
        ["pattern"],
    ),
    grep,
)
FS_TOOLS = (READ, WRITE, EDIT, LS, GREP)
