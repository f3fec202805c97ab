"""inspector/base/json_text.py: the encoder made once writes the text json.JSONEncoder(...).encode writes."""

from __future__ import annotations

import enum
import json
import threading
from decimal import Decimal

import pytest

from ctxscope.inspector.base import json_text


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


VALUES = [
    "plain",
    'ünïcødé ✓ \u2028 \x00 "quoted" \\',
    0,
    -7,
    2**70,
    1.5,
    1e300,
    0.1 + 0.2,
    float("inf"),
    float("nan"),
    True,
    False,
    None,
    [],
    {},
    [1, [2, [3, {"a": None}]]],
    {"b": 1, "a": [True, None, "x"], "ç": {"z": 1.0, "y": ""}},
    {"kind": Colour.RED, "level": Level.HIGH},
    [Colour.RED, Level.HIGH],
    {3: "int key", 1.5: "float key", True: "bool key", None: "null key"},
    ("a", "tuple"),
    {"decimal": Decimal("1.25"), "set": {1}},  # not JSON: the default turns them into strings
]

OPTIONS = [
    {},
    {"sort_keys": True},
    {"separators": (", ", ": ")},
    {"ensure_ascii": True},
    {"default": str},
    {"sort_keys": True, "ensure_ascii": True, "default": str},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_same_text_as_the_standard_encoder(options):
    ours = json_text.encoder(**options)
    settings = {"separators": (",", ":"), "sort_keys": False, "ensure_ascii": False, "default": None, **options}
    plain = json.JSONEncoder(**settings)
    for value in VALUES:
        try:
            expected = plain.encode(value)
        except TypeError:
            with pytest.raises(TypeError):
                ours(value)
            continue
        assert ours(value) == expected, value


def test_a_value_it_cannot_encode_raises_without_a_default():
    with pytest.raises(TypeError):
        json_text.encoder()({"x": object()})


def test_a_cycle_raises_instead_of_running_forever():
    loop: list = []
    loop.append(loop)
    with pytest.raises(RecursionError):
        json_text.encoder()(loop)


def test_threads_share_one_encoder():
    encode = json_text.encoder(sort_keys=True)
    values = [{"n": i, "text": "x" * (i % 50), "list": list(range(i % 7))} for i in range(2000)]
    expected = [json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for v in values]
    results: dict[int, list[str]] = {}

    def work(k: int) -> None:
        results[k] = [encode(v) for v in values]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[k] == expected for k in range(4))
