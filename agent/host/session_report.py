"""Session report: the call environment of a session, kept beside its history.

History holds the messages; what it lacks to rebuild a request is the rest of the call: system
prompt, tool schemas, model and provider, thinking level, output limit, cache policy. The
``session-report`` host builtin writes that part to ``<session dir>/llm-call.json`` on every
``on_llm_call_prepared``, skips the write when the envelope's SHA-256 is unchanged, caps one
envelope at 4 MiB (largest fields are replaced by their size and hash first), and never lets a
failure reach the model call: failures are logged and kept in ``failures``.

Each compaction (a history replacement whose reason starts with ``compaction``) freezes a copy,
``compaction-<epoch>.llm-call.json``, beside the history epoch it opened (``freeze_for_compaction``;
``freeze_report`` for any other snapshot). A rewind deletes the live copy (it describes a state
that no longer exists) and ``discard_frozen_report(snapshot)`` removes the copy of a snapshot the
rewind undid.
Bundling a session for a bug report is ``session_report_bundle``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.events import Event, HistoryChanged, LlmCallPrepared
from ..core.model import PreparedCall
from ..core.settings import HostOptions
from ..core.spi import Extension, ExtensionAPI

log = logging.getLogger("ctxscope.agent.host.session_report")

REPORT_ID = "session-report"
REPORT_FILE = "llm-call.json"
MAX_ENVELOPE_BYTES = 4 * 1024 * 1024
VERSION = 1
_MESSAGE_KEYS = ("messages", "input")
_SYSTEM_ROLES = ("system", "developer")
_THINKING_KEYS = ("thinking", "reasoning", "reasoning_effort")
_OUTPUT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _walk(value: Any, pointer: str = "") -> Iterator[tuple[str, dict]]:
    if isinstance(value, dict):
        yield pointer, value
        for k, v in value.items():
            yield from _walk(v, f"{pointer}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{pointer}/{i}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def system_prompt(body: dict[str, Any]) -> list[str]:
    """The system/developer text of a request in any of the three wire shapes."""
    out = []
    if body.get("system") is not None:
        out.append(_text(body["system"]))
    if isinstance(body.get("instructions"), str):
        out.append(body["instructions"])
    for key in _MESSAGE_KEYS:
        for m in body.get(key) or []:
            if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES:
                out.append(_text(m.get("content")))
    return [t for t in out if t]


def cache_policy(body: dict[str, Any]) -> dict[str, Any]:
    """Where breakpoints sit by section (their positions in messages move every call, so only a count)."""
    sections: dict[str, int] = {}
    ttls: set[str] = set()
    for pointer, node in _walk(body):
        marker = node.get("cache_control")
        if isinstance(marker, dict):
            section = pointer.split("/")[1] if pointer.count("/") >= 1 else "top"
            sections[section] = sections.get(section, 0) + 1
            if marker.get("ttl"):
                ttls.add(str(marker["ttl"]))
    policy: dict[str, Any] = {"breakpoints": sections, "ttls": sorted(ttls)}
    policy.update({k: v for k, v in body.items() if k.startswith("prompt_cache")})
    return policy


def call_envelope(call: PreparedCall) -> dict[str, Any]:
    """Everything of a prepared call except its conversation messages."""
    body = call.body_json()
    params = {
        k: v
        for k, v in body.items()
        if k not in (*_MESSAGE_KEYS, "system", "instructions", "tools", *_THINKING_KEYS, *_OUTPUT_KEYS)
        and not k.startswith("prompt_cache")
    }
    return {
        "provider": call.provider,
        "api": call.api,
        "model": body.get("model", call.model),
        "url": call.url,
        "system": system_prompt(body),
        "tools": body.get("tools") or [],
        "thinking": {k: body[k] for k in _THINKING_KEYS if k in body},
        "output_limit": next((body[k] for k in _OUTPUT_KEYS if k in body), call.request.max_output_tokens),
        "cache_policy": cache_policy(body),
        "parameters": params,
    }


def canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def capped(envelope: dict[str, Any], limit: int = MAX_ENVELOPE_BYTES) -> dict[str, Any] | None:
    """The envelope within ``limit`` bytes: largest fields become {omitted, bytes, sha256}; None if that fails."""
    out = dict(envelope)
    while len(canonical(out)) > limit:
        sizes = {k: len(canonical(v)) for k, v in out.items() if not (isinstance(v, dict) and v.get("omitted"))}
        if not sizes:
            return None
        key = max(sizes, key=lambda k: sizes[k])
        raw = canonical(out[key])
        if len(raw) < 256:
            return None
        out[key] = {"omitted": True, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class ReportFailure:
    session_id: str
    path: str
    error: str
    at: float


class LlmCallReportStore:
    """Writes ``llm-call.json`` per session, skipping unchanged envelopes by SHA-256."""

    def __init__(self, max_bytes: int = MAX_ENVELOPE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._last: dict[str, str] = {}  # session dir -> sha256 last written
        self.failures: list[ReportFailure] = []
        self.writes = 0  # how many times the file was written (unchanged envelopes are not rewritten)

    def _fail(self, session_id: str, path: Path, error: str) -> None:
        self.failures = (self.failures + [ReportFailure(session_id, str(path), error, time.time())])[-100:]
        log.warning("session report: could not write %s: %s", path, error)

    def _known_sha(self, path: Path) -> str | None:
        key = str(path)
        if key not in self._last:
            try:
                self._last[key] = json.loads(path.read_text(encoding="utf-8")).get("sha256") or ""
            except (OSError, ValueError, AttributeError):
                self._last[key] = ""
        return self._last[key] or None

    def record(self, session_id: str, session_dir: Path, call: PreparedCall, turn: int, step: int) -> bool:
        """True when the file was (re)written; never raises."""
        path = session_dir / REPORT_FILE
        try:
            envelope = capped(call_envelope(call), self.max_bytes - 1024)  # room for the small wrapper
            if envelope is None:
                self._fail(session_id, path, f"envelope over {self.max_bytes} bytes even with fields omitted")
                return False
            sha = hashlib.sha256(canonical(envelope)).hexdigest()
            if self._known_sha(path) == sha:
                return False
            doc = {
                "version": VERSION,
                "sha256": sha,
                "session": session_id,
                "turn": turn,
                "step": step,
                "written_at": time.time(),
                "envelope": envelope,
            }
            _atomic_write(path, json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode())
        except Exception as e:
            self._fail(session_id, path, f"{type(e).__name__}: {e}")
            return False
        self._last[str(path)] = sha
        self.writes += 1
        return True

    def forget(self, session_dir: Path) -> None:
        """Delete the live report (after a rewind); the next call writes it fresh."""
        path = session_dir / REPORT_FILE
        self._last.pop(str(path), None)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            self._fail(session_dir.name, path, f"{type(e).__name__}: {e}")


def frozen_path(snapshot: Path) -> Path:
    """Where the frozen report of a snapshot lives: inside a snapshot folder, else beside the snapshot file."""
    return snapshot / REPORT_FILE if snapshot.is_dir() else snapshot.with_name(f"{snapshot.name}.{REPORT_FILE}")


def freeze_report(session_dir: Path, snapshot: Path) -> Path | None:
    """Copy the live ``llm-call.json`` beside a compaction snapshot; None (logged) when there is none or it fails."""
    src = Path(session_dir) / REPORT_FILE
    dest = frozen_path(Path(snapshot))
    try:
        if not src.is_file():
            return None
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
        return dest
    except OSError as e:
        log.warning("session report: could not freeze %s to %s: %s", src, dest, e)
        return None


def freeze_for_compaction(session_dir: Path, epoch: int) -> Path | None:
    """The frozen copy for the compaction that opened history epoch ``epoch`` (``compaction-<epoch>.llm-call.json``).

    Automatic compactions inside a turn are frozen by the extension itself (it sees the history
    replacement); a manual ``/compact`` replaces history between turns and calls this directly.
    """
    return freeze_report(session_dir, Path(session_dir) / f"compaction-{epoch}")


def discard_frozen_report(snapshot: Path) -> bool:
    """Remove the frozen report of a snapshot a rewind undid; True when one was removed."""
    path = frozen_path(Path(snapshot))
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        log.warning("session report: could not remove %s: %s", path, e)
        return False


def session_report_extension(store: LlmCallReportStore | None = None) -> Extension:
    store = store or LlmCallReportStore()

    def prepared(e: LlmCallPrepared) -> None:
        store.record(e.session.id, e.session.dir, e.call, e.turn, e.step)

    def changed(e: HistoryChanged) -> None:
        reason = e.reason or ""
        if e.kind != "replace":
            return
        if reason.startswith("rewind"):
            store.forget(e.session.dir)
        elif reason.startswith("compaction"):
            freeze_for_compaction(e.session.dir, e.epoch)

    def init(api: ExtensionAPI) -> None:
        api.on(Event.ON_LLM_CALL_PREPARED, prepared)
        api.on(Event.ON_HISTORY_CHANGED, changed)

    return Extension(REPORT_ID, init, "keeps the call environment (system prompt, tools, limits) in llm-call.json")


def create_session_report(options: HostOptions) -> Extension:
    return session_report_extension()
