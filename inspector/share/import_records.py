"""A file to import as records read twice: once to check them all and plan the order, once to store each.

Nothing is written until the whole file has been read and every call in it checked, so a bad file
changes nothing; yet neither pass holds more than one call. The first pass keeps, per call, only
where its record lies (``Planned``: a few dozen bytes); the second reads each record again in
capture order, from the HAR itself or, for a bundle (compressed, so not seekable), from a private
temporary file of its decoded lines written during the first pass (its size is bounded by
``--max-size``). docs/architecture.md, "Export and import go through the writer's ingest".
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from ctxscope.inspector.share.bundle import bundle_lines, call_from_line
from ctxscope.inspector.share.exchanges import BadExport
from ctxscope.inspector.share.file_limits import line_cap, parse_json
from ctxscope.inspector.share.har import exchange_from_entry, har_analysis
from ctxscope.inspector.share.har_stream import har_entries
from ctxscope.inspector.share.imported import BadImport, check_label
from ctxscope.proxy.exchange import Exchange


@dataclass(frozen=True)
class Planned:
    """Where one checked call's record lies, and what orders it."""

    started_at: float
    call_id: str
    epoch: int | None
    n: int  # its place in the file
    offset: int
    length: int


@dataclass(frozen=True)
class Loaded:
    exchange: Exchange
    epoch: int | None
    analysis: dict | None  # the analysis the file carried, to check the new one against


class Records(Protocol):
    """A file's calls: ``scan`` checks each (BadExport on the first bad one), ``load`` reads one again."""

    kind: str

    def scan(self) -> Iterator[Planned]: ...

    def load(self, p: Planned) -> Loaded: ...

    def progress(self) -> tuple[int, int]:
        """(bytes of the file read, its size)."""
        ...

    def close(self) -> None: ...


class HarRecords:
    """A HAR, its entries streamed (``share/har_stream.py``) and read again by offset."""

    kind = "har"

    def __init__(self, path: Path, label: str | None, max_bytes: int):
        try:
            check_label(label)
        except BadImport as exc:
            raise BadExport(str(exc)) from None
        self.label, self.max_entry = label, line_cap(max_bytes)
        self.f: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.size = path.stat().st_size

    def scan(self) -> Iterator[Planned]:
        self.f.seek(0)
        for raw in har_entries(self.f, self.max_entry):
            ex, epoch = exchange_from_entry(raw.entry, raw.n, self.label)
            yield Planned(ex.started_at, ex.id, epoch, raw.n, raw.offset, raw.length)

    def load(self, p: Planned) -> Loaded:
        self.f.seek(p.offset)
        entry = parse_json(self.f.read(p.length), f"HAR entry {p.n}")
        ex, epoch = exchange_from_entry(entry, p.n, self.label)
        return Loaded(ex, epoch, har_analysis(entry))

    def progress(self) -> tuple[int, int]:
        return self.f.tell(), self.size

    def close(self) -> None:
        self.f.close()


class BundleRecords:
    """A bundle, decompressed as a stream once; its lines kept in a private unlinked file."""

    kind = "bundle"

    def __init__(self, path: Path, max_bytes: int):
        self.header, self.lines = bundle_lines(path, max_bytes)
        self.f: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close(); mode 0600, unlinked
        self.size, self.path = path.stat().st_size, path

    def scan(self) -> Iterator[Planned]:
        for n, text in enumerate(self.lines, 1):
            ex, epoch, _ = call_from_line(text, n)
            offset = self.f.tell()
            self.f.write(text)
            yield Planned(ex.started_at, ex.id, epoch, n, offset, len(text))

    def load(self, p: Planned) -> Loaded:
        self.f.seek(p.offset)
        ex, epoch, analysis = call_from_line(self.f.read(p.length), p.n)
        return Loaded(ex, epoch, analysis)

    def progress(self) -> tuple[int, int]:
        return self.f.tell(), 0  # (decoded bytes: the compressed size says little)

    def close(self) -> None:
        self.f.close()
        self.lines.close()


def open_records(path: Path, label: str | None, max_bytes: int) -> Records:
    """The records of a bundle or a HAR (by its first bytes); BadExport when it is neither."""
    from ctxscope.inspector.share.bundle import is_bundle

    if is_bundle(path):
        return BundleRecords(path, max_bytes)
    return HarRecords(path, label, max_bytes)
