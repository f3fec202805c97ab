"""Stores as an older or damaged file would be: the bodies gone, or a migration not yet applied.
Tests build them from a current store with plain ``sqlite3``, as another program would leave them."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def strip_bodies(path: Path) -> None:
    """Every stored body gone: a reader that opened one (to name a session, say) would find nothing."""
    con = sqlite3.connect(path)
    con.execute("UPDATE calls SET request_blob = NULL, response_blob = NULL, final_response_blob = NULL")
    for table in ("blobs", "pages", "chunks"):
        con.execute(f"DELETE FROM {table}")
    con.commit()
    con.close()


def copy_store(src: Path, dst: Path) -> None:
    """A consistent copy of the store file (``VACUUM INTO``), its WAL included."""
    con = sqlite3.connect(src)
    con.execute(f"VACUUM INTO '{dst}'")
    con.close()


def before_migration(path: Path, migration: str, *undo: str) -> None:
    """The store at ``path`` as a version before ``migration`` left it: the ``undo`` statements run
    (dropping what it made) and its record gone, so the next open applies it again."""
    con = sqlite3.connect(path)
    for statement in undo:
        con.execute(statement)
    con.execute("DELETE FROM _sqlite_migrations WHERE name = ?", [migration])
    con.commit()
    con.close()
