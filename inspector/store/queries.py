"""Read side of the capture store, shared by the CLI and the web UI.

Readers open their own connection (``open_db``); WAL lets them read while the writer thread
commits. Rows come out as plain JSON-ready dicts: times in ISO 8601 UTC, JSON columns decoded,
usage as {input, output, cache_read, cache_write} or None when the provider reported nothing.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ctxscope.inspector.store import db as store
from ctxscope.inspector.store import totals
from ctxscope.inspector.store.blobs import blob_get, stored_bytes
from ctxscope.inspector.store.columns import with_defaults
from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.layout import headers
from ctxscope.inspector.store.recode import apply_recipe
from ctxscope.inspector.store.sessions import (
    SessionAggregate,
    session_aggregates,
    thread_order,
)
from ctxscope.proxy.wire.decoding import BodyDecodeError, decode_body
from ctxscope.proxy.wire.responses import parse_response

if TYPE_CHECKING:
    import sqlite_utils

SUMMARY_COLUMNS = (
    "id, session, seq, started_at, api, model, method, path, status, outcome, stream, request_bytes, "
    "response_bytes, ttfb_ms, duration_ms, usage_input, usage_output, usage_cache_read, usage_cache_write, "
    "provider, attempt, retry_of, error, capture_epoch, stop_reason, "
    # the inspector's analysis (inspector/pipeline/analyze.py); NULL until analysed
    "session_source, grouped_by, thread, parent_thread, predecessor, relation, pointer, epoch_reason, "
    "tokens_estimated, tokens_by_category, cache_verdict, cache, has_compaction_before, markers"
)
_JSON_COLUMNS = ("request_headers", "response_headers", "annotations", "usage_raw", "response_error", "extra")
_ANALYSIS_JSON = ("tokens_by_category", "cache", "markers", "relation_detail")
_USAGE = ("input", "output", "cache_read", "cache_write")
FAILURE_KINDS = ("write_failed", "dropped", "analysis_failed", "parse_failed", "store_unavailable")


class AmbiguousCallId(ValueError):
    """A call (or session) id prefix that matches more than one; ``candidates`` holds the first
    few matches, so a caller can list them (``more``: there are others beyond those)."""

    def __init__(self, message: str, candidates: tuple[str, ...] = (), more: bool = False) -> None:
        super().__init__(message)
        self.candidates = candidates
        self.more = more


CANDIDATES_LISTED = 10


def open_db(path: str | Path, *, segment_texts: store.SegmentReader | None = None) -> sqlite_utils.Database:
    """A read connection (usable from any thread), with the schema brought up to date; ``segment_texts``
    for a reader of search texts (``store/db.py``)."""
    return store.connect(path, check_same_thread=False, segment_texts=segment_texts)


def _usage(row: dict[str, Any]) -> dict[str, Any] | None:
    usage = {k: row.pop("usage_" + k, None) for k in _USAGE}
    return usage if any(v is not None for v in usage.values()) else None


def _analysis(row: dict[str, Any]) -> dict[str, Any]:
    """Decode the analysis columns in place: JSON to objects, flags to booleans."""
    for col in _ANALYSIS_JSON:
        if isinstance(row.get(col), str):
            with contextlib.suppress(ValueError):
                row[col] = with_defaults(col, json.loads(row[col]))
    if row.get("has_compaction_before") is not None:
        row["has_compaction_before"] = bool(row["has_compaction_before"])
    return row


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["usage"] = _usage(row)
    row["stream"] = None if row.get("stream") is None else bool(row["stream"])
    return _analysis(row)


def list_calls(
    db: Db,
    *,
    session: str | None = None,
    model: str | None = None,
    limit: int | None = 50,
    offset: int = 0,
    newest_first: bool = True,
) -> list[dict[str, Any]]:
    """Call summaries, newest first (``newest_first=False`` for a timeline)."""
    where: list[str] = []
    params: list[object] = []
    if session is not None:
        where.append("session = ?")
        params.append(session)
    if model is not None:
        where.append("model = ?")
        params.append(model)
    order = "DESC" if newest_first else "ASC"
    sql = f"SELECT {SUMMARY_COLUMNS} FROM calls"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY started_at {order}, seq {order}, id {order} LIMIT ? OFFSET ?"  # a tie by call number
    params += [-1 if limit is None else limit, offset]
    return with_thread_parents(db, [_summary(r) for r in db.query(sql, params)])


_SESSIONS_PER_QUERY = 500


def with_thread_parents(db: Db, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``parent_thread`` as the session is read now: None on the main thread, the
    main thread on every other (``thread_order``), not what was known when the thread began."""
    sessions = sorted({r["session"] for r in rows if r.get("thread")})
    parents: dict[tuple[str, str], str | None] = {}
    for start in range(0, len(sessions), _SESSIONS_PER_QUERY):
        chunk = sessions[start : start + _SESSIONS_PER_QUERY]
        groups: dict[str, list[dict[str, Any]]] = {}
        for session, thread, calls, rounds, first, subagent in db.execute(
            f"""SELECT session, thread, SUM(calls), SUM(tool_rounds), MIN(first_seq), MAX(subagent)
                FROM {totals.source(db)}
                WHERE session IN ({", ".join("?" for _ in chunk)}) AND thread IS NOT NULL GROUP BY session, thread""",
            chunk,
        ).fetchall():
            groups.setdefault(session, []).append(
                {"thread": thread, "calls": calls, "tool_rounds": rounds, "first_seq": first, "subagent": subagent}
            )
        for session, threads in groups.items():
            main, *_ = thread_order(threads)
            parents.update({(session, t["thread"]): None if t["thread"] == main else main for t in threads})
    for r in rows:
        if r.get("thread") and (r["session"], r["thread"]) in parents:
            r["parent_thread"] = parents[(r["session"], r["thread"])]
    return rows


