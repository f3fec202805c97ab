"""Printing query results: JSON for scripts, aligned columns for people.

Captured bodies are stored byte-exact, keys a client put inside them included: everything
printed here is masked first (``redact.mask_keys_in`` / ``mask_key_values``). Human output fits
the terminal and never shows a Python repr (docs/architecture.md, "Human output fits the terminal"),
and no control character a client chose reaches it (``guard_stdout``; docs/architecture.md,
"Captured text never drives a terminal").
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from ctxscope.proxy.defence.printable import printable
from ctxscope.proxy.redaction.mask import mask_key_values, mask_keys_in

DEFAULT_WIDTH = 100
WRAP_FLOOR = 12  # a wrapped column is never narrower than this (or its header)


def json_text(data: Any) -> str:
    """``data`` as indented JSON whose every non-printable character is a \\u escape (json leaves
    DEL, C1 controls and the like raw with ensure_ascii=False): the same data, safe on a terminal."""
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    if text.replace("\n", "").isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _json_escape(ch) for ch in text)


def _json_escape(ch: str) -> str:
    return json.dumps(ch, ensure_ascii=True)[1:-1]  # (a surrogate pair beyond the BMP)


def emit_json(data: Any) -> None:
    click.echo(json_text(mask_keys_in(data)))


def safe_text(value: Any) -> str:
    """Captured text made safe for a terminal: keys masked, newlines and tabs shown as signs, other
    control characters as "?" (captured text never drives the terminal)."""
    return printable("-" if value is None else mask_key_values(str(value)))


class GuardedStdout(io.TextIOBase):
    """Standard output through ``printable``: whatever a command prints, no control character
    other than a newline or a tab reaches the terminal. Bytes written to ``buffer`` (a raw body
    sent to a file or a pipe on purpose) pass as they are."""

    def __init__(self, inner: Any):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(printable(text, multiline=True))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]  # (click checks it to use this stream as is)
        return getattr(self.inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]  # typeshed: a plain attribute on TextIOBase
        return getattr(self.inner, "errors", None)

    @property
    def buffer(self) -> Any:
        return self.inner.buffer


def guard_stdout() -> Callable[[], None]:
    """Put ``GuardedStdout`` in front of sys.stdout; returns what puts the old one back."""
    inner = sys.stdout
    if isinstance(inner, GuardedStdout) or inner is None:
        return lambda: None
    sys.stdout = GuardedStdout(inner)

    def restore() -> None:
        if isinstance(sys.stdout, GuardedStdout) and sys.stdout.inner is inner:
            sys.stdout.flush()
            sys.stdout = inner

    return restore


def fmt_int(n: Any) -> str:
    return "-" if n is None else f"{n:,}" if isinstance(n, int) else str(n)


def fmt_rate(rate: Any) -> str:
    """A share 0..1 as a percentage with one decimal ("84.9%")."""
    return "-" if rate is None else f"{rate:.1%}"


def fmt_usd(usd: Any) -> str:
    """Dollars to the cent, smaller amounts to four places ("$0.0216"); "-" when unpriced."""
    if usd is None:
        return "-"
    if isinstance(usd, str):  # "unpriced": said, not a dash
        return usd
    return f"${usd:,.2f}" if abs(usd) >= 1 else f"${usd:.4f}"


def plain(value: Any) -> str:
    """Any value in words: lists joined by commas, mappings as key=value pairs, never a repr."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(plain(v) for v in value) or "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={plain(v)}" for k, v in value.items()) or "-"
    if isinstance(value, int):
        return fmt_int(value)
    return safe_text(value)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    return safe_text(value)


def terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 100."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


@dataclass(frozen=True)
class Column:
    """A table column: the row key (dotted for nested values), its header, and how a cell is made."""

    key: str
    header: str
    fmt: Any = None  # callable(value) -> str; default: _cell
    shrink: bool = False  # may be cut with "…" to fit the width; ids and key cells (model, pointer, markers) never are
    right: bool = False  # numbers align right
    wrap: bool = False  # a comma list that goes on more lines, whole items, before any column is cut


def get_path(row: Any, key: str) -> Any:
    for part in key.split("."):
        row = row.get(part) if isinstance(row, dict) else None
    return row


def pick_columns(columns: Sequence[Column], names: str | None, default: Sequence[str], wide: bool) -> list[Column]:
    """The columns to print: --columns (a comma list of headers, any case), else all with --wide, else the defaults."""
    by_name = {c.header.lower(): c for c in columns}
    if names:
        chosen = [n.strip().lower() for n in names.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in by_name]
        if unknown:
            raise click.UsageError(
                f"unknown column(s) {', '.join(unknown)}; choose from {', '.join(c.header for c in columns)}"
            )
        return [by_name[n] for n in chosen]
    if wide:
        return list(columns)
    return [by_name[n.lower()] for n in default]


