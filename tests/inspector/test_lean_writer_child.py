"""The writer child never loads sqlite-utils (nor click, dateutil, pluggy): it stores through the
store's own small handle, and a file that needs a migration is migrated by a short-lived process
before it opens it; the handle itself loads sqlite-utils only when a migration must run
(docs/architecture.md, "Memory")."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
import sqlite_utils

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store.migrations import NAMES, migrations
from ctxscope.inspector.store.queries import open_db
from ctxscope.inspector.writer.child.life import migrate_apart
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess

from support.factories import make_exchange

# The child imports this by name: the daemon's analyzers, then one that writes down every module the
# child holds after each call it stored (so what storing and analysing imported is there too).
_PROBE = """
import json, sys
from ctxscope.inspector.pipeline.search_index import writer_analyzers

def report(out):
    def modules(db, call):
        with open(out, "w") as f:
            json.dump(sorted(sys.modules), f)
    return [*writer_analyzers(), modules]
"""

HEAVY = ("sqlite_utils", "click", "dateutil", "pluggy", "sqlite_fts4")


def _heavy(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def _store_in_a_child(tmp_path, monkeypatch, db_path, n: int = 5) -> tuple[list[str], list[str]]:
    """``n`` calls stored by a real writer child: (the ids it was given, the modules it held at the end)."""
    (tmp_path / "lean_probe.py").write_text(_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))  # the child gets the parent's sys.path
    out = tmp_path / "child-modules.json"
    w = WriterProcess(db_path, analyzers_factory="lean_probe:report", analyzers_args=(str(out),), status_file=False)
    w.start()
    exs = [make_exchange(i) for i in range(n)]
    try:
        assert w.stats().running, w.stats().last_error
        for ex in exs:
            w.submit(ex)
    finally:
        assert w.stop()
    assert w.stats().written == n and w.stats().failed == 0
    return [ex.id for ex in exs], json.loads(out.read_text())


def _stored(db_path) -> set[str]:
    db = open_db(db_path)
    try:
        return {r[0] for r in db.execute("SELECT id FROM calls")}
    finally:
        db.close()


def test_a_writer_child_on_a_current_store_never_imports_sqlite_utils(tmp_path, monkeypatch):
    db_path = tmp_path / "c.db"
    store.connect(db_path).close()  # a current store, as the daemon's is after its first start
    ids, modules = _store_in_a_child(tmp_path, monkeypatch, db_path)
    assert "ctxscope.inspector.pipeline.analyze" in modules and "ctxscope.inspector.store.ingest" in modules
    assert not _heavy(modules), f"the writer child imported {_heavy(modules)}"
    assert _stored(db_path) == set(ids)


def _older_file(path) -> None:
    """A store at the schema before the last migration."""
    old = store.connect(path, migrate=False)
    migrations.apply(old, stop_before=NAMES[-1])
    old.close()


def _migrated(path) -> bool:
    db = store.connect(path, migrate=False)
    try:
        return store.pending_migrations(db) == [] and store.applied_migrations(db) == list(NAMES)
    finally:
        db.close()


@pytest.mark.parametrize("kind", ["new", "older"])
@pytest.mark.slow
def test_a_writer_child_on_a_file_that_needs_migrations_migrates_it_apart_and_stores(tmp_path, monkeypatch, kind):
    db_path = tmp_path / f"{kind}.db"
    if kind == "older":
        _older_file(db_path)
    ids, modules = _store_in_a_child(tmp_path, monkeypatch, db_path)
    assert not _heavy(modules), f"the writer child imported {_heavy(modules)}"
    assert _migrated(db_path)
    assert _stored(db_path) == set(ids)


_OPEN = """
import json, sys
from ctxscope.inspector.store import db
from ctxscope.inspector.pipeline.search_text import SegmentTexts
handle = db.open_handle(sys.argv[1], segment_texts=SegmentTexts)
print(json.dumps({"pending": db.pending_migrations(handle), "sqlite_utils": "sqlite_utils" in sys.modules}))
handle.close()
"""


def test_the_handle_loads_sqlite_utils_only_to_run_a_migration(tmp_path):
    """In the writer's own process (an in-process writer, or the child if its migration process failed)."""
    current, older = tmp_path / "current.db", tmp_path / "older.db"
    store.connect(current).close()
    _older_file(older)
    seen = {}
    for path in (current, older):
        done = subprocess.run([sys.executable, "-c", _OPEN, str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seen[path] = json.loads(done.stdout)
    assert seen[current] == {"pending": [], "sqlite_utils": False}
    assert seen[older] == {"pending": [], "sqlite_utils": True}


def test_migrating_apart_leaves_a_store_it_cannot_open_to_the_writer(tmp_path):
    older, broken = tmp_path / "older.db", tmp_path / "broken.db"
    _older_file(older)
    broken.write_bytes(b"not a database" * 100)
    migrate_apart(older)
    assert _migrated(older)
    migrate_apart(broken)  # no error: the writer reports it, and retries
    assert broken.read_bytes() == b"not a database" * 100


def test_pending_migrations_read_without_sqlite_utils_agree_with_its_own_at_every_step(tmp_path):
    for i, name in enumerate(NAMES):
        path = tmp_path / f"{i}.db"
        db = store.connect(path, migrate=False)
        assert store.pending_migrations(db) == list(NAMES)  # no record at all yet
        migrations.apply(db, stop_before=name)
        assert store.pending_migrations(db) == [m.name for m in migrations.pending(db)] == list(NAMES[i:])
        db.close()
        handle = store.open_handle(path)  # migrates the rest
        assert store.pending_migrations(handle) == []
        handle.close()


@pytest.mark.parametrize("kind", ["handle", "sqlite_utils"])
def test_the_handle_and_a_sqlite_utils_database_commit_and_roll_back_alike(tmp_path, kind):
    """What the write path relies on, against each: a statement outside a transaction is committed at
    once; atomic() commits, or undoes everything when its block raises; nested, it is a savepoint."""
    path = tmp_path / "c.db"
    db: store.Db = store.open_handle(path) if kind == "handle" else store.connect(path)
    other = sqlite3.connect(path)

    def seen() -> list[str]:
        return [k for (k,) in other.execute("SELECT key FROM meta ORDER BY key")]

    try:
        store.set_meta(db, "a", "1")
        assert seen() == ["a"] and not db.conn.in_transaction
        with db.atomic():
            store.set_meta(db, "b", "1")
            with pytest.raises(ValueError), db.atomic():
                store.set_meta(db, "c", "1")
                raise ValueError
        assert seen() == ["a", "b"]
        with pytest.raises(ValueError), db.atomic():
            store.set_meta(db, "d", "1")
            raise ValueError
        assert seen() == ["a", "b"] and not db.conn.in_transaction
        assert next(db.query("SELECT key, value FROM meta WHERE key = ?", ["a"])) == {"key": "a", "value": "1"}
        assert {"calls", "meta", "_sqlite_migrations"} <= set(db.table_names())
        assert isinstance(db, store.Handle if kind == "handle" else sqlite_utils.Database)
    finally:
        other.close()
        db.close()