def resolve_prefix(db: Db, column: Literal["id", "session"], value: str) -> str | None:
    """The full call id or session id for an id or a unique prefix of one; None if nothing matches;
    ``AmbiguousCallId`` (with the first candidates) if several do. One rule for every id
    (docs/architecture.md, "One id rule")."""
    if db.execute(f"SELECT 1 FROM calls WHERE {column} = ? LIMIT 1", [value]).fetchone():
        return value
    if not value:
        return None
    rows = db.execute(
        f"SELECT DISTINCT {column} FROM calls WHERE {column} >= ? AND {column} < ? ORDER BY {column} LIMIT ?",
        [value, value + "\U0010ffff", CANDIDATES_LISTED + 1],
    ).fetchall()
    if len(rows) > 1:
        what = "call id prefix" if column == "id" else "session prefix"
        noun = "call" if column == "id" else "session"
        raise AmbiguousCallId(
            f"{what} {value!r} matches more than one {noun}",
            tuple(r[0] for r in rows[:CANDIDATES_LISTED]),
            len(rows) > CANDIDATES_LISTED,
        )
    return rows[0][0] if rows else None


def resolve_call_id(db: Db, call_id: str) -> str | None:
    """The full id for an id or a unique prefix; None if nothing matches."""
    return resolve_prefix(db, "id", call_id)


def get_call(db: Db, call_id: str) -> dict[str, Any] | None:
    """Every stored column of a call (JSON decoded) plus ``usage``; None if unknown."""
    full = resolve_call_id(db, call_id)
    if full is None:
        return None
    row = next(db.query("SELECT * FROM calls WHERE id = ?", [full]))
    headers.load_pairs(db, row)
    for col in _JSON_COLUMNS:
        if row.get(col) is not None:
            with contextlib.suppress(ValueError):
                row[col] = json.loads(row[col])
    row["usage"] = {k: row.get("usage_" + k) for k in _USAGE}
    if all(v is None for v in row["usage"].values()):
        row["usage"] = None
    row["stream"] = None if row.get("stream") is None else bool(row["stream"])
    return with_thread_parents(db, [_analysis(row)])[0]


def _body_row(db: Db, call_id: str, kind: str) -> dict[str, Any]:
    full = resolve_call_id(db, call_id)
    if full is None:
        raise KeyError(f"no call {call_id!r}")
    return next(
        db.query(
            f"SELECT {kind}_blob AS blob, {kind}_recode AS recode, {kind}_encoding AS encoding FROM calls WHERE id = ?",
            [full],
        )
    )


