"""Citations in an answer: rewrite the forms models use into one, and tell which known sources it cites.

Canonical forms: ``[S4]`` for a source with a marker (one bracket per id: ``[S4][S7]``) and
``[path:10-24]`` / ``[path:10]`` / ``[path]`` for a file. Rewritten outside code only, and only
when every id or path in the citation is a source of this session (an unknown id is left as the
model wrote it and reported). Accepted variants: ``[^S4]``, ``[[S4]]``, ``【S4】``, ``[s 4]``,
``[S4, S7]``, ``[source: S4]``, ``[source 4]``, ``(source S4)``, ``(see S4)``; for files
``[path#L10-L24]``, ``[path:L10-24]``, ``[path, lines 10–24]``. A bare ``(S3)`` is left alone:
it is too often something else (Amazon S3).

What counts as citing a source is deliberately generous, so that the retry stays rare: a
canonical id, or the source's path, file name (when it has an extension), URL or MCP locator
written anywhere in the answer, code included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from .refs import SourceCatalog, norm_path

_CODE = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`", re.DOTALL)
_OPEN, _CLOSE = r"(?:\[\^|\[\[|\[|【|［)", r"(?:\]\]|\]|】|］)"
_PREFIX = r"(?:sources?|src|refs?|see)\s*:?\s*"
_SEP = r"\s*(?:,|;|&|/|\band\b)\s*"
_STRICT = r"[Ss]\s?\d{1,5}"
_LOOSE = r"(?:[Ss]\s?)?#?\d{1,5}"
_PLAIN_IDS = re.compile(rf"{_OPEN}\s*(?P<ids>{_STRICT}(?:{_SEP}{_STRICT})*)\s*{_CLOSE}")
_PREFIXED_IDS = re.compile(rf"{_OPEN}\s*{_PREFIX}(?P<ids>{_LOOSE}(?:{_SEP}{_LOOSE})*)\s*{_CLOSE}", re.IGNORECASE)
_PAREN_IDS = re.compile(rf"\(\s*{_PREFIX}(?P<ids>{_LOOSE}(?:{_SEP}{_LOOSE})*)\s*\)", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_FILE = re.compile(
    r"\[\s*`?(?P<path>[^\[\]`\s:#,()]+)`?\s*"
    r"(?:(?::|#)\s*L?(?P<a>\d+)(?:\s*[-–—]\s*L?(?P<b>\d+))?"
    r"|,?\s*\(?\s*lines?\s+(?P<c>\d+)(?:\s*[-–—]\s*(?P<d>\d+))?\s*\)?)?\s*\](?!\()"
)
_CANONICAL_ID = re.compile(r"\[(S\d{1,5})\]")


@dataclass(frozen=True)
class Citations:
    text: str  # the answer with citations in canonical form
    cited: tuple[str, ...]  # ids of this session's sources the answer cites or names, in order
    unknown: tuple[str, ...]  # ids cited that are not sources of this session
    rewritten: int  # citations whose form changed


class _Rewriter:
    def __init__(self, catalog: SourceCatalog) -> None:
        self.catalog = catalog
        self.unknown: list[str] = []
        self.rewritten = 0

    def ids(self, m: re.Match[str]) -> str:
        ids = [f"S{int(d)}" for d in _DIGITS.findall(m.group("ids"))]
        missing = [i for i in ids if self.catalog.get(i) is None]
        if missing:
            self.unknown += missing
            return m.group(0)
        return self._count(m.group(0), "".join(f"[{i}]" for i in dict.fromkeys(ids)))

    def file(self, m: re.Match[str]) -> str:
        path = norm_path(m.group("path"))
        if not path or not self.catalog.by_path(path):
            return m.group(0)
        a, b = m.group("a") or m.group("c"), m.group("b") or m.group("d")
        span = "" if a is None else f":{int(a)}" if b is None or int(a) == int(b) else f":{int(a)}-{int(b)}"
        return self._count(m.group(0), f"[{path}{span}]")

    def _count(self, before: str, after: str) -> str:
        if after != before:
            self.rewritten += 1
        return after

    def prose(self, text: str) -> str:
        text = _PREFIXED_IDS.sub(self.ids, text)
        text = _PAREN_IDS.sub(self.ids, text)
        text = _PLAIN_IDS.sub(self.ids, text)
        return _FILE.sub(self.file, text)


def rewrite(text: str, catalog: SourceCatalog) -> tuple[str, list[str], int]:
    """Canonical citations outside code; (text, unknown ids, how many were rewritten)."""
    r = _Rewriter(catalog)
    out, last = [], 0
    for m in _CODE.finditer(text):
        out += [r.prose(text[last : m.start()]), m.group(0)]
        last = m.end()
    out.append(r.prose(text[last:]))
    return "".join(out), r.unknown, r.rewritten


def _file_name_named(name: str, text: str) -> bool:
    if "." not in name.strip(".") or len(name) < 4:
        return False
    return re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w-])", text) is not None


def cited_sources(text: str, catalog: SourceCatalog) -> list[str]:
    """Ids of known sources the answer cites by id or names by path, file name, URL or locator."""
    cited: dict[str, None] = {}
    for m in _CANONICAL_ID.finditer(text):
        if catalog.get(m.group(1)) is not None:
            cited[m.group(1)] = None
    for path in catalog.paths:
        if path in text or _file_name_named(PurePosixPath(path).name, text):
            cited.update((r.id, None) for r in catalog.by_path(path))
    for url in catalog.urls:
        bare = url.split("://", 1)[-1]
        if url in text or bare in text:
            cited.update((r.id, None) for r in catalog.by_url(url))
    for ref in catalog:
        if ref.kind == "mcp" and ref.id not in cited and ref.locator in text:
            cited[ref.id] = None
    return list(cited)


def normalise(text: str, catalog: SourceCatalog) -> Citations:
    """The answer with canonical citations, and the sources it cites."""
    out, unknown, rewritten = rewrite(text, catalog)
    return Citations(out, tuple(cited_sources(out, catalog)), tuple(dict.fromkeys(unknown)), rewritten)
