"""User message assembly: prefixes, extension reminders, host reminder blocks, then the user's own text.

Every reminder is exactly one complete ``<system-reminder>…</system-reminder>`` block, or empty;
anything else (bare text, two blocks, an unclosed tag) is an error, so a provider cannot smuggle
text outside its block or break the block structure the inspector counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .messages import Message, TextBlock

OPEN = "<system-reminder>"
CLOSE = "</system-reminder>"
SEPARATOR = "\n\n"


class ReminderFormatError(ValueError):
    """A reminder that is not exactly one complete <system-reminder> block."""


def validate_reminder(text: str, *, origin: str = "reminder") -> str:
    """The block without surrounding whitespace, or "" for an empty reminder; raises otherwise."""
    if not isinstance(text, str):
        raise ReminderFormatError(f"{origin}: a reminder must be a string, not {type(text).__name__}")
    block = text.strip()
    if not block:
        return ""
    if not (block.startswith(OPEN) and block.endswith(CLOSE)):
        raise ReminderFormatError(f"{origin}: a reminder must be one complete {OPEN}…{CLOSE} block")
    if block.count(OPEN) != 1 or block.count(CLOSE) != 1:
        raise ReminderFormatError(f"{origin}: a reminder must be exactly one {OPEN} block")
    return block


def reminder_block(*lines: str) -> str:
    """Wrap non-empty lines into one block ("" when there is nothing to say)."""
    body = "\n".join(line for line in lines if line)
    return f"{OPEN}\n{body}\n{CLOSE}" if body else ""


def assemble_user_text(
    prefixes: Iterable[str], extension_reminders: Iterable[str], host_reminders: Iterable[str], text: str
) -> str:
    parts = [p.strip() for p in prefixes if p and p.strip()]
    parts += [b for b in (validate_reminder(r, origin="extension reminder") for r in extension_reminders) if b]
    parts += [b for b in (validate_reminder(r, origin="host reminder") for r in host_reminders) if b]
    parts.append(text)
    return SEPARATOR.join(parts)


def assemble_user_message(
    prefixes: Iterable[str], extension_reminders: Iterable[str], host_reminders: Iterable[str], text: str, **meta: Any
) -> Message:
    """The turn's user message; ``meta["genuine_text"]`` marks the user's own words."""
    full = assemble_user_text(prefixes, extension_reminders, host_reminders, text)
    return Message("user", (TextBlock(full),), meta={"kind": "input", **meta, "genuine_text": text})
