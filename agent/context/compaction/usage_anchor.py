"""The usage anchor: the provider's own count of the last request, kept to measure the next one.

``on_prepared`` notes what a request was bound to (provider, API, model, the prefix's hash and the
live history's epoch), ``after_llm_call`` records the answer's usage as the session's anchor, and
``on_history_changed`` drops it on a replacement: the old usage describes a history that is gone
(``core.estimate`` measures the footprint from it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...core.estimate import AnchorBinding, UsageAnchor, prefix_hash
from ...core.events import HistoryChanged, LlmCallPrepared, LlmCallResult
from .outcome import ANCHOR_KEY, invalidate_anchor


class AnchorKeeper:
    """The binding of each session's request in flight, turned into its anchor when the answer comes."""

    def __init__(self, epoch: Callable[[str], int | None]) -> None:
        self._epoch = epoch  # the live history's epoch of a session
        self._bindings: dict[str, tuple[AnchorBinding, int | None]] = {}

    def on_prepared(self, ev: LlmCallPrepared) -> None:
        call = ev.call
        binding = AnchorBinding(
            call.provider, call.api, call.model, prefix_hash(call.request.system, call.request.tools)
        )
        self._bindings[ev.session.id] = (binding, self._epoch(ev.session.id))

    def after_llm_call(self, ev: LlmCallResult) -> None:
        bound = self._bindings.pop(ev.session.id, None)
        usage = ev.response.usage
        if bound is None or usage is None or usage.input_tokens <= 0:
            return None
        anchor = UsageAnchor(
            bound[0],
            bound[1],
            ev.response.message.id,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            time.time(),
        )
        ev.session.state.set(ANCHOR_KEY, anchor.to_dict())
        return None

    def on_history_changed(self, ev: HistoryChanged) -> None:
        if ev.kind == "replace":  # a new epoch: the old usage describes a history that is gone
            invalidate_anchor(ev.session)
