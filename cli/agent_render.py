"""Terminal display of a turn: streamed answer text on stdout, tool activity and notices on stderr."""

from __future__ import annotations

import json
from typing import Any

import click

from ctxscope.agent.core import activity as act
from ctxscope.agent.core.model import RetryNotice, TextDelta, ThinkingDelta
from ctxscope.agent.provenance.marker import split_host_marker


def _short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def call_summary(name: str, arguments: dict[str, Any], width: int = 100) -> str:
    args = ", ".join(f"{k}={_short(v, 60)}" for k, v in arguments.items())
    return _short(f"{name}({args})", width)


class TerminalRenderer:
    def __init__(self, *, show_thinking: bool = False) -> None:
        self.show_thinking = show_thinking
        self._midline = False

    def _newline(self) -> None:
        if self._midline:
            click.echo("")
            self._midline = False

    def __call__(self, event: act.Activity) -> None:
        if isinstance(event, act.ModelDelta):
            d = event.delta
            if isinstance(d, TextDelta) and d.text:
                click.echo(d.text, nl=False)
                self._midline = not d.text.endswith("\n")
            elif isinstance(d, ThinkingDelta) and self.show_thinking:
                click.secho(d.text, nl=False, dim=True, err=True)
            elif isinstance(d, RetryNotice):
                self._newline()
                click.secho(f"[retrying in {d.delay:.1f}s: {_short(d.error, 120)}]", err=True, fg="yellow")
        elif isinstance(event, act.ToolStarted):
            self._newline()
            click.secho(f"→ {call_summary(event.call.name, event.call.arguments)}", err=True, fg="cyan")
        elif isinstance(event, act.ToolFinished):
            r = event.result
            own, _ = split_host_marker(r)  # the host's source marker is for the model, not this line
            last = own.strip().splitlines()[-1] if own.strip() else "(no output)"
            mark, color = ("✗", "red") if r.is_error else ("✓", "green")
            lines = own.count("\n") + 1 if own else 0
            click.secho(f"  {mark} {r.name}: {_short(last, 100)}  ({lines} lines)", err=True, fg=color)
        elif isinstance(event, act.TurnFinished):
            self._newline()
            res = event.result
            if res.outcome != act.COMPLETED:
                click.secho(f"[turn {res.outcome}: {res.reason or ''}]", err=True, fg="red")
