"""``/context`` for a live session and ``ctxscope agent context SESSION`` for a stored one.

Both assemble the system prompt and tools as a real turn would, then measure them with
``context.report``; a stored session is assembled by a runtime whose client only describes the
model (``OfflineClient``), so nothing is ever sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..context.compaction.outcome import ANCHOR_KEY
from ..context.report import ContextReport, build_report
from ..core.events import CONTEXT_SOURCE
from ..core.model import DeltaSink, ModelRequest, ModelResponse, PreparedCall, ProviderError, dumps
from ..core.spi import TurnContext
from ..core.state import ModelInfo, SessionState, SessionView
from ..providers.catalog import default_api, model_limits
from .runtime import AgentRuntime
from .session import AgentSession
from .session_store import SessionMeta, SessionStore


def live_report(runtime: AgentRuntime, session: AgentSession) -> ContextReport:
    """/context for a live session: system prompt and tools assembled as for a real turn."""
    view = session.view
    assembly = runtime.registry.assemble(
        TurnContext(view, session.turn, CONTEXT_SOURCE, "/context"),
        base_system_prompt=runtime.system_prompt(),
        disabled=session.disabled,
    )
    return build_report(
        session_id=session.id,
        info=runtime.model_info(),
        base_system=runtime.system_prompt(),
        system=assembly.system_prompt,
        tools=assembly.specs(),
        messages=session.messages,
        state=view.state.snapshot(),
        epoch=session.history.epoch,
    )


class OfflineClient:
    """A client that only describes a model: enough to assemble and measure a stored session."""

    def __init__(self, provider: str, api: str, model: str, context_window: int, max_output_tokens: int) -> None:
        self.provider, self.api, self.model = provider, api, model
        self.context_window, self.max_output_tokens = context_window, max_output_tokens

    def prepare(self, request: ModelRequest) -> PreparedCall:
        body = {
            "model": self.model,
            "system": request.system,
            "tools": [t.name for t in request.tools],
            "messages": len(request.messages),
        }
        return PreparedCall(request, self.provider, self.api, self.model, "offline://", dumps(body), {})

    async def send(self, call: PreparedCall, on_delta: DeltaSink | None = None) -> ModelResponse:
        raise ProviderError("offline: this runtime only inspects stored sessions", kind="offline")

    async def aclose(self) -> None:
        pass


def current_model(meta: SessionMeta, state: Mapping[str, Any]) -> tuple[str, str, str]:
    """(provider, api, model) the session talks to now: its last turn's, as ``meta.json`` keeps them; for a
    session written before meta followed the model (no ``api``), its usage anchor's binding (the model of its
    last answer) (docs/architecture.md, "The stored session's model")."""
    if meta.api and meta.model:
        return meta.provider or "anthropic", meta.api, meta.model
    stored = state.get(ANCHOR_KEY)
    bound = stored.get("binding") if isinstance(stored, dict) else None
    if isinstance(bound, dict) and all(isinstance(bound.get(k), str) and bound[k] for k in ("provider", "model")):
        return bound["provider"], str(bound.get("api") or default_api(bound["provider"])), bound["model"]
    provider = meta.provider or "anthropic"
    return provider, default_api(provider), meta.model


def stored_report(
    home: Path, session_id: str, *, context_window: int | None = None, max_output_tokens: int | None = None
) -> ContextReport:
    """``ctxscope agent context SESSION``: the stored session measured as its next request would be."""
    store = SessionStore(home)
    meta = store.get(session_id)
    loaded = store.history(session_id).load()
    provider, api, model = current_model(meta, loaded.state)
    window, output = model_limits(model)
    info = ModelInfo(provider, api, model, context_window or window, max_output_tokens or output)
    workspace = meta.workspace if meta.workspace and Path(meta.workspace).is_dir() else None
    rt = AgentRuntime(
        OfflineClient(provider, api, model, info.context_window, info.max_output_tokens), home=home, workspace=workspace
    )
    d = store.dir(session_id)
    view = SessionView(session_id, d, d / "artifacts", rt.workspace, SessionState(loaded.state), info)
    turn = max((t.turn for t in loaded.turns), default=0)
    assembly = rt.registry.assemble(
        TurnContext(view, turn, CONTEXT_SOURCE, "/context"),
        base_system_prompt=rt.system_prompt(),
        disabled=meta.disabled_extensions,
    )
    return build_report(
        session_id=session_id,
        info=info,
        base_system=rt.system_prompt(),
        system=assembly.system_prompt,
        tools=assembly.specs(),
        messages=loaded.messages,
        state=loaded.state,
        epoch=loaded.epoch,
    )
