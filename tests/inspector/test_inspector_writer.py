"""The background writer: batching, draining, surviving failures, and the SIGKILL / SIGTERM promise."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store import db as store
from ctxscope.inspector.store import exchange_row, queries
from ctxscope.inspector.writer import status
from ctxscope.inspector.writer.storing.thread import CaptureWriter

from support.factories import make_exchange

TESTS = Path(__file__).resolve().parents[1]  # tests/, where the support package is


def _ids(db) -> set[str]:
    return {r[0] for r in db.execute("SELECT id FROM calls")}


def test_a_call_being_stored_still_counts_as_queued(tmp_path):
    """A status read while the writer stores a call must not look settled (nothing queued, nothing
    written): a status publisher would go to sleep and nobody would hear that the call was stored."""
    import threading

    inside, release = threading.Event(), threading.Event()

    def slow_analyzer(db, call):
        inside.set()
        assert release.wait(30)

    w = CaptureWriter(tmp_path / "c.db", analyzers=[slow_analyzer], status_file=False)
    w.start()
    try:
        w.submit(make_exchange(1))
        assert inside.wait(30)
        during = w.stats()
    finally:
        release.set()
        assert w.stop()
    assert during.queued == 1 and during.written == 0
    assert w.stats().queued == 0 and w.stats().written == 1


def test_queued_calls_are_committed_in_batches(tmp_path):
    w = CaptureWriter(tmp_path / "c.db")
    exs = [make_exchange(session_label=f"s{i % 4}") for i in range(60)]
    for ex in exs:  # queued before the thread runs: the writer finds them all waiting
        w.submit(ex)
    assert w.stats().queued == 60
    w.start()
    assert w.stop()
    st = w.stats()
    assert st.written == 60 and st.failed == 0 and st.queued == 0
    assert st.commits < 10
    assert _ids(queries.open_db(tmp_path / "c.db", segment_texts=SegmentTexts)) == {e.id for e in exs}


def test_stop_drains_everything_and_readers_work_meanwhile(tmp_path):
    path = tmp_path / "c.db"
    w = CaptureWriter(path)
    w.start()
    reader = queries.open_db(path, segment_texts=SegmentTexts)
    exs = [make_exchange() for _ in range(300)]
    for ex in exs:
        w.submit(ex)
    assert isinstance(queries.list_calls(reader, limit=5), list)  # reading while the writer writes
    assert w.stop()
    assert w.stats().running is False
    assert _ids(reader) == {e.id for e in exs}
    assert [c["seq"] for c in queries.list_calls(reader, session="s1", limit=None, newest_first=False)] == list(
        range(1, 301)
    )


def test_a_failing_analyzer_is_counted_and_the_call_is_kept(tmp_path, caplog):
    path = tmp_path / "c.db"
    store.connect(path).execute("CREATE TABLE notes (call_id TEXT)")

    def flaky(db, call):
        db.execute("INSERT INTO notes VALUES (?)", [call["id"]])
        if call["seq"] == 2:
            raise RuntimeError("analysis bug")

    exs = [make_exchange() for _ in range(3)]
    w = CaptureWriter(path, analyzers=[flaky])
    w.start()
    with caplog.at_level(logging.WARNING, logger="ctxscope.store"):
        for ex in exs:
            w.submit(ex)
        assert w.stop()
    st = w.stats()
    assert (st.written, st.failed, st.analysis_failed) == (3, 0, 1)
    assert "analysis bug" in st.last_error and "analysis bug" in caplog.text
    db = queries.open_db(path, segment_texts=SegmentTexts)
    assert _ids(db) == {e.id for e in exs}
    assert {r[0] for r in db.execute("SELECT call_id FROM notes")} == {exs[0].id, exs[2].id}  # its writes undone
    assert db_status(path)["writer"]["analysis_failed"] == 1


def test_the_inspector_analyzer_failing_keeps_the_call_unanalysed_without_a_savepoint(tmp_path, monkeypatch):
    from ctxscope.inspector.pipeline.analyze import Analyzer

    analyzer = Analyzer()
    assert analyzer.single_write  # so the writer runs it without a savepoint
    real = Analyzer.analyze
    exs = [make_exchange() for _ in range(3)]

    def sometimes(self, db, inp, *, live=True):
        if inp.id == exs[1].id:  # the second call (it is analysed before its row is numbered)
            raise RuntimeError("analysis bug")
        return real(self, db, inp, live=live)

    monkeypatch.setattr(Analyzer, "analyze", sometimes)
    path = tmp_path / "a.db"
    w = CaptureWriter(path, analyzers=[analyzer])
    w.start()
    for ex in exs:
        w.submit(ex)
    assert w.stop()
    assert (w.stats().written, w.stats().analysis_failed) == (3, 1)
    db = queries.open_db(path, segment_texts=SegmentTexts)
    relations = [r[0] for r in db.execute("SELECT relation FROM calls ORDER BY seq")]
    assert relations[1] is None and None not in (relations[0], relations[2])


def test_a_failing_insert_is_counted_persisted_and_the_writer_goes_on(tmp_path, caplog):
    path = tmp_path / "c.db"
    store.connect(path).execute(
        "CREATE TRIGGER boom BEFORE INSERT ON calls WHEN NEW.path = '/boom' "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    good1, bad, good2 = make_exchange(), make_exchange(path="/boom"), make_exchange()
    w = CaptureWriter(path)
    for ex in (good1, bad, good2):  # one batch
        w.submit(ex)
    with caplog.at_level(logging.ERROR, logger="ctxscope.store"):
        w.start()
        assert w.stop()
    st = w.stats()
    assert (st.written, st.failed) == (2, 1) and "disk on fire" in st.last_error
    assert bad.id in caplog.text
    db = queries.open_db(path, segment_texts=SegmentTexts)
    assert _ids(db) == {good1.id, good2.id}
    assert (
        db.execute(
            "SELECT COUNT(*) FROM blobs WHERE id NOT IN (SELECT request_blob FROM calls) "
            "AND id NOT IN (SELECT response_blob FROM calls WHERE response_blob IS NOT NULL)"
        ).fetchone()[0]
        == 0
    )
    for ex in (good1, good2):
        assert queries.get_request_raw(db, ex.id) == ex.request_body
    status = db_status(path)["writer"]
    assert status["write_failed"] == 1 and "disk on fire" in status["last_error"]["detail"]


def test_a_batch_stored_again_after_a_failing_call_is_analysed_as_if_each_call_had_its_savepoint(
    tmp_path, monkeypatch, caplog
):
    """Calls are stored without a savepoint each; one that fails sends its batch back, stored again
    with a savepoint per call, and every other call gets the analysis it gets when each call is
    isolated from the start (the calls before the failure are not analysed a second time)."""
    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.writer.storing import batches, work

    from support.factories import anthropic_request

    turns = [[{"role": "user", "content": "first question"}]]
    turns.append(
        turns[-1] + [{"role": "assistant", "content": "first answer"}, {"role": "user", "content": "second question"}]
    )
    turns.append(
        turns[-1] + [{"role": "assistant", "content": "second answer"}, {"role": "user", "content": "third question"}]
    )

    def traffic():
        return [
            make_exchange(request=anthropic_request(turns[0]), session_label="s"),
            make_exchange(request=anthropic_request(turns[1]), session_label="s", client="boom"),
            make_exchange(request=anthropic_request(turns[1]), session_label="s"),
            make_exchange(request=anthropic_request(turns[2]), session_label="s"),
        ]

    def run(path, isolated: bool):
        store.connect(path).execute(
            "CREATE TRIGGER boom BEFORE INSERT ON calls WHEN NEW.client = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        if isolated:  # the reference: each call in its savepoint from the start
            monkeypatch.setattr(batches, "store_one", lambda *a, **k: work.store_one(*a, **{**k, "isolated": True}))
        exs = traffic()
        w = CaptureWriter(path, analyzers=writer_analyzers(), status_file=False, batch_interval=60)
        for ex in exs:  # queued before the writer starts: one batch
            w.submit(ex)
        w.start()
        assert w.stop()
        monkeypatch.undo()
        assert (w.stats().written, w.stats().failed) == (3, 1)
        db = queries.open_db(path, segment_texts=SegmentTexts)
        try:
            cols = (
                "seq",
                "thread",
                "predecessor",
                "relation",
                "epoch_reason",
                "relation_detail",
                "tokens_estimated",
                "tokens_by_category",
                "cache_verdict",
                "cache",
                "markers",
                "attempt",
                "retry_of",
                "grouped_by",
            )
            ids = {ex.id: n for n, ex in enumerate(exs)}  # ids differ between the runs: compare positions
            rows = []
            for row in db.execute(f"SELECT id, {', '.join(cols)} FROM calls ORDER BY rowid").fetchall():
                rows.append([ids[row[0]]] + [ids.get(v, v) for v in row[1:]])
            numbered = [ids[r[0]] for r in db.execute("SELECT call_id FROM stored_order ORDER BY seq")]
            hits = sorted(ids[h["call"]] for h in search_hits(db))
            return rows, numbered, hits
        finally:
            db.close()

    from ctxscope.inspector.store.derived.search import search

    def search_hits(db):
        return search(db, "question") + search(db, "answer")

    with caplog.at_level(logging.INFO, logger="ctxscope.store"):
        again = run(tmp_path / "again.db", isolated=False)
    assert "storing the batch again" in caplog.text
    reference = run(tmp_path / "isolated.db", isolated=True)
    assert again == reference
    assert [r[0] for r in again[0]] == [0, 2, 3] and again[1] == [0, 2, 3]


def test_a_failure_that_kills_the_transaction_costs_only_that_call(tmp_path):
    """RAISE(ROLLBACK) ends the whole transaction, like SQLITE_FULL can: the batch is redone call by call."""
    path = tmp_path / "c.db"
    store.connect(path).execute(
        "CREATE TRIGGER boom BEFORE INSERT ON calls WHEN NEW.path = '/boom' BEGIN SELECT RAISE(ROLLBACK, 'gone'); END"
    )
    exs = [make_exchange(path="/boom" if i == 3 else "/v1/messages") for i in range(8)]
    w = CaptureWriter(path)
    for ex in exs:
        w.submit(ex)
    w.start()
    assert w.stop()
    assert (w.stats().written, w.stats().failed) == (7, 1)
    db = queries.open_db(path, segment_texts=SegmentTexts)
    assert _ids(db) == {e.id for e in exs if e.path != "/boom"}
    for ex in exs:
        if ex.path != "/boom":
            assert queries.get_request_raw(db, ex.id) == ex.request_body
    assert db_status(path)["writer"]["write_failed"] == 1


def test_a_parser_bug_keeps_the_call_and_is_counted(tmp_path, monkeypatch):
    def broken(*args):
        raise ZeroDivisionError("parser bug")

    monkeypatch.setattr(exchange_row, "parse_response", broken)
    ex = make_exchange()
    w = CaptureWriter(tmp_path / "c.db")
    w.start()
    w.submit(ex)
    assert w.stop()
    assert (w.stats().written, w.stats().parse_failed) == (1, 1)
    db = queries.open_db(tmp_path / "c.db", segment_texts=SegmentTexts)
    assert "parser bug" in queries.get_call(db, ex.id)["parse_error"]
    assert queries.get_response_raw(db, ex.id) == ex.response_body
    assert db_status(tmp_path / "c.db")["writer"]["parse_failed"] == 1


def test_full_queue_drops_are_counted_and_persisted(tmp_path, caplog):
    w = CaptureWriter(tmp_path / "c.db", max_queue=3)
    exs = [make_exchange() for _ in range(5)]
    with caplog.at_level(logging.ERROR, logger="ctxscope.store"):
        for ex in exs:
            w.submit(ex)  # never raises, never blocks
    assert w.stats().dropped == 2 and "queue is full" in w.stats().last_error
    assert "dropped" in caplog.text
    w.start()
    assert w.stop()
    assert w.stats().written == 3
    assert db_status(tmp_path / "c.db")["writer"]["dropped"] == 2


def test_submit_after_stop_is_a_counted_drop(tmp_path):
    w = CaptureWriter(tmp_path / "c.db")
    w.start()
    assert w.stop()
    w.submit(make_exchange())
    assert w.stats().dropped == 1 and w.stats().running is False


def test_a_call_submit_fails_on_is_counted_logged_once_and_shown_by_the_status_api(tmp_path, caplog):
    """A call ``submit`` itself cannot take (a body that is no bytes: a defect upstream) is dropped
    and counted, never silently lost, and the count reaches the status API's writer figures."""
    import dataclasses

    from ctxscope.web.routes import writer_status

    w = CaptureWriter(tmp_path / "c.db", status_file=False)
    w.start()
    broken = dataclasses.replace(make_exchange(), request_body=None)
    with caplog.at_level(logging.ERROR, logger="ctxscope.store"):
        w.submit(broken)  # never raises
        w.submit(broken)
    w.submit(make_exchange())
    assert w.stop()
    stats = w.stats()
    assert (stats.submit_failed, stats.dropped, stats.written) == (2, 2, 1)
    lines = [r for r in caplog.records if "submitting it failed" in r.getMessage()]
    assert len(lines) == 1 and "TypeError" in lines[0].getMessage() and not lines[0].exc_info
    shown = writer_status(w)
    assert shown is not None and shown["submit_failed"] == 2 and shown["failures"] == 2
    assert db_status(tmp_path / "c.db")["writer"]["dropped"] == 2  # recorded in the store too


