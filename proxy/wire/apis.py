"""Which LLM API a request path speaks, so the store knows how to parse the exchange.

Clients configure base URLs in many shapes ("https://host", "https://host/v1",
"https://openrouter.ai/api/v1", Azure's "/openai/deployments/<d>"), so matching looks at the
path's tail rather than at a fixed prefix. Only POST is an LLM call; GETs of stored objects
(e.g. "/v1/responses/{id}") are plain HTTP exchanges.
"""

from __future__ import annotations

from ctxscope.vocab.apis import Api

_GEMINI_METHODS = ("generateContent", "streamGenerateContent")


def detect_api(method: str, path: str) -> Api | None:
    """The API an LLM call speaks, or None for any other exchange."""
    if method.upper() not in ("POST", "WEBSOCKET"):  # a call made over a socket (proxy/sockets) is recorded so
        return None
    path = path.split("?", 1)[0].split("#", 1)[0]
    segments = [s for s in path.split("/") if s]
    if not segments:
        return None
    last = segments[-1]
    before = segments[-2] if len(segments) > 1 else ""
    if ":" in last:
        # Gemini: ".../models/{model}:generateContent", Code Assist "/v1internal:streamGenerateContent".
        return Api.GEMINI_GENERATE if last.rsplit(":", 1)[1] in _GEMINI_METHODS else None
    if last == "completions" and before == "chat":
        return Api.OPENAI_CHAT
    if last == "responses" or (last == "compact" and before == "responses"):
        return Api.OPENAI_RESPONSES  # the compaction endpoint takes and bills a Responses prompt
    # OpenAI Assistants also has POST ".../threads/{id}/messages": not an Anthropic call.
    if "threads" in segments:
        return None
    if last == "messages":
        return Api.ANTHROPIC_MESSAGES
    if last == "count_tokens" and before == "messages":
        return Api.ANTHROPIC_COUNT_TOKENS
    return None


# Requests known clients make beside their model calls: Claude Code's own API (settings, metrics,
# feature flags) and its event logging, reachability probes, model listings. They are recorded as
# what they are and kept out of sessions (docs/architecture.md, "Non-model requests").
# Claude Code 2.1 also reads `/api/claude_cli/bootstrap`, `/api/claude_code_penguin_mode` (so any
# `/api/claude…`), posts `/api/eval/sdk-…` feature-flag evaluations and reads `/api/directory/…`.
_TELEMETRY = ("event_logging", "eval")
_METADATA = ("oauth", "hello", "directory")


def non_model_kind(method: str, path: str) -> str | None:
    """``probe``, ``telemetry`` or ``metadata`` for a known client's request that is no model call, else None."""
    method = method.upper()
    if method == "HEAD":
        return "probe"
    if detect_api(method, path) is not None:
        return None
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    if "api" in segments:
        after = segments[segments.index("api") + 1 :]
        if after and (after[0] in _TELEMETRY or after[0].startswith("claude")):
            return "telemetry"
        if after and after[0] in _METADATA:
            return "metadata"
    if not segments:
        return "probe"  # GET / and the like: is anybody there?
    if method == "GET" and "models" in segments[-2:]:
        return "metadata"  # the model list, or one model's card
    return None
