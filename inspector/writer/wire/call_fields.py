"""A call as it crosses the pipe and sits in the spool: the plain tuple of its ``Exchange`` fields.

An Exchange crosses the process boundary as a tuple of its fields, in their declared order: no
class reference and no field names, less than half the time to encode and decode. What a spool
record's fields must be, field by field, is checked against the annotation of each (``VALID``):
a record that does not pass is corrupt, whoever wrote the file (docs/architecture.md, "The spool
cannot run code").
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any

from ctxscope.proxy.exchange import Exchange


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value, from its factory when it has one."""
    if f.default is not dataclasses.MISSING:
        return f.default
    factory: Callable[[], Any] = f.default_factory  # type: ignore[assignment]  # typeshed: _MISSING_TYPE | factory
    return factory()


def _opt(kind: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or kind(v)


def _pairs(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str) for p in v
    )


_CHECKS = {  # an Exchange field's annotation -> a check of its JSON value (other kinds: any JSON value)
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: type(v) is bool,
    "int": lambda v: type(v) is int,
    "str | None": _opt(lambda v: isinstance(v, str)),
    "int | None": _opt(lambda v: type(v) is int),
    "float": lambda v: type(v) in (int, float, str),  # a number, or (since version 4) its bytes in hex
    "float | None": _opt(lambda v: type(v) in (int, float, str)),
    "dict[str, Any]": lambda v: isinstance(v, dict),
    "tuple[tuple[str, str], ...]": _pairs,
    # the body's length (its bytes follow the JSON), or its pieces then that length (checked by _pieces)
    "bytes": lambda v: (type(v) is int and v >= 0) or type(v) is list,
}
FIELDS = dataclasses.fields(Exchange)
# An Exchange crosses the process boundary and sits in the spool as a plain tuple of its fields: no
# class reference and no field names in the pickle, less than half the time to pickle and to unpickle.
pack = operator.attrgetter(*(f.name for f in FIELDS))
NAMES = [f.name for f in FIELDS]
ID = NAMES.index("id")
_SIZED = (NAMES.index("request_body"), NAMES.index("response_body"))


def unpack(fields: tuple) -> Exchange:
    return Exchange(*fields)


def call_size(fields: tuple) -> int:
    """Body bytes of a packed exchange (what the queue and spool limits count)."""
    return len(fields[_SIZED[0]]) + len(fields[_SIZED[1]])


_KINDS = [str(f.type) for f in FIELDS]
VALID = [_CHECKS.get(kind, lambda v: True) for kind in _KINDS]
# A spool written before fields with defaults were added still reads: they take their defaults.
REQUIRED = sum(1 for f in FIELDS if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
BODIES = [i for i, kind in enumerate(_KINDS) if kind == "bytes"]
REQUEST_BODY = NAMES.index("request_body")
BODY_FIELDS = tuple(BODIES)
PAIRS = [i for i, kind in enumerate(_KINDS) if kind.startswith("tuple[")]
FLOATS = [i for i, kind in enumerate(_KINDS) if kind.startswith("float")]
RESPONSE_BODY = NAMES.index("response_body")
REQUEST_HEADERS, RESPONSE_HEADERS = NAMES.index("request_headers"), NAMES.index("response_headers")
STARTED, FIRST_BYTE, ENDED = (NAMES.index(name) for name in ("started_at", "first_byte_at", "ended_at"))
assert BODY_FIELDS == (REQUEST_BODY, RESPONSE_BODY) and FLOATS == [STARTED, FIRST_BYTE, ENDED]  # unrolled there
