"""``ctxscope agent report SESSION``: one archive with a session, its sub-sessions and a collection manifest.

Everything under the session's directory is collected (history, artifacts, ``llm-call.json``,
frozen reports, guard events), plus every session whose ``meta.json`` names it as parent
(``parent_session``), recursively. A file that cannot be read is listed in the manifest
(``session-report-collection.json``, the archive's last member) with the error, and the rest of
the bundle is still written: a report is most needed when something is broken. Symbolic links
are listed, never followed (they could point anywhere on the machine).
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .session_store import SessionNotFound, SessionStore

MANIFEST = "session-report-collection.json"
SKIP_DIRS = frozenset({"llm-context-inspector", "__pycache__"})
PARENT_KEYS = ("parent_session", "parent_session_id", "parent")


@dataclass
class Collection:
    session: str
    sessions: list[dict] = field(default_factory=list)  # {id, parent, dir}
    files: list[dict] = field(default_factory=list)  # {path, bytes}
    unreadable: list[dict] = field(default_factory=list)  # {path, error}
    skipped: list[dict] = field(default_factory=list)  # {path, reason}


@dataclass(frozen=True)
class BundleResult:
    archive: Path
    sessions: tuple[str, ...]
    files: int
    unreadable: tuple[dict, ...]


def _parent_of(meta_path: Path) -> str | None:
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    return next((str(meta[k]) for k in PARENT_KEYS if isinstance(meta.get(k), str) and meta[k]), None)


def sub_sessions(store: SessionStore, session_id: str) -> list[tuple[str, str]]:
    """(sub-session id, parent id) for every descendant of ``session_id``, parents first."""
    children: dict[str, list[str]] = {}
    if store.root.is_dir():
        for d in sorted(store.root.iterdir()):
            parent = _parent_of(d / "meta.json") if d.is_dir() else None
            if parent:
                children.setdefault(parent, []).append(d.name)
    out, todo, seen = [], [session_id], {session_id}
    while todo:
        parent = todo.pop(0)
        for child in children.get(parent, []):
            if child not in seen:
                seen.add(child)
                out.append((child, parent))
                todo.append(child)
    return out


def _members(root: Path, prefix: str, c: Collection) -> Iterator[tuple[str, Path]]:
    """(archive name, path) of every regular file under ``root``; links and odd files are recorded as skipped."""
    for dirpath, dirnames, filenames in os.walk(
        root,
        onerror=lambda e: c.unreadable.append(
            {
                "path": f"{prefix}/{Path(e.filename).relative_to(root)}" if e.filename else prefix,
                "error": f"{type(e).__name__}: {e.strerror or e}",
            }
        ),
    ):
        here = Path(dirpath)
        for d in list(dirnames):
            if d in SKIP_DIRS or (here / d).is_symlink():
                dirnames.remove(d)
                reason = "link" if (here / d).is_symlink() else "excluded folder"
                c.skipped.append({"path": f"{prefix}/{(here / d).relative_to(root)}", "reason": reason})
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            arc = f"{prefix}/{path.relative_to(root).as_posix()}"
            try:
                mode = path.lstat().st_mode
            except OSError as e:
                c.unreadable.append({"path": arc, "error": f"{type(e).__name__}: {e.strerror or e}"})
                continue
            if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
                c.skipped.append({"path": arc, "reason": "link" if stat.S_ISLNK(mode) else "not a regular file"})
                continue
            yield arc, path


def bundle_session(home: Path, session_id: str, out: Path | None = None) -> BundleResult:
    """Write ``out`` (default ``./ctxscope-report-<id>.tar.gz``); raises SessionNotFound for an unknown session."""
    store = SessionStore(home)
    main = store.dir(session_id)
    if not (main / "meta.json").exists():
        raise SessionNotFound(session_id)
    out = Path(out) if out is not None else Path.cwd() / f"ctxscope-report-{session_id}.tar.gz"
    c = Collection(session_id)
    c.sessions.append({"id": session_id, "parent": None, "dir": f"sessions/{session_id}"})
    for child, parent in sub_sessions(store, session_id):
        c.sessions.append({"id": child, "parent": parent, "dir": f"sessions/{child}"})
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _write(tar_path=tmp, store=store, c=c)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return BundleResult(out, tuple(s["id"] for s in c.sessions), len(c.files), tuple(c.unreadable))


def _write(tar_path: Path, store: SessionStore, c: Collection) -> None:
    with tarfile.open(tar_path, "w:gz") as tar:
        for s in c.sessions:
            for arc, path in _members(store.dir(s["id"]), s["dir"], c):
                if path.resolve() == tar_path.resolve():  # the archive being written (run from inside a session)
                    continue
                try:  # one file in memory at a time: a file that shrinks while read cannot corrupt the archive
                    with open(path, "rb") as f:
                        data = f.read()
                        mtime = os.fstat(f.fileno()).st_mtime
                except OSError as e:
                    c.unreadable.append({"path": arc, "error": f"{type(e).__name__}: {e.strerror or e}"})
                    continue
                _add(tar, arc, data, mtime)
                c.files.append({"path": arc, "bytes": len(data)})
        manifest = {"created_at": time.time(), **asdict(c)}
        _add(tar, MANIFEST, json.dumps(manifest, ensure_ascii=False, indent=1).encode(), time.time())


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o600
    tar.addfile(info, io.BytesIO(data))
