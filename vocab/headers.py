"""The ``x-ctxscope-*`` HTTP headers, spelled once (docs/architecture.md, "Protocols between packages").

Annotations are request headers a client (our agent, a replay, anyone) sends through the proxy:
the proxy strips every header under ``ANNOTATION_PREFIX`` before forwarding and stores them as the
call's annotations, so the inspector reads what the client declared. Names are lowercase, as the
proxy stores them. ``TOKEN``, ``REMOTE_KEY`` and ``BODY`` are the web UI's own headers, between the page and its API.
"""

from __future__ import annotations

from enum import StrEnum

ANNOTATION_PREFIX = "x-ctxscope-"


class Annotation(StrEnum):
    """The annotation headers some package of ours writes or reads."""

    SESSION = "x-ctxscope-session"  # the session label (also the /s/<label>/ path prefix)
    TURN = "x-ctxscope-turn"  # our agent's turn number
    STEP = "x-ctxscope-step"  # our agent's step number inside the turn
    EVENT = "x-ctxscope-event"  # declared effects (vocab/effects.py)
    ATTEMPT = "x-ctxscope-attempt"  # our agent's HTTP client on a retry (2, 3, ...)
    SUBAGENT = "x-ctxscope-subagent"  # the id of the sub-agent that sent the call
    REPLAY_OF = "x-ctxscope-replay-of"  # the id of the call a replay repeats
    REPLAY_ID = "x-ctxscope-replay-id"  # a nonce telling this replay's call from earlier ones
    IMPORTED = "x-ctxscope-imported"  # set by an import on every call it stores: the file's format
    ASKED_DIAGNOSIS = "x-ctxscope-asked-diagnosis"  # serve --ask-diagnosis: the field it added upstream


TOKEN = "X-Ctxscope-Token"  # the web UI's control token, on every state-changing API request
REMOTE_KEY = "X-Ctxscope-Key"  # the remote-mode key a script sends instead of the login cookie
BODY = "X-Ctxscope-Body"  # how the web API served a body: "wire", "decoded", "decoded; keys masked"
