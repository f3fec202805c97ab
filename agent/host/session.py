"""A live session: its history, state, input queue and the worker that runs queued inputs as turns.

Inputs submitted while a turn runs wait in the queue (follow-ups, listed/edited/cancelled/
reordered through the conversation API) and run as the next turns, in order. ``steer`` reaches the
running turn before its next model request. ``abort`` cancels the running turn; the queue stays.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..core import activity as act
from ..core.assembly import validate_reminder
from ..core.dispatch import ErrorLog, observe
from ..core.events import COMPACT_SOURCE, Event, HistoryChanged, MaintenanceCommand, MaintenanceContext
from ..core.history import History
from ..core.loop import SteeringQueue, TurnRunner
from ..core.messages import Message, repair_history
from ..core.spi import AssemblyError, TurnContext
from ..core.state import SessionState, SessionView
from .session_store import SessionMeta

if TYPE_CHECKING:
    from .runtime import AgentRuntime

log = logging.getLogger("ctxscope.agent.host.session")
_ids = itertools.count(1)


@dataclass
class QueuedInput:
    id: str
    text: str
    source: str
    result: asyncio.Future = field(repr=False)  # resolves to TurnResult; cancelled when dequeued


class SessionBusy(RuntimeError):
    pass


class AgentSession:
    def __init__(self, runtime: AgentRuntime, meta: SessionMeta) -> None:
        self.runtime = runtime
        self.id = meta.id
        self.file = runtime.store.history(meta.id)
        loaded = self.file.load()
        messages = repair_history(loaded.messages, "interrupted")
        self.history = History(loaded.messages, loaded.epoch, self.file)
        if messages != loaded.messages:  # a crash left tool calls without results
            self.file.append_replace(loaded.epoch + 1, messages, "repair")
            self.history = History(messages, loaded.epoch + 1, self.file)
        self.turns = loaded.turns
        self.turn = max((t.turn for t in loaded.turns), default=0)
        self.state = SessionState(loaded.state, persist=self.file.append_state)
        self.disabled: set[str] = set(meta.disabled_extensions)
        self.steering = SteeringQueue()
        self.errors = ErrorLog()
        self._queue: list[QueuedInput] = []
        self._worker: asyncio.Task | None = None
        self._current: asyncio.Task | None = None

    # --- views ------------------------------------------------------------------------------------
    @property
    def meta(self) -> SessionMeta:
        return self.runtime.store.get(self.id)

    @property
    def view(self) -> SessionView:
        d = self.runtime.store.dir(self.id)
        return SessionView(self.id, d, d / "artifacts", self.runtime.workspace, self.state, self.runtime.model_info())

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.history.messages

    @property
    def busy(self) -> bool:
        return self._current is not None

    # --- ingress ----------------------------------------------------------------------------------
    def submit(self, text: str, source: str = "api") -> QueuedInput:
        """Queue an input; it runs as a turn as soon as the session is idle."""
        item = QueuedInput(f"in_{next(_ids)}", text, source, asyncio.get_running_loop().create_future())
        self._queue.append(item)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"ctxscope-session-{self.id}")
        return item

    async def run(self, text: str, source: str = "api") -> act.TurnResult:
        return await self.submit(text, source).result

    def steer(self, text: str, source: str = "api") -> None:
        """Deliver to the running turn before its next model request; when idle, submit as a new input.

        A steer that arrives too late for its turn (the turn ended first) runs as the next input.
        """
        if self.busy:
            self.steering.put(text, {"source": source})
        else:
            self.submit(text, source)

    def queued(self) -> list[QueuedInput]:
        return list(self._queue)

    def _find(self, input_id: str) -> QueuedInput:
        for item in self._queue:
            if item.id == input_id:
                return item
        raise KeyError(f"no queued input {input_id!r}")

    def edit_queued(self, input_id: str, text: str) -> None:
        self._find(input_id).text = text

    def cancel_queued(self, input_id: str) -> None:
        item = self._find(input_id)
        self._queue.remove(item)
        item.result.cancel()

    def reorder_queued(self, input_ids: list[str]) -> None:
        if sorted(input_ids) != sorted(i.id for i in self._queue):
            raise ValueError("reorder needs exactly the ids of the queued inputs")
        by_id = {i.id: i for i in self._queue}
        self._queue = [by_id[i] for i in input_ids]

    def abort(self) -> bool:
        """Cancel the running turn (it cleans up its history); False when idle."""
        if self._current is None or self._current.done():
            return False
        self._current.cancel()
        return True

    async def wait_idle(self) -> None:
        while self._worker is not None and not self._worker.done():
            await asyncio.wait([self._worker])

    # --- extensions per session -------------------------------------------------------------------
    def set_enabled(self, extension_id: str, enabled: bool) -> None:
        if extension_id not in self.runtime.registry.extension_ids:
            raise KeyError(f"no extension {extension_id!r}")
        (self.disabled.discard if enabled else self.disabled.add)(extension_id)
        self.runtime.store.touch(self.id, disabled_extensions=sorted(self.disabled))

    # --- maintenance -------------------------------------------------------------------------------
    async def run_command(self, command: MaintenanceCommand, argument: str | None) -> object:
        """Run a maintenance command (``/compact``) on the idle session, with a turn's prompt and tools assembled."""
        rt, view, turn = self.runtime, self.view, self.turn
        assembly = rt.registry.assemble(
            TurnContext(view, turn, COMPACT_SOURCE, "/compact"),
            base_system_prompt=rt.system_prompt(),
            disabled=self.disabled,
        )

        async def history_changed(
            kind: Literal["append", "replace"], messages: tuple[Message, ...], epoch: int, reason: str | None
        ) -> None:
            # no turn is running, so the history has no observer wired: the command tells the extensions
            await observe(
                assembly.handlers_for(Event.ON_HISTORY_CHANGED),
                HistoryChanged(view, turn, kind, messages, epoch, reason),
                self.errors,
            )

        ctx = MaintenanceContext(
            view, turn, assembly.system_prompt, assembly.specs(), self.history, lambda: self.busy, history_changed
        )
        return await command(ctx, argument)

    # --- the worker -------------------------------------------------------------------------------
    async def _work(self) -> None:
        while self._queue:
            item = self._queue.pop(0)
            try:
                result = await self._run_turn(item.text, item.source)
            except asyncio.CancelledError:
                if not item.result.done():
                    item.result.cancel()
                raise
            except Exception as e:  # a bug must not leave the caller waiting forever
                log.exception("turn failed unexpectedly")
                if not item.result.done():
                    item.result.set_exception(e)
                continue
            if not item.result.done():
                item.result.set_result(result)

    async def _run_turn(self, text: str, source: str) -> act.TurnResult:
        self.turn += 1
        turn = self.turn
        view = self.view
        rt = self.runtime
        self.file.append_turn_start(turn, source, text)
        rt.emit(act.TurnStarted(self.id, turn, source, text))
        ctx = TurnContext(view, turn, source, text)
        try:
            assembly = rt.registry.assemble(ctx, base_system_prompt=rt.system_prompt(), disabled=self.disabled)
            host_reminders = tuple(validate_reminder(p(ctx) or "", origin="host reminder") for p in rt.host_reminders)
        except (AssemblyError, ValueError) as e:
            self.file.append_turn_end(turn, act.FAILED, str(e))
            result = act.TurnResult(self.id, turn, act.FAILED, str(e), error_kind="assembly")
            rt.emit(act.TurnFinished(result))
            return result
        runner = TurnRunner(
            session=view,
            client=rt.client,
            assembly=assembly,
            history=self.history,
            turn=turn,
            source=source,
            config=rt.config,
            steering=self.steering,
            errors=self.errors,
            emit=rt.emit,
            host_reminders=host_reminders,
            on_overflow=rt.overflow_handler,
        )
        self._current = asyncio.create_task(runner.run(text), name=f"ctxscope-turn-{self.id}-{turn}")
        try:
            result = await self._current
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the worker itself is being cancelled, not just this turn
            if runner.result is None:  # cancelled before the turn's first line ran
                self.file.append_turn_end(turn, act.CANCELLED, "cancelled")
                runner.result = act.TurnResult(self.id, turn, act.CANCELLED, "cancelled", error_kind="cancelled")
            result = runner.result
        finally:
            self._current = None
            late = self.steering.take()
        if result.outcome != act.CANCELLED:  # a user's late steer is not lost; extension steers end with their turn
            for text, meta in late:
                if "source" in meta:
                    self._queue.insert(
                        0,
                        QueuedInput(
                            f"in_{next(_ids)}", text, meta["source"], asyncio.get_running_loop().create_future()
                        ),
                    )
        # the session's model is the one it talks to now (a resumed session may have switched)
        self.runtime.store.touch(
            self.id, turns=turn, provider=rt.client.provider, api=rt.client.api, model=rt.client.model
        )
        rt.emit(act.TurnFinished(result))
        return result
