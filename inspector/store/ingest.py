"""Turn one captured Exchange into a ``calls`` row: decode, parse, store bodies, link retries.

Runs in the writer thread, off the hot path, inside the writer's transaction. ``exchange_row.derive``
is the pure part (no database); ``ingest`` adds what needs the store: bodies laid out against recent
bodies of the same session (or, for a session's first, of the sessions used last), header lists
as shared sets, the call's position in its session, retry linkage, and the analysis hooks.

An analyzer is ``analyzer(db, call)``: ``call`` is the row as inserted plus, under keys that
start with "_", what the writer already computed: ``_exchange`` (the Exchange), ``_request_body``
and ``_response_body`` (decoded bytes or None), ``_request_json`` (parsed or None) and
``_parsed`` (ParsedResponse or None). It may add rows or update the call row; it runs in a
savepoint, so if it raises, its writes are undone and the call is kept.

An analyzer with a ``row_columns(db, call)`` method runs before the row is inserted instead (``call``
as above, with ``_rowid`` = ``NOT_INSERTED``): the columns it returns are inserted with the row, so
the call is written once, in its final session, instead of inserted and then moved by an UPDATE
(docs/architecture.md, "One INSERT per call"). Such an analyzer links retries in the session it
chooses; ingest numbers the call there (unless the columns hold a ``seq``). If it raises, the call
is inserted as ingest alone would, and the error reported.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ctxscope.inspector.base import body_reuse
from ctxscope.inspector.base.body_reuse import BodyMemory
from ctxscope.inspector.base.clock import iso
from ctxscope.inspector.store import totals
from ctxscope.inspector.store.blobs import StoredBlob, blob_load, blob_put
from ctxscope.inspector.store.db import Db, Savepoint
from ctxscope.inspector.store.exchange_row import derive
from ctxscope.inspector.store.layout import headers
from ctxscope.inspector.store.layout.known import KnownIds
from ctxscope.inspector.store.recode import find_recipe
from ctxscope.proxy.exchange import Exchange
from ctxscope.proxy.wire.decoding import DEFAULT_MAX_SIZE
from ctxscope.vocab.kinds import Outcome

log = logging.getLogger("ctxscope.store")

Analyzer = Callable[[Db, dict[str, Any]], None]
RETRY_WINDOW_S = 120.0
NOT_INSERTED = 2**63 - 1  # the rowid a call has before it is inserted: every stored row comes before it


class BaseCache:
    """Recently stored bodies per (session, direction): the bases for the next body's layout.

    Bounded by keys and bytes. Cleared whenever a transaction rolls back, since the blob ids it
    holds may then no longer exist; it reseeds itself from the database.
    """

    def __init__(self, per_key: int = 4, max_keys: int = 256, max_bytes: int = 256 * 2**20, max_body: int = 32 * 2**20):
        self.per_key, self.max_keys, self.max_bytes, self.max_body = per_key, max_keys, max_bytes, max_body
        self._entries: OrderedDict[tuple[str, str], list[StoredBlob]] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple[str, str]) -> list[StoredBlob] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def add(self, key: tuple[str, str], blob: StoredBlob | None) -> None:
        entry = self._entries.setdefault(key, [])
        self._entries.move_to_end(key)
        if blob is None or len(blob.data) > self.max_body or any(b.id == blob.id for b in entry):
            return
        entry.insert(0, blob)
        self._bytes += len(blob.data)
        while len(entry) > self.per_key:
            self._bytes -= len(entry.pop().data)
        while self._entries and (len(self._entries) > self.max_keys or self._bytes > self.max_bytes):
            _, old = self._entries.popitem(last=False)
            self._bytes -= sum(len(b.data) for b in old)

    def recent(self, kind: str, count: int = 3) -> list[StoredBlob]:
        """The latest body of each of the ``count`` sessions used last: a new session's bases, so
        the system prompt and tools it shares with them are not stored again."""
        out: list[StoredBlob] = []
        for (_session, k), entry in reversed(self._entries.items()):
            if k == kind and entry:
                out.append(entry[0])
                if len(out) >= count:
                    break
        return out

    def shrink(self, max_bytes: int) -> None:
        """Forget the least recent sessions' bases until at most ``max_bytes`` are held."""
        while self._entries and self._bytes > max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= sum(len(b.data) for b in old)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


