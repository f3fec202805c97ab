"""``share/har_stream.py`` against the stdlib parser: every valid layout (indent, separators,
escapes, a byte order mark, ``entries`` before or after the rest) gives the entries ``json.loads``
gives, with offsets that read each back, whatever the chunk size; every cut of a valid file, and
each malformed one, is a BadExport that names where."""

from __future__ import annotations

import io
import json
import random

import pytest

from ctxscope.inspector.share.exchanges import BadExport
from ctxscope.inspector.share.har_stream import _Reader, har_entries


def entries_of(data: bytes, chunk: int, limit: int = 1 << 20) -> list:
    f = io.BytesIO(data)
    reader = _Reader(f, limit, chunk)
    out = []
    for raw in har_entries(f, limit, reader):
        assert json.loads(data[raw.offset : raw.offset + raw.length]) == raw.entry
        out.append(raw.entry)
    return out


def documents(seed: int, count: int = 60):
    rnd = random.Random(seed)
    for _ in range(count):
        entries = [
            {
                "x": rnd.random() * 10 ** rnd.randint(0, 30),
                "s": 'é"\\\u2028😀\x00' * rnd.randint(0, 5),
                "n": [1, -2, {"a": None, "b": True}],
                "k": 12345678901234567890,
            }
            for _ in range(rnd.randint(0, 4))
        ]
        if rnd.random() < 0.5:
            doc: dict = {"log": {"version": "1.2", "creator": {"name": "é"}, "pages": [], "entries": entries}}
        else:
            doc = {"log": {"entries": entries, "creator": {"name": "x"}, "version": 1.25e10, "w": -1e-5}, "z": [1]}
        data = json.dumps(
            doc,
            indent=rnd.choice([None, 0, 2]),
            ensure_ascii=rnd.random() < 0.5,
            separators=rnd.choice([None, (",", ":"), (" , ", " : ")]),
        ).encode()
        data = (b"\xef\xbb\xbf" if rnd.random() < 0.3 else b"") + data + (b" \n" if rnd.random() < 0.3 else b"")
        yield data, entries


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 20])
def test_any_valid_layout_gives_the_entries_the_stdlib_gives(chunk):
    for data, entries in documents(chunk):
        assert entries_of(data, chunk) == entries


def test_every_cut_of_a_valid_file_is_refused():
    for data, _ in documents(7, 6):
        for cut in range(len(data.rstrip())):
            if not data[:cut].strip(b" \n\xef\xbb\xbf"):
                continue
            with pytest.raises(BadExport, match=r"byte|not a HAR"):
                entries_of(data[:cut], 5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"log":{"entries":[]}} x', "not JSON at byte 23: something follows the document"),
        (b'{"log":{"entries":[{},]}}', "not JSON at byte 22: Expecting value"),
        (b'{"log":{"entries":[{"a":1,}]}}', "not JSON at byte 26: Expecting property name"),
        (b'{"log":{"entries":[{"a":"\xff"}]}}', "not UTF-8 at byte 25"),
        (b'{"log":{"entries":[{"a":"x\ny"}]}}', "not JSON at byte 26: Invalid control character"),
        (b'{"log":{"entries":[{"a":1}]}', "ends at byte 28, inside the file"),
        (b'{"log":{"entries":{}}}', "log.entries is not a list"),
        (b'{"log":{"entries":[1]}}', "HAR entry 0 is not an object"),
        (b'{"log":[]}', "no log.entries"),
        (b'{"log":{"entries":[]},"log":{"entries":[]}}', "two logs"),
        (b"", "ends at byte 0"),
    ],
)
def test_malformed_files_name_what_and_where(data, message):
    with pytest.raises(BadExport, match=message):
        entries_of(data, 4)


def test_a_value_over_the_limit_is_refused_before_it_is_read_whole():
    data = b'{"log":{"entries":[{"a":"' + b"x" * 100_000 + b'"}]}}'
    f = io.BytesIO(data)
    reader = _Reader(f, 10_000, 1_000)
    with pytest.raises(BadExport, match="HAR entry 0 is over"):
        list(har_entries(f, 10_000, reader))
    assert reader.read_bytes < 40_000  # about the limit read, not the whole value
