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
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

from ctxscope.inspector.share.exchanges import BadExport, Exported, exchange_fields, exchange_from_fields
from ctxscope.inspector.share.file_limits import MAX_IMPORT_BYTES, CappedStream, line_cap, mib, parse_json
from ctxscope.inspector.share.imported import BadImport, mark_imported
from ctxscope.proxy.exchange import Exchange

if sys.version_info >= (3, 14):  # mypy checks the branch of its python_version only
    from compression import zstd
else:
    from backports import zstd

FORMAT, VERSION = "ctxscope-bundle", 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


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


def bundle_lines(path: Path, max_bytes: int = MAX_IMPORT_BYTES) -> tuple[dict, Generator[bytes, None, None]]:
    """(header, lines): each call's line as bytes, the stream closed at the end. BadExport when the
    file is not a bundle of this version, a line is over ``line_cap(max_bytes)``, or it decodes to
    more than ``max_bytes`` (decompressed as a stream that stops there: a bomb costs no more than a line)."""
    stream = io.BufferedReader(CappedStream(zstd.open(path, "rb"), max_bytes, "the bundle"))

    max_line = line_cap(max_bytes)

    def line() -> bytes:
        data = stream.readline(max_line + 1)
        if len(data) > max_line:
            raise BadExport(f"a line of the bundle is over {mib(max_line)} (--max-size raises the limit)")
        return data

    try:
        header = parse_json(line() or b"null", "the bundle's header")
    except (BadExport, zstd.ZstdError, OSError, EOFError) as exc:
        stream.close()
        raise BadExport(f"not a ctxscope bundle: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        stream.close()
        raise BadExport("not a ctxscope bundle")
    if header.get("version") != VERSION:
        stream.close()
        raise BadExport(f"bundle version {header.get('version')!r}; this ctxscope reads version {VERSION}")

    def lines() -> Generator[bytes, None, None]:
        with stream:
            n = 0
            while True:
                n += 1
                try:
                    text = line()
                except BadExport as exc:
                    raise BadExport(f"bundle call {n}: {exc}") from None
                except (ValueError, zstd.ZstdError, OSError, EOFError) as exc:
                    raise BadExport(f"bundle call {n}: {type(exc).__name__}: {exc}") from None
                if not text:
                    return
                yield text

    return header, lines()


def call_from_line(text: bytes, n: int) -> tuple[Exchange, int, dict]:
    """A bundle's call line as (Exchange, capture epoch, analysis), checked and marked as imported
    (``share/imported.py``); BadExport naming call ``n`` when it is malformed."""
    try:
        item = parse_json(text, "the line")
        return (
            mark_imported(exchange_from_fields(item["exchange"]), FORMAT),
            int(item.get("capture_epoch") or 0),
            dict(item.get("analysis") or {}),
        )
    except (BadExport, BadImport) as exc:
        raise BadExport(f"bundle call {n}: {exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadExport(f"bundle call {n}: {type(exc).__name__}: {exc}") from None
