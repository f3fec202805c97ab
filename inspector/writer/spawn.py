"""Starting a spawned child process without running the parent's main module again."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def main_not_rerun() -> Iterator[None]:
    """Start a spawned child without it running this process's ``__main__`` again.

    A spawned child re-imports the parent's main module by default; under ``ctxscope serve`` that
    is the CLI, which imports click, the proxy's server, the web routes and the simulator. The
    child needs none of them (its target and analyzers are imported by name), so while it starts
    the main module shows neither a file nor a spec (docs/architecture.md, "The writer child
    imports only the inspector").
    """
    main = sys.modules["__main__"]
    saved: dict[str, object] = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)
