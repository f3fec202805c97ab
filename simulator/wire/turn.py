"""What one model request resolves to, and the interface each API's wire module implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ctxscope.simulator.model.cache import PromptCache, PromptUsage
from ctxscope.simulator.model.diagnosis import NOT_ASKED, Diagnosis
from ctxscope.simulator.model.ids import IdMaker
from ctxscope.simulator.model.prompt import Block, Prompt
from ctxscope.simulator.model.script import ErrorSpec, Reply
from ctxscope.simulator.wire.sse import Event


@dataclass(frozen=True)
class Turn:
    """A resolved request: the prompt, the scripted reply and the usage to report."""

    body: dict[str, Any]
    model: str
    prompt: Prompt
    reply: Reply
    usage: PromptUsage
    output_tokens: int
    created: int  # unix seconds
    ids: IdMaker
    response_id: str  # msg_01…, chatcmpl-…, resp_…
    call_ids: tuple[str, ...]  # one per scripted tool call (scripted id or generated)
    conversation: tuple[Block, ...] = ()  # Responses: blocks to remember for previous_response_id
    diagnosis: Diagnosis = NOT_ASKED  # the provider's cache diagnosis, when the request asked


class Wire(Protocol):
    """One provider API's shapes. Implementations never share code with the proxy."""

    api: str
    request_id_header: str
    request_id_prefix: str
    response_id_prefix: str
    call_id_prefix: str

    def prompt(self, body: dict[str, Any], memory: dict[str, tuple[Block, ...]]) -> tuple[Prompt, tuple[Block, ...]]:
        """Linearised prompt (raises PromptError) and the conversation blocks to remember."""

    def usage(self, cache: PromptCache, scope: str, model: str, prompt: Prompt, now: float) -> PromptUsage: ...

    def error(
        self, status: int, type_: str | None, message: str | None, code: str | None, param: str | None = None
    ) -> dict[str, Any]:
        """The provider's own error JSON."""

    def overflow(self, tokens: int, window: int) -> dict[str, Any]:
        """The provider's 400 context-overflow error JSON."""

    def wants_stream(self, body: dict[str, Any]) -> bool: ...

    def response(self, turn: Turn) -> dict[str, Any]:
        """The full non-streaming response object."""

    def events(self, turn: Turn) -> list[Event]:
        """The complete SSE event sequence for a streamed answer."""

    def stream_error(self, turn: Turn, spec: ErrorSpec, position: int) -> Event:
        """The in-stream error event (sent after some content instead of the normal ending)."""

    def remember(self, turn: Turn) -> tuple[Block, ...] | None:
        """What a later request may reference by this turn's id (Responses' previous_response_id)."""
