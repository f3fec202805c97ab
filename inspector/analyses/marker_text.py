"""One line per effect marker, for people (``ctxscope session``'s effect list and the demo's summary).

Marker details are untrusted (declared by a client or taken from captured text); callers print the
result through their own escaping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxscope.vocab.kinds import MarkerKind

_PREVIEW = 80


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _tokens(d: dict) -> str:
    before = d.get("tokens_before", d.get("prev_tokens"))
    after = d.get("tokens_after", d.get("cur_tokens"))
    return f"{_n(before)} → {_n(after)} tokens" if before is not None and after is not None else ""


def _preview(d: dict) -> str:
    text = d.get("preview")
    if not isinstance(text, str) or not text:
        return ""
    text = " ".join(text.split())
    return "“" + (text[:_PREVIEW] + "…" if len(text) > _PREVIEW or d.get("chars", 0) > len(text) else text) + "”"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _externalized(d: dict) -> str:
    where = "kept head and tail (no artifact)" if d.get("artifact") in (None, "none") else f"→ {d['artifact']}"
    return f"{d.get('tool', '?')} output, {_n(d.get('bytes', '?'))} bytes {where}"


def _archived(d: dict) -> str:
    return _join(
        f"{_n(d.get('archived', d.get('replaced', '?')))} old tool results archived ({d.get('mode', '?')}), "
        f"{_n(d.get('saved_bytes', '?'))} bytes saved",
        _tokens(d),
    )


def _checkpoint(d: dict) -> str:
    return _join(
        f"rung {d.get('rung', '?')}, {d.get('validation', '?')} ({d.get('mode', '?')} mode, "
        f"trigger {d.get('trigger', '?')})",
        _tokens(d),
    )


def _compaction(d: dict) -> str:
    if d.get("declared"):
        return _join(
            f"history replaced by the {d.get('stage', '?')} stage (trigger {d.get('trigger', '?')})", _tokens(d)
        )
    evidence = {
        "summary_message": "a summary-shaped message replaced the history",
        "compaction_item": "a compaction item appeared",
        "early_shrink": "the history shrank near its start",
    }
    return _join(evidence.get(str(d.get("evidence")), "history replaced"), _tokens(d))


def _reminder(d: dict) -> str:
    scope = {"round": "round reminder", "in_turn": "in-turn reminder"}.get(str(d.get("scope")), "reminder block")
    providers = d.get("providers") or ([d["source"]] if d.get("source") else [])
    who = f" from {', '.join(map(str, providers))}" if providers else ""
    size = f" ({_n(d['chars'])} chars)" if isinstance(d.get("chars"), int) else ""
    return _join(scope + who + size, _preview(d) if not d.get("declared") else "")


def _todo(d: dict) -> str:
    return (
        f"in-turn todo reminder: {d.get('since_todowrite', '?')} steps since the last todowrite, "
        f"{d.get('open', '?')} open item(s)"
    )


def _guard_signal(d: dict) -> str:
    return f"{d.get('kind', '?')} seen {d.get('count', '?')} steps in a row"


def _guard_reminder(d: dict) -> str:
    return f"reminder on {d.get('signal', '?')} (count {d.get('count', '?')}), sent as a steering message"


def _empty(d: dict) -> str:
    return "the answer after successful tools was empty: asked once more for a final summary"


def _dropped(d: dict) -> str:
    return f"{d.get('source', '?')} reminder dropped: it would push the request over the input limit"


def _checkpoint_request(d: dict) -> str:
    return (
        f"the checkpoint request itself (rung {d.get('rung', '?')}, {d.get('mode', '?')} mode, "
        f"trigger {d.get('trigger', '?')})"
    )


def _tools(d: dict) -> str:
    names = [t.get("name") or t.get("ref") or "?" for t in d.get("tools") or [] if isinstance(t, dict)]
    return ", ".join(dict.fromkeys(map(str, names)))


def _retry(d: dict) -> str:
    if d.get("retry_of"):
        return f"attempt {d.get('attempt', '?')} of {d['retry_of']}"
    return "the answer was rejected and asked for again" if d.get("declared") else "the same prompt again"


def _sources(d: dict) -> str:
    kinds = d.get("kinds")
    kinds = f" ({kinds})" if isinstance(kinds, str) and kinds else ""
    new, total = _n(d.get("new", d.get("count", "?"))), _n(d.get("count", "?"))
    return f"{new} new source(s) the answer may cite, {total} in all{kinds}"


def _citations(d: dict) -> str:
    return _join(
        f"the previous answer cited {_n(d.get('count', 0))} source(s)",
        f"{_n(d['missing'])} quoted without a citation" if d.get("missing") else "",
    )


def _citation_retry(d: dict) -> str:
    return f"the answer quoted a source ({d.get('source', '?')}) without citing it: asked once more, with a citation"


_BY_KIND: dict[str, Callable[[dict], str]] = {
    MarkerKind.SOURCES_AVAILABLE: _sources,
    MarkerKind.CITATIONS: _citations,
    MarkerKind.SOURCE_CITATION_RETRY: _citation_retry,
    MarkerKind.TOOL_OUTPUT_EXTERNALIZED: _externalized,
    MarkerKind.TOOL_RESULTS_ARCHIVED: _archived,
    MarkerKind.CHECKPOINT: _checkpoint,
    MarkerKind.COMPACTION: _compaction,
    MarkerKind.REMINDER: _reminder,
    MarkerKind.TODO_REMINDER: _todo,
    MarkerKind.GUARD_SIGNAL: _guard_signal,
    MarkerKind.GUARD_REMINDER: _guard_reminder,
    MarkerKind.EMPTY_ANSWER_RETRY: _empty,
    MarkerKind.REMINDER_DROPPED: _dropped,
    MarkerKind.CHECKPOINT_REQUEST: _checkpoint_request,
    MarkerKind.TOOLS_EXECUTED: _tools,
    MarkerKind.RETRY: _retry,
}


def marker_summary(marker: dict) -> str:
    """What the marker says happened, in one line."""
    d = marker.get("detail")
    if not isinstance(d, dict):
        return "" if d is None else str(d)[:200]
    fn = _BY_KIND.get(str(marker.get("kind")))
    try:
        if fn is not None:
            return fn(d)
    except (TypeError, ValueError, KeyError):  # a client's odd parameters only cost the nice wording
        pass
    skip = ("declared", "inferred", "span", "spans", "pointers", "segment")
    return ", ".join(f"{k}={v}" for k, v in d.items() if k not in skip and not isinstance(v, (dict, list)))[:200]
