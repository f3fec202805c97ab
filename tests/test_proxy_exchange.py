import dataclasses

import pytest

from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.forward.recorder import Recorder
from ctxscope.proxy.forward.routing import resolve
from ctxscope.vocab.kinds import Outcome
from tests.factories import make_exchange

FIELDS = {f.name for f in dataclasses.fields(Exchange)}


def test_of_makes_the_same_frozen_exchange_as_the_dataclass():
    made = make_exchange()
    fast = Exchange.of({name: getattr(made, name) for name in FIELDS})
    assert fast == made and type(fast) is Exchange and repr(fast) == repr(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.status = 500  # type: ignore[misc]


def test_the_recorder_names_every_field_of_its_exchange():
    class Request:
        method = "POST"

    route = resolve("/u/fast/v1/chat/completions", {"fast": "http://127.0.0.1:9"})
    rec = Recorder(route, Request(), [("Authorization", "Bearer sk-test-not-a-real-key-123")], [], None, "", 1.0)
    rec.finish(Outcome.HTTP_ERROR, "boom")
    exchange = rec.to_exchange(b"salt")
    assert set(vars(exchange)) == FIELDS
    assert exchange.outcome == "http_error" and type(exchange.outcome) is str
