"""Printing query results: JSON for scripts, aligned columns for people.

Captured bodies are stored byte-exact, keys a client put inside them included: everything
printed here is masked first (``redact.mask_keys_in`` / ``mask_key_values``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from ctxscope.proxy.redaction.mask import mask_key_values, mask_keys_in


def emit_json(data: Any) -> None:
    click.echo(json.dumps(mask_keys_in(data), indent=2, ensure_ascii=False, default=str))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    text = mask_key_values(str(value))
    # Captured text is untrusted: never let it drive the terminal.
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def emit_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> None:
    """columns: (key, header) pairs; keys may be dotted ("usage.input")."""
    if not rows:
        click.echo("(nothing)")
        return

    def get(row, key):
        for part in key.split("."):
            row = row.get(part) if isinstance(row, dict) else None
        return row

    table = [[h for _, h in columns]] + [[_cell(get(r, k)) for k, _ in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
