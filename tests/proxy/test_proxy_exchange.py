import dataclasses

from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.forward.recorder import Recorder
from ctxscope.proxy.forward.routing import resolve
from ctxscope.vocab.kinds import Outcome

from support.factories import make_exchange

FIELDS = [f.name for f in dataclasses.fields(Exchange)]


def test_an_exchange_is_slotted_and_positional_in_field_order():
    made = make_exchange()
    again = Exchange(*(getattr(made, name) for name in FIELDS))
    assert again == made and repr(again) == repr(made)
    assert not hasattr(made, "__dict__") and Exchange.__slots__ == tuple(FIELDS)


def test_the_recorder_puts_each_value_in_its_field():
    class Request:
        method = "PUT"

    route = resolve("/u/fast/v1/chat/completions", {"fast": "http://127.0.0.1:9"})
    rec = Recorder(
        route,
        Request(),
        [("Authorization", "Bearer sk-test-not-a-real-key-123"), ("User-Agent", "ua/1")],
        [("x-ctxscope-turn", "3")],
        "label-a",
        "a=1",
        1.5,
    )
    rec.body, rec.status, rec.response_headers, rec.chunks = b"req", 418, (("server", "s"),), [b"re", b"sp"]
    rec.first_byte_at = 1.75
    rec.finish(Outcome.HTTP_ERROR, "boom")
    exchange = rec.to_exchange(b"salt")
    assert (exchange.provider, exchange.upstream, exchange.method, exchange.path, exchange.query) == (
        route.provider,
        route.upstream.base_url,
        "PUT",
        route.path,
        "a=1",
    )
    assert (exchange.session_label, exchange.annotations, exchange.client) == (
        "label-a",
        (("x-ctxscope-turn", "3"),),
        "ua/1",
    )
    assert exchange.key_fingerprint and ("Authorization", "[redacted]") in exchange.request_headers
    assert (exchange.request_body, exchange.status, exchange.response_headers, exchange.response_body) == (
        b"req",
        418,
        (("server", "s"),),
        b"resp",
    )
    assert (exchange.started_at, exchange.first_byte_at) == (1.5, 1.75) and exchange.ended_at >= 1.75
    assert exchange.outcome == "http_error" and type(exchange.outcome) is str and exchange.error == "boom"
    assert exchange.extra == {} and exchange.id
