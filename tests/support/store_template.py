"""An empty capture store, migrated once per pytest worker and copied for each in-process daemon.

A daemon started on a new file migrates it in a short-lived process of its own (``migrate_apart``,
docs/architecture.md, "Memory"): about 0.35 s of CPU, a third of what a daemon's start costs the
suite. The daemons of the ``proxy`` and web fixtures test capture, not migration, so they start on
a copy of a store that very code migrated; the installed command (``running_serve``), the
migration tests and the writer tests still start on new files."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_template: Path | None = None


def _migrated_template() -> Path:
    global _template
    if _template is None:
        from ctxscope.inspector.writer.child.life import _MIGRATE

        folder = Path(tempfile.mkdtemp(prefix="ctxscope-store-template-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "template.db"
        subprocess.run([sys.executable, "-c", _MIGRATE, str(path)], stdin=subprocess.DEVNULL, check=True)
        assert path.exists() and not Path(f"{path}-wal").exists(), "the template store was not closed cleanly"
        _template = path
    return _template


def fresh_store(db_path: Path) -> Path:
    """``db_path`` as a new, empty, migrated store (owner-only, as the daemon makes it), unless the
    test put a file there already (a store it built, or one that must fail to open)."""
    if not db_path.exists():
        shutil.copy(_migrated_template(), db_path)  # copies the mode bits: 0600
    return db_path
