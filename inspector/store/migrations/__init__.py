"""Schema of the capture store, as sqlite-utils ``Migrations``: the one ordered list of them.

One function per migration, named ``mNNN_verb_noun``, never edited once released: add a new one
instead, in the module of what it changes (``calls``, ``bodies``, ``search_index``,
``side_tables``), and append it to ``STEPS``. Tables are written as explicit SQL with comments,
because Datasette shows a table's CREATE statement to whoever opens the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ctxscope.inspector.store.migrations import bodies, calls, search_index, side_tables

if TYPE_CHECKING:
    import sqlite_utils
    from sqlite_utils.migrations import Migrations

MIGRATION_SET = "ctxscope"
Migration = Callable[["sqlite_utils.Database"], None]

STEPS: tuple[Migration, ...] = (
    bodies.m001_create_blobs,
    calls.m002_create_calls,
    side_tables.m003_create_meta,
    calls.m004_add_call_analysis,
    calls.m005_add_grouped_by,
    side_tables.m006_create_cache_minimums,
    search_index.m007_create_search_index,
    calls.m008_add_replay_of,
    side_tables.m009_create_export_positions,
    calls.m010_index_unnamed_retries,
    bodies.m011_create_chunks,
    bodies.m012_create_header_sets,
    search_index.m013_compress_search_text,
    search_index.m014_search_text_from_bodies,
    calls.m015_drop_predecessor_index,
    side_tables.m016_stored_order_from_the_writer,
    calls.m017_same_request_by_time,
    side_tables.m018_create_call_findings,
    side_tables.m019_create_call_shapes,
    side_tables.m020_create_call_totals,
    side_tables.m021_create_session_titles,
)
NAMES = tuple(step.__name__ for step in STEPS)  # in order: what a current file has applied
_built: list[Migrations] = []


def migration_set() -> Migrations:
    """The migrations as sqlite-utils' ``Migrations`` (which imports sqlite-utils), made once: they are
    handed to it only when one must run or be listed, so the writer opens a current file without
    loading it (docs/architecture.md, "Memory")."""
    if not _built:
        from sqlite_utils.migrations import Migrations

        built = Migrations(MIGRATION_SET)
        for step in STEPS:
            built()(step)
        _built.append(built)
    return _built[0]


def __getattr__(name: str) -> Migrations:
    """``migrations``: the same, made on first use."""
    if name == "migrations":
        return migration_set()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
