"""Session titles are stored by the writer as a session's first calls are stored (real CaptureWriter,
real SQLite), kept right through reindex, deletion and import, filled into an older store once by
the backfill, and read without opening a body (pipeline/session_titles.py, store/derived/titles.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ctxscope.inspector.pipeline.analyze import Analyzer, writer_analyzers
from ctxscope.inspector.pipeline.reindex import reindex
from ctxscope.inspector.pipeline.session_titles import CALLS_TRIED, TITLE_CHARS, backfill
from ctxscope.inspector.share.importer import import_calls
from ctxscope.inspector.store import queries
from ctxscope.inspector.store.deletion import delete_session
from ctxscope.inspector.store.derived import titles
from ctxscope.inspector.writer.child.life import migrate_apart
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.web.overview import list_session_overviews
from ctxscope.web.timeline import session_view

from support.factories import T0, anthropic_request, capture, make_exchange
from support.old_stores import before_migration, copy_store, strip_bodies
from support.stored_calls import wait_for_stored

REMINDER = "<system-reminder>\nThe date is today. Be careful.\n</system-reminder>"


def _call(session: str | None, t: float, content, *, header: str | None = None, **overrides):
    """One Anthropic call whose only message is ``content``: in the session the user named ``session``,
    or the one its ``x-session-id`` header says (``header``), else unnamed (the analysis places it)."""
    if header is not None:
        overrides["request_headers"] = (("content-type", "application/json"), ("x-session-id", header))
    return make_exchange(
        request=anthropic_request([{"role": "user", "content": content}], system=f"agent of {session or header or t}"),
        session_label=session,
        started_at=T0 + t,
        **overrides,
    )


def _tool_result_only(t: float, header: str):
    """A call in the session its header names whose only message is a tool result: no user text."""
    return _call(None, t, [{"type": "tool_result", "tool_use_id": "tu_1", "content": "42 files"}], header=header)


def _store(path: Path, exchanges):
    return capture(path, exchanges, analyzers=writer_analyzers())


def _by_first_call(db) -> dict[str, str | None]:
    """Each session's stored title, keyed by the first line its first call sent (for unnamed ones)."""
    found = db.execute("SELECT session FROM call_totals GROUP BY session").fetchall()
    return titles.of(db, [s for (s,) in found])


def test_the_writer_stores_each_sessions_title_and_the_readers_open_no_body(tmp_path):
    path = tmp_path / "t.db"
    db = _store(
        path,
        [
            _call("named-one", 0, "Something else entirely"),
            _call(None, 10, f"{REMINDER}\n\n  Fix   the login\tbug  \nIt fails on Safari."),
            # a session that opens with a tool result only, then a real message
            _tool_result_only(20, "tools-first"),
            _call(
                None,
                21,
                header="tools-first",
                content=[{"type": "text", "text": REMINDER}, {"type": "text", "text": "Sort the table"}],
            ),
        ],
    )
    stored = _by_first_call(db)
    assert stored["named-one"] == "named-one"  # the user named it: that is its title
    assert stored["tools-first"] == "Sort the table"  # the first call held no user text: the second's
    unnamed = [s for s in stored if s not in ("named-one", "tools-first")]
    assert len(unnamed) == 1 and stored[unnamed[0]] == "Fix the login bug"  # reminder out, spaces folded
    db.close()

    strip_bodies(path)  # the old reader took titles from these bodies: it would now find none
    db = queries.open_db(path)
    listed = {r["session"]: r["title"] for r in list_session_overviews(db)}
    assert listed == stored
    assert session_view(db, unnamed[0])["title"] == "Fix the login bug"


def test_a_title_survives_reindex_deletion_and_import(tmp_path):
    path = tmp_path / "t.db"
    db = _store(path, [_call(None, 0, "Write the parser"), _call("kept", 5, "a"), _call("gone", 9, "b")])
    before = _by_first_call(db)
    # a row gone wrong (or a call moved by a new analysis) is named again by the reindex from the calls
    db.execute("UPDATE session_titles SET title = 'stale', tried = 1")
    db.execute("INSERT INTO session_titles (session, title, tried) VALUES ('no-such-session', 'x', 1)")
    db.conn.commit()
    for _ in reindex(db, analyzer=Analyzer()):
        pass
    after = dict(db.execute("SELECT session, title FROM session_titles").fetchall())
    assert after.get("no-such-session", "x") == "x"  # reindex names the sessions it touched only
    assert {s: after[s] for s in before} == before

    delete_session(db, "gone")
    assert titles.state(db, "gone") is None
    imported = list(import_calls(path, [(_call("gone", 100, "Come back under a new name"), None)], writer_analyzers()))
    assert [i.stored for i in imported] == [True]
    assert titles.title(db, "gone") == "gone"  # a label's title is its name, the deleted row did not linger
    imported = list(
        import_calls(path, [(_call(None, 200, "Imported question", header="imp"), None)], writer_analyzers())
    )
    assert titles.title(db, "imp") == "Imported question"


