"""`ctxscope advise`: what to change so a session reads its cache: one advice per cause, ranked by
dollars, then the breakpoint placements compared (docs/architecture.md, "The cache advisor")."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from ..daemon_address import daemon_option, find_daemon
from ..options import CONTEXT, db_option, json_option
from ..output import emit_json, emit_table, safe_text
from .findings_commands import read_advice

COLUMNS = [
    ("name", "ALTERNATIVE"),
    ("input", "INPUT"),
    ("cache_read", "CACHE_READ"),
    ("cache_write", "CACHE_WRITE"),
    ("cost_usd", "COST_USD"),
    ("saving_pct", "SAVING_%"),
    ("description", "PLACEMENT"),
]


@click.command(context_settings=CONTEXT)
@click.argument("session")
@db_option
@click.option(
    "--verify",
    is_flag=True,
    help="Replay the session as sent and as the top advice changes it through the built-in simulator "
    "(a running `ctxscope serve`), and show the simulated saving next to the predicted one.",
)
@daemon_option
@json_option
def advise(session: str, db_path: Path | None, verify: bool, daemon: str | None, as_json: bool) -> None:
    """Replay SESSION's prompts through the provider's cache rules without each cause of cache misses."""
    s, advice = read_advice(db_path, session)  # --verify reads each body as it sends it, one at a time
    if advice is None:
        raise click.ClickException(f"session {s.id} has no Anthropic or OpenAI prompt to replay")
    result = advice.as_dict()
    if verify:
        from .advise_verify import verify_advice

        result["verify"] = verify_advice(find_daemon(daemon), s, advice, progress=_progress())
    if as_json:
        emit_json(result)
        return
    click.echo(f"session {s.id}: {result['calls']} {advice.family} call(s) replayed ({result['units']})")
    if not advice.causes:
        click.echo("no change saves anything: the session reads what it can from the cache")
    for n, a in enumerate(result["advices"], 1):
        click.echo(f"{n}. {safe_text(a['change'])}")
        click.echo(f"   saves ~{a['saving_tokens']:,} tokens, ${a['saving_usd']:.4f} ({a['saving_pct']:.1f}%)")
        if a["before"] is not None or a["after"] is not None:
            click.echo(f"   before: {safe_text(a['before'])}")
            click.echo(f"   after:  {safe_text(a['after'])}")
    click.echo("breakpoint placements:")
    rows = [dict(a, cost_usd=f"{a['cost_usd']:.4f}") for a in result["alternatives"]]
    emit_table(rows, COLUMNS)
    for a in result["alternatives"]:
        click.echo(f"  {a['name']}: {a['explanation']}")
    click.echo(f"best placement: {advice.best.name}")
    click.echo(f"advice: {safe_text(advice.advice)}")
    if verify:
        v = result["verify"]
        click.echo(
            f"verified in the simulator ({v['top'] or 'as sent'}): predicted saving {v['predicted_saving_pct']:.1f}%, "
            f"simulated {v['simulated_saving_pct']:.1f}%, error {v['error_pts']:.1f} pts"
        )


def _progress() -> Callable[[int, int], None] | None:
    """On a terminal, "replaying call 120/1000" on stderr as the simulator is sent each call."""
    if not sys.stderr.isatty():
        return None

    def report(done: int, total: int) -> None:
        click.echo(f"\rreplaying call {done}/{total}", err=True, nl=done == total)

    return report
