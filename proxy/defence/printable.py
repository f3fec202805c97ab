"""Captured text made harmless for a terminal or a log line: the one place control characters are
taken out (docs/architecture.md, "Captured text never drives a terminal").

A session label, a header or a prompt is chosen by whoever sent the call, and a cross-site page can
send one. Printed raw, ESC sequences in it could write the clipboard (OSC 52), retitle the window or
hide lines. Every character Python does not call printable (C0 controls, ESC, DEL, C1 controls,
format characters such as bidirectional overrides, line and paragraph separators) is shown as a sign
instead: a newline as ⏎, a tab as →, a carriage return as ␍, anything else as "?". Where several
lines are printed on purpose, newlines and tabs are kept as they are.
"""

from __future__ import annotations

import logging

_SIGNS = {"\n": "⏎", "\t": "→", "\r": "␍"}
_KEPT = frozenset("\n\t")


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with no character that could drive a terminal; ``multiline`` keeps \\n and \\t."""
    if text.isprintable():  # the usual case, checked in C
        return text
    kept = _KEPT if multiline else frozenset()
    return "".join(ch if ch.isprintable() or ch in kept else _SIGNS.get(ch, "?") for ch in text)


class PrintableFormatter(logging.Formatter):
    """A log formatter whose lines carry no control character: a message built from what a client
    sent (a refused header, a path) cannot drive the terminal that shows the daemon's log.
    Tracebacks keep their lines."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), multiline=True)