def emit_table(
    rows: Sequence[dict], columns: Sequence[tuple[str, str] | Column], *, width: int | None = None, wide: bool = False
) -> None:
    """columns: Column or (key, header) pairs; keys may be dotted ("usage.input"). Unless ``wide``, the
    table is cut to ``width`` (default: the terminal's) by shortening its shrinkable columns, the
    widest first; the others (ids, numbers, the key cells) stay whole even if the line then runs
    past the width (docs/architecture.md, "Human output fits the terminal")."""
    if not rows:
        click.echo("(nothing)")
        return
    cols = [c if isinstance(c, Column) else Column(c[0], c[1]) for c in columns]
    body = [[(c.fmt or _cell)(get_path(r, c.key)) for c in cols] for r in rows]
    table = [[c.header for c in cols], *body]
    widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
    if not wide:
        limit = width or terminal_width()
        over = sum(widths) + 2 * (len(cols) - 1) - limit
        for i, c in enumerate(cols):  # a wrapped list first gives way, down to its longest item
            if c.wrap and over > 0:
                floor = max([len(c.header), *(len(item) for line in body for item in _items(line[i]))])
                cut = min(over, max(0, widths[i] - floor))
                widths[i] -= cut
                over -= cut
        while over > 0:
            shrinkable = [i for i, c in enumerate(cols) if c.shrink and widths[i] > max(len(c.header), 6)]
            if not shrinkable:
                break
            i = max(shrinkable, key=lambda j: widths[j])
            cut = min(over, widths[i] - max(len(cols[i].header), 6))
            widths[i] -= cut
            over -= cut
        for i, c in enumerate(cols):  # last, a wrapped cell's items go on more lines too: never cut
            if c.wrap and over > 0:
                cut = min(over, max(0, widths[i] - max(len(c.header), WRAP_FLOOR)))
                widths[i] -= cut
                over -= cut
    for line in table:
        parts = [
            _wrapped(text, w) if c.wrap else [fit_line(text, w)] for text, w, c in zip(line, widths, cols, strict=True)
        ]
        for k in range(max(len(p) for p in parts)):
            cells = [
                (p[k] if k < len(p) else "").rjust(w) if c.right else (p[k] if k < len(p) else "").ljust(w)
                for p, w, c in zip(parts, widths, cols, strict=True)
            ]
            click.echo("  ".join(cells).rstrip())


def _items(text: str) -> list[str]:
    """A comma list's items, each with its comma."""
    items = text.split(",")
    return [item + "," for item in items[:-1]] + items[-1:]


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` on lines of at most ``width``, broken after a comma, an item longer than that over
    several lines: every character is printed."""
    lines: list[str] = []
    for item in _items(text):
        if lines and len(lines[-1]) + len(item) <= width:
            lines[-1] += item
        else:
            lines += [item[k : k + width] for k in range(0, len(item), width)] or [""]
    return lines or [""]


def fit_line(text: str, width: int) -> str:
    """One line cut to ``width`` characters, "…" marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def value_words(value: Any) -> str:
    """A value in words (a diff's, a marker's): a clipped value as its start and its length, a list
    or a mapping spelled out, never a Python repr (docs/architecture.md, "Human output fits the terminal")."""
    if isinstance(value, dict) and value.get("clipped"):
        start = safe_text(value.get("json_prefix") or value.get("preview") or "")[:60]
        return f"{start}… ({fmt_int(value.get('chars'))} characters, clipped)"
    if isinstance(value, (list, tuple)) and not value:
        return "none"
    if isinstance(value, (dict, list, tuple, bool, int)):
        return plain(value)
    return safe_text(value)


def plural(n: Any, noun: str) -> str:
    """ "1 segment", "2 segments", "1,204 segments": the count grouped, the noun agreeing with it."""
    return f"{fmt_int(n)} {noun}{'' if n == 1 else 's'}"


def emit_fields(pairs: Sequence[tuple[str, Any]], indent: int = 0) -> None:
    """Aligned "name: value" lines, values in words (never a repr)."""
    if not pairs:
        return
    w = max(len(k) for k, _ in pairs)
    for k, v in pairs:
        click.echo(f"{' ' * indent}{k:>{w}}: {v if isinstance(v, str) else plain(v)}")
