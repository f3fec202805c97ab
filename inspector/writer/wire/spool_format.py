"""The spool's record format, which cannot run code whoever wrote the file.

A spool is a 16-byte header (magic and version), then records, each an 8-byte little-endian
payload length, the payload's CRC32 (4 bytes) and the payload: a 4-byte length, a JSON list of the
calls' fields with each body replaced by its length, then the bodies' raw bytes (no copy or base64
of a 1 MB body on the way in). Reading is strict: a field of the wrong type, a length that does not
add up or a checksum that does not match makes the record corrupt, and a declared length is only
trusted (allocated) once the checksum over those bytes matched.

Since version 3 a body may also be written as pieces of the file before its record, then its own
bytes: ``[n, offset, length, ...]`` in place of its length ``n`` (docs/architecture.md, "New
bytes only"). The pieces must lie between the header and the record, in order, without overlap,
so a body can never be longer than the file before it. Version 2 files read the same way.

Since version 4 a time (a float field) is written as the 16 hex digits of its 8 bytes (IEEE 754,
little-endian), which read back as the same float: ``repr`` of a Unix time took ~7.8K
instructions (the shortest decimal that rounds back), these ~1K, and ``float.hex`` ~2.6K; the
three times were a quarter of the feeder's cost per small call (docs/architecture.md, "Messages
between the writer and its child"). Older files, with JSON numbers there, read as before.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Protocol

from ctxscope.inspector.base import json_text
from ctxscope.inspector.base.json_splice import MARK, RepeatedTexts, splice
from ctxscope.inspector.writer.wire.call_fields import (
    BODIES,
    ENDED,
    FIELDS,
    FIRST_BYTE,
    FLOATS,
    NAMES,
    PAIRS,
    REQUEST_BODY,
    REQUEST_HEADERS,
    REQUIRED,
    RESPONSE_BODY,
    RESPONSE_HEADERS,
    STARTED,
    VALID,
    default_of,
)

MAGIC = b"ctxscope-spool\0"
VERSION = 4
HEADER = MAGIC + bytes([VERSION])
# version 3 writes times as numbers, version 2 also has no pieces: both read as version 4 does
READABLE = (HEADER, MAGIC + bytes([3]), MAGIC + bytes([2]))
MAX_PIECES = 64  # pieces of earlier records one body may be made of
_RECORD = struct.Struct("<QI")  # payload length, CRC32 of the payload
_JSON_LEN = struct.Struct("<I")
_TIME = struct.Struct("<d")  # a time in a field list (version 4): these 8 bytes, in hex
_IOV_MAX = 512  # pieces per writev call (the system limit is at least 1024)
_CHECK_PIECE = 1 << 20  # bytes read at a time to verify a record's checksum
_ONE_READ = 8 << 10  # a record up to this size is read whole, with its head (a larger read costs its copy)


class SpoolCorrupt(ValueError):
    """A record that is complete but not what a writer wrote: wrong checksum, type or length."""


class Torn(Exception):
    """The file ends inside a record: a crash mid-append."""


# The calls' fields are plain values and tuples of them, which cannot form a cycle: the encoder's
# cycle check cost a fifth of the feeder's encoding time (6.2 -> 5.1 us per small call).
_ENCODE = json_text.encoder(ensure_ascii=True, default=str)


class Referrer(Protocol):
    """What the proxy remembers of the large request bodies it sent (``body_delta.SentBodies``)."""

    compared: range  # the lengths of the request bodies ``refer`` looks at (it passes over the others)

    def refer(self, body: bytes) -> tuple[int, int] | None: ...


def payload_pieces(batch: list[tuple], sent: Referrer | None = None) -> list:
    """The pieces of one record's payload for a batch of Exchange field tuples: the field list's
    length, the list (each body replaced by its length), then the bodies themselves, not copied.
    With ``sent`` (a hand-over on the pipe), a request body that repeats one sent before is
    ``[own, number, shared]`` and only its own bytes follow (docs/architecture.md, "New bytes only")."""
    return payload_and_size(batch, sent)[0]


def payload_and_size(
    batch: list[tuple], sent: Referrer | None = None, headers: RepeatedTexts | None = None
) -> tuple[list, int]:
    """``payload_pieces`` and the batch's body bytes, whole (``call_size`` summed), in one pass;
    with ``headers``, the header lists the batch repeats are spliced in as the texts it remembers.

    This is the feeder's work per call, on the daemon's interpreter lock: the loop is unrolled
    over the two bodies and the three times, and a body outside the sizes ``sent`` compares is
    not offered to it (docs/architecture.md, "Messages between the writer and its child")."""
    heads: list[list] = []
    bodies: list = []
    add_head, add_body = heads.append, bodies.append
    refer = sent.refer if sent is not None else None
    compared = sent.compared if sent is not None else ()
    bits = _TIME.pack
    texts: list[str] = []
    add_text = texts.append
    requests = responses = False
    if headers is not None:
        requests, responses = headers.worth(batch, REQUEST_HEADERS), headers.worth(batch, RESPONSE_HEADERS)
        get, add = headers.get, headers.add
    size = 0
    for fields in batch:
        head = list(fields)
        if requests:
            listed = fields[REQUEST_HEADERS]
            known = get(listed)
            add_text(known if known is not None else add(listed, _ENCODE(listed)))
            head[REQUEST_HEADERS] = MARK
        if responses:
            listed = fields[RESPONSE_HEADERS]
            known = get(listed)
            add_text(known if known is not None else add(listed, _ENCODE(listed)))
            head[RESPONSE_HEADERS] = MARK
        body = fields[REQUEST_BODY]
        n = len(body)
        size += n
        ref = refer(body) if n in compared and refer is not None else None
        if ref is None:
            head[REQUEST_BODY] = n
            add_body(body)
        else:
            number, shared = ref
            head[REQUEST_BODY] = [n - shared, number, shared]
            add_body(memoryview(body)[shared:])
        body = fields[RESPONSE_BODY]
        n = len(body)
        size += n
        head[RESPONSE_BODY] = n
        add_body(body)
        t = head[STARTED]
        if t.__class__ is float:
            head[STARTED] = bits(t).hex()
        t = head[FIRST_BYTE]
        if t.__class__ is float:
            head[FIRST_BYTE] = bits(t).hex()
        t = head[ENDED]
        if t.__class__ is float:
            head[ENDED] = bits(t).hex()
        add_head(head)
    text = _ENCODE(heads)
    if texts:
        spliced = splice(text, texts)
        if spliced is None:  # a field list held MARK itself: the lists go in place after all
            for head, fields in zip(heads, batch, strict=True):
                head[REQUEST_HEADERS], head[RESPONSE_HEADERS] = fields[REQUEST_HEADERS], fields[RESPONSE_HEADERS]
            spliced = _ENCODE(heads)
        text = spliced
    data = text.encode()
    return [_JSON_LEN.pack(len(data)), data, *bodies], size


RECORD_HEAD = _RECORD.size  # bytes of a record before its payload


def bodies_start(payload: bytes | bytearray) -> int:
    """Where the bodies begin in a payload (after its field lists)."""
    return _JSON_LEN.size + _JSON_LEN.unpack_from(payload)[0]


def heads_of(payload: bytes | bytearray) -> tuple[list, int]:
    """The field lists of a payload this process's proxy encoded, and where its bodies begin."""
    at = bodies_start(payload)
    return json.loads(payload[_JSON_LEN.size : at]), at