def _raw(db: Db, call_id: str, kind: str) -> bytes:
    row = _body_row(db, call_id, kind)
    if row["blob"] is None:
        return b""
    data = blob_get(db, row["blob"])
    return apply_recipe(data, row["recode"]) if row["recode"] else data


def _decoded(db: Db, call_id: str, kind: str) -> bytes | None:
    row = _body_row(db, call_id, kind)
    if row["blob"] is None:
        return b""
    data = blob_get(db, row["blob"])
    if row["recode"] or not row["encoding"]:
        return data  # the blob already holds the decoded body
    try:
        return decode_body(data, row["encoding"], allow_truncated=True)
    except BodyDecodeError:
        return None


def get_request_raw(db: Db, call_id: str) -> bytes:
    """The request body exactly as forwarded upstream (possibly compressed). KeyError if unknown."""
    return _raw(db, call_id, "request")


def get_response_raw(db: Db, call_id: str) -> bytes:
    """The response body exactly as sent to the client (the full SSE text for streams)."""
    return _raw(db, call_id, "response")


def get_request_body(db: Db, call_id: str) -> bytes | None:
    """The request body with its Content-Encoding undone; None if it cannot be decoded."""
    return _decoded(db, call_id, "request")


def get_response_body(db: Db, call_id: str) -> bytes | None:
    return _decoded(db, call_id, "response")


def get_request_json(db: Db, call_id: str) -> Any | None:
    """The parsed request body; None when empty, undecodable or not JSON."""
    body = get_request_body(db, call_id)
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def get_final_response(db: Db, call_id: str) -> dict[str, Any] | None:
    """The final response object (reassembled from the stream for streamed calls); KeyError if unknown."""
    full = resolve_call_id(db, call_id)
    if full is None:
        raise KeyError(f"no call {call_id!r}")
    blob, api, status, ctype = db.execute(
        "SELECT final_response_blob, api, status, response_content_type FROM calls WHERE id = ?", [full]
    ).fetchone()
    if blob is not None:
        return cast("dict[str, Any] | None", json.loads(blob_get(db, blob)))
    body = get_response_body(db, full)
    if not body:
        return None
    parsed = parse_response(api, status, ctype, body)
    return parsed.body if isinstance(parsed.body, dict) else None


def list_sessions(
    db: Db,
    *,
    limit: int | None = None,
    cost: Callable[[SessionAggregate], tuple[float | None, str | None]] | None = None,
    purposes: bool = False,
) -> list[dict[str, Any]]:
    """One row per session, most recently active first, with its threads nested and cache figures.

    ``hit_rate`` counts calls: hits over calls that could have read the cache (``HIT_ELIGIBLE``);
    ``breaks`` are the calls whose own prompt change broke the cache (client_break). Given ``cost``
    (the store knows no prices: the caller brings them), each row gets its ``cost_usd`` and, when
    that is None, ``cost_unpriced``: why. The sessions
    the project made itself (a replay, the advisor's check, non-model requests) only with ``purposes``;
    each row says its ``purpose`` (None for a client's session).
    """
    out = []
    for a in session_aggregates(db, limit=limit, purposes=purposes):
        usage = dict(a.usage)
        out.append(
            {
                "session": a.session,
                "purpose": a.purpose,
                "calls": a.calls,
                "first_started_at": a.first_started_at,
                "last_started_at": a.last_started_at,
                "models": a.models,
                "providers": a.providers,
                "session_source": a.session_source,
                "breaks": a.breaks or 0,
                "lost_tokens": a.lost_tokens or 0,
                "lost_usd": a.lost_usd,
                "usage": usage if any(v is not None for v in usage.values()) else None,
                "hit_rate": a.hit_rate.as_report(),
                "threads": session_threads(db, a.session),
            }
        )
        if cost is not None:
            out[-1]["cost_usd"], out[-1]["cost_unpriced"] = cost(a)
    return out


