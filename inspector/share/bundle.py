"""ctxscope's own export: a session's calls as raw bytes plus their analysis, in one compressed file.

The file is zstd-compressed JSON Lines: a header line (``format``, ``version``, counts), then one
line per call, in capture order: the Exchange's fields (bodies in base64, masked where they held a
key: ``share/bodies.py``), its capture epoch and the analysis it had. Only data: reading it runs
nothing (docs/architecture.md, "Exports never carry a key").
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ctxscope.inspector.share.exchanges import BadExport, Exported, exchange_fields, exchange_from_fields
from ctxscope.proxy.exchange import Exchange

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd

FORMAT, VERSION = "ctxscope-bundle", 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_LINE = 1 << 31  # a call line longer than this is not ours


def write_bundle(path: Path, calls: Iterable[Exported], header: dict[str, Any]) -> Iterator[str]:
    """Write the bundle, yielding each call id as it is written."""
    with zstd.open(path, "wb") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as out:
        out.write(json.dumps({"format": FORMAT, "version": VERSION, **header}) + "\n")
        for e in calls:
            line = {"exchange": exchange_fields(e.exchange), "capture_epoch": e.capture_epoch, "analysis": e.analysis}
            out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str) + "\n")
            yield e.exchange.id


def is_bundle(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == ZSTD_MAGIC


def read_bundle(path: Path) -> tuple[dict, Iterator[tuple[Exchange, int, dict]]]:
    """(header, calls): each call as (Exchange, capture epoch, analysis). BadExport when the file is
    not a bundle of this version or a line is malformed."""
    raw = zstd.open(path, "rb")
    text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
    try:
        header = json.loads(text.readline(MAX_LINE) or "null")
    except (ValueError, zstd.ZstdError, UnicodeDecodeError) as exc:
        text.close()
        raise BadExport(f"not a ctxscope bundle: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        text.close()
        raise BadExport("not a ctxscope bundle")
    if header.get("version") != VERSION:
        text.close()
        raise BadExport(f"bundle version {header.get('version')!r}; this ctxscope reads version {VERSION}")

    def calls() -> Iterator[tuple[Exchange, int, dict]]:
        with text:
            for n, line in enumerate(text, 1):
                try:
                    item = json.loads(line)
                    yield exchange_from_fields(item["exchange"]), int(item.get("capture_epoch") or 0), dict(
                        item.get("analysis") or {})
                except BadExport as exc:
                    raise BadExport(f"bundle call {n}: {exc}") from exc
                except (ValueError, KeyError, TypeError, zstd.ZstdError) as exc:
                    raise BadExport(f"bundle call {n}: {type(exc).__name__}: {exc}") from exc

    return header, calls()
