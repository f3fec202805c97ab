"""How context management tells the world what it did, and lets extensions weigh in.

Every stage leaves two traces: an effect declared on the next model request (``x-ctxscope-event:
checkpoint; rung=hall; validation=exact; ...``, written by ``ctxscope.vocab.effects``) that the
proxy records and the inspector shows as a declared marker, and a ``context_event`` record in the
session's history.jsonl (kept forever, ignored by loading). Marker kinds: ``tool_output_externalized``,
``tool_results_archived``, ``checkpoint``, and ``compaction`` on the first request after any history replacement (the
inspector's has_compaction_before side, so never used for anything else); ``checkpoint_request``
on the checkpoint call itself; ``compaction_failed``, ``compaction_deferred`` and
``compaction_stopped`` when nothing was replaced; ``compaction_forced`` when a compaction runs
although the thrash guard held it back, or after the provider's overflow.

PreCompact / PostCompact hooks: the SPI events ``before_compact`` / ``after_compact`` (any extension
subscribes with ``api.on``), plus hooks handed to the builtin directly (``CompactionHooks``), which
run first. A PreCompact hook sees why automatic compaction wants to run and may return ``Defer``
(not now; asked again before the next request) or ``StopAuto`` (no automatic compaction for this
session any more). PostCompact hooks observe the outcome. A hook that raises is logged and treated
as "proceed": a broken plugin must not leave the context to overflow.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ...core.events import Defer, PostCompact, PreCompact, StopAuto
from ...core.history import HistoryFile
from ...core.state import SessionView

log = logging.getLogger("ctxscope.agent.compaction")


def record(view: SessionView, event: str, **data: Any) -> dict[str, Any]:
    """Append a ``context_event`` record to the session history (best effort: never fails the turn)."""
    rec = {"type": "context_event", "event": event, **{k: v for k, v in data.items() if v is not None}}
    try:
        HistoryFile(view.dir / "history.jsonl").append(rec)
    except OSError:
        log.warning("could not record context event %s", event, exc_info=True)
    return rec


def context_events(view_dir: Path) -> list[dict[str, Any]]:
    return [r for r in HistoryFile(view_dir / "history.jsonl").records() if r.get("type") == "context_event"]


# --- hooks -----------------------------------------------------------------------------------------


PreCompactHook = Callable[[PreCompact], Defer | StopAuto | Awaitable[Defer | StopAuto | None] | None]
PostCompactHook = Callable[[PostCompact], object]
_E = TypeVar("_E")


async def _call(fn: Callable[[_E], object], event: _E) -> object:
    out = fn(event)
    return await out if inspect.isawaitable(out) else out


@dataclass
class CompactionHooks:
    pre: list[PreCompactHook] = field(default_factory=list)
    post: list[PostCompactHook] = field(default_factory=list)

    def on_pre_compact(self, fn: PreCompactHook) -> PreCompactHook:
        self.pre.append(fn)
        return fn

    def on_post_compact(self, fn: PostCompactHook) -> PostCompactHook:
        self.post.append(fn)
        return fn

    async def run_pre(self, event: PreCompact) -> Defer | StopAuto | None:
        """The first Defer or StopAuto wins; exceptions are logged and count as proceed."""
        for fn in self.pre:
            try:
                verdict = await _call(fn, event)
            except Exception:
                log.warning("PreCompact hook %r failed; compaction proceeds", fn, exc_info=True)
                continue
            if isinstance(verdict, (Defer, StopAuto)):
                return verdict
        return None

    async def run_post(self, event: PostCompact) -> None:
        for fn in self.post:
            try:
                await _call(fn, event)
            except Exception:
                log.warning("PostCompact hook %r failed", fn, exc_info=True)


def now() -> float:
    return time.time()
