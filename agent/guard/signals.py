"""Runaway-guard signals: consecutive counting over step views, thresholds and the reminder choice.

A key seen in consecutive steps counts up (first sighting = 1); a step without it resets it, and
a step without tool calls resets everything. Six signals:

- ``repeated_action``: the same call with the same answer (action + result pair) step after step.
  Keying on the pair keeps a debugger's ``next`` or a log tail that advances from counting.
- ``repeated_result``: the same result, whatever produced it (observe only).
- ``same_error_family``: failures of one family in a row, even with varying arguments (the signal
  says whether they varied, so the reminder does not claim a change that did not happen).
- ``abab_alternation``: the last four (or more) action batches alternate A, B, A, B (observe only);
  its count is the number of A-B repetitions.
- ``polling_without_change``: a polling tool (task status/output) at the same status and cursor.
- ``no_progress``: steps in which nothing new happened: every (action, result) pair was already
  seen this turn, no polled loop moved, and the host's verified progress (if any) is unchanged.

Count 2 is an observation; at the reminder threshold (3, never lower) four signals may remind, in
priority order: no progress > same error family > repeated action > polling.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import SupportsIndex, SupportsInt

from .projection import CallView, StepView

REPEATED_ACTION = "repeated_action"
REPEATED_RESULT = "repeated_result"
SAME_ERROR_FAMILY = "same_error_family"
ABAB = "abab_alternation"
POLLING = "polling_without_change"
NO_PROGRESS = "no_progress"
REMINDER_PRIORITY = (NO_PROGRESS, SAME_ERROR_FAMILY, REPEATED_ACTION, POLLING)
OBSERVE_AT = 2
MIN_REMIND_AT = 3
_KEYED = (REPEATED_ACTION, REPEATED_RESULT, SAME_ERROR_FAMILY, POLLING)


def remind_threshold(configured: object = None) -> int:
    """The configured reminder threshold, never below 3 (lower values fire on ordinary retries)."""
    if not isinstance(configured, str | bytes | SupportsInt | SupportsIndex):
        return MIN_REMIND_AT
    try:
        value = int(configured)
    except (TypeError, ValueError):
        return MIN_REMIND_AT
    return max(MIN_REMIND_AT, value)


@dataclass(frozen=True)
class Signal:
    kind: str
    count: int
    key: str  # a fingerprint prefix, for events; "" for whole-step signals
    label: str | None = None  # same_error_family: the family's code or class
    varied: bool = False  # same_error_family: the failing calls' arguments changed within the run


class SignalTracker:
    """Counts for one turn (the fingerprints are only comparable within it)."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {k: {} for k in _KEYED}
        self._batches: list[str] = []
        self._pairs: set[str] = set()
        self._positions: dict[str, str] = {}
        self._verified: str | None = None
        self._no_progress = 0
        self._family_actions: dict[str, set[str]] = {}  # error family -> actions that failed with it in its run

    def reset(self) -> None:
        self._counts = {k: {} for k in _KEYED}
        self._batches = []
        self._no_progress = 0
        self._family_actions = {}

    def _families(self, calls: tuple[CallView, ...]) -> Signal | None:
        """same_error_family, and whether the calls of the run differed (the reminder says so only then)."""
        labels: dict[str, str | None] = {}
        runs: dict[str, set[str]] = {}
        for c in calls:
            if c.error_family is not None:
                labels[c.error_family] = c.family_label
                runs.setdefault(c.error_family, set(self._family_actions.get(c.error_family, ()))).add(c.action)
        self._family_actions = runs
        signal = self._bump(SAME_ERROR_FAMILY, labels)
        if signal is None:
            return None
        counts = self._counts[SAME_ERROR_FAMILY]
        top = max(counts, key=lambda k: (counts[k], k))  # the key _bump reported
        return replace(signal, varied=len(runs[top]) > 1)

    def _bump(self, kind: str, keys: dict[str, str | None]) -> Signal | None:
        old = self._counts[kind]
        new = {k: old.get(k, 0) + 1 for k in keys}
        self._counts[kind] = new
        if not new:
            return None
        top = max(new, key=lambda k: (new[k], k))
        return Signal(kind, new[top], top[:12], keys[top])

    def _alternation(self) -> int:
        b = self._batches
        if len(b) < 2 or b[-1] == b[-2]:
            return 0
        run, i = 2, len(b) - 3
        while i >= 0 and b[i] == b[i + 2]:
            run += 1
            i -= 1
        return run // 2

    def observe(self, view: StepView, verified: str | None = None) -> list[Signal]:
        """Update the counts with one step; the current signal of every kind that counts (max per kind)."""
        if not view.calls:
            self.reset()
            return []
        calls = view.calls
        out = [
            self._bump(REPEATED_ACTION, {c.pair: None for c in calls if not c.polling}),
            self._bump(REPEATED_RESULT, {c.result: None for c in calls}),
            self._families(calls),
            self._bump(POLLING, {c.position: None for c in calls if c.polling and c.position}),
        ]
        moved = any(c.loop is not None and self._positions.get(c.loop) != c.position for c in calls)
        novel = any(c.pair not in self._pairs for c in calls)
        verified_moved = verified is not None and verified != self._verified
        for c in calls:
            self._pairs.add(c.pair)
            if c.loop is not None and c.position is not None:
                self._positions[c.loop] = c.position
        if verified is not None:
            self._verified = verified
        self._no_progress = 0 if (novel or moved or verified_moved) else self._no_progress + 1
        if self._no_progress:
            out.append(Signal(NO_PROGRESS, self._no_progress, ""))
        self._batches.append(view.batch)
        alternations = self._alternation()
        if alternations:
            out.append(Signal(ABAB, alternations, view.batch[:12]))
        return [s for s in out if s is not None]


def choose_reminder(signals: list[Signal], threshold: int) -> Signal | None:
    """The highest-priority reminding signal at or over the threshold, if any."""
    eligible = {s.kind: s for s in signals if s.kind in REMINDER_PRIORITY and s.count >= threshold}
    return next((eligible[k] for k in REMINDER_PRIORITY if k in eligible), None)