def payload_parts(heads: list, bodies: Sequence[bytes | bytearray | memoryview]) -> list:
    """A payload's pieces for field lists whose bodies (or their own bytes) are ``bodies``."""
    text = _ENCODE(heads).encode()
    return [_JSON_LEN.pack(len(text)), text, *bodies]


def record_head(pieces: Sequence[bytes | bytearray]) -> bytes:
    """A record's header (payload length and CRC32) for the pieces of its payload."""
    crc, size = 0, 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += len(piece)
    return _RECORD.pack(size, crc)


def encode(batch: list[tuple]) -> list[bytes]:
    """The pieces of one record (header first) for a batch of Exchange field tuples."""
    pieces = payload_pieces(batch)
    return [record_head(pieces), *pieces]


# A record of no calls: everything before it is stored. A writer appends it instead of emptying
# its spool after a pause, so the next large bodies can still be written as the new bytes they add
# to those in it (docs/architecture.md, "New bytes only"). Its header alone tells it apart.
STORED_MARK = b"".join(encode([]))
_MARK_HEAD = STORED_MARK[: _RECORD.size]


_MAX_SCAN = 1 << 17  # record headers read looking for the last mark (a planted file of tiny records stops there)


def stored_up_to(fd: int, size: int) -> int:
    """The offset after the last ``STORED_MARK`` of a spool of ``size`` bytes (after its header
    when there is none): the records before it are stored. Reads only the records' headers, at
    most _MAX_SCAN of them (past that, what follows counts as not stored: read again, never lost)."""
    at = last = len(HEADER)
    for _ in range(_MAX_SCAN):
        if at + _RECORD.size > size:
            break
        head = os.pread(fd, _RECORD.size, at)
        if len(head) < _RECORD.size:
            break
        n, _ = _RECORD.unpack(head)
        if n > size - at - _RECORD.size:
            break  # torn: the readers say so
        at += _RECORD.size + n
        if head == _MARK_HEAD:
            last = at
    return last


