"""The writer's known ids (header sets, chunks, search segments, each session's last seq): a deletion,
a rolled-back call or another connection's commit between two calls leaves no stale id behind.

Each test stores calls through a real CaptureWriter into a real SQLite file, does the thing that
removes rows, stores the same content again, and reads every call back: its header lists, its bodies
byte for byte, its place in its session and its texts in the search index.
"""

from __future__ import annotations

import time

from ctxscope.inspector.pipeline.search_index import writer_analyzers
from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.deletion import delete_session
from ctxscope.inspector.store.derived import search
from ctxscope.inspector.writer.storing.thread import CaptureWriter

from support.factories import anthropic_request, make_exchange

HEADERS = (("content-type", "application/json"), ("x-api-key", "[redacted]"), ("x-trace-tag", "rare-tag"))


def _call(word: str, **kw):
    """A small call (one chunk per body) whose prompt holds ``word``, with its own header set."""
    request = anthropic_request([{"role": "user", "content": f"please {word}"}])
    return make_exchange(request=request, request_headers=HEADERS, **kw)


def _writer(path) -> CaptureWriter:
    w = CaptureWriter(path, analyzers=writer_analyzers(), status_file=False)
    w.start()
    return w


def _store(w: CaptureWriter, exs) -> None:
    for ex in exs:
        w.submit(ex)


def _wait(w: CaptureWriter, n: int) -> None:
    deadline = time.monotonic() + 30
    while w.stats().written + w.stats().failed < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.stats().written + w.stats().failed >= n


def _check_all(path, exs) -> None:
    """Every call reads back whole: headers, bodies byte for byte, seqs 1..n in each session."""
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        for ex in exs:
            row = queries.get_call(db, ex.id)
            assert row is not None, ex.id
            assert [tuple(p) for p in row["request_headers"]] == [tuple(p) for p in ex.request_headers]
            assert queries.get_request_raw(db, ex.id) == ex.request_body
            assert queries.get_response_raw(db, ex.id) == ex.response_body
        by_session: dict[str, list[int]] = {}
        for session, seq in db.execute("SELECT session, seq FROM calls ORDER BY rowid"):
            by_session.setdefault(session, []).append(seq)
        for session, seqs in by_session.items():
            assert seqs == list(range(1, len(seqs) + 1)), (session, seqs)
    finally:
        db.close()


def _found(path, word: str) -> set[str]:
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        return {hit["call"] for hit in search.search(db, word)}
    finally:
        db.close()


def _fail_boom_inserts(path) -> None:
    """Calls to /boom fail at their INSERT, rolling back their savepoint."""
    store.connect(path).execute(
        "CREATE TRIGGER boom BEFORE INSERT ON calls WHEN NEW.path = '/boom' "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )


def test_a_deleted_session_leaves_no_stale_id(tmp_path):
    path = tmp_path / "k.db"
    w = _writer(path)
    try:
        first = [_call("zebra", session_label="gone"), _call("zebra", session_label="gone")]
        _store(w, first)
        _wait(w, 2)
        assert w.delete_session("gone")["calls_deleted"] == 2
        # The same headers, bodies and texts again, in the same session: every row they named is gone.
        again = [_call("zebra", session_label="gone"), _call("zebra", session_label="gone")]
        _store(w, again)
        _wait(w, 4)
    finally:
        assert w.stop()
    _check_all(path, again)
    assert _found(path, "zebra") == {again[0].id}  # a session records the first call holding a text


def test_a_rolled_back_call_leaves_no_stale_id(tmp_path):
    path = tmp_path / "k.db"
    _fail_boom_inserts(path)
    w = _writer(path)
    try:
        before = _call("walrus", session_label="s")
        _store(w, [before])
        _wait(w, 1)
        # Its header set, its request chunk and its seq are new when it is stored, then rolled back.
        bad = make_exchange(
            request=anthropic_request([{"role": "user", "content": "please narwhal"}]),
            request_headers=(*HEADERS, ("x-only-here", "1")),
            path="/boom",
            session_label="s",
        )
        good = make_exchange(
            request=anthropic_request([{"role": "user", "content": "please narwhal"}]),
            request_headers=(*HEADERS, ("x-only-here", "1")),
            session_label="s",
        )
        _store(w, [bad, good])
        _wait(w, 3)
    finally:
        assert w.stop()
    assert w.stats().failed == 1
    _check_all(path, [before, good])
    assert _found(path, "narwhal") == {good.id}


def test_another_connections_deletion_leaves_no_stale_id(tmp_path):
    path = tmp_path / "k.db"
    w = _writer(path)
    try:
        first = [_call("okapi", session_label="other"), _call("okapi", session_label="other")]
        _store(w, first)
        _wait(w, 2)
        # a second writer, as a CLI command run beside the daemon would be
        db = store.connect(path, segment_texts=SegmentTexts)
        try:
            assert delete_session(db, "other")["calls_deleted"] == 2
        finally:
            db.close()
        again = [_call("okapi", session_label="other")]
        _store(w, again)
        _wait(w, 3)
    finally:
        assert w.stop()
    _check_all(path, again)
    assert _found(path, "okapi") == {again[0].id}


