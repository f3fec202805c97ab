"""A large request body that repeats one spooled before it is spooled as its new bytes: read
back byte-exact by the child and by the next writer after a crash, and a forged reference to the
file is corrupt, never read outside the records before it (docs/architecture.md, "A spool of new
bytes")."""

from __future__ import annotations

import json
import struct

import pytest
from factories import make_exchange

from ctxscope.inspector.store.queries import get_call, get_request_body, open_db
from ctxscope.inspector.writer import spool as spools
from ctxscope.inspector.writer import spool_format
from ctxscope.inspector.writer.process import WriterProcess
from ctxscope.inspector.writer.spool_delta import DELTA_MIN
from ctxscope.inspector.writer.spool_format import pack, payload_pieces, unpack


def _conversation(turns: int, size: int = 6000) -> bytes:
    """An agent's request after ``turns`` turns: each repeats the ones before and adds one."""
    messages = [{"role": "user" if t % 2 == 0 else "assistant", "content": f"turn {t} " * (size // 8)}
                for t in range(turns)]
    return json.dumps({"model": "m", "messages": messages}).encode()


def _handover(*exchanges) -> bytes:
    """A hand-over's payload as the proxy encodes it."""
    return b"".join(payload_pieces([pack(ex) for ex in exchanges]))


def _read_back(spool: spools.Spool) -> list[bytes]:
    bodies = []
    while (batch := spool.next_batch()) is not None:
        bodies += [unpack(fields).request_body for fields in batch]
    return bodies


def test_a_growing_conversation_is_spooled_as_its_new_bytes_and_reads_back_byte_exact(tmp_path):
    spool = spools.Spool(tmp_path / "c.db")
    bodies = [_conversation(t) for t in range(1, 41)]
    small = [b'{"model":"m","messages":[]}']  # below DELTA_MIN: spooled as it came
    other = [_conversation(3, size=9000)]  # shares only a short prefix with the others
    sent = bodies[:20] + small + other + bodies[20:]
    for body in sent:
        spool.append_payload(_handover(make_exchange(request_body=body)))
    assert _read_back(spool) == sent
    whole = sum(map(len, sent))
    assert spool.size < len(bodies[-1]) + len(other[0]) + whole // 10  # ~the distinct bytes, not their sum
    spool.close(remove=True)


def test_a_batch_of_calls_and_responses_reads_back_as_handed_over(tmp_path):
    spool = spools.Spool(tmp_path / "c.db")
    first = [make_exchange(request_body=_conversation(t), response_body=b"r" * (DELTA_MIN + t)) for t in (4, 5)]
    second = [make_exchange(request_body=_conversation(t)) for t in (6, 7, 8)]
    spool.append_payload(_handover(*first))
    spool.append_payload(_handover(*second))
    back = []
    while (batch := spool.next_batch()) is not None:
        back += [unpack(fields) for fields in batch]
    assert back == first + second
    spool.close(remove=True)


def test_after_the_spool_is_emptied_a_body_is_written_whole_again(tmp_path):
    spool = spools.Spool(tmp_path / "c.db")
    spool.append_payload(_handover(make_exchange(request_body=_conversation(5))))
    assert _read_back(spool) == [_conversation(5)]
    spool.clear()
    spool.append_payload(_handover(make_exchange(request_body=_conversation(6))))
    assert spool.size > len(_conversation(6))  # nothing before it to refer to
    assert _read_back(spool) == [_conversation(6)]
    spool.close(remove=True)


def test_a_spool_of_new_bytes_left_by_a_killed_writer_is_stored_by_the_next(tmp_path):
    db = tmp_path / "c.db"
    left = spools.Spool(db, owner=999_997)
    calls = [make_exchange(request_body=_conversation(t)) for t in range(2, 12)]
    for ex in calls:
        left.append_payload(_handover(ex))
    assert left.size < sum(len(ex.request_body) for ex in calls) // 3
    left.close(remove=False)
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    db_ = open_db(db)
    for ex in calls:
        assert get_request_body(db_, ex.id) == ex.request_body
    assert spools.spool_files(db) == []


def _forged(tmp_path, field) -> spools.Orphan:
    """A spool whose second record's request body is ``field`` (pieces of the file), checksummed."""
    path = tmp_path / "f.db"
    spool = spools.Spool(path, owner=424_242)
    spool.append_payload(_handover(make_exchange(request_body=_conversation(4))))
    record_at = spool.size
    payload = _handover(make_exchange(request_body=b"tail"))
    (n,) = struct.unpack_from("<I", payload)
    heads = json.loads(payload[4:4 + n])
    heads[0][spool_format.REQUEST_BODY] = field(record_at)
    forged = spool_format.payload_parts(heads, [b"tail", payload[4 + n + 4:]])
    spool._write([spool_format.record_head(forged), *forged])
    spool.close(remove=False)
    [orphan] = spools.orphans(path)
    return orphan


@pytest.mark.parametrize("field", [
    lambda at: [4, at, 10],  # the record itself
    lambda at: [4, at - 10, 20],  # runs into the record
    lambda at: [4, 0, 10],  # the file's header
    lambda at: [4, 100, 10, 105, 10],  # overlapping pieces
    lambda at: [4, 200, 10, 100, 10],  # out of order
    lambda at: [4, 100, 0],  # an empty piece
    lambda at: [4, 100],  # no length
    lambda at: [4, *[v for k in range(65) for v in (100 + 20 * k, 10)]],  # more pieces than a body may have
    lambda at: [4, 100, -10],
    lambda at: [4, 100, "10"],
], ids=["itself", "into-itself", "header", "overlap", "order", "empty", "odd", "too-many", "negative", "text"])
def test_a_forged_reference_to_the_file_is_corrupt(tmp_path, field):
    orphan = _forged(tmp_path, field)
    batches = list(orphan.batches())
    assert len(batches) == 1 and orphan.corrupt  # the calls before it are kept
    orphan.keep()


def test_a_well_formed_reference_reads_the_bytes_it_names(tmp_path):
    orphan = _forged(tmp_path, lambda at: [4, 100, 10, 300, 5])
    data = orphan.path.read_bytes()
    first, second = list(orphan.batches())
    assert unpack(second[0]).request_body == data[100:110] + data[300:305] + b"tail"
    assert unpack(first[0]).request_body == _conversation(4)
    orphan.keep()


def test_a_body_made_of_pieces_is_corrupt_outside_a_spool():
    payload = _handover(make_exchange(request_body=b"tail"))
    (n,) = struct.unpack_from("<I", payload)
    heads = json.loads(payload[4:4 + n])
    heads[0][spool_format.REQUEST_BODY] = [4, 100, 10]
    forged = b"".join(spool_format.payload_parts(heads, [b"tail", payload[4 + n + 4:]]))
    with pytest.raises(spool_format.SpoolCorrupt):
        spool_format.decode(forged)


def test_a_version_2_spool_is_still_read(tmp_path):
    db = tmp_path / "c.db"
    left = spools.Spool(db, owner=999_996)
    ex = make_exchange(1)
    left.append([pack(ex)])
    left.close(remove=False)
    data = bytearray(left.path.read_bytes())
    data[len(spool_format.MAGIC)] = 2  # as the version before pieces wrote it
    left.path.write_bytes(bytes(data))
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    assert get_call(open_db(db), ex.id)["id"] == ex.id
