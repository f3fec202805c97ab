"""Once a burst is stored the writer shrinks its caches of bodies to a settled size (docs/architecture.md,
"Memory"): each keeps its most recent entries and holds no more than it was asked to."""

from __future__ import annotations

import json

from ctxscope.inspector.base.body_reuse import BodyMemory, parse
from ctxscope.inspector.store.blobs import StoredBlob
from ctxscope.inspector.store.ingest import BaseCache


def _body(i: int, size: int) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": f"s{i} " + "x" * size}]}).encode()


def test_the_base_cache_shrinks_to_its_most_recent_sessions():
    cache = BaseCache()
    for i in range(10):
        cache.add((f"s{i}", "request"), StoredBlob(i, b"b" * 100_000, pieces=()))
    cache.shrink(250_000)
    assert cache._bytes <= 250_000
    assert list(cache._entries) == [("s8", "request"), ("s9", "request")]
    cache.shrink(0)
    assert cache._bytes == 0 and not cache._entries


def test_the_parsed_bodies_shrink_to_their_most_recent_keys():
    memory = BodyMemory()
    for i in range(6):
        _value, parsed = parse(_body(i, 50_000))
        assert parsed is not None
        memory.add(f"s{i}", parsed)
    memory.shrink(120_000)
    assert memory.bytes <= 120_000
    assert memory.get("s5") and memory.get("s4") and not memory.get("s3")
    assert memory.bytes == sum(len(b.raw) for key in ("s4", "s5") for b in memory.get(key))
