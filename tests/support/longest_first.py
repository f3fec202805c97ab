"""The test files in the order that lets the workers finish together: longest first.

`scripts/test` hands whole files to the workers (`--dist loadfile`: a file's module fixtures, its
daemon and its browser, start once), each file to the first worker that is free, in collection
order (three workers per two cores, scripts/test). In folder order the e2e files (half of the
suite's test time) came in one block that one worker took while the others ran out of work: 2,176 s
of wall time for 3,284 s of tests on two workers. Longest first is the classic cure: the last files
handed out are the short ones.

A file's length is the sum of its tests' times in the last run (kept in pytest's cache by the
controller, sent to the workers so both sort alike); on a clean clone, the file's seconds in
test_seconds.json (a whole run on 2 cores, refreshed by hand now and then: it only orders); for a
file new since then, a guess from its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CACHE_KEY = "ctxscope/test-seconds"
# Seconds per test by folder, from a whole run on 2 cores (what a clean clone sorts by).
FOLDER_GUESS = {"e2e": 2.7, "browser": 2.0, "web": 0.65, "cli": 0.46, "inspector": 0.24, "project": 0.23}
OTHER_GUESS = 0.05
SEED = Path(__file__).with_name("test_seconds.json")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def guess(nodeid: str) -> float:
    parts = file_of(nodeid).split("/")
    folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
    return FOLDER_GUESS.get(folder, OTHER_GUESS)


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort ``items`` in place, longest file first; a file's tests keep their order (the sort is
    stable and each file's tests are together), so module fixtures still start once per file."""
    seed: dict[str, float] = json.loads(SEED.read_text())
    known: dict[str, float] = {}
    guessed: dict[str, float] = {}
    for item in items:
        name = file_of(item.nodeid)
        if item.nodeid in seconds:
            known[name] = known.get(name, 0.0) + seconds[item.nodeid]
        else:
            guessed[name] = guessed.get(name, 0.0) + guess(item.nodeid)
    length = {
        name: known[name] + guessed.get(name, 0.0) if name in known else seed.get(name, guessed[name])
        for name in {file_of(item.nodeid) for item in items}
    }
    items.sort(key=lambda item: -length[file_of(item.nodeid)])


class SecondsLog:
    """Each test's time (setup, call and teardown) in this run, kept for the next one's order."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        cache = self.config.cache
        if cache is not None and self.seconds:
            kept = cache.get(CACHE_KEY, {})
            kept.update({k: round(v, 2) for k, v in self.seconds.items()})
            cache.set(CACHE_KEY, kept)
