"""A large request body that repeats one sent before crosses the pipe and lands in the spool as
its new bytes: the child numbers the bodies as the proxy did, reads them back byte-exact, and so
does the next writer after a crash; a forged reference to the file is corrupt, never read outside
the records before it (docs/architecture.md, "New bytes only")."""

from __future__ import annotations

import json
import os
import select
import struct
import threading
import time

import pytest

from ctxscope.inspector.store.queries import get_call, get_request_body, open_db
from ctxscope.inspector.writer.daemon_side.launch import Outbox
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
from ctxscope.inspector.writer.wire import call_fields, spool_format
from ctxscope.inspector.writer.wire import messages as m
from ctxscope.inspector.writer.wire import spool as spools
from ctxscope.inspector.writer.wire.body_delta import MAX_ROPE, REMEMBER_BYTES, REMEMBER_MAX, ReceivedBodies, SentBodies
from ctxscope.inspector.writer.wire.call_fields import pack, unpack
from ctxscope.inspector.writer.wire.spool_format import payload_pieces

from support.factories import make_exchange

DELTA_MIN = 16 << 10


def _conversation(turns: int, size: int = 6000) -> bytes:
    """An agent's request after ``turns`` turns: each repeats the ones before and adds one."""
    messages = [
        {"role": "user" if t % 2 == 0 else "assistant", "content": f"turn {t} " * (size // 8)} for t in range(turns)
    ]
    return json.dumps({"model": "m", "messages": messages}).encode()


class _Pipe:
    """Both ends of the proxy's pipe to its child, in one process: a hand-over is framed as the
    feeder frames it and read back as the child reads it (through a real pipe)."""

    def __init__(self):
        self.sent, self.received = SentBodies(), ReceivedBodies()
        self.wire = 0  # bytes that crossed

    def carry(self, *exchanges) -> m.HandoverRecord:
        frame = m.frame(m.Handover(False, [pack(ex) for ex in exchanges]), self.sent)
        data = b"".join(bytes(p) for p in frame)
        self.wire += len(data)
        r, w = os.pipe()

        def write() -> None:  # from a thread: a large hand-over does not fit the pipe's buffer
            with open(w, "wb") as out:
                out.write(data)

        sender = threading.Thread(target=write)
        sender.start()
        try:
            record = m.receive(r)
        finally:
            sender.join()
            os.close(r)
        assert isinstance(record, m.HandoverRecord)
        return record

    def into(self, spool: spools.Spool, *exchanges) -> None:
        record = self.carry(*exchanges)
        spool.append_incoming(self.received.take(record.payload, record.large))


def _assert_stored(db, calls) -> None:
    """Every call's request body is in the store, byte-exact."""
    stored = open_db(db)
    for ex in calls:
        assert get_request_body(stored, ex.id) == ex.request_body


def _read_back(spool: spools.Spool) -> list[bytes]:
    bodies = []
    while (batch := spool.next_batch()) is not None:
        bodies += [unpack(fields).request_body for fields in batch]
    return bodies


def test_a_growing_conversation_crosses_and_is_spooled_as_its_new_bytes_and_reads_back_byte_exact(tmp_path):
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    bodies = [_conversation(t) for t in range(1, 41)]
    small = [b'{"model":"m","messages":[]}']  # below DELTA_MIN: sent as it is
    other = [_conversation(3, size=9000)]  # shares only a short prefix with the others
    sent = bodies[:20] + small + other + bodies[20:]
    for body in sent:
        pipe.into(spool, make_exchange(request_body=body))
    assert _read_back(spool) == sent
    distinct = len(bodies[-1]) + len(other[0])
    whole = sum(map(len, sent))
    assert spool.size < distinct + whole // 10  # ~the distinct bytes, not their sum
    assert pipe.wire < distinct + whole // 10  # and so is what crossed the pipe
    spool.close(remove=True)


def test_a_batch_of_calls_and_responses_reads_back_as_handed_over(tmp_path):
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    first = [make_exchange(request_body=_conversation(t), response_body=b"r" * (DELTA_MIN + t)) for t in (4, 5)]
    second = [make_exchange(request_body=_conversation(t)) for t in (6, 7, 8)]
    pipe.into(spool, *first)
    pipe.into(spool, *second)
    back = []
    while (batch := spool.next_batch()) is not None:
        back += [unpack(fields) for fields in batch]
    assert back == first + second
    spool.close(remove=True)


def test_repeats_within_one_handover_are_spooled_as_new_bytes_in_records_of_their_own(tmp_path):
    """A burst hands over several large requests at once; a record may refer only to the ones before it."""
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    burst = [make_exchange(request_body=_conversation(t), response_body=b"r" * (DELTA_MIN + t)) for t in range(20, 26)]
    pipe.into(spool, *burst)
    back = []
    while (batch := spool.next_batch()) is not None:
        back.append([unpack(fields) for fields in batch])
    assert [ex for batch in back for ex in batch] == burst
    assert len(back) == len(burst)  # each repeats the one before it
    responses = sum(len(ex.response_body) for ex in burst)
    assert spool.size < len(burst[-1].request_body) + responses + 6 * 6000 + 20_000
    spool.close(remove=True)


def test_after_the_spool_is_emptied_a_repeated_body_is_written_whole_from_what_crossed(tmp_path):
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    pipe.into(spool, make_exchange(request_body=_conversation(5)))
    assert _read_back(spool) == [_conversation(5)]
    spool.clear()
    before = pipe.wire
    pipe.into(spool, make_exchange(request_body=_conversation(6)))
    assert pipe.wire - before < 2 * 6000  # only the new turn crossed the pipe...
    assert spool.size > len(_conversation(6))  # ...but the file holds nothing before it to refer to
    assert _read_back(spool) == [_conversation(6)]
    spool.close(remove=True)


def test_a_long_chain_of_repeats_is_joined_and_still_reads_back(tmp_path):
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    bodies = [_conversation(t, size=400) for t in range(40, 40 + MAX_ROPE + 10)]
    for k, body in enumerate(bodies):
        pipe.into(spool, make_exchange(request_body=body))
        if k % 30 == 29:
            assert _read_back(spool) == bodies[k - 29 : k + 1]
            spool.clear()  # later bodies are written whole from a rope of many pieces
    assert _read_back(spool) == bodies[len(bodies) // 30 * 30 :]
    spool.close(remove=True)


def test_bodies_that_repeat_a_sliver_of_large_handovers_do_not_keep_them_all_alive(tmp_path):
    """Each body repeats the one before up to 1 KiB into its newest 200 KB, then adds 200 KB: a rope
    of pieces would keep every earlier hand-over alive for 1 KiB of each."""
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    body = b"x" * DELTA_MIN
    sent = []
    for k in range(40):
        body = body[: len(body) - 199_000 if k else len(body)] + bytes([65 + k % 26]) * 200_000
        sent.append(body)
        pipe.into(spool, make_exchange(request_body=body))
        assert pipe.received.held() <= 4 * (2 * len(body) + DELTA_MIN)  # four remembered bodies at most
    assert _read_back(spool) == sent
    spool.close(remove=True)


def test_both_sides_remember_the_same_bodies_within_their_byte_budget(tmp_path):
    """A body over REMEMBER_MAX crosses whole and is not remembered; past REMEMBER_BYTES the oldest
    are forgotten, on both sides alike: a body repeating a forgotten one crosses whole, and the
    child, which forgot it too, is not surprised."""
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    size = REMEMBER_BYTES // 2 - DELTA_MIN  # two fit in the budget, three do not
    first, second, third = (bytes([65 + k]) * size for k in range(3))
    huge = b"h" * (REMEMBER_MAX + 1)
    for body in (first, huge, second, third):
        record = pipe.carry(make_exchange(request_body=body))
        assert record.large == (0 if body is huge else 1)
        spool.append_incoming(pipe.received.take(record.payload, record.large))
    before = pipe.wire
    pipe.into(spool, make_exchange(request_body=first + b"more"))  # its predecessor was forgotten
    assert pipe.wire - before > size
    before = pipe.wire
    pipe.into(spool, make_exchange(request_body=huge + b"more"))  # too large to have been remembered
    assert pipe.wire - before > REMEMBER_MAX
    before = pipe.wire
    pipe.into(spool, make_exchange(request_body=third + b"more"))  # still remembered
    assert pipe.wire - before < 10_000
    assert _read_back(spool) == [first, huge, second, third, first + b"more", huge + b"more", third + b"more"]
    spool.close(remove=True)


def test_a_body_its_successor_continues_gives_its_room_to_another_agents_body(tmp_path):
    """An agent's burst of calls keeps only its latest body, so another agent's body, sent before
    the burst, is still there to repeat (with four places and no such rule, the burst took them all)."""
    spool, pipe = spools.Spool(tmp_path / "c.db"), _Pipe()
    other = _conversation(4, size=9000).replace(b'"m"', b'"other"')
    pipe.into(spool, make_exchange(request_body=other))
    for turns in range(3, 9):
        pipe.into(spool, make_exchange(request_body=_conversation(turns)))
    before = pipe.wire
    pipe.into(spool, make_exchange(request_body=other[:-2] + b',{"role":"user","content":"next"}]}'))
    assert pipe.wire - before < 2000
    assert len(_read_back(spool)) == 8
    spool.close(remove=True)


def test_the_child_refuses_a_reference_to_a_body_it_never_received():
    pipe = _Pipe()
    record = pipe.carry(make_exchange(request_body=_conversation(5)))
    later = pipe.carry(make_exchange(request_body=_conversation(6)))
    with pytest.raises(ValueError, match="not remembered"):
        ReceivedBodies().take(later.payload, later.large)  # a child that missed the first hand-over
    received = ReceivedBodies()
    received.take(record.payload, record.large)
    with pytest.raises(ValueError, match="add up"):
        received.take(later.payload, later.large + 1)


def test_a_handover_the_spool_cannot_take_is_decoded_whole():
    pipe = _Pipe()
    first = pipe.carry(make_exchange(request_body=_conversation(5)))
    pipe.received.take(first.payload, first.large)
    ex = make_exchange(request_body=_conversation(6), response_body=b"done")
    record = pipe.carry(ex)
    assert len(record.payload) < len(ex.request_body) // 2
    [fields] = spool_format.decode(pipe.received.take(record.payload, record.large).plain())
    assert unpack(fields) == ex


@pytest.mark.slow
def test_an_idle_feeder_forgets_what_it_sent_once_and_says_so():
    r, w = os.pipe()
    outbox = Outbox(w, forget_after=0.2)
    try:
        outbox.put(m.Handover(True, [pack(make_exchange(request_body=b"small"))]))
        assert isinstance(m.receive(r), m.HandoverRecord)
        assert not select.select([r], [], [], 0.6)[0]  # nothing remembered: nothing to forget, no wake
        outbox.put(m.Handover(True, [pack(make_exchange(request_body=_conversation(5)))]))
        first = m.receive(r)
        assert isinstance(first, m.HandoverRecord) and first.large == 1
        started = time.monotonic()
        assert m.receive(r) == m.Forget()
        assert time.monotonic() - started >= 0.15
        assert not select.select([r], [], [], 0.6)[0]  # once
        outbox.put(m.Handover(True, [pack(make_exchange(request_body=_conversation(6)))]))
        again = m.receive(r)  # nothing to refer to now: the body crosses whole
        assert isinstance(again, m.HandoverRecord) and len(again.payload) > len(_conversation(6))
        received = ReceivedBodies()
        received.take(first.payload, first.large)
        received.clear()
        [fields] = spool_format.decode(received.take(again.payload, again.large).plain())
        assert unpack(fields).request_body == _conversation(6)
    finally:
        outbox.close()
        outbox.join_thread(5)
        os.close(r)


@pytest.mark.slow
def test_the_writer_child_stores_repeated_bodies_byte_exact_across_an_idle_forget(tmp_path):
    db = tmp_path / "c.db"
    w = WriterProcess(db, idle_release=0.3)
    w.start()
    calls = [make_exchange(request_body=_conversation(t)) for t in range(2, 14)]
    try:
        for k, ex in enumerate(calls):
            w.submit(ex)
            time.sleep(0.6 if k == 5 else 0.01)  # past idle_release once: both sides forget
    finally:
        assert w.stop()
    _assert_stored(db, calls)


@pytest.mark.slow
def test_an_agents_calls_after_pauses_are_spooled_as_their_new_bytes(tmp_path):
    """An agent pauses after each call, so each is stored before the next comes: the spool keeps
    the stored records (marked) instead of emptying itself, and every later body is written as the
    new bytes it adds, not whole again."""
    db = tmp_path / "c.db"
    w = WriterProcess(db)
    w.start()
    calls = [make_exchange(request_body=_conversation(t, size=20_000)) for t in range(10, 16)]
    try:
        spool_file = next(tmp_path.glob("c.db.spool-*"))
        for ex in calls:
            w.submit(ex)
            deadline = time.monotonic() + 20
            while w.stats().written < calls.index(ex) + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            while not spool_file.read_bytes().endswith(spool_format.STORED_MARK) and time.monotonic() < deadline:
                time.sleep(0.02)
        data = spool_file.read_bytes()
        assert data.count(spool_format.STORED_MARK) == len(calls)  # all kept, each marked stored
        assert len(data) < len(calls[-1].request_body) * 1.5  # the first body, then new bytes only
    finally:
        assert w.stop()
    _assert_stored(db, calls)


def test_a_spool_of_new_bytes_left_by_a_killed_writer_is_stored_by_the_next(tmp_path):
    db = tmp_path / "c.db"
    left, pipe = spools.Spool(db, owner=999_997), _Pipe()
    calls = [make_exchange(request_body=_conversation(t)) for t in range(2, 12)]
    for ex in calls:
        pipe.into(left, ex)
    assert left.size < sum(len(ex.request_body) for ex in calls) // 3
    left.close(remove=False)
    w = WriterProcess(db)
    w.start()
    assert w.stop()
    _assert_stored(db, calls)
    assert spools.spool_files(db) == []


def _handover(*exchanges) -> bytes:
    """A hand-over's payload as the proxy encodes it, no body referring to another."""
    return b"".join(payload_pieces([pack(ex) for ex in exchanges]))


def _forged(tmp_path, field) -> spools.Orphan:
    """A spool whose second record's request body is ``field`` (pieces of the file), checksummed."""
    path = tmp_path / "f.db"
    spool = spools.Spool(path, owner=424_242)
    _Pipe().into(spool, make_exchange(request_body=_conversation(4)))
    record_at = spool.size
    payload = _handover(make_exchange(request_body=b"tail"))
    (n,) = struct.unpack_from("<I", payload)
    heads = json.loads(payload[4 : 4 + n])
    heads[0][call_fields.REQUEST_BODY] = field(record_at)
    forged = spool_format.payload_parts(heads, [b"tail", payload[4 + n + 4 :]])
    spool._write([spool_format.record_head(forged), *forged])
    spool.close(remove=False)
    [orphan] = spools.orphans(path)
    return orphan


@pytest.mark.parametrize(
    "field",
    [
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
    ],
    ids=["itself", "into-itself", "header", "overlap", "order", "empty", "odd", "too-many", "negative", "text"],
)
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
    heads = json.loads(payload[4 : 4 + n])
    heads[0][call_fields.REQUEST_BODY] = [4, 100, 10]
    forged = b"".join(spool_format.payload_parts(heads, [b"tail", payload[4 + n + 4 :]]))
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
