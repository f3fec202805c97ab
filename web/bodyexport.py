"""A stored body as bytes for a download, keys masked: ``inspector/share/bodies.py`` (shared with
the CLI and the exports)."""

from __future__ import annotations

from ctxscope.inspector.share.bodies import BodyExport, export_body

__all__ = ["BodyExport", "export_body"]
