"""The what-ifs the advisor makes from request bodies, read one at a time: a session rebuilt with
its bodies rewritten, a pointer scanned across the calls, and the billing header's rewrites
(docs/architecture.md, "The cache advisor"). ``causes.py`` uses them where a shape cannot express
the what-if; ``--verify`` sends what they make."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ctxscope.inspector.advisor import shape_whatif
from ctxscope.inspector.advisor.model import Session, SessionCall
from ctxscope.inspector.advisor.rewrite import dropped, held, value_at
from ctxscope.inspector.advisor.shape import BILLING_HEADER, textless
from ctxscope.inspector.analyses.accounting import TokenCounter


def rebuilt(
    calls: Sequence[SessionCall], rewrite: Callable[[int, SessionCall], Any], counter: TokenCounter | None = None
) -> tuple[SessionCall, ...]:
    """The calls with their bodies rewritten and their prompts read again from the new bodies
    (``counter``: shared between the what-ifs, so a segment they keep is counted once)."""
    from ctxscope.inspector.analyses.canonical import canonicalize  # the body path's parsers: only here

    counter = counter or TokenCounter()
    out = []
    for i, call in enumerate(calls):
        body = rewrite(i, call)
        prompt = canonicalize(call.api, body) if body is not None else None
        if prompt is None:
            out.append(call)
            continue
        out.append(dataclasses.replace(call, body=body, prompt=prompt, tokens=counter.count_prompt(prompt)))
    return tuple(out)


def streamed(
    session: Session, calls: Sequence[SessionCall], rewrite: Callable[[int, SessionCall], Any], counter: TokenCounter
) -> tuple[SessionCall, ...]:
    """``rebuilt`` for calls made from shapes: each body read (``session.bodies``), rewritten, its
    prompt read again and kept without its text (``shape.textless``), one body at a time, so memory
    holds one body beside the shapes whatever the session's size. NeedsBodies without a reader."""
    if session.bodies is None:
        raise shape_whatif.NeedsBodies("no body reader")
    from ctxscope.inspector.analyses.canonical import canonicalize

    out: list[SessionCall] = []
    last: dict[str, SessionCall] = {}
    for i, call in enumerate(calls):
        sent = session.bodies(call.id)
        if not isinstance(sent, dict):  # no longer readable (released since): the call as it was sent
            out.append(call)
            continue
        body = rewrite(i, dataclasses.replace(call, body=sent))
        prompt = canonicalize(call.api, body) if body is not None else None
        if prompt is None:
            out.append(call)
            continue
        made = dataclasses.replace(call, prompt=prompt, tokens=counter.count_prompt(prompt))
        lean = textless(made, last.get(call.thread or call.id))
        last[call.thread or call.id] = lean
        out.append(lean)
    return tuple(out)


def bodies_in_order(session: Session, calls: Sequence[SessionCall]) -> Iterator[tuple[SessionCall, Any]]:
    """Each call with its body, read one at a time when the calls carry none."""
    for call in calls:
        if call.body is not None or session.bodies is None:
            yield call, call.body
        else:
            yield call, session.bodies(call.id)


@dataclass(frozen=True)
class Scan:
    """What the body path reads of a pointer across the session, taken in one pass."""

    first: Any  # the first value there
    changed: int  # calls whose value differs from the call before
    billing_here: bool  # a value there is a billing header
    billing_any: bool  # ... or a system block is


def scan_pointer(session: Session, calls: Sequence[SessionCall], pointer: str) -> Scan:
    first, changed, here, anywhere = None, 0, False, False
    before: str | None = None
    for n, (call, body) in enumerate(bodies_in_order(session, calls)):
        value = value_at(body, pointer)
        if first is None:
            first = value
        text = repr(value)
        if n and text != before:
            changed += 1
        before = text
        billing = is_billing_header(value)
        here = here or billing
        anywhere = anywhere or billing or bool(billing_pointers(dataclasses.replace(call, body=body)))
    return Scan(first, changed, here, anywhere)


def first_held(pointer: str) -> Callable[[int, SessionCall], Any]:
    """``held`` at the first value met at ``pointer``: the same rewrite as the body path's when
    applied to the calls in order (``--verify`` of a session read from shapes)."""
    first: list[Any] = []

    def rewrite(_i: int, c: SessionCall) -> Any:
        value = value_at(c.body, pointer)
        if value is None:
            return c.body
        if not first:
            first.append(value)
        return held(c.body, pointer, first[0])

    return rewrite


def is_billing_header(value: Any) -> bool:
    text = value.get("text") if isinstance(value, dict) else value
    return isinstance(text, str) and text.lstrip().lower().startswith(BILLING_HEADER)


def billing_pointers(call: SessionCall) -> list[str]:
    system = call.body.get("system") if isinstance(call.body, dict) else None
    blocks = system if isinstance(system, list) else []
    return [f"/system/{j}" for j, b in enumerate(blocks) if is_billing_header(b)]


def without_billing(pointer: str) -> Callable[[int, SessionCall], Any]:
    """Every billing header block dropped; one at the head of a text at ``pointer``, its line cut."""

    def rewrite(_i: int, call: SessionCall) -> Any:
        body = call.body
        for block in reversed(billing_pointers(call)):
            body = dropped(body, block)
        value = value_at(body, pointer)
        if isinstance(value, str) and is_billing_header(value):
            body = held(body, pointer, value.lstrip().partition("\n")[2])
        return body

    return rewrite