def session_threads(db: Db, session: str) -> list[dict[str, Any]]:
    """The session's threads as a tree: the main thread on top (``thread_order``), every side thread
    its child (``parent_thread``); ``index`` numbers them main first, as every view does."""
    rows = db.query(  # from the session's totals (store/totals.py): a few rows, whatever its calls
        f"""SELECT thread, SUM(calls) AS calls, SUM(tool_rounds) AS tool_rounds, MIN(first_seq) AS first_seq,
                   MAX(subagent) AS subagent,
                   MIN(first_started_at) AS first_started_at, MAX(last_started_at) AS last_started_at,
                   json_group_array(DISTINCT model) AS models
            FROM {totals.source(db)} WHERE session = ? AND thread IS NOT NULL GROUP BY thread ORDER BY first_seq""",
        [session],
    )
    threads = {}
    for row in rows:
        row["models"] = sorted(m for m in json.loads(row["models"]) if m is not None)
        row["children"] = []
        threads[row["thread"]] = row
    order = thread_order(threads.values())
    if not order:
        return []
    main = threads[order[0]]
    for index, thread in enumerate(order):
        row = threads[thread]
        row.update(index=index, main=row is main, parent_thread=None if row is main else main["thread"])
        if row is not main:
            main["children"].append(row)
    return [main]


_marks = ", ".join("?" * len(FAILURE_KINDS))


def store_status(db_path: str | Path, status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with the file's size, counts, storage efficiency, schema and persisted writer
    failures added (an ``error`` when it is not a readable SQLite database)."""
    path = Path(db_path)
    if not path.exists():
        return status
    files = [path, Path(str(path) + "-wal"), Path(str(path) + "-shm")]
    status["size_bytes"] = sum(f.stat().st_size for f in files if f.exists())
    try:
        db = store.connect(path, check_same_thread=False, migrate=False)
        db.table_names()
    except sqlite3.DatabaseError as e:
        status["error"] = f"not a readable SQLite database: {e}"
        return status
    try:
        tables = set(db.table_names())
        status["journal_mode"] = db.journal_mode
        status["migrations_applied"] = store.applied_migrations(db)
        status["migrations_pending"] = store.pending_migrations(db)
        if not {"calls", "blobs", "store_events", "meta"} <= tables:
            return status

        def one(sql: str) -> Any:
            return db.execute(sql).fetchone()

        # the calls' figures from the per-session totals (store/totals.py): no pass over the calls
        src = totals.source(db)
        status["calls"], status["sessions"], raw = one(
            f"SELECT COALESCE(SUM(calls), 0), COUNT(DISTINCT session),"
            f" COALESCE(SUM(request_bytes), 0) + COALESCE(SUM(response_bytes), 0) FROM {src}"
        )
        status["last_capture_at"] = one("SELECT MAX(started_at) FROM calls")[0]
        status["capture_epoch"] = int(store.get_meta(db, "capture_epoch", "0") or 0)
        blobs, content = one("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs")
        stored = stored_bytes(db) if "chunks" in tables else one("SELECT COALESCE(SUM(length(data)), 0) FROM blobs")[0]
        status["blobs"] = {
            "count": blobs,
            "stored_bytes": stored,  # compressed bytes on disk
            "content_bytes": content,  # what those blobs expand to
            "raw_bytes": raw,  # request + response bytes of all calls, as on the wire
            "ratio": round(stored / raw, 4) if raw else None,
        }
        failures = dict.fromkeys(FAILURE_KINDS, 0)
        for kind, n in db.execute(
            f"SELECT kind, SUM(count) FROM store_events WHERE kind IN ({_marks}) GROUP BY kind", list(FAILURE_KINDS)
        ):
            failures[kind] = n
        status["writer"] = failures
        last = db.execute(
            f"SELECT at, kind, detail FROM store_events WHERE kind IN ({_marks}) ORDER BY id DESC LIMIT 1",
            list(FAILURE_KINDS),
        ).fetchone()
        status["writer"]["last_error"] = None if last is None else {"at": last[0], "kind": last[1], "detail": last[2]}
    finally:
        db.close()
    return status
