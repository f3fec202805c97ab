"""`ctxscope findings`: what wastes a session's context (docs/architecture.md, "Findings")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..options import CONTEXT, db_option, json_option, open_db_or_fail, resolve_session_id
from ..output import emit_json, emit_table

if TYPE_CHECKING:
    import sqlite_utils

    from ctxscope.inspector.advisor.alternatives import Advice
    from ctxscope.inspector.advisor.model import Session
    from ctxscope.inspector.analyses.prices import PriceTable
    from ctxscope.inspector.reading.stored_findings import SessionFindings


def read_advice(db_path: Path | None, session: str | None) -> tuple[Session, Advice | None]:
    """The session and its advice from the stored shapes and findings (no body read, once stored),
    or a clear error."""
    from ctxscope.inspector.reading.stored_advice import stored_advice
    from ctxscope.inspector.store.queries import AmbiguousCallId

    db, session, prices = _open(db_path, session)
    try:
        found = stored_advice(db, session, prices)
    except AmbiguousCallId as exc:
        raise click.ClickException(str(exc)) from exc
    if found is None:
        raise click.ClickException(f"no session matches {session!r}")
    return found


def _open(db_path: Path | None, session: str | None) -> tuple[sqlite_utils.Database, str, PriceTable]:
    """The store, the session's id (the latest when None) and the prices, or a clear error."""
    from ctxscope.inspector.store.queries import list_sessions

    from ..settings import prices_path

    db = open_db_or_fail(db_path)
    if session is None:
        latest = list_sessions(db, limit=1)
        if not latest:
            raise click.ClickException("no sessions captured yet")
        session = latest[0]["session"]
    session = resolve_session_id(db, session)  # the one id rule: exit 2 with the candidates
    try:
        from ctxscope.inspector.analyses.prices import load_prices

        prices = load_prices(prices_path())
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"bad price file: {exc}") from exc
    return db, session, prices


def read_findings(db_path: Path | None, session: str | None) -> SessionFindings:
    """The session's findings from its calls' stored facts (no body read), or a clear error."""
    from ctxscope.inspector.reading.stored_findings import stored_findings
    from ctxscope.inspector.store.queries import AmbiguousCallId

    db, session, prices = _open(db_path, session)
    try:
        found = stored_findings(db, session, prices)
    except AmbiguousCallId as exc:
        raise click.ClickException(str(exc)) from exc
    if found is None:
        raise click.ClickException(f"no session matches {session!r}")
    return found


def call_session(db_path: Path | None, name: str | None) -> tuple[str | None, str | None]:
    """(session, None) for a session name; (its session, the call id) when ``name`` names a call instead."""
    from ctxscope.inspector.store.analysis_queries import resolve_session
    from ctxscope.inspector.store.queries import AmbiguousCallId, get_call

    if name is None:
        return None, None
    db = open_db_or_fail(db_path)
    try:
        if resolve_session(db, name) is not None:
            return name, None
        call = get_call(db, name)
    except AmbiguousCallId as exc:
        raise click.ClickException(str(exc)) from exc
    return (call["session"], call["id"]) if call is not None else (name, None)


@click.command(context_settings=CONTEXT)
@click.argument("session", required=False)
@db_option
@json_option
def findings(session: str | None, db_path: Path | None, as_json: bool) -> None:
    """What wastes SESSION's context (default: the latest session): tokens and dollars at stake, and where.

    SESSION may also be a call id (or a unique prefix): then only the findings that concern that call."""
    from ctxscope.inspector.advisor.findings import by_call

    session, call = call_session(db_path, session)
    s = read_findings(db_path, session)
    found = [f for f in s.findings if call is None or call in f.calls]
    if as_json:
        emit_json(
            {
                "session": s.session,
                "call": call,
                "calls": s.calls,
                "skipped": s.skipped,
                "findings": [f.as_dict() for f in found],
                "by_call": by_call(found),
            }
        )
        return
    about = f" concerning call {call}" if call else ""
    click.echo(f"session {s.session}: {s.calls} call(s) read, {len(found)} finding(s){about}")
    rows = [
        {
            "kind": f.kind,
            "tokens": f.tokens,
            "usd": None if f.usd is None else f"{f.usd:.4f}",
            "call": f.evidence.get("call"),
            "pointer": f.evidence.get("pointer") or f.evidence.get("pointers"),
            "summary": f.summary,
        }
        for f in found
    ]
    emit_table(
        rows,
        [
            ("kind", "KIND"),
            ("tokens", "TOKENS"),
            ("usd", "USD"),
            ("call", "CALL"),
            ("pointer", "POINTER"),
            ("summary", "WHAT"),
        ],
    )
