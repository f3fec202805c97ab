"""The agent's own SSE decoder: frames across chunk boundaries, line endings, comments, BOM."""

from __future__ import annotations

from ctxscope.agent.providers.sse import SSEDecoder, SSEEvent

STREAM = (
    "\ufeff: comment\r\n"
    'event: message_start\r\ndata: {"a":1}\r\n\r\n'
    "data: line1\ndata: line2\n\n"
    "event: ping\rdata: {}\r\r"
    "id: 7\nevent: x\ndata:no-space\n\n"
    "data: ünïcode ✓\n\n"
).encode()
EXPECTED = [
    SSEEvent("message_start", '{"a":1}'),
    SSEEvent("message", "line1\nline2"),
    SSEEvent("ping", "{}"),
    SSEEvent("x", "no-space", "7"),
    SSEEvent("message", "ünïcode ✓", "7"),
]


def decode(chunks):
    d = SSEDecoder()
    out = []
    for c in chunks:
        out += d.feed(c)
    return out + d.close()


def test_whole_stream():
    assert decode([STREAM]) == EXPECTED


def test_every_two_way_split_gives_the_same_events():
    for i in range(len(STREAM) + 1):
        assert decode([STREAM[:i], STREAM[i:]]) == EXPECTED, i


def test_byte_by_byte():
    assert decode([bytes([b]) for b in STREAM]) == EXPECTED


def test_crlf_split_across_chunks_is_one_line_end():
    # "\r" at a chunk end must wait: if "\n" follows it is the same line end, not an empty line
    events = decode([b"data: a\r", b"\ndata: b\r", b"\n\r\n"])
    assert events == [SSEEvent("message", "a\nb")]


def test_last_frame_without_blank_line_is_delivered_on_close():
    assert decode([b"data: [DONE]"]) == [SSEEvent("message", "[DONE]")]


def test_frame_without_data_is_not_an_event():
    assert decode([b"event: ping\n\n: keepalive\n\n"]) == []
