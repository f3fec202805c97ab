"""The words and columns of the CLI's call and session tables, shared by the commands that print
them (`calls`, `sessions`, `session`, `diff`): one place, so no command module imports another's."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from ctxscope.vocab.kinds import CacheVerdict, RelationKind
from ctxscope.vocab.words import word

from .output import Column, fmt_int, fmt_rate, fmt_usd


def clock_time(value: Any) -> str:
    text = str(value or "-")
    return text[11:19] if len(text) >= 19 and text[10:11] == "T" else text


def _when(value: Any) -> str:
    """ "12-01 09:39": month, day and minute, enough to tell sessions apart."""
    text = str(value or "-")
    return f"{text[5:10]} {text[11:16]}" if len(text) >= 16 and text[10:11] == "T" else text


def relation_word(value: Any) -> str:
    return word(RelationKind, value) or "-"


def agreement_word(value: Any) -> str:
    """The provider's diagnosis held against the verdict, compact: agree, DISAGREE, pending, -."""
    if value == "disagree":
        return "DISAGREE"
    return str(value) if value in ("agree", "pending") else "-"


def verdict_word(value: Any) -> str:
    return word(CacheVerdict, value) or "-"


CALL_COLUMNS = [
    Column("id", "ID"),
    Column("session", "SESSION"),
    Column("seq", "SEQ", right=True),
    Column("started_at", "TIME", clock_time),
    Column("started_at", "STARTED", shrink=True),
    Column("api", "API", shrink=True),
    Column("model", "MODEL"),  # model and pointer are key cells, never cut (output.py, ``emit_table``)
    Column("status", "STATUS", right=True),
    Column("outcome", "OUTCOME", shrink=True),
    Column("usage.input", "PROMPT", fmt_int, right=True),
    Column("usage.cache_read", "CACHE_R", fmt_int, right=True),
    Column("usage.cache_write", "CACHE_W", fmt_int, right=True),
    Column("usage.output", "OUT", fmt_int, right=True),
    Column("tokens_estimated", "EST_TOKENS", fmt_int, right=True),
    Column("duration_ms", "MS", right=True),
    Column("relation", "RELATION", relation_word),
    Column("pointer", "POINTER"),
    Column("cache_verdict", "VERDICT", verdict_word),
    Column("cache.provider_agreement", "PROVIDER", agreement_word),
]
# OUT (output tokens) with --columns or --wide: the default keeps to 100 columns
CALL_DEFAULT = ("ID", "SEQ", "MODEL", "STATUS", "RELATION", "VERDICT", "PROVIDER", "PROMPT", "CACHE_R")
# Which figure each token column is (docs/architecture.md, "Cache verdicts"): CACHE_R, CACHE_W and OUT
# exactly as the provider reported them; PROMPT the whole prompt from the provider's report (its
# input field, plus the cache reads and writes Anthropic reports apart); EST_TOKENS ctxscope's estimate.
TOKENS_LEGEND = (
    "tokens: CACHE_R, CACHE_W, OUT exactly as the provider reported; EST_TOKENS as ctxscope estimated;\n"
    "PROMPT the whole prompt from the provider's report (Anthropic: input + cache reads + writes)"
)
TOKEN_HEADERS = {"PROMPT", "CACHE_R", "CACHE_W", "OUT", "EST_TOKENS"}
SESSION_COLUMNS = [
    Column("session", "SESSION"),
    Column("title", "TITLE", shrink=True),
    Column("purpose", "PURPOSE"),
    Column("calls", "CALLS", right=True),
    Column("thread_count", "THREADS", right=True),
    Column("models", "MODELS"),
    Column("first_started_at", "FIRST", _when),
    Column("last_started_at", "LAST", _when),
    Column("hit_rate.rate", "HIT_RATE", fmt_rate, right=True),
    Column("breaks", "BREAKS", right=True),
    Column("lost_tokens", "LOST_TOKENS", fmt_int, right=True),
    Column("lost_usd", "LOST_USD", fmt_usd, right=True),
    Column("cost_usd", "COST_USD", fmt_usd, right=True),
]
SESSION_DEFAULT = ("SESSION", "TITLE", "CALLS", "MODELS", "LAST", "HIT_RATE", "BREAKS", "LOST_USD")


def usd_legend(rows: list[dict]) -> str:
    """How the dollar columns are priced: the one loss definition, and why any row is unpriced."""
    from ctxscope.vocab.figures import LOSS_PRICING

    reasons = sorted({r["cost_unpriced"] for r in rows if r.get("cost_unpriced")})
    lines = [f"LOST_USD: {LOSS_PRICING}", *(f"unpriced: {why}" for why in reasons)]
    return "\n".join(textwrap.fill(line, 100, subsequent_indent="  ") for line in lines)


columns_option = click.option("--columns", metavar="A,B,...", help="Print these columns (headers, any case).")
wide_option = click.option("--wide", is_flag=True, help="Print every column, uncut, however wide.")


def thread_names(threads: list[dict]) -> dict[str, str]:
    """ "main T1", "side T2" ...: the store's thread order, as every view names them."""
    flat = [t for top in threads for t in (top, *top.get("children", ()))]
    return {t["thread"]: f"{'main' if t.get('main') else 'side'} T{t.get('index', i) + 1}" for i, t in enumerate(flat)}


def compaction_breaks(d: dict) -> str:
    """The breaks compactions made, counted as the sessions list counts compactions: the first
    call after each, and apart from them the checkpoint requests themselves."""
    after, requests = d.get("breaks_after_compaction", 0), d.get("checkpoint_request_breaks", 0)
    text = f"{after} after a compaction"
    return text + (f", {requests} a checkpoint request" if requests else "")
