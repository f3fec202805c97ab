"""Deleting a session from the capture store: its calls, then bodies nobody needs any more.

Identical bodies are shared between calls (and sessions), and bodies of the older layout are
deltas against earlier bodies, so a blob may only go when nothing refers to it: no call, no other
blob (as a delta base), no row of any other table that declares a reference to ``blobs``. Then
the chunks and pages no remaining blob uses go too (``blobs.sweep``). Rows of other tables
that reference the deleted calls go with them. The writer also remembers the last few bodies of
each session as delta bases for the next call: if the same session label sends again it would
lay its next body out on pieces of a blob we just removed, so the bodies of the session's last ``KEEP_TAIL``
calls (and their chains) are kept; they cost little and keep every later body recoverable.

The search index goes first, while the session's bodies are still stored: a segment only this
session holds leaves FTS5 with its text, which is read back from those bodies; a segment another
session holds stays, read back from that session's occurrence (docs/architecture.md, "The search
index").
"""

from __future__ import annotations

from typing import Any

from ctxscope.inspector.store import totals
from ctxscope.inspector.store.blobs import sweep
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived import search, titles
from ctxscope.inspector.store.layout import headers

KEEP_TAIL = 8


def _references(db: Db, target: str) -> list[tuple[str, str]]:
    """(table, column) pairs whose schema declares REFERENCES ``target``."""
    out = []
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        for fk in db.execute(f"PRAGMA foreign_key_list([{table}])").fetchall():
            if fk[2] == target:
                out.append((table, fk[3]))
    return out


def delete_session(db: Db, session: str) -> dict[str, Any]:
    """Delete a session's calls (and rows referring to them) and unreferenced blobs, in one transaction."""
    blob_refs = _references(db, "blobs")
    call_refs = [(t, c) for t, c in _references(db, "calls") if t != "calls"]
    call_blob_cols = [c for t, c in blob_refs if t == "calls"]
    db.execute("BEGIN IMMEDIATE")  # waits (busy timeout) while the writer commits a batch
    try:
        keep: set[int] = set()
        if call_blob_cols:
            tail = db.execute(
                f"SELECT {', '.join(call_blob_cols)} FROM calls WHERE session = ? ORDER BY seq DESC LIMIT ?",
                [session, KEEP_TAIL],
            ).fetchall()
            keep = {b for row in tail for b in row if b is not None}
        if "search_occurrences" in db.table_names():
            search.clear(db, session)  # before the calls and bodies it reads the texts from
        for table, col in call_refs:
            db.execute(f"DELETE FROM [{table}] WHERE [{col}] IN (SELECT id FROM calls WHERE session = ?)", [session])
        calls = db.execute("DELETE FROM calls WHERE session = ?", [session]).rowcount
        if totals.kept(db):
            totals.refresh(db, [session])  # its totals go with its calls
        if titles.kept(db):
            titles.forget(db, [session])  # and its title: a later session of that id is named afresh
        blobs = _collect(db, blob_refs, keep) if calls else 0
        if blobs:
            sweep(db)  # the chunks and pages only those blobs used
        if calls and "header_sets" in db.table_names():
            headers.sweep(db)
        db.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise
    return {"session": session, "calls_deleted": calls, "blobs_deleted": blobs}


def _collect(db: Db, refs: list[tuple[str, str]], keep: set[int]) -> int:
    """Remove blobs nothing refers to (repeated: removing a delta can free its base)."""
    keep_sql = ",".join(str(int(b)) for b in keep) or "NULL"
    used = " UNION ".join(f"SELECT [{c}] FROM [{t}] WHERE [{c}] IS NOT NULL" for t, c in refs) or "SELECT NULL"
    total = 0
    while True:
        n = db.execute(f"DELETE FROM blobs WHERE id NOT IN ({used}) AND id NOT IN ({keep_sql})").rowcount
        if n <= 0:
            return total
        total += n
