"""Read-only views for observers: what ``on_llm_call_prepared`` handlers receive.

An observer sees the prepared call exactly as it will be sent, but as a frozen deep copy: its
headers, the request's messages with their meta, tool calls' arguments and tool results' details
are ``FrozenDict``s and tuples, so a mutation raises ``ReadOnlyViolation`` (or the dataclass's
``FrozenInstanceError``) at the line that tried it, and what is sent and what is stored never
change. The dispatcher decides what a violation costs: in strict mode (tests turn it on:
``LoopConfig(strict_views=True)`` or ``CTXSCOPE_AGENT_STRICT=1``) it fails the turn; by default it
is logged, counted and ignored (docs/architecture.md, "Prepared calls are read-only").
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, NoReturn

from .model import PreparedCall

STRICT_ENV = "CTXSCOPE_AGENT_STRICT"  # "1": a read-only violation fails the turn (a test run may set it)


class ReadOnlyViolation(TypeError):
    """An observer tried to change a read-only view."""


def strict_default() -> bool:
    return os.environ.get(STRICT_ENV) == "1"


class FrozenDict(dict[str, Any]):
    """A dict that refuses every change (still a dict: JSON, ``dict(...)`` and ``copy()`` work)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyViolation("this mapping is a read-only view; copy it (dict(view)) to change a copy")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def copy(self) -> dict[str, Any]:
        return dict(self)

    # copies are ordinary, changeable dicts (copy and deepcopy would otherwise rebuild a FrozenDict item by item)
    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


def freeze(value: Any) -> Any:
    """A deep read-only copy: dicts become FrozenDicts, lists tuples, frozen dataclasses are rebuilt around
    frozen fields; strings, bytes and numbers are shared (they cannot change)."""
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: freeze(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value


def prepared_view(call: PreparedCall) -> PreparedCall:
    """The prepared call as observers get it: equal to ``call``, sharing nothing that can change."""
    view = freeze(call)
    assert isinstance(view, PreparedCall)
    return view


def is_violation(error: BaseException) -> bool:
    return isinstance(error, (ReadOnlyViolation, dataclasses.FrozenInstanceError))
