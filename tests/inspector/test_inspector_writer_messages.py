"""The pipe between the writer and its child: typed messages framed as JSON or as spool records, never pickles."""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import threading

import pytest

from ctxscope.inspector.writer.wire import messages as m
from ctxscope.inspector.writer.wire.body_delta import ReceivedBodies
from ctxscope.inspector.writer.wire.call_fields import call_size, pack
from ctxscope.inspector.writer.wire.spool import Spool
from ctxscope.inspector.writer.wire.spool_format import decode

from support.factories import make_exchange


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


def _through(pipe, message):
    """Send a message through a real pipe (from a thread: a big one does not fit the pipe's buffer)."""
    r, w = pipe
    sender = threading.Thread(target=m.send, args=(w, message))
    sender.start()
    got = m.receive(r)
    sender.join()
    return got


@pytest.mark.parametrize(
    "message",
    [
        m.DeleteSession(7, "label:abc", 29.0),
        m.Stop(),
        m.Forget(),
        m.Ready(3, None),
        m.Ready(None, "unable to open database file"),
        m.Failed("ImportError: no module"),
        m.Recovered(["a", "b"]),
        m.Counters({"written": 3, "last_error": None, "store_down_since": "2026-01-01T00:00:00Z", "running": True}, 5),
        m.Deleted(2, result={"calls": 4, "bodies": 1}),
        m.Deleted(3, error="the writer is busy"),
        m.Taken(0),
        m.Taken(2**40),
    ],
)
def test_every_control_message_comes_out_as_it_went_in(pipe, message):
    assert _through(pipe, message) == message


def test_a_handover_arrives_as_the_payload_of_a_spool_record_the_child_appends_as_it_is(pipe, tmp_path):
    batch = [pack(make_exchange(i, response_body=os.urandom(200_000))) for i in range(3)]  # 600 KB: past the pipe
    record = _through(pipe, m.Handover(True, batch, dropped=4))
    assert isinstance(record, m.HandoverRecord)
    assert (record.pause, record.calls, record.dropped) == (True, 3, 4)
    assert record.body_bytes == sum(call_size(f) for f in batch)
    assert decode(record.payload) == batch
    encoded, verbatim = Spool(tmp_path / "a.db"), Spool(tmp_path / "b.db")
    encoded.append(batch)
    verbatim.append_incoming(ReceivedBodies().take(record.payload, record.large))
    try:  # the same file as the child's own encoding would have made
        assert encoded.path.read_bytes() == verbatim.path.read_bytes()
        assert verbatim.next_batch() == batch
    finally:
        encoded.close(remove=True)
        verbatim.close(remove=True)


def test_a_handover_without_calls_still_carries_the_drops(pipe):
    record = _through(pipe, m.Handover(False, [], dropped=9))
    assert isinstance(record, m.HandoverRecord) and (record.calls, record.dropped, len(record.payload)) == (0, 9, 0)


def test_the_end_of_the_pipe_between_messages_is_none_and_inside_one_is_torn(pipe):
    r, w = pipe
    os.write(w, b"".join(m.frame(m.Stop())))
    os.write(w, b"".join(m.frame(m.Failed("x" * 100)))[:40])
    os.close(w)
    assert m.receive(r) == m.Stop()
    with pytest.raises(m.Torn):
        m.receive(r)
    assert m.receive(r) is None


def test_nothing_read_from_the_pipe_is_unpickled(pipe):
    r, w = pipe
    os.write(w, pickle.dumps(m.Stop()))
    with pytest.raises(ValueError):
        m.receive(r)


def test_a_json_message_names_only_a_control_message(pipe):
    r, w = pipe
    text = b'{"type":"Handover","pause":true,"batch":[]}'
    os.write(w, struct.pack("<BQ", 1, len(text)) + text)
    with pytest.raises(ValueError):
        m.receive(r)


def test_taken_is_sent_as_its_count_alone():
    """Sent for every hand-over the child takes: 8 bytes after the frame, no JSON."""
    frame = b"".join(m.frame(m.Taken(12)))
    assert len(frame) == 9 + 8 and b"{" not in frame


def test_thousands_of_pieces_go_through_a_pipe_whole_and_in_order_however_it_takes_them(pipe):
    """A hand-over of 2,000 small calls is ~4,000 pieces, more than one ``writev`` takes, into a
    pipe that takes a part of them at a time: every byte arrives once, in order (empty pieces and
    views included)."""
    from ctxscope.inspector.writer.wire.spool_format import write_pieces

    r, w = pipe
    pieces: list = [bytes([k % 251]) * (k % 701) for k in range(4000)]
    pieces[7] = memoryview(b"0123456789")[3:]
    pieces[8] = bytearray(b"ab")
    got = bytearray()

    def read() -> None:
        while chunk := os.read(r, 1 << 16):
            got.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    write_pieces(w, pieces)
    os.close(w)
    reader.join()
    assert got == b"".join(pieces) and len(got) > 1 << 20  # more than the pipe holds: written in parts
