"""Comments cite docs/architecture.md by heading, and every heading they cite exists.

The design lives in docs/architecture.md; a comment that justifies itself names one of its
headings. Ids from elsewhere ("(P4)", "issue 9") mean nothing to a reader of this repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("agent", "bench", "cli", "inspector", "proxy", "scripts", "simulator", "tests", "vocab", "web")
SUFFIXES = {".py", ".js", ".html", ".css", ".sh"}
CITATION = re.compile(r'docs/architecture\.md,\s*"([^"]+)"')
# A capital letter and one or two digits in parentheses (alone or in a list), or the word "issue"
# and a number: ids the repository does not define, so a comment must not carry them (the rule opens
# docs/architecture.md). S and a number is left out: it is the agent's own source-reference id
# (agent/provenance/refs.py).
_ID = r"[A-RT-Z]\d{1,2}"
FOREIGN_ID = re.compile(rf"\((?:{_ID})(?:\s*[,/]\s*{_ID})*\)|\b[Ii]ssue #?\d+\b")


def _sources() -> list[Path]:
    return sorted(
        p
        for folder in FOLDERS
        for p in (ROOT / folder).rglob("*")
        if p.suffix in SUFFIXES and p.is_file() and p != Path(__file__)
    )


def _headings() -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{2,4}\s+(.+)$", DOC.read_text(), re.MULTILINE)}


def _one_line(heading: str) -> str:
    """A heading as cited across a line break in a comment or docstring: words joined by one space."""
    return " ".join(w for w in heading.split() if w != "#")


def test_every_cited_heading_exists():
    headings = _headings()
    cited = [(p, _one_line(m.group(1))) for p in _sources() for m in CITATION.finditer(p.read_text(errors="replace"))]
    assert cited, "no citation found: the pattern no longer matches how comments cite the design"
    missing = [f'{p.relative_to(ROOT)}: "{h}"' for p, h in cited if h not in headings]
    assert not missing, "citations of headings docs/architecture.md lacks:\n" + "\n".join(missing)


def test_the_foreign_id_pattern_catches_what_it_should():
    for text in ("see (P4)", "(C5, G4)", "(I3/I6)", "fixed in issue 9", "Issue #12"):
        assert FOREIGN_ID.search(text), text
    for text in ("source [S3] and (S3)", "call (a)", "UTF-8", "H0 rung", "array[2]"):
        assert not FOREIGN_ID.search(text), text


def test_no_source_cites_an_id_the_repository_does_not_define():
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in _sources()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if FOREIGN_ID.search(line)
    ]
    assert not bad, "\n".join(bad)
