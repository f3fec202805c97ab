"""The runaway guard's reminder text, in our own words; one per turn, sent as a steering user message."""

from __future__ import annotations

from ..core.assembly import reminder_block
from .signals import NO_PROGRESS, POLLING, REPEATED_ACTION, SAME_ERROR_FAMILY, Signal

SAME_ERROR_REPEATED = "same_error_family:unchanged"  # the text's key when the failing call did not change

_LEADS = {
    NO_PROGRESS: "Your last {n} steps brought nothing new: each call returned something you had already seen "
    "in this turn.",
    SAME_ERROR_FAMILY: "Your last {n} steps failed with the same kind of error ({label}), even though the "
    "arguments changed.",
    SAME_ERROR_REPEATED: "Your last {n} steps made the same call and it failed each time with the same kind of "
    "error ({label}).",
    REPEATED_ACTION: "You have made the same call and got the same result in each of your last {n} steps.",
    POLLING: "You have checked the same status {n} times in a row and it has not moved.",
}

ADVICE = (
    "Do not repeat that action unchanged. Look at the results you already have; then either change "
    "your approach and say which concrete change in state you expect the next action to produce, or "
    "stop and report what is blocking you."
)
TEMPORARY = "This is a temporary note from the host for this turn only. Do not store it in memory, notes or skills."


def reminder_text(signal: Signal) -> str:
    key = SAME_ERROR_REPEATED if signal.kind == SAME_ERROR_FAMILY and not signal.varied else signal.kind
    lead = _LEADS[key].format(n=signal.count, label=signal.label or "same family")
    return reminder_block(f"Runaway guard: {lead}", ADVICE, TEMPORARY)