class RecentFailures:
    """The request bodies (by hash) of the failed calls this writer stored, so that looking for the
    call a new one retries costs a query only when there can be one (docs/architecture.md, "Sessions
    and threads"). ``since``: a failed call that began before it may be stored without being known
    here (``stored_failures`` learns those after it); a new call whose retry window reaches back
    before that is looked up in the store whatever this says."""

    def __init__(self, since: float | None = None, keep: int = 4096):
        self.since = time.time() if since is None else since
        self.keep = keep
        self._latest: dict[str, float] = {}  # request hash -> latest start of a failed call with it

    def may_have(self, sha: str | None, started_at: float) -> bool:
        """Whether a failed call with this body may be stored within the retry window before ``started_at``."""
        return bool(sha) and (started_at - RETRY_WINDOW_S < self.since or sha in self._latest)

    def add(self, sha: str | None, started_at: float) -> None:
        if not sha:
            return
        self._latest[sha] = max(started_at, self._latest.get(sha, started_at))
        if len(self._latest) > self.keep:  # forget the older half: windows reaching them ask the store again
            ordered = sorted(self._latest.items(), key=lambda kv: kv[1])
            cut = len(ordered) // 2
            self.since = max(self.since, ordered[cut - 1][1] + 1.0)
            self._latest = dict(ordered[cut:])


def stored_failures(db: Db) -> RecentFailures:
    """A writer's memory of failed bodies as it opens the store: the failed calls among those that
    began within the retry window before the latest stored one. A new call's window reaches back no
    further than that (it begins after the latest call), so it is looked up in the store only when a
    failure with its body is known (a call that began long before and ended now is looked up too).
    The look-up walks the window of the time index (docs/architecture.md, "One INSERT per call"):
    for a call whose body never failed, that would be every call of the last two minutes."""
    row = db.execute("SELECT MAX(started_at) FROM calls").fetchone()
    if not row or not row[0]:
        return RecentFailures(since=float("-inf"))  # nothing stored yet
    since = _unix(row[0]) - RETRY_WINDOW_S
    failures = RecentFailures(since=since)
    for sha, started, outcome, status, complete in db.execute(
        """SELECT request_sha256, started_at, outcome, status, response_complete FROM calls
           WHERE started_at >= ? AND request_sha256 IS NOT NULL""",
        [iso(since)],
    ):
        if is_failure(outcome, status, complete):
            failures.add(sha, _unix(started))
    return failures


def _unix(stamp: str) -> float:
    moment = datetime.fromisoformat(stamp)  # ours end in "Z" (3.11 reads that as UTC)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@dataclass
class IngestState:
    """Writer-thread memory that keeps ingest cheap; losing it costs only compression, never data."""

    capture_epoch: int
    max_decoded_bytes: int = DEFAULT_MAX_SIZE  # cap on a body's decoded size for analysis
    bases: BaseCache = field(default_factory=BaseCache)
    recipes: dict[tuple[str, str], str] = field(default_factory=dict)  # "" = last search failed
    bodies: BodyMemory = field(default_factory=BodyMemory)  # recent request bodies, parsed
    failures: RecentFailures = field(default_factory=RecentFailures)
    ids: KnownIds = field(default_factory=KnownIds)
    # The calls of a batch the writer rolled back and stores again: their analysis is taken as it was
    # (docs/architecture.md, "A savepoint only after a failure").
    redo: set[str] = field(default_factory=set)

    def forget(self) -> None:
        """What the store held may be gone (a rollback, a deletion): keep nothing that names its rows,
        and analyse again what is stored from now on (a deletion may change the analysis)."""
        self.bases.clear()
        self.ids.clear()
        self.redo.clear()


_BLOB_COLUMN = {"request": "request_blob", "response": "response_blob"}
_INSERTS: dict[tuple[str, ...], str] = {}  # a call row's columns -> its INSERT statement


def _candidates(db: Db, state: IngestState, session: str, kind: str) -> tuple[list[StoredBlob], bool]:
    """The bases for a body: the session's last bodies, else the latest of other sessions (a new
    session re-sends the system prompt and tools they hold; True), loaded from the database after a restart."""
    key = (session, kind)
    cached = state.bases.get(key)
    if cached is None:
        state.bases.add(key, _latest(db, kind, session))
        cached = state.bases.get(key) or []
    if cached:
        return cached, False
    recent = state.bases.recent(kind)
    if not recent:
        state.bases.add(("", kind), _latest(db, kind, None))  # any session's latest body
        recent = state.bases.recent(kind)
    return recent, True


