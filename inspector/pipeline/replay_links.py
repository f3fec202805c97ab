"""The writer analyzer that links a replay to the call it re-sent (docs/architecture.md, "Replay").

A replay names its original in an annotation header (``share/replay.py`` sets it); this turns it
into the ``replay_of`` column as the call is stored.
"""

from __future__ import annotations

from ctxscope.inspector.store.db import Db
from ctxscope.inspector.store.derived.replays import set_replay_of
from ctxscope.vocab.headers import Annotation

REPLAY_OF = Annotation.REPLAY_OF.value


class ReplayLinker:
    """Writer analyzer: a call sent by a replay gets ``replay_of``, the call it re-sent."""

    single_write = True  # one UPDATE: nothing to undo halfway

    def __call__(self, db: Db, call: dict) -> None:
        ex = call.get("_exchange")
        original = next((v for k, v in ex.annotations if k == REPLAY_OF), None) if ex is not None else None
        if original:
            set_replay_of(db, call["id"], original[:200])