def test_a_restarted_writer_reuses_the_chunks_and_segments_stored_before_it(tmp_path):
    """A new chunk or search segment is inserted without a look-up first: one the store already holds
    (stored by an earlier writer, unknown to this one) keeps its row and its id."""
    path = tmp_path / "k.db"
    w = _writer(path)
    try:
        first = [_call("ibex", session_label="a")]
        _store(w, first)
        _wait(w, 1)
    finally:
        assert w.stop()
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("chunks", "search_segments")]
    finally:
        db.close()
    w = _writer(path)  # knows no id: the same bodies and texts meet the rows the first writer stored
    try:
        again = [_call("ibex", session_label="b")]
        _store(w, again)
        _wait(w, 1)
    finally:
        assert w.stop()
    assert w.stats().failed == 0
    _check_all(path, first + again)
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        assert [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("chunks", "search_segments")] == counts
    finally:
        db.close()
    assert _found(path, "ibex") == {first[0].id, again[0].id}  # each session's first call holding it


def test_every_stored_call_is_numbered_once_in_storing_order_and_a_rolled_back_one_never(tmp_path):
    """``ingest`` numbers each call in ``stored_order`` itself (no trigger on a call's INSERT), in the
    call's savepoint: a call that fails at its INSERT takes no number."""
    path = tmp_path / "k.db"
    _fail_boom_inserts(path)
    w = _writer(path)
    try:
        calls = [
            _call("lynx", session_label="s"),
            _call("puma", session_label="s", path="/boom"),
            _call("lynx", session_label="t"),
        ]
        _store(w, calls)
        _wait(w, 3)
    finally:
        assert w.stop()
    assert w.stats().failed == 1
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        numbered = db.execute("SELECT call_id FROM stored_order ORDER BY seq").fetchall()
        triggers = db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'calls' "
            "AND sql LIKE '%INSERT ON calls%' AND name != 'boom'"
        ).fetchall()
    finally:
        db.close()
    assert [r[0] for r in numbered] == [calls[0].id, calls[2].id]
    assert triggers == []


def test_a_call_analysed_before_its_insert_is_written_once_in_its_final_session(tmp_path):
    """A call without a session id is placed by its lineage: its row is inserted there, numbered
    there, and the search index names that session."""
    path = tmp_path / "k.db"
    w = _writer(path)
    try:
        conversation = [{"role": "user", "content": "please tapir"}]
        one = make_exchange(request=anthropic_request(conversation), session_label=None)
        conversation = conversation + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        two = make_exchange(request=anthropic_request(conversation), session_label=None)
        _store(w, [one, two])
        _wait(w, 2)
    finally:
        assert w.stop()
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        rows = [queries.get_call(db, ex.id) for ex in (one, two)]
        assert rows[0] is not None and rows[1] is not None
        assert rows[0]["session"] == rows[1]["session"] == f"key:{'f' * 12}:{one.id}"
        assert [r["seq"] for r in rows] == [1, 2]
        assert rows[1]["grouped_by"] == "lineage" and rows[1]["relation"] == "APPEND_ONLY"
        hits = search.search(db, "tapir")
        assert [(h["session"], h["call"]) for h in hits] == [(rows[0]["session"], one.id)]
        assert db.execute("SELECT COUNT(*) FROM stored_order").fetchone()[0] == 2  # inserted once each
    finally:
        db.close()


def _fts_terms(path) -> dict[str, int]:
    """FTS5's terms and how many documents hold each (a text given twice would count twice)."""
    db = queries.open_db(path, segment_texts=SegmentTexts)
    try:
        db.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, search_fts, 'row')")
        return dict(db.execute("SELECT term, doc FROM temp.terms").fetchall())
    finally:
        db.close()


def test_the_texts_of_a_rolled_back_call_never_reach_fts5(tmp_path):
    # The writer gives FTS5 a batch's texts at its commit: a call rolled back in between gives none,
    # and the next calls, whose segments take the ids its segments had, give theirs once.
    path = tmp_path / "k.db"
    _fail_boom_inserts(path)
    w = _writer(path)
    try:
        bad = make_exchange(
            request=anthropic_request([{"role": "user", "content": "please kraken"}]), path="/boom", session_label="s"
        )
        good = make_exchange(
            request=anthropic_request([{"role": "user", "content": "please squid"}]), session_label="s"
        )
        again = make_exchange(
            request=anthropic_request([{"role": "user", "content": "please squid"}]), session_label="t"
        )
        _store(w, [bad, good, again])
        _wait(w, 3)
    finally:
        assert w.stop()
    assert w.stats().failed == 1
    _check_all(path, [good, again])
    assert _found(path, "kraken") == set()
    assert _found(path, "squid") == {good.id, again.id}
    terms = _fts_terms(path)
    assert "kraken" not in terms
    assert terms["squid"] == 1


def test_a_failed_indexing_leaves_no_texts_for_fts5(tmp_path, monkeypatch):
    # The indexer fails after it added the call's segments: they are undone with its savepoint, the
    # call stays, and the texts it held back for FTS5 go too.
    original = search.add_pieces
    failing: set[str] = set()

    def add_then_fail(db, call_id, *args, **kw):
        added = original(db, call_id, *args, **kw)
        if call_id in failing:
            raise RuntimeError("indexer bug")
        return added

    monkeypatch.setattr(search, "add_pieces", add_then_fail)
    path = tmp_path / "k.db"
    w = _writer(path)
    try:
        first = _call("lemur", session_label="a")
        second = _call("gecko", session_label="b")  # its segments take the ids the first one's had
        failing.add(first.id)
        _store(w, [first, second])
        _wait(w, 2)
    finally:
        assert w.stop()
    assert w.stats().analysis_failed == 1
    _check_all(path, [first, second])
    assert _found(path, "lemur") == set()
    assert _found(path, "gecko") == {second.id}
    terms = _fts_terms(path)
    assert "lemur" not in terms
    assert terms["gecko"] == 1