def _latest(db: Db, kind: str, session: str | None) -> StoredBlob | None:
    """The latest stored body of this kind (of ``session``, else of any session)."""
    col = _BLOB_COLUMN[kind]
    if session is None:
        row = db.execute(f"SELECT {col} FROM calls WHERE {col} IS NOT NULL ORDER BY rowid DESC LIMIT 1").fetchone()
    else:
        row = db.execute(
            f"SELECT {col} FROM calls WHERE session = ? AND {col} IS NOT NULL ORDER BY seq DESC LIMIT 1", [session]
        ).fetchone()
    if row is None:
        return None
    try:
        return blob_load(db, row[0])
    except Exception as e:  # a damaged base only costs compression
        log.warning("could not load base blob %s: %s", row[0], e)
        return None


def store_body(
    db: Db,
    state: IngestState,
    session: str,
    kind: str,
    raw: bytes,
    encoding: str | None,
    decoded: bytes | None,
    decoded_hash: bytes | None = None,
) -> tuple[int | None, str | None]:
    """Store a body; returns (blob id or None for empty, recode recipe or None when the blob is raw).
    ``decoded_hash``: the store's hash of ``decoded``, when known (derive hashed the request)."""
    if not raw:
        return None, None
    form, recipe = raw, None
    if encoding and decoded is not None and decoded != raw:
        key = (session + "\0" + (encoding or ""), kind)
        hint = state.recipes.get(key)
        recipe = find_recipe(raw, decoded, encoding, hint or None, quick=hint == "")
        state.recipes[key] = recipe or ""
        if recipe is not None:
            form = decoded
    bases, foreign = _candidates(db, state, session, kind)
    blob = blob_put(db, form, bases, search=foreign, known=state.ids, digest=decoded_hash if form is decoded else None)
    state.bases.add((session, kind), blob)
    return blob.id, recipe


def is_failure(outcome: str | None, status: int | None, complete: int | None = None) -> bool:
    """A call a client may retry: failed, cut off or unanswered; never one answered in full."""
    return outcome != Outcome.OK or status is None or status >= 500 or status == 429 or complete == 0


def link_retry(db: Db, row: dict[str, Any], started_at: float, failures: RecentFailures | None = None) -> None:
    """attempt/retry_of: the same body in the same session, failed within RETRY_WINDOW_S before."""
    row["attempt"], row["retry_of"] = 1, None
    if not row["request_sha256"] or (failures is not None and not failures.may_have(row["request_sha256"], started_at)):
        return
    prev = db.execute(
        """SELECT id, attempt, outcome, status, response_complete FROM calls
           WHERE +session = ? AND request_sha256 = ? AND method = ? AND path = ? AND started_at >= ?
             AND started_at <= ?
           ORDER BY started_at DESC LIMIT 1""",
        [
            row["session"],
            row["request_sha256"],
            row["method"],
            row["path"],
            iso(started_at - RETRY_WINDOW_S),
            row["started_at"],
        ],
    ).fetchone()
    if prev is not None and is_failure(prev[2], prev[3], prev[4]):
        row["attempt"], row["retry_of"] = (prev[1] or 1) + 1, prev[0]


@dataclass
class IngestResult:
    row: dict[str, Any]
    analysis_errors: list[tuple[str, BaseException]]


def ingest(
    db: Db,
    ex: Exchange,
    state: IngestState,
    analyzers: Sequence[Analyzer] = (),
    *,
    isolated: bool = True,
) -> IngestResult:
    """Store one exchange (call inside an open transaction). Raises if the call row cannot be stored.

    ``isolated``: the call is in a savepoint of its own, and so is each analyzer that writes more than
    one statement, whose failure is then undone and reported. Not isolated (the writer's first attempt
    at a batch), such an analyzer runs without one and its failure is raised: the writer stores the
    batch again, isolated (docs/architecture.md, "A savepoint only after a failure")."""
    try:
        return _ingest(db, ex, state, analyzers, isolated)
    finally:
        # parsing, the blob layout and the analyses asked for the same common prefix; its memo
        # holds the call's two bodies, which may be large: not past the call
        body_reuse.forget_last()


