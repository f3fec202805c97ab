"""The JSON text of values a list of records repeats, encoded once and spliced into the list's
text: the writer's feeder does it for the header lists of a hand-over's calls
(docs/architecture.md, "Messages between the writer and its child"). It imports nothing of ours.

A client sends the same request headers with every call, and an upstream often the same response
headers for a while: their text was ~26K of the feeder's ~58K instructions per small call. The
feeder puts MARK in place of a header list it knows, encodes the field lists, then splices the
remembered texts in where MARK's text landed: the same bytes as encoding them in place. A field
list's string or key that is MARK itself would land there too, so the count of places is checked
and the hand-over is encoded in place when it does not add up.

A header list seen once costs more this way (it is hashed, looked up and encoded alone), so a
hand-over splices a field only when a sample of its calls repeats that field's lists, or finds
them remembered: a provider's response headers, with their request ids, are encoded in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MARK = "\x00ctxscope: a header list spliced in"
MARK_TEXT = '"\\u0000ctxscope: a header list spliced in"'  # MARK as ensure_ascii JSON writes it
LIMIT = 1024  # header lists remembered; past it they are all forgotten (a client's few come back at once)
SAMPLE = 16  # calls of a hand-over looked at to decide whether a field's lists repeat

Headers = tuple[tuple[str, str], ...]


class RepeatedTexts:
    """The texts of the header lists one encoder (the feeder) wrote lately, and which fields to splice."""

    def __init__(self) -> None:
        self._texts: dict[Headers, str] = {}
        self.get = self._texts.get  # the feeder's look-up, once per call and field

    def clear(self) -> None:
        """Let go of the texts (an idle feeder lets go of what it holds)."""
        self._texts.clear()

    def add(self, headers: Headers, text: str) -> str:
        if len(self._texts) >= LIMIT:
            self._texts.clear()
        self._texts[headers] = text
        return text

    def worth(self, batch: Sequence[tuple[Any, ...]], field: int) -> bool:
        """Whether the header lists of ``field`` in ``batch`` repeat enough to splice: at least
        half of a sample of calls spread over it carry a list seen before (in the sample, or
        remembered)."""
        n = len(batch)
        if n < 2:
            return n == 1 and batch[0][field] in self._texts
        step = max(1, n // SAMPLE)
        sample = [fields[field] for fields in batch[::step]]
        distinct = set(sample)
        seen = len(sample) - len(distinct) + sum(1 for headers in distinct if headers in self._texts)
        return 2 * seen >= len(sample)


def splice(text: str, texts: list[str]) -> str | None:
    """``text`` with each MARK in it replaced by the next of ``texts``; None when MARK is not
    there exactly once per text (a field list held MARK itself)."""
    parts = text.split(MARK_TEXT)
    if len(parts) != len(texts) + 1:
        return None
    out: list[str] = [""] * (2 * len(parts) - 1)
    out[::2] = parts
    out[1::2] = texts
    return "".join(out)
