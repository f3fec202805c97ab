"""The analyses' vocabularies, spelled once: what the store records and the UI and CLI show.

Each is a ``StrEnum``, so a member is the plain string that goes into SQLite and JSON.
"""

from __future__ import annotations

from enum import StrEnum


class RelationKind(StrEnum):
    """How a call's prompt relates to its predecessor's (docs/architecture.md, "Prefix relations")."""

    IDENTICAL = "IDENTICAL"
    APPEND_ONLY = "APPEND_ONLY"
    DIVERGED = "DIVERGED"
    NOT_COMPARABLE = "NOT_COMPARABLE"
    EPOCH_START = "EPOCH_START"


class EpochReason(StrEnum):
    """Why a call starts a new epoch instead of being compared with its predecessor."""

    SESSION_START = "session_start"
    THREAD_START = "thread_start"  # a new thread inside a session that already has calls
    PROVIDER_CHANGE = "provider_change"
    API_CHANGE = "api_change"
    MODEL_CHANGE = "model_change"
    CAPTURE_RESUMED = "capture_resumed"
    CACHE_POLICY_CHANGE = "cache_policy_change"


class GroupedBy(StrEnum):
    """Why a call landed in its session (docs/architecture.md, "Sessions and threads")."""

    LABEL = "label"  # the /s/<label>/ path prefix
    HEADER = "header"  # a session header (x-ctxscope-session, Claude Code's, session_id ...)
    METADATA = "metadata"  # Claude Code's metadata.user_id names the session
    PROMPT_CACHE_KEY = "prompt_cache_key"
    PREVIOUS_RESPONSE = "previous_response"  # previous_response_id names a captured call
    LINEAGE = "lineage"  # its prompt continues an earlier call's prompt
    CLIENT_GAP = "client_gap"  # same key and client, a short gap after the session's last call
    NEW = "new"  # no id, no lineage, another client or a long idle gap: a session of its own
    NON_MODEL = "non_model"  # a known client's request that is no model call (telemetry, a probe)


class CacheVerdict(StrEnum):
    """Why the reported cache read differs from (or matches) the predicted one."""

    HIT = "hit"
    EXPECTED_WRITE = "expected_write"
    CLIENT_BREAK = "client_break"
    MODEL_SWITCH = "model_switch"  # another model, provider or API than the predecessor's: a cache of its own
    TTL_EXPIRED = "ttl_expired"
    BELOW_MINIMUM = "below_minimum"
    PROVIDER_MISS = "provider_miss"
    NOT_REQUESTED = "not_requested"
    UNKNOWN = "unknown"


class Outcome(StrEnum):
    """How an exchange through the proxy ended (docs/architecture.md, "Honest outcomes")."""

    OK = "ok"
    HTTP_ERROR = "http_error"  # the upstream answered with a status >= 400
    UPSTREAM_UNREACHABLE = "upstream_unreachable"  # no connection to the upstream could be made (in time)
    UPSTREAM_RESET = "upstream_reset"  # the upstream's connection broke after it was made, or it spoke non-HTTP
    CLIENT_DISCONNECTED = "client_disconnected"  # the client left (or stalled its body) before the end
    TIMEOUT = "timeout"  # the upstream was silent longer than the read timeout
    INTERRUPTED = "interrupted"  # cut by the daemon's own shutdown
    REQUEST_TOO_LARGE = "request_too_large"  # a body over the limit, answered 413, never forwarded


class MarkerKind(StrEnum):
    """What happened to the context between a call and its predecessor, as markers record it.

    The first four are inferred from any client's prompts; the rest are declared by our own agent
    (or recognised by its reminder tags) and merged by the store. The UI's marker filter lists
    exactly these.
    """

    REMINDER = "reminder"
    COMPACTION = "compaction"
    RETRY = "retry"
    TOOLS_EXECUTED = "tools_executed"
    TODO_REMINDER = "todo_reminder"
    GUARD_REMINDER = "guard_reminder"
    TOOL_OUTPUT_EXTERNALIZED = "tool_output_externalized"
    TOOL_RESULTS_ARCHIVED = "tool_results_archived"
    CHECKPOINT = "checkpoint"
    CHECKPOINT_REQUEST = "checkpoint_request"
    GUARD_SIGNAL = "guard_signal"
    EMPTY_ANSWER_RETRY = "empty_answer_retry"
    STEER = "steer"
    REMINDER_DROPPED = "reminder_dropped"
    COMPACTION_FAILED = "compaction_failed"
    COMPACTION_DEFERRED = "compaction_deferred"
    COMPACTION_STOPPED = "compaction_stopped"
    COMPACTION_FORCED = "compaction_forced"
    SOURCES_AVAILABLE = "sources_available"
    CITATIONS = "citations"
    SOURCE_CITATION_RETRY = "source_citation_retry"
    ANNOTATION = "annotation"  # a declared event header whose kind could not be read


class SearchArea(StrEnum):
    """Where in a call a search hit lies (``ctxscope search --in``, the search page's filter)."""

    SYSTEM = "system"
    TOOLS = "tools"
    MESSAGES = "messages"
    TOOL_RESULTS = "tool_results"
    RESPONSES = "responses"


class CompactionTrigger(StrEnum):
    """Why our agent compacted its context: the ``trigger`` of its compaction effects, hooks and records."""

    THRESHOLD = "threshold"  # the request's footprint is over the trigger line
    BYTES = "bytes"  # the request's bytes are over the provider's limit
    ARCHIVE_PLAN = "archive_plan"  # old tool results can be archived cheaply before the line
    OVERFLOW = "overflow"  # the provider refused the prompt as too long
    LIMIT = "limit"  # over the input limit while the thrash guard held automatic compaction back
    MANUAL = "manual"  # /compact


class ProviderAgreement(StrEnum):
    """The provider's own cache diagnosis held against ctxscope's verdict
    (``inspector/analyses/cache/provider_agreement.py`` has the table)."""

    AGREE = "agree"
    DISAGREE = "disagree"
    PENDING = "pending"  # the provider's comparison was not finished when it answered
    NONE = "none"  # no diagnosis: not asked, nothing to compare, or the provider could not say
