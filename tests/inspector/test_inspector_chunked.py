"""Chunked reads like a tuple, shares the chunks of what it was built from, and keeps few chunks."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from ctxscope.inspector.analyses.chunked import Chunked


def test_reads_like_the_tuple_it_holds():
    rng = random.Random(11)
    for _ in range(200):
        parts = [tuple(rng.randrange(100) for _ in range(rng.randrange(6))) for _ in range(rng.randrange(5))]
        c, t = Chunked.of(*parts), sum(parts, ())
        assert len(c) == len(t) and tuple(c) == t and c == t and t == c and bool(c) == bool(t)
        assert [c[i] for i in range(-len(t), len(t))] == [t[i] for i in range(-len(t), len(t))]
        i, j = rng.randrange(-3, len(t) + 3), rng.randrange(-3, len(t) + 3)
        assert c[i:j] == t[i:j] and c[i:] == t[i:] and c[:j] == t[:j] and c[::2] == t[::2] and c[::-1] == t[::-1]
        assert c[i:j] + c[j:] == t[i:j] + t[j:] and t[:i] + c[i:] == t and isinstance(t[:i] + c[i:], Chunked)
        assert hash(c) == hash(t) and list(reversed(c)) == list(reversed(t))
        for bad in (len(t), -len(t) - 1):
            with pytest.raises(IndexError):
                c[bad]
    assert Chunked() == () and Chunked.of((), ()) == () and Chunked.of((1,)) != (2,) and Chunked.of((1,)) != [1]


def test_a_growing_prompt_shares_chunks_and_keeps_few():
    head = ("h1", "h2")
    body: Chunked = Chunked.of(head, tuple(range(3)))
    for step in range(2000):  # each step: a fresh head, all but the last item kept, two items added
        kept = body[len(head) : len(body) - 1]
        body = Chunked.of(("h1", "h2"), kept, (f"x{step}", f"y{step}"))
        assert body.chunks[0] == head and len(body.chunks) <= 2 + 2 * (len(body).bit_length())
    assert len(body) == 2 + 3 + 2000 and body[-1] == "y1999" and body[2] == 0
    before = body[2 : len(body) - 1]
    after = Chunked.of(head, before, ("z",))
    assert any(a is b for a in before.chunks for b in after.chunks if len(a) > 100)  # shared, not copied


def test_copies_and_pickles_are_plain_tuples():
    c = Chunked.of((1, 2), (3,))
    for other in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c), copy.copy(c)):
        assert other == (1, 2, 3) and type(other) is tuple
