"""Hashes: a sequence of hex digests stored as bytes, and what it knows it shares with others."""

from __future__ import annotations

import copy
import hashlib
import pickle
import random

import pytest

from ctxscope.inspector.analyses.hashes import Hashes, common_prefix, known_common


def h(*names: str) -> list[str]:
    return [hashlib.sha256(n.encode()).hexdigest() for n in names]


def test_reads_like_a_tuple_of_hex_strings():
    items = h(*"abcde")
    hs = Hashes(items)
    assert len(hs) == 5 and list(hs) == items and hs == tuple(items) and hs == items
    assert hs[0] == items[0] and hs[-1] == items[-1] and items[2] in hs and "zz" not in hs
    assert hs[1:3] == tuple(items[1:3]) and isinstance(hs[1:3], Hashes) and hs[::2] == tuple(items[::2])
    assert hs[:0] == () and hs[4:2] == () and hs[3:] + hs[:3] == tuple(items[3:] + items[:3])
    assert tuple(items[:2]) + hs[2:] == hs and hs[:2] + tuple(items[2:]) == hs
    assert {hs, Hashes(items)} == {hs} and set(hs) == set(items)
    with pytest.raises(IndexError):
        hs[5]
    for bad in (["abc"], [items[0].upper()], [items[0][:62], items[0][62:] + items[1]], ["x" * 64]):
        with pytest.raises(ValueError):
            Hashes(bad)


def test_copies_and_pickles_keep_the_hashes_but_know_nothing():
    base = Hashes(h(*"abc"))
    child = base.derive(Hashes(h(*"abd")), 2)
    for other in (copy.deepcopy(child), pickle.loads(pickle.dumps(child)), copy.copy(child)):
        assert other == child and other.known == () and other.serial != child.serial


def test_common_prefix_matches_a_plain_walk():
    rng = random.Random(5)
    names = h(*"abcd")
    for _ in range(300):
        a = [rng.choice(names[:3]) for _ in range(rng.randrange(50))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.choice(names) for _ in range(rng.randrange(50))]
        want = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        for x, y in ((Hashes(a), Hashes(b)), (tuple(a), tuple(b)), (Hashes(a), tuple(b))):
            assert common_prefix(x, y) == common_prefix(y, x) == want


def test_what_is_known_is_skipped_and_passed_on():
    base = Hashes(h(*"abcdefgh"))
    child = base.derive(Hashes(h(*"abcdefXY")), 6)  # built from base: its first 6 are base's
    grandchild = child.derive(Hashes(h(*"abcdefXYZ")), 8)
    sibling = base.derive(Hashes(h(*"abcdQ")), 4)
    assert (child.known, grandchild.known) == (((base.serial, 6),), ((child.serial, 8), (base.serial, 6)))
    assert known_common(base, grandchild) == 6 and known_common(sibling, grandchild) == 4
    assert known_common(base, Hashes(h(*"abcdefgh"))) == 0  # equal, but nothing is known
    assert common_prefix(base, child) == common_prefix(child, base) == 6
    assert common_prefix(grandchild, child) == 8 and common_prefix(sibling, grandchild) == 4
    # Known is not checked again: a (false) claim shows where the comparison starts.
    assert common_prefix(base, base.derive(Hashes(h(*"zzzzzzzz")), 3)) == 3
    assert len({b.serial for b in (base, child, grandchild, sibling)}) == 4


def test_join_takes_ranges_of_several_in_one_copy():
    a, b = Hashes(h(*"abc")), Hashes(h(*"xyz"))
    assert Hashes.join([(a, 0, 2), (b, 1, 3), (a, 3, 3)]) == a[:2] + b[1:] == tuple(h(*"abyz"))
    assert Hashes.join([]) == () and Hashes.join([(a, 0, 3)]).known == ()
