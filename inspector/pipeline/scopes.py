"""Which pool of recent calls a new call is compared with (docs/architecture.md, "Sessions and threads").

A call that names its session is compared with that session's calls under its API key. Calls without
a session id share one pool per key and client, whatever session their lineage puts them in; the
store's queries for them (a cold start, a retry's failed twin) select them by the rules that placed
them, ``UNNAMED_GROUPS``.
"""

from __future__ import annotations

from ctxscope.inspector.pipeline.recent import Scope
from ctxscope.vocab.kinds import GroupedBy

UNNAMED = "\0unnamed:"  # scope of the calls without a session id, per key and this client
UNNAMED_GROUPS = (GroupedBy.LINEAGE, GroupedBy.CLIENT_GAP, GroupedBy.NEW)


def scope_of(explicit: tuple[str, str] | None, client: str | None, key_fingerprint: str | None) -> Scope:
    """The pool of a call with the session id ``explicit`` (None: it sent none)."""
    if explicit:
        return explicit[0], key_fingerprint
    return UNNAMED + (client or ""), key_fingerprint
