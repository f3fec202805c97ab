"""A hand-over's repeated header lists are spliced in as remembered texts: the same bytes as
encoding them in place, whatever the field lists hold."""

from __future__ import annotations

import dataclasses

from ctxscope.inspector.base import json_splice
from ctxscope.inspector.base.json_splice import MARK, RepeatedTexts
from ctxscope.inspector.writer.wire.call_fields import pack
from ctxscope.inspector.writer.wire.spool_format import decode, payload_and_size
from ctxscope.proxy.exchange import Exchange

from support.factories import make_exchange

_NAMES = [f.name for f in dataclasses.fields(Exchange)]
REQUEST, RESPONSE = _NAMES.index("request_headers"), _NAMES.index("response_headers")


def _payload(batch: list[tuple], headers: RepeatedTexts | None) -> bytes:
    pieces, _ = payload_and_size(batch, None, headers)
    return b"".join(pieces)


def _calls(n: int, **overrides) -> list[tuple]:
    return [pack(make_exchange(k, **overrides)) for k in range(n)]


def test_spliced_texts_give_the_bytes_encoding_in_place_gives():
    headers = RepeatedTexts()
    batch = _calls(40)
    assert headers.worth(batch, REQUEST) and headers.worth(batch, RESPONSE)  # one list for all: spliced
    assert _payload(batch, headers) == _payload(batch, None)
    again = _calls(3, request_headers=(("content-type", "application/json"), ("x-api-key", "[redacted]")))
    assert headers.worth(again, REQUEST)  # remembered from the hand-over before
    assert _payload(again, headers) == _payload(again, None)
    assert [f[REQUEST] for f in decode(_payload(again, headers))] == [f[REQUEST] for f in again]


def test_a_field_list_holding_the_mark_itself_is_encoded_in_place():
    headers = RepeatedTexts()
    batch = _calls(5, client=MARK, extra={MARK: MARK})
    payload = _payload(batch, headers)
    assert payload == _payload(batch, None)
    assert decode(payload) == batch


def test_header_lists_seen_once_are_not_spliced_and_the_memory_is_bounded(monkeypatch):
    headers = RepeatedTexts()
    unique = [pack(make_exchange(k, response_headers=(("request-id", f"req_{k}"),))) for k in range(64)]
    assert not headers.worth(unique, RESPONSE) and headers.worth(unique, REQUEST)
    assert _payload(unique, headers) == _payload(unique, None)
    monkeypatch.setattr(json_splice, "LIMIT", 4)
    for k in range(9):
        headers.add((("n", str(k)),), f"text {k}")
    assert headers.get((("n", "8"),)) == "text 8" and headers.get((("n", "0"),)) is None
    headers.clear()
    assert headers.get((("n", "8"),)) is None
