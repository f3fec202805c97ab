"""The suite's order: longest file first, each file's tests together and in their own order."""

from __future__ import annotations

from dataclasses import dataclass

from support.longest_first import longest_first


@dataclass
class Item:
    nodeid: str


def _order(nodeids: list[str], seconds: dict[str, float]) -> list[str]:
    items = [Item(n) for n in nodeids]
    longest_first(items, seconds)  # only nodeid is read
    return [i.nodeid for i in items]


def test_the_longest_file_goes_first_and_a_files_tests_stay_together_in_order():
    ids = ["tests/a/test_x.py::one", "tests/a/test_x.py::two", "tests/b/test_y.py::one", "tests/b/test_y.py::two"]
    seconds = {ids[0]: 1.0, ids[1]: 2.0, ids[2]: 0.5, ids[3]: 9.0}
    assert _order(ids, seconds) == [ids[2], ids[3], ids[0], ids[1]]


def test_the_last_runs_times_outrank_the_seed_and_a_new_file_is_guessed_by_its_folder():
    scale = "tests/e2e/test_advise_at_scale.py::test_advise_of_a_thousand_calls_reads_the_stored_shapes"
    new_e2e = "tests/e2e/test_brand_new.py::test_it"
    vocab = "tests/vocab/test_brand_new.py::test_it"
    assert _order([vocab, new_e2e, scale], {}) == [scale, new_e2e, vocab]  # seed, then e2e's guess
    assert _order([vocab, new_e2e, scale], {scale: 0.01}) == [new_e2e, vocab, scale]