Read = Callable[[int, int], bytes]  # (offset, length) -> those bytes


def decode(payload: bytes | bytearray) -> list[tuple]:
    """The batch in a record's payload (its checksum already verified), outside any file: a body
    made of pieces is corrupt here; SpoolCorrupt if malformed."""
    view = memoryview(payload)
    return _decode(lambda at, n: bytes(view[at : at + n]), len(payload))


def _decode(read: Read, size: int, file: Read | None = None, record_at: int = 0) -> list[tuple]:
    """The batch of a ``size``-byte payload whose bytes ``read(offset, length)`` gives; ``file``
    reads the spool itself, for bodies made of pieces of the records before ``record_at``."""
    if size < _JSON_LEN.size:
        raise SpoolCorrupt("record too short")
    (n,) = _JSON_LEN.unpack(read(0, _JSON_LEN.size))
    at = _JSON_LEN.size + n
    if at > size:
        raise SpoolCorrupt("field list longer than its record")
    try:
        heads = json.loads(read(_JSON_LEN.size, n))
    except (ValueError, RecursionError) as exc:
        raise SpoolCorrupt(f"unreadable field list ({exc})") from None
    if not isinstance(heads, list):
        raise SpoolCorrupt("the field list is not a list")
    batch = []
    for head in heads:
        if not isinstance(head, list) or not REQUIRED <= len(head) <= len(VALID):
            raise SpoolCorrupt("a call with the wrong number of fields")
        for field in FIELDS[len(head) :]:
            head.append(default_of(field))
        for field, valid, value in zip(FIELDS, VALID, head, strict=False):
            if not valid(value):
                raise SpoolCorrupt(f"field {field.name} has the wrong type")
        for i in BODIES:
            pieces = _pieces(head[i], file, record_at) if isinstance(head[i], list) else ()
            own = head[i][0] if pieces else head[i]
            end = at + own
            if end > size:
                raise SpoolCorrupt("a body longer than its record")
            if pieces:
                head[i] = b"".join([*(file(o, n) for o, n in pieces), read(at, own)])  # type: ignore[misc]  # mypy: a starred generator in a list display
            else:
                head[i] = read(at, own)
            at = end
        for i in PAIRS:
            head[i] = tuple((k, v) for k, v in head[i])
        for i in FLOATS:
            value = head[i]
            if value.__class__ is str:
                try:
                    (head[i],) = _TIME.unpack(bytes.fromhex(value))
                except (ValueError, struct.error):
                    raise SpoolCorrupt(f"field {NAMES[i]} is not a time") from None
            elif value is not None:
                head[i] = float(value)
        batch.append(tuple(head))
    if at != size:
        raise SpoolCorrupt("bytes left over after the last body")
    return batch