def test_the_backfill_names_the_sessions_of_an_older_store_once(tmp_path):
    path = tmp_path / "t.db"
    db = _store(
        path, [_call(None, 0, "First question"), _tool_result_only(10, "tl"), _call(None, 11, "Then this", header="tl")]
    )
    expected = _by_first_call(db)
    db.close()
    old = tmp_path / "old.db"  # the same store as a version before m021 left it
    copy_store(path, old)
    before_migration(old, "m021_create_session_titles", "DROP TABLE session_titles")

    apart = tmp_path / "apart.db"  # a copy the writer child's migration process takes up
    copy_store(old, apart)
    migrate_apart(apart)  # what the daemon's writer child runs before it stores a call
    con = sqlite3.connect(apart)
    assert dict(con.execute("SELECT session, title FROM session_titles").fetchall()) == expected
    assert con.execute("SELECT count(*) FROM meta WHERE key = ?", [titles.PENDING]).fetchone() == (0,)
    con.close()

    migrated = queries.open_db(old)  # m021: the table, and the backfill marked due
    assert titles.pending(migrated) and set(_by_first_call(migrated).values()) == {None}
    seen: list[tuple[int, int]] = []
    assert backfill(migrated, lambda named, total: seen.append((named, total))) == 2
    assert seen == [(2, 2)] and not titles.pending(migrated)
    assert _by_first_call(migrated) == expected
    assert backfill(migrated) == 0  # done once: a later open reads no body


def test_hostile_first_messages_give_short_printable_titles(tmp_path):
    path = tmp_path / "t.db"
    huge = "x" * (1 << 20)  # a first message of 1 MB on one line
    controls = "\x1b]52;c;cm0gLXJmIH4=\x07Deploy\x00 the\u202e app\x1b[2J\x9b31m now\r\nsecond line"
    no_text = [_tool_result_only(20 + i, "quiet") for i in range(CALLS_TRIED)]
    db = _store(
        path,
        [
            _call("huge", 0, huge),
            _call(None, 10, controls),
            *no_text,
            _call(None, 40, "Too late to name it", header="quiet"),
        ],
    )
    stored = _by_first_call(db)
    assert stored["huge"] == "huge"  # named: the label
    assert titles.state(db, "quiet") == (None, CALLS_TRIED)  # its first calls hold no user text: untitled
    (hostile,) = [t for s, t in stored.items() if s not in ("huge", "quiet")]
    assert hostile is not None and hostile.isprintable() and "\x1b" not in hostile and "\u202e" not in hostile
    assert "Deploy" in hostile and "second line" not in hostile and len(hostile) <= TITLE_CHARS

    # the same 1 MB line in an unnamed session: trimmed, whole words of it read only up to a bound
    db2 = _store(tmp_path / "u.db", [_call(None, 0, huge + "\nmore")])
    (title,) = _by_first_call(db2).values()
    assert title is not None and len(title) == TITLE_CHARS and title.endswith("…")


def test_the_writer_reads_the_table_once_per_session_not_per_call(tmp_path):
    """A session's later calls cost a dict look-up: the writer's statements on session_titles stop
    once the session is titled."""
    statements: list[str] = []
    path = tmp_path / "t.db"
    calls = [_call("busy", i, json.dumps({"n": i})) for i in range(12)]
    analyzers = writer_analyzers()
    recorder = analyzers[1]

    class Counting:
        single_write = True

        def __call__(self, db, call):
            db.conn.set_trace_callback(lambda sql: statements.append(sql) if "session_titles" in sql else None)
            try:
                recorder(db, call)
            finally:
                db.conn.set_trace_callback(None)

    capture(path, calls, analyzers=[analyzers[0], Counting()])
    assert len(statements) == 2, statements  # the first call: one look-up, one write


def test_a_session_deleted_through_the_writer_is_named_again_when_it_comes_back(tmp_path):
    path = tmp_path / "t.db"
    writer = CaptureWriter(path, analyzers=writer_analyzers())
    writer.start()
    try:
        writer.submit(_call(None, 0, "First life", header="again"))
        wait_for_stored(path, 1, writer=writer)
        assert writer.delete_session("again")["calls_deleted"] == 1
        writer.submit(_call(None, 10, "Second life", header="again"))
        wait_for_stored(path, 1, writer=writer)
    finally:
        assert writer.stop()
    db = queries.open_db(path)
    assert titles.state(db, "again") == ("Second life", 1)