def _wait(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def _unopenable(tmp_path: Path, how: str) -> tuple[Path, object]:
    """A database path the store cannot open, and how to make it usable again."""
    if how == "folder is a file":
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("x")
        return blocker / "c.db", lambda: (blocker.unlink(), blocker.mkdir())
    path = tmp_path / "c.db"
    path.write_bytes(b"this is not a database " * 200)
    return path, path.unlink


@pytest.mark.parametrize("how", ["folder is a file", "corrupt file"])
def test_a_store_that_cannot_be_opened_keeps_the_calls_says_so_and_stores_them_once_it_can(tmp_path, caplog, how):
    path, repair = _unopenable(tmp_path, how)
    w = CaptureWriter(path, retry_interval=0.05, status_file=False)
    with caplog.at_level(logging.ERROR, logger="ctxscope.store"):
        w.start()  # does not raise: the proxy must forward regardless
    exs = [make_exchange() for _ in range(5)]
    for ex in exs:
        w.submit(ex)
    st = w.stats()
    assert st.running and st.store_failures >= 1 and st.store_down_since is not None
    assert ("Not a directory" if how == "folder is a file" else "not a database") in st.last_error
    assert st.queued == 5 and st.dropped == 0 and st.failed == 0
    assert "unavailable" in caplog.text
    time.sleep(0.3)
    assert w.stats().store_failures > st.store_failures  # it keeps trying
    repair()
    assert _wait(lambda: w.stats().written == 5)
    assert w.stats().store_down_since is None and w.stats().queued == 0
    assert w.stop()
    assert _ids(queries.open_db(path, segment_texts=SegmentTexts)) == {e.id for e in exs}
    assert db_status(path)["writer"]["store_unavailable"] >= 1


def _full_disk(monkeypatch) -> dict:
    """SQLITE_FULL, as from a full disk: each new connection of the writer may not grow the database
    (SQLite's max_page_count) while the switch is on."""
    real = store.open_handle
    switch = {"full": True}

    def open_handle(path, **kw):
        db = real(path, **kw)
        if switch["full"]:
            db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
        return db

    monkeypatch.setattr(store, "open_handle", open_handle)
    return switch


def test_a_full_disk_loses_no_call_and_every_call_is_stored_once_when_space_returns(tmp_path, monkeypatch, caplog):
    path = tmp_path / "c.db"
    store.connect(path).close()
    switch = _full_disk(monkeypatch)
    w = CaptureWriter(path, retry_interval=0.05, status_file=False)
    w.start()
    # Bodies that do not compress: what a batch needs is more than the few free pages a file may hold.
    exs = [make_exchange(request_body=random.Random(i).randbytes(20_000)) for i in range(60)]
    with caplog.at_level(logging.ERROR, logger="ctxscope.store"):
        for ex in exs:
            w.submit(ex)
        assert _wait(lambda: w.stats().store_failures >= 3)
    st = w.stats()
    assert "full" in st.last_error and st.store_down_since is not None
    assert st.queued == 60 and st.written == 0 and st.failed == 0 and st.dropped == 0
    assert len(_ids(queries.open_db(path, segment_texts=SegmentTexts))) == 0
    assert "unavailable" in caplog.text
    switch["full"] = False  # space returns
    assert _wait(lambda: w.stats().written == 60)
    assert w.stop()
    db = queries.open_db(path, segment_texts=SegmentTexts)
    assert next(r[0] for r in db.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM calls")) == 60
    assert _ids(db) == {e.id for e in exs}
    assert queries.get_request_raw(db, exs[7].id) == exs[7].request_body
    assert w.stats().store_down_since is None


@pytest.mark.slow
def test_calls_the_store_never_took_are_left_in_a_spool_for_the_next_writer(tmp_path):
    from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
    from ctxscope.inspector.writer.wire import spool as spools

    path, repair = _unopenable(tmp_path, "corrupt file")
    w = CaptureWriter(path, retry_interval=0.05, status_file=False)
    w.start()
    exs = [make_exchange() for _ in range(3)]
    for ex in exs:
        w.submit(ex)
    assert w.stop() is False  # the store never came back
    assert w.stats().queued == 3
    [left] = spools.spool_files(path)
    assert os.stat(left).st_mode & 0o777 == 0o600
    repair()
    nxt = WriterProcess(path)
    nxt.start()
    assert nxt.stop()
    assert _ids(queries.open_db(path, segment_texts=SegmentTexts)) == {e.id for e in exs}
    assert spools.spool_files(path) == []


def test_submit_still_never_raises_after_a_stop_with_the_store_down(tmp_path):
    path, _ = _unopenable(tmp_path, "corrupt file")
    w = CaptureWriter(path, retry_interval=0.05, status_file=False)
    w.start()
    assert w.stop() is True  # nothing was waiting
    w.submit(make_exchange())
    assert w.stats().dropped == 1


_KILL_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from support.factories import make_exchange
from ctxscope.inspector.writer.storing.thread import CaptureWriter
w = CaptureWriter({db!r})
w.start()
for i in range({n}):
    w.submit(make_exchange(id="early%06d" % i, session_label="s%d" % (i % 3)))
time.sleep(1.5)
print("ready", flush=True)
i = 0
while True:  # keep the writer busy so the kill lands mid-transaction
    w.submit(make_exchange(id="late%08d" % i, request_body=b"x" * 50_000 + str(i).encode()))
    i += 1
    time.sleep(0.001)
"""


def _spawn(script: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_sigkill_loses_nothing_completed_more_than_a_second_earlier(tmp_path):
    path = tmp_path / "kill.db"
    n = 300
    proc = _spawn(_KILL_SCRIPT.format(tests=str(TESTS), db=str(path), n=n))
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    early = {r[0] for r in conn.execute("SELECT id FROM calls WHERE id LIKE 'early%'")}
    assert early == {f"early{i:06d}" for i in range(n)}
    conn.close()
    db = queries.open_db(path, segment_texts=SegmentTexts)  # and the store opens and reads cleanly
    assert queries.get_request_raw(db, "early000007").startswith(b"{")
    for c in queries.list_calls(db, limit=20):  # calls committed just before the kill are whole too
        if c["id"].startswith("late"):
            assert queries.get_request_raw(db, c["id"]) == b"x" * 50_000 + str(int(c["id"][4:])).encode()


_TERM_SCRIPT = """
import signal, sys, time
sys.path.insert(0, {tests!r})
from support.factories import make_exchange
from ctxscope.inspector.writer.storing.thread import CaptureWriter

def slow(db, call):  # a slow analysis keeps a backlog queued when SIGTERM arrives
    time.sleep(0.001)

w = CaptureWriter({db!r}, analyzers=[slow])
def on_term(signum, frame):
    queued = w.stats().queued
    drained = w.stop()
    print("queued_at_term=%d drained=%s written=%d" % (queued, drained, w.stats().written), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
w.start()
for i in range({n}):
    w.submit(make_exchange(id="term%06d" % i, request_body=b"y" * 5000 + str(i).encode()))
print("submitted", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_sigterm_drains_the_queue_before_exit(tmp_path):
    path = tmp_path / "term.db"
    n = 1500
    proc = _spawn(_TERM_SCRIPT.format(tests=str(TESTS), db=str(path), n=n))
    try:
        assert proc.stdout.readline().strip() == "submitted", proc.stderr.read()
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"drained=True written={n}" in out
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert {r[0] for r in conn.execute("SELECT id FROM calls")} == {f"term{i:06d}" for i in range(n)}


def test_queue_is_bounded_in_bytes_too(tmp_path):
    w = CaptureWriter(tmp_path / "c.db", max_queue_bytes=30_000)
    big = [make_exchange(request_body=b"z" * 20_000) for _ in range(3)]
    for ex in big:
        w.submit(ex)
    st = w.stats()
    assert st.dropped == 2 and "bytes" in st.last_error
    assert st.queued == 1 and st.queued_bytes == len(big[0].request_body) + len(big[0].response_body)
    w.start()
    assert w.stop()
    assert w.stats().queued_bytes == 0 and w.stats().written == 1
    huge = CaptureWriter(tmp_path / "d.db", max_queue_bytes=10)
    huge.submit(big[0])  # an empty queue takes any one body, however large
    assert huge.stats().dropped == 0


def test_a_store_that_comes_back_while_nothing_waits_is_reported_working_again(tmp_path):
    path, repair = _unopenable(tmp_path, "corrupt file")
    w = CaptureWriter(path, retry_interval=0.05, status_file=False)
    w.start()
    assert w.stats().store_down_since is not None
    repair()
    assert _wait(lambda: w.stats().store_down_since is None)
    assert w.stop()
    assert db_status(path)["writer"]["store_unavailable"] >= 1


def test_the_writer_thread_deletes_a_session_between_batches_and_refuses_once_stopped(tmp_path):
    from ctxscope.inspector.writer.protocol import WriterUnavailable

    w = CaptureWriter(tmp_path / "c.db", batch_interval=0.01)
    w.start()
    try:
        exchanges = [make_exchange(session_label=label) for label in ("gone", "gone", "kept")]
        for ex in exchanges:
            w.submit(ex)
        deadline = time.monotonic() + 10
        while w.stats().written < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        gone = queries.list_calls(queries.open_db(tmp_path / "c.db"), limit=None)[-1]["session"]
        result = w.delete_session(gone)
        assert result["session"] == gone and result["calls_deleted"] == 2
        assert w.delete_session(gone)["calls_deleted"] == 0
        left = queries.list_calls(queries.open_db(tmp_path / "c.db", segment_texts=SegmentTexts), limit=None)
        assert [c["id"] for c in left] == [exchanges[2].id]
    finally:
        assert w.stop()
    with pytest.raises(WriterUnavailable):
        w.delete_session("kept")


@pytest.mark.parametrize("give_back", [True, False])
def test_the_publisher_sleeps_once_all_is_stored_giving_the_heap_back_only_for_a_writer_here(
    tmp_path, monkeypatch, give_back
):
    """A writer child's heap and the daemon's go back before its counters are read (writer/daemon_side/launch.py);
    a writer in this process has only its publisher to do it, once everything is stored."""
    trims = []
    monkeypatch.setattr(status, "release_heap", lambda: trims.append(time.monotonic()))
    publisher = status.StatusPublisher(
        tmp_path / "c.db", lambda: status.WriterStats(written=3, running=True), interval=0.01, give_back_heap=give_back
    )
    try:
        deadline = time.monotonic() + 10
        while not publisher.asleep:
            assert time.monotonic() < deadline, "the publisher never went to sleep"
            time.sleep(0.01)
        time.sleep(0.1)  # asleep: it wakes for nothing
        assert len(trims) == (1 if give_back else 0)
        assert publisher.asleep and json.loads(publisher._file.path.read_text())["written"] == 3
    finally:
        publisher.close()