def _pieces(field: list, file: Read | None, record_at: int) -> list[tuple[int, int]]:
    """The (offset, length) pieces of a body written as ``[n, offset, length, ...]``, checked."""
    if file is None:
        raise SpoolCorrupt("a body made of pieces of a spool, outside a spool")
    if len(field) < 3 or len(field) % 2 == 0 or len(field) > 1 + 2 * MAX_PIECES:
        raise SpoolCorrupt("a body's pieces are not offset and length pairs")
    if not all(type(v) is int and v >= 0 for v in field):
        raise SpoolCorrupt("a body's pieces are not offsets and lengths")
    pieces, end = [], len(HEADER)
    for offset, length in zip(field[1::2], field[2::2], strict=True):
        if offset < end or length == 0 or offset + length > record_at:
            raise SpoolCorrupt("a body's pieces are not in order within the records before it")
        pieces.append((offset, length))
        end = offset + length
    return pieces


def read_record(fd: int, at: int, size: int, verify: bool = True) -> tuple[list[tuple], int]:
    """The batch of the record at ``at`` and the offset after it. ``verify=False`` skips the
    checksum (a writer reading back what it appended itself moments ago: 0.2 ms per MB saved) and
    reads each body straight into its own ``bytes``, not into the payload and out again.

    A record of up to _ONE_READ bytes (a small call's) comes in the read of its head: one system
    call, where reading its parts one by one took five."""
    head = os.pread(fd, min(_ONE_READ, max(size - at, 0)), at)
    if len(head) < _RECORD.size:
        raise Torn
    n, crc = _RECORD.unpack_from(head)
    if n > size - at - _RECORD.size:
        raise Torn
    start = at + _RECORD.size

    def file(offset: int, length: int) -> bytes:
        return _pread_exact(fd, length, offset)

    if _RECORD.size + n <= len(head):
        view = memoryview(head)[_RECORD.size : _RECORD.size + n]
        if verify and zlib.crc32(view) != crc:
            raise SpoolCorrupt("checksum mismatch")
        return _decode(lambda offset, length: bytes(view[offset : offset + length]), n, file, at), start + n
    if not verify:
        return _decode(lambda offset, length: file(start + offset, length), n, file, at), start + n
    if _checksum(fd, start, n) != crc:
        raise SpoolCorrupt("checksum mismatch")
    payload = os.pread(fd, n, start)
    if len(payload) < n:
        raise Torn
    view = memoryview(payload)
    return _decode(lambda offset, length: bytes(view[offset : offset + length]), n, file, at), start + n


def _pread_exact(fd: int, n: int, at: int) -> bytes:
    data = os.pread(fd, n, at)
    if len(data) < n:
        raise Torn
    return data


def _checksum(fd: int, at: int, n: int) -> int:
    """The CRC32 of ``n`` bytes at ``at``, read a piece at a time: a hostile file's declared
    length is only trusted, and allocated, once its checksum matched."""
    crc, end = 0, at + n
    while at < end:
        piece = os.pread(fd, min(_CHECK_PIECE, end - at), at)
        if not piece:
            raise Torn
        crc = zlib.crc32(piece, crc)
        at += len(piece)
    return crc


def write_pieces(fd: int, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
    """Write byte pieces whole with ``writev``, _IOV_MAX at a time. A hand-over of 2,000 small
    calls is 4,000 pieces: each is passed as it is (a view is made only of one written in
    part), and the written ones are stepped over, not popped from the front of the list."""
    views = [p for p in pieces if len(p)]
    at, end = 0, len(views)
    while at < end:
        done = os.writev(fd, views[at : at + _IOV_MAX])
        while done:
            n = len(views[at])
            if done >= n:
                done -= n
                at += 1
            else:
                views[at], done = memoryview(views[at]).cast("B")[done:], 0
