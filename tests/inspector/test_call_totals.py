"""The per-session totals (store/totals.py) stay equal to a fresh GROUP BY over the calls through
every write the store knows, the migration counts a store's existing calls, and the whole-store
reads cost the same whatever the number of calls per session."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from ctxscope.inspector.analyses.prices import load_prices
from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.pipeline.reindex import reindex
from ctxscope.inspector.share.importer import import_calls
from ctxscope.inspector.store import queries, totals
from ctxscope.inspector.store.analysis_queries import stats
from ctxscope.inspector.store.deletion import delete_session
from ctxscope.inspector.store.views import store_totals
from ctxscope.web.overview import list_session_overviews

from support.factories import (
    T0,
    analysed,
    anthropic_request,
    anthropic_response,
    anthropic_sse,
    capture,
    claude_code_like_session,
    make_exchange,
)
from support.old_stores import before_migration, copy_store


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)  # a sum's last bits follow its order
    return a == b


def assert_totals_true(db) -> None:
    """The table holds exactly the groups a fresh GROUP BY over ``calls`` gives."""
    kept, fresh = totals.stored(db), totals.recomputed(db)
    assert [r[0] for r in kept] == [r[0] for r in fresh]
    for k, f in zip(kept, fresh, strict=True):
        assert all(_same(a, b) for a, b in zip(k, f, strict=True)), (k, f)


def _growing(session: str, n: int, t0: float, **overrides) -> list:
    """An agent-like session: each prompt the previous one plus a turn, so the analysis finds
    APPEND_ONLY relations, threads and cache verdicts."""
    messages: list = [{"role": "user", "content": f"start {session}"}]
    out = []
    for i in range(n):
        out.append(
            make_exchange(
                request=anthropic_request(json.loads(json.dumps(messages))),
                response=anthropic_response(
                    usage={"input_tokens": 10 + i, "output_tokens": 3, "cache_read_input_tokens": 100 * i}
                ),
                session_label=session,
                started_at=t0 + 20 * i,
                **overrides,
            )
        )
        messages += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": f"more {i}"}]
    return out


def _mixed() -> list:
    """Sessions that differ in every value the totals split by: models, clients, providers, errors,
    streams, missing usage, non-model requests, cache breaks with a cost."""
    calls = _growing("alpha", 6, T0)
    calls += _growing("beta", 3, T0 + 5, client="other-agent/2.0")
    calls.append(
        make_exchange(
            session_label="beta",
            started_at=T0 + 100,
            status=529,
            outcome="http_error",
            response={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
            error="upstream said 529",
        )
    )
    calls.append(
        make_exchange(
            session_label="beta",
            started_at=T0 + 110,
            request=anthropic_request(model="claude-haiku-4-5", stream=True),
            response_body=anthropic_sse(),
            response_headers=(("content-type", "text/event-stream"),),
        )
    )
    calls.append(make_exchange(session_label="gamma", started_at=T0 + 120, provider="simulator"))
    calls.append(
        make_exchange(
            session_label=None,
            key_fingerprint=None,
            started_at=T0 + 130,
            method="GET",
            path="/v1/models",
            request_body=b"",
            response_body=b'{"data": []}',
        )
    )
    calls += claude_code_like_session(5, [400.0, 10.0, 400.0, 10.0])  # gaps past the cache's lifetime
    return calls + _broken_cache()


def _broken_cache() -> list:
    """A cached system prompt the client changes at its third call: a client break with tokens and
    dollars lost, its segment kind and area."""
    out = []
    for i, tag in enumerate(["v1", "v1", "v2", "v2"]):
        system = [
            {
                "type": "text",
                "text": " ".join(f"{tag}w{k}" for k in range(3000)),
                "cache_control": {"type": "ephemeral"},
            }
        ]
        turns = [{"role": "user" if j % 2 == 0 else "assistant", "content": f"turn {j}"} for j in range(2 * i + 1)]
        written = 6000 if i in (0, 2) else 0
        usage = {
            "input_tokens": 20,
            "output_tokens": 3,
            "cache_read_input_tokens": 6000 - written,
            "cache_creation_input_tokens": written,
        }
        out.append(
            make_exchange(
                request=anthropic_request(turns, system=system),
                response=anthropic_response(usage=usage),
                session_label="broke",
                started_at=T0 + 500 + 10 * i,
            )
        )
    return out


def test_totals_equal_a_fresh_group_by_through_ingest_reindex_deletion_and_import(tmp_path):
    path = tmp_path / "t.db"
    db, _ = analysed(path, _mixed())
    assert db.execute("SELECT COUNT(DISTINCT session) FROM call_totals").fetchone()[0] >= 5
    verdicts = {r[0] for r in db.execute("SELECT verdict FROM call_totals WHERE verdict IS NOT NULL")}
    assert len(verdicts) >= 2, verdicts  # the mix reached the analysis's splits
    broke = db.execute(
        "SELECT break_kind, break_area, lost_tokens, lost_usd FROM call_totals WHERE verdict = 'client_break'"
    ).fetchall()
    assert [r[:2] for r in broke] == [("system", "/system")] and broke[0][2] > 0 and broke[0][3] > 0
    assert_totals_true(db)

    for _ in reindex(db, session="alpha", analyzer=Analyzer()):
        pass
    assert_totals_true(db)
    # re-analysed at other prices: every loss in dollars changes, and the totals with it
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"claude": {"input": 30.0}}))
    lost_before = db.execute("SELECT SUM(lost_usd) FROM call_totals").fetchone()[0]
    for _ in reindex(db, analyzer=Analyzer(prices=load_prices(prices))):
        pass
    assert db.execute("SELECT SUM(lost_usd) FROM call_totals").fetchone()[0] > 2 * lost_before
    assert_totals_true(db)
    # a whole re-analysis with a changed history: a call's analysis columns rewritten behind the
    # totals' back are counted again by the reindex that follows
    db.execute("UPDATE calls SET cache_verdict = 'hit', relation = NULL WHERE session = 'cc'")
    db.conn.commit()
    for _ in reindex(db, analyzer=Analyzer()):
        pass
    assert_totals_true(db)

    result = delete_session(db, "beta")
    assert result["calls_deleted"] == 5
    assert db.execute("SELECT COUNT(*) FROM call_totals WHERE session = 'beta'").fetchone()[0] == 0
    assert_totals_true(db)

    later = _growing("alpha", 3, T0 + 1000) + _growing("delta", 2, T0 + 1100)
    imported = list(import_calls(path, [(ex, None) for ex in later], [Analyzer()]))
    assert sum(i.stored for i in imported) == 5
    assert_totals_true(db)
    assert (
        db.execute("SELECT SUM(calls) FROM call_totals").fetchone()[0]
        == db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    )


def test_a_call_is_counted_as_the_analyzers_left_its_row(tmp_path):
    """An analyzer that runs after the INSERT and writes the call's columns: the totals count the
    row it left, not the row as first inserted."""

    def verdict_after_insert(db, call) -> None:
        db.execute("UPDATE calls SET cache_verdict = 'hit', cache_lost_tokens = 7 WHERE id = ?", [call["id"]])

    db = capture(tmp_path / "t.db", _growing("late", 3, T0), analyzers=[verdict_after_insert])
    assert db.execute("SELECT verdict, calls, lost_tokens FROM call_totals").fetchall() == [("hit", 3, 21)]
    assert_totals_true(db)


def _without_table(src: Path, dst: Path) -> None:
    """A copy of the store whose file predates the totals: what m020 made and its record gone."""
    copy_store(src, dst)
    before_migration(dst, "m020_create_call_totals", "DROP TABLE call_totals", "DROP INDEX idx_calls_session_time")


def test_the_migration_counts_the_calls_a_store_already_holds(tmp_path):
    path = tmp_path / "t.db"
    db, _ = analysed(path, _mixed())
    kept = totals.stored(db)
    db.close()
    old = tmp_path / "old.db"
    _without_table(path, old)
    migrated = queries.open_db(old)  # migrates: m020 counts what is there
    assert totals.stored(migrated) == kept
    assert_totals_true(migrated)


def test_reads_from_the_totals_equal_the_reads_over_the_calls(tmp_path):
    """Every whole-store read gives the same figures from the table as from the calls themselves
    (``totals.source`` computes them from the calls on a file without the table)."""
    path = tmp_path / "t.db"
    db, _ = analysed(path, _mixed())
    old = tmp_path / "old.db"
    _without_table(path, old)
    bare = sqlite3.connect(old)  # not migrated: the readers fall back to the calls
    from sqlite_utils import Database

    raw = Database(bare)
    assert not totals.kept(raw) and totals.kept(db)
    for purposes in (False, True):
        assert queries.list_sessions(db, purposes=purposes) == queries.list_sessions(raw, purposes=purposes)
        assert list_session_overviews(db, purposes=purposes) == list_session_overviews(raw, purposes=purposes)
    for session in (None, "alpha", "cc"):
        assert stats(db, session=session) == stats(raw, session=session)
    status, old_status = queries.store_status(path, {}), queries.store_status(old, {})
    for key in ("calls", "sessions", "last_capture_at"):
        assert status[key] == old_status[key]
    assert status["blobs"]["raw_bytes"] == old_status["blobs"]["raw_bytes"]


def _vm_steps(db, read) -> int:
    """SQLite virtual-machine steps a read takes: a count that does not depend on the machine's load."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    db.conn.set_progress_handler(tick, 100)
    try:
        read(db)
    finally:
        db.conn.set_progress_handler(None, 0)
    return steps[0] * 100


@pytest.mark.slow
def test_whole_store_reads_cost_the_same_at_ten_and_at_150_calls_per_session(tmp_path):
    def store(name: str, per_session: int):
        calls = [ex for s in range(4) for ex in _growing(f"s{s}", per_session, T0 + s)]
        return analysed(tmp_path / name, calls)[0]

    small, large = store("small.db", 10), store("large.db", 150)
    reads = {
        "sessions": lambda db: queries.list_sessions(db),
        "overviews": lambda db: list_session_overviews(db),
        "stats": lambda db: stats(db),
        "store totals": store_totals,
    }
    for name, read in reads.items():
        few, many = _vm_steps(small, read), _vm_steps(large, read)
        assert many <= 1.2 * few + 1_000, (name, few, many)  # 15x the calls: a scan of them took 8-16x the steps
