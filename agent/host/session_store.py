"""Sessions on disk: ``<home>/sessions/<id>/{meta.json, history.jsonl, artifacts/}``.

``history.jsonl`` is append-only. Message records carry their history epoch; a whole-history
replacement (compaction) is one ``replace`` record that opens the next epoch, so the file keeps
everything that was ever sent while loading yields only the live history. Turn boundaries (with
their source: cli, api, ...) and session state changes (the todo list) are records too, so a
session resumes from this one file. A torn last line (crash mid-write) is ignored on load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..core.history import HistoryFile

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")


class SessionNotFound(KeyError):
    def __str__(self) -> str:
        return f"no session {self.args[0]!r}"


@dataclass(frozen=True)
class SessionMeta:
    id: str
    title: str = ""
    workspace: str = ""
    provider: str = ""
    model: str = ""  # with provider and api: what the session's last turn talked to (a resume may switch)
    created_at: float = 0.0
    updated_at: float = 0.0
    turns: int = 0
    disabled_extensions: tuple[str, ...] = ()
    api: str = ""  # "" in sessions written before the model was followed per turn
    parent_session: str = ""  # a sub-agent's session names the session that started it

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SessionMeta:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["disabled_extensions"] = tuple(known.get("disabled_extensions") or ())
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["disabled_extensions"] = list(self.disabled_extensions)
        return d


def new_session_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class SessionStore:
    def __init__(self, home: Path | str) -> None:
        self.home = Path(home).expanduser()
        self.root = self.home / "sessions"

    def dir(self, session_id: str) -> Path:
        if not _ID.match(session_id or ""):
            raise SessionNotFound(session_id)
        return self.root / session_id

    def create(
        self,
        *,
        workspace: str = "",
        provider: str = "",
        model: str = "",
        title: str = "",
        session_id: str | None = None,
        api: str = "",
        parent_session: str = "",
    ) -> SessionMeta:
        sid = session_id or new_session_id()
        d = self.dir(sid)
        (d / "artifacts").mkdir(parents=True, exist_ok=False)
        now = time.time()
        meta = SessionMeta(sid, title, workspace, provider, model, now, now, api=api, parent_session=parent_session)
        self.save(meta)
        (d / "history.jsonl").touch()
        return meta

    def save(self, meta: SessionMeta) -> None:
        path = self.dir(meta.id) / "meta.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta.to_dict(), ensure_ascii=False, indent=2), encoding="utf-8")
        os.replace(tmp, path)

    def get(self, session_id: str) -> SessionMeta:
        path = self.dir(session_id) / "meta.json"
        try:
            return SessionMeta.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            raise SessionNotFound(session_id) from None

    def list(self) -> list[SessionMeta]:
        if not self.root.is_dir():
            return []
        metas = []
        for d in self.root.iterdir():
            try:
                metas.append(self.get(d.name))
            except SessionNotFound:
                continue
        return sorted(metas, key=lambda m: (m.updated_at, m.id), reverse=True)

    def latest(self, workspace: str | None = None) -> SessionMeta | None:
        """The latest top-level session (a sub-agent's session is never the one to continue)."""
        metas = [m for m in self.list() if not m.parent_session]
        if workspace is not None:
            metas = [m for m in metas if m.workspace == workspace] or metas
        return metas[0] if metas else None

    def rename(self, session_id: str, title: str) -> SessionMeta:
        meta = self.get(session_id)
        meta = SessionMeta.from_dict({**meta.to_dict(), "title": title, "updated_at": time.time()})
        self.save(meta)
        return meta

    def touch(self, session_id: str, **changes: Any) -> SessionMeta:
        meta = self.get(session_id)
        meta = SessionMeta.from_dict({**meta.to_dict(), **changes, "updated_at": time.time()})
        self.save(meta)
        return meta

    def delete(self, session_id: str) -> None:
        d = self.dir(session_id)
        if not (d / "meta.json").exists():
            raise SessionNotFound(session_id)
        shutil.rmtree(d)

    def history(self, session_id: str) -> HistoryFile:
        return HistoryFile(self.dir(session_id) / "history.jsonl")
