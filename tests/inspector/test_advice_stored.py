"""Advice from the calls' stored prompt shapes (``advisor/shape.py``) is the advice computed from
the bodies (the reference, kept as ``load_session`` + ``advise``): same ranking, same figures, on
the per-cause sessions of both providers and on a session with every cause at once; and it reads
no body once the writer stored the shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ctxscope.inspector.advisor.alternatives import advise
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.reading import stored_advice as stored
from ctxscope.inspector.store import queries
from ctxscope.inspector.writer.storing.thread import CaptureWriter

from support import cause_sessions as cases

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from advise_scale import bodies as scale_bodies
from advise_scale import exchange as scale_exchange


def _stored(path: Path, exchanges) -> queries.sqlite_utils.Database:
    """The exchanges stored through a real writer with the daemon's analyzers (facts and shapes)."""
    writer = CaptureWriter(path, analyzers=writer_analyzers())
    writer.start()
    for ex in exchanges:
        writer.submit(ex)
    assert writer.stop()
    stats = writer.stats()
    assert stats.failed == 0 and stats.analysis_failed == 0, stats.last_error
    return queries.open_db(path)


def _reference(db, session: str) -> dict:
    s = load_session(db, session)
    assert s is not None
    advice = advise(s)
    assert advice is not None
    return advice.as_dict()


def _no_bodies(monkeypatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("a body was read")

    for name in ("get_request_json", "get_request_body", "get_final_response"):
        monkeypatch.setattr(queries, name, refuse)


@pytest.mark.slow
@pytest.mark.parametrize("provider", cases.PROVIDERS)
@pytest.mark.parametrize("cause", [c for c in cases.CAUSES if c != "billing_header"])
def test_advice_from_shapes_is_the_advice_from_bodies_and_reads_no_body(tmp_path, monkeypatch, provider, cause):
    db = _stored(tmp_path / "c.db", cases.exchanges(provider, cause, "sess"))
    reference = _reference(db, "sess")
    assert reference["top"]["cause"] == cases.expected(provider, cause)[0]
    _no_bodies(monkeypatch)
    found = stored.stored_advice(db, "sess")
    assert found is not None and found[1] is not None
    assert found[1].as_dict() == reference


@pytest.mark.parametrize("provider", cases.PROVIDERS)
def test_a_billing_header_is_advised_from_the_bodies_as_before(tmp_path, provider):
    """The billing what-if cuts text out of a block, which a shape cannot say: the bodies are read."""
    db = _stored(tmp_path / "c.db", cases.exchanges(provider, "billing_header", "sess"))
    found = stored.stored_advice(db, "sess")
    assert found is not None and found[1] is not None
    assert found[1].as_dict() == _reference(db, "sess")
    assert found[1].top is not None and found[1].top.cause == "billing_header"


@pytest.mark.slow
def test_every_cause_at_once_over_sixty_calls_and_a_store_without_shapes(tmp_path, monkeypatch):
    """A timestamp in the system prompt, the tools reordered half-way, 6-minute gaps: equal figures;
    then the same store with its shapes deleted (a store older than them) is backfilled, once."""
    exchanges = [scale_exchange(i, t, raw) for i, (t, raw) in enumerate(scale_bodies(60))]
    db = _stored(tmp_path / "c.db", exchanges)
    reference = _reference(db, "advise-scale")
    assert {a["cause"] for a in reference["advices"]} >= {"changing_span", "placement"}
    found = stored.stored_advice(db, "advise-scale")
    assert found is not None and found[1] is not None and found[1].as_dict() == reference

    db.execute("DELETE FROM call_shapes")
    db.conn.commit()
    with pytest.raises(stored.FactsMissing):
        stored.stored_advice(db, "advise-scale", backfill_allowed=False)
    found = stored.stored_advice(db, "advise-scale")  # taken from the bodies, and stored
    assert found is not None and found[1] is not None and found[1].as_dict() == reference
    assert db.execute("SELECT count(*) FROM call_shapes").fetchone()[0] == 60
    _no_bodies(monkeypatch)
    found = stored.stored_advice(db, "advise-scale")
    assert found is not None and found[1] is not None and found[1].as_dict() == reference


def test_a_store_without_shapes_that_cannot_be_written_is_advised_from_one_body_at_a_time(tmp_path, monkeypatch):
    """A store older than the shapes, opened where nothing can be written: the shapes taken from
    the bodies (one at a time) are used as they are, where the whole session was read again."""
    exchanges = [scale_exchange(i, t, raw) for i, (t, raw) in enumerate(scale_bodies(30))]
    db = _stored(tmp_path / "c.db", exchanges)
    reference = _reference(db, "advise-scale")
    db.execute("DELETE FROM call_shapes")
    db.execute("DELETE FROM call_findings")
    db.conn.commit()
    db.execute("PRAGMA query_only = ON")

    def whole_session(*_a, **_k):
        raise AssertionError("the whole session was read")

    monkeypatch.setattr("ctxscope.inspector.advisor.load.load_session", whole_session)
    found = stored.stored_advice(db, "advise-scale")
    assert found is not None and found[1] is not None and found[1].as_dict() == reference
    assert db.execute("SELECT count(*) FROM call_shapes").fetchone()[0] == 0  # nothing could be stored