def _ingest(db: Db, ex: Exchange, state: IngestState, analyzers: Sequence[Analyzer], isolated: bool) -> IngestResult:
    d = derive(ex, state.max_decoded_bytes, state.bodies)
    row = d.row
    session = row["session"]
    # derive hashed the request (resuming from a recent body's state): the blob's hash is its first 16 bytes.
    request_hash = bytes.fromhex(row["request_sha256"]) if row["request_sha256"] else None
    row["request_blob"], row["request_recode"] = store_body(
        db, state, session, "request", ex.request_body, row["request_encoding"], d.request_body, request_hash
    )
    row["response_blob"], row["response_recode"] = store_body(
        db, state, session, "response", ex.response_body, row["response_encoding"], d.response_body
    )
    # A stream's final response is not stored: reading it parses the stored stream again
    # (queries.get_final_response), so the same text is not kept twice (docs/architecture.md, "Body storage").
    row["final_response_blob"] = None
    row["capture_epoch"] = state.capture_epoch
    no_failed_twin = not state.failures.may_have(row["request_sha256"], ex.started_at)
    errors: list[tuple[str, BaseException]] = []
    call: dict[str, Any] = {}
    if analyzers:
        call = dict(row, seq=None, attempt=None, retry_of=None)
        call.update(
            _rowid=NOT_INSERTED,
            _exchange=ex,
            _request_body=d.request_body,
            _response_body=d.response_body,
            _request_json=d.request_json,
            _parsed=d.parsed,
            _no_failed_twin=no_failed_twin,  # no failed call with this body can be in its retry window
            _known=state.ids,
            _redo=ex.id in state.redo,  # stored again after its batch rolled back: analysed already
        )
    after, placed = [], False
    for analyzer in analyzers:
        columns = getattr(analyzer, "row_columns", None)
        if columns is None:
            after.append(analyzer)
            continue
        try:
            row.update(columns(db, call))
            placed = True
        except Exception as e:
            if not db.conn.in_transaction:
                raise  # it destroyed the whole transaction: let the writer redo the batch
            errors.append((_name(analyzer), e))
    if not placed:  # no analyzer placed it: its retry link in the session it was given
        link_retry(db, row, ex.started_at, state.failures)
    if row.get("seq") is None:  # the next in its session
        row["seq"] = state.ids.next_seq(db, row["session"])
    stored = dict(row)
    headers.store_pairs(db, stored, state.ids)  # the header lists as shared sets (docs/architecture.md, "Body storage")
    # NULL is the default of every column a call may leave empty, so a None is left out rather than
    # bound: sqlite3 binds a None through its adapter look-up, ~0.4 us each, and a call leaves ~20
    # columns empty (docs/architecture.md, "One INSERT per call").
    stored = {k: v for k, v in stored.items() if v is not None}
    cols = tuple(stored)
    sql = _INSERTS.get(cols)
    if sql is None:  # the same few column lists come back call after call: their statement text is kept
        if len(_INSERTS) >= 256:
            _INSERTS.clear()
        sql = _INSERTS[cols] = f"INSERT INTO calls ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
    rowid = db.execute(sql, list(stored.values())).lastrowid
    # Its number in the storing order (the OTLP export's position), in the call's savepoint. Not a
    # trigger on calls: a statement with a trigger journals every page it changes, ~30 us per call
    # with the row's indexes (docs/architecture.md, "One INSERT per call"). OR IGNORE: a file migrated
    # only part of the way (before m016) still has the trigger, which numbered it already.
    db.execute("INSERT OR IGNORE INTO stored_order (call_id) VALUES (?)", [row["id"]])
    if is_failure(row["outcome"], row["status"], row["response_complete"]):
        state.failures.add(row["request_sha256"], ex.started_at)
    if after:
        call.update(row, _rowid=rowid)
        for analyzer in after:
            mark = len(state.ids.terms)
            single = getattr(analyzer, "single_write", False)  # one statement: it cannot half-fail
            if not (single or isolated):
                analyzer(db, call)  # a failure fails the call: stored again, isolated
                continue
            try:
                if single:
                    analyzer(db, call)
                    continue
                with Savepoint(db):  # a failing analyzer's writes are undone, the call stays
                    analyzer(db, call)
            except Exception as e:
                if not db.conn.in_transaction:
                    raise  # it destroyed the whole transaction: let the writer redo the batch
                state.ids.clear()  # ids it noted of the rows undone with it
                state.ids.drop_terms(mark)  # and the search texts it held back for them
                errors.append((_name(analyzer), e))
    # its session's totals, in the same transaction, from the row as the analyzers left it (store/totals.py)
    totals.add_call(db, rowid)
    return IngestResult(row, errors)


def _name(analyzer: object) -> str:
    return getattr(analyzer, "__qualname__", repr(analyzer))
