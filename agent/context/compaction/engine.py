"""One compaction: archive old tool results if that alone fits, else walk the checkpoint ladder.

Ladder, fullest first: ``h0`` the history as it is; ``htrim`` after archiving/trimming; ``hall``
every tool result a placeholder; ``hvideo`` also without images and video; ``hmid`` whole
segments removed from the middle outwards (first segment and every segment with a user message
kept); ``hmin`` only the last genuine user input. Each rung is checked with the local estimate
against the checkpoint request's own input limit before any model call; a provider "input too
long" moves to the next rung. (After a provider overflow of the agent's own request, ``h0`` is
that same prompt, so the ladder starts at the next rung.)

The engine never touches the live history: it returns the replacement and the caller commits it.
Failure codes: ``POST_ADMISSION_FAILED`` (the caller aborts the turn), ``COMPACTION_INPUT_TOO_LARGE``,
``CHECKPOINT_REQUEST_FAILED``, ``CHECKPOINT_INVALID`` (recorded; the turn goes on uncompacted).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxscope.vocab.effects import format_effect
from ctxscope.vocab.kinds import CompactionTrigger, MarkerKind

from ...core.budget import BudgetLines, ContextSettings, budget_lines, byte_limit, checkpoint_output_limit
from ...core.estimate import estimate_request, rough_bytes
from ...core.events import CompactionStage, CompactionStatus, annotation_headers
from ...core.messages import Message
from ...core.model import ContextOverflowError, ModelClient, ModelRequest, ProviderError, ToolSpec
from ...core.state import SessionView
from .archive import ArchivePlan, apply_archive, plan_archive
from .checkpoint import build_request, validate
from .history import has_media, last_input_only, placeholder_all, reduce_middle, strip_media
from .replace import POST_ADMISSION_FAILED, admit, build_appendix

# the triggers that mean "the request is over a line": an archive must also clear the trigger line
LINE_TRIGGERS = frozenset(
    {CompactionTrigger.THRESHOLD, CompactionTrigger.BYTES, CompactionTrigger.OVERFLOW, CompactionTrigger.LIMIT}
)
AttemptOutcome = Literal["skipped_local", "skipped_refused", "provider_overflow", "invalid", "error", "accepted"]
COMPACTION_INPUT_TOO_LARGE = "COMPACTION_INPUT_TOO_LARGE"
CHECKPOINT_REQUEST_FAILED = "CHECKPOINT_REQUEST_FAILED"
CHECKPOINT_INVALID = "CHECKPOINT_INVALID"


@dataclass(frozen=True)
class CompactionInput:
    session: SessionView
    turn: int
    step: int
    trigger: CompactionTrigger
    history: tuple[Message, ...]
    system: str
    tools: tuple[ToolSpec, ...]
    tokens_before: int
    instructions: str | None = None
    allow_archive: bool = True
    plan: ArchivePlan | None = None


@dataclass(frozen=True)
class Attempt:
    rung: str
    mode: str
    outcome: AttemptOutcome
    tokens: int  # local estimate of the checkpoint request
    input_tokens: int = 0  # provider usage, when sent
    cache_read_tokens: int = 0
    seconds: float = 0.0
    detail: str | None = None


@dataclass(frozen=True)
class CompactionOutcome:
    trigger: CompactionTrigger
    stage: CompactionStage
    status: CompactionStatus
    tokens_before: int
    messages: tuple[Message, ...] | None = None
    tokens_after: int | None = None
    error: str | None = None
    detail: str | None = None
    mode: str | None = None  # tool_archive / tool_trim, or the checkpoint mode
    rung: str | None = None
    validation: str | None = None
    missing_sections: tuple[str, ...] = ()
    archived: int = 0
    saved_bytes: int = 0
    attempts: tuple[Attempt, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    items: tuple[Mapping[str, Any], ...] = ()  # archive: what was archived

    @property
    def replaced(self) -> bool:
        return self.status == "replaced"


class CompactionEngine:
    def __init__(
        self, client: ModelClient, settings: ContextSettings, *, checkpoint_system: str, window: int, model_output: int
    ) -> None:
        self.client = client
        self.settings = settings
        self.checkpoint_system = checkpoint_system
        self.lines: BudgetLines = budget_lines(window, model_output)
        self.checkpoint_output = checkpoint_output_limit(model_output)
        self.checkpoint_lines: BudgetLines = budget_lines(window, self.checkpoint_output)
        self.byte_limit = byte_limit(client.provider, client.api, settings.byte_limits)

    # --- measuring ----------------------------------------------------------------------------------
    def body_bytes(self, system: str, tools: Sequence[ToolSpec], messages: Sequence[Message]) -> int:
        """The serialized body size; computed exactly only when a cheap bound says it could matter."""
        if rough_bytes(system, tools, messages) <= self.byte_limit:
            return 0
        return len(self.client.prepare(ModelRequest(system, tuple(tools), tuple(messages), 1, {})).body)

    def fits_next(
        self, inp: CompactionInput, messages: Sequence[Message], limit: int | None = None
    ) -> tuple[bool, int]:
        tokens = estimate_request(inp.system, inp.tools, messages).total
        ok = tokens <= (limit or self.lines.provider_input_limit)
        return ok and self.body_bytes(inp.system, inp.tools, messages) <= self.byte_limit, tokens

    # --- the stages ---------------------------------------------------------------------------------
    async def run(self, inp: CompactionInput) -> CompactionOutcome:
        timings: dict[str, float] = {}
        trimmed: tuple[Message, ...] | None = None
        has_read = any(t.name == "read" for t in inp.tools)
        if inp.allow_archive:
            t0 = time.perf_counter()
            plan = inp.plan or plan_archive(inp.history, self.settings)
            if plan.holds:
                res = apply_archive(inp.history, plan, inp.session, has_read=has_read, turn=inp.turn, step=inp.step)
                # over a line, the archive must also clear the trigger line, or we would compact again next request
                limit = self.lines.automatic_trigger_at if inp.trigger in LINE_TRIGGERS else None
                ok, after = self.fits_next(inp, res.messages, limit)
                timings["archive"] = time.perf_counter() - t0
                if ok and res.saved_bytes >= self.settings.min_savings_kib * 1024:
                    return CompactionOutcome(
                        inp.trigger,
                        "archive",
                        "replaced",
                        inp.tokens_before,
                        res.messages,
                        after,
                        mode=res.mode,
                        archived=res.archived,
                        saved_bytes=res.saved_bytes,
                        timings=timings,
                        items=res.items,
                    )
                trimmed = res.messages
        return await self._checkpoint(inp, trimmed, timings)

    def _rungs(
        self, inp: CompactionInput, trimmed: tuple[Message, ...] | None, fits: Callable[[Sequence[Message]], bool]
    ) -> Any:
        """(name, messages or None) lazily, fullest first; identical neighbours are skipped."""
        base = list(trimmed or inp.history)
        yield "h0", list(inp.history)
        if trimmed is not None:
            yield "htrim", list(trimmed)
        hall = placeholder_all(base)
        yield "hall", hall
        last = hall
        if has_media(hall):
            last = strip_media(hall)
            yield "hvideo", last
        yield "hmid", reduce_middle(last, fits)
        yield "hmin", last_input_only(inp.history)

    async def _checkpoint(
        self, inp: CompactionInput, trimmed: tuple[Message, ...] | None, timings: dict[str, float]
    ) -> CompactionOutcome:
        mode = self.settings.checkpoint_mode
        attempts: list[Attempt] = []
        appendix = build_appendix(inp.history, inp.session.state.snapshot(), turn=inp.turn, step=inp.step)

        def request(messages: Sequence[Message], m: str, rung: str) -> ModelRequest:
            headers = annotation_headers(
                inp.session.id,
                inp.turn,
                inp.step,
                [format_effect(MarkerKind.CHECKPOINT_REQUEST, rung=rung, mode=m, trigger=inp.trigger)],
            )
            return build_request(
                mode=m,
                candidate=messages,
                live_system=inp.system,
                live_tools=inp.tools,
                checkpoint_system=self.checkpoint_system,
                instructions=inp.instructions,
                output_limit=self.checkpoint_output,
                headers=headers,
            )

        def local(req: ModelRequest) -> tuple[bool, int]:
            tokens = estimate_request(req.system, req.tools, req.messages).total
            ok = tokens <= self.checkpoint_lines.provider_input_limit
            return ok and self.body_bytes(req.system, req.tools, req.messages) <= self.byte_limit, tokens

        previous: list[Message] | None = None
        sent = False
        t_start = time.perf_counter()
        for rung, messages in self._rungs(inp, trimmed, lambda ms: local(request(ms, mode, "hmid"))[0]):
            if not messages or messages == previous:
                continue
            previous = messages
            if rung == "h0" and inp.trigger == CompactionTrigger.OVERFLOW:
                attempts.append(Attempt(rung, mode, "skipped_refused", 0, detail="the provider just refused it"))
                continue
            m = mode
            for _ in range(2):  # a reuse-mode answer that calls a tool is retried once in separate mode
                req = request(messages, m, rung)
                ok, tokens = local(req)
                if not ok:
                    attempts.append(Attempt(rung, m, "skipped_local", tokens))
                    break
                t0 = time.perf_counter()
                sent = True
                try:
                    response = await self.client.send(self.client.prepare(req))
                except ContextOverflowError as e:
                    attempts.append(
                        Attempt(
                            rung, m, "provider_overflow", tokens, seconds=time.perf_counter() - t0, detail=str(e)[:200]
                        )
                    )
                    break
                except ProviderError as e:
                    attempts.append(
                        Attempt(rung, m, "error", tokens, seconds=time.perf_counter() - t0, detail=str(e)[:200])
                    )
                    return self._failed(inp, CHECKPOINT_REQUEST_FAILED, str(e), attempts, timings, t_start)
                u = response.usage
                v = validate(response, self.checkpoint_output)
                attempt = Attempt(
                    rung,
                    m,
                    "accepted" if v.ok else "invalid",
                    tokens,
                    u.input_tokens if u else 0,
                    u.cache_read_tokens if u else 0,
                    time.perf_counter() - t0,
                    v.reason,
                )
                attempts.append(attempt)
                if not v.ok:
                    if m == "reuse" and v.reason == "tool_calls":
                        m = "separate"
                        continue
                    return self._failed(inp, CHECKPOINT_INVALID, v.reason, attempts, timings, t_start)
                adm = admit(
                    response.message.text,
                    appendix,
                    lambda ms: self.fits_next(inp, ms),
                    compacted_at=time.time(),
                    rung=rung,
                    validation=v.verdict,
                    trigger=inp.trigger,
                    compacted_turn=inp.turn,
                )
                timings["checkpoint"] = time.perf_counter() - t_start
                if not adm.ok:
                    return CompactionOutcome(
                        inp.trigger,
                        "checkpoint",
                        "failed",
                        inp.tokens_before,
                        None,
                        adm.tokens,
                        POST_ADMISSION_FAILED,
                        f"the summary needs {adm.tokens} tokens, the input limit is {self.lines.provider_input_limit}",
                        m,
                        rung,
                        v.verdict,
                        v.missing,
                        attempts=tuple(attempts),
                        timings=timings,
                    )
                return CompactionOutcome(
                    inp.trigger,
                    "checkpoint",
                    "replaced",
                    inp.tokens_before,
                    adm.messages,
                    adm.tokens,
                    None,
                    ",".join(adm.dropped) or None,
                    m,
                    rung,
                    v.verdict,
                    v.missing,
                    attempts=tuple(attempts),
                    timings=timings,
                )
        detail = "every rung was refused by the provider" if sent else "no rung fits the checkpoint input limit"
        return self._failed(inp, COMPACTION_INPUT_TOO_LARGE, detail, attempts, timings, t_start)

    def _failed(
        self,
        inp: CompactionInput,
        code: str,
        detail: str | None,
        attempts: list[Attempt],
        timings: dict[str, float],
        t_start: float,
    ) -> CompactionOutcome:
        timings["checkpoint"] = time.perf_counter() - t_start
        return CompactionOutcome(
            inp.trigger,
            "checkpoint",
            "failed",
            inp.tokens_before,
            error=code,
            detail=detail,
            mode=self.settings.checkpoint_mode,
            attempts=tuple(attempts),
            timings=timings,
        )
