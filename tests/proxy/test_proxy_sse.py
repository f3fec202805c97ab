import pytest

from ctxscope.proxy.wire.sse import SSEDecoder, SSEEvent


def decode(*chunks: bytes) -> list[SSEEvent]:
    d = SSEDecoder()
    events = []
    for chunk in chunks:
        events += d.feed(chunk)
    return events + d.finish()


def test_single_event():
    assert decode(b"event: ping\ndata: {}\n\n") == [SSEEvent("ping", "{}")]


def test_event_without_type_and_several_frames_in_one_chunk():
    raw = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert decode(raw) == [SSEEvent(None, '{"a":1}'), SSEEvent(None, '{"a":2}'), SSEEvent(None, "[DONE]")]


def test_feed_returns_events_as_soon_as_complete():
    d = SSEDecoder()
    assert d.feed(b"data: a\n") == []
    assert d.feed(b"\ndata: b") == [SSEEvent(None, "a")]
    assert d.feed(b"\n") == []
    assert d.feed(b"\n") == [SSEEvent(None, "b")]
    assert d.finish() == []


def test_multiple_data_lines_are_joined_with_newline():
    assert decode(b"data: one\ndata: two\ndata:\ndata: four\n\n") == [SSEEvent(None, "one\ntwo\n\nfour")]


def test_only_one_leading_space_is_removed_and_colons_in_values_survive():
    assert decode(b"data:x\n\ndata:  y\n\ndata: a: b\n\n") == [
        SSEEvent(None, "x"),
        SSEEvent(None, " y"),
        SSEEvent(None, "a: b"),
    ]


def test_field_without_colon():
    # "data" alone appends an empty line; "event" alone resets the type to the default.
    assert decode(b"data\n\n") == [SSEEvent(None, "")]
    assert decode(b"event: x\nevent\ndata: 1\n\n") == [SSEEvent(None, "1")]
    assert decode(b"data\ndata\n\n") == [SSEEvent(None, "\n")]


def test_comments_retry_and_unknown_fields_are_ignored():
    raw = b": keep-alive\n:\nretry: 3000\nfoo: bar\nevent: message_start\ndata: {}\n\n: trailing\n\n"
    assert decode(raw) == [SSEEvent("message_start", "{}")]


def test_events_without_data_are_not_dispatched():
    raw = b"event: ping\n\nid: 5\n\n\n\nevent: real\ndata: x\n\n"
    assert decode(raw) == [SSEEvent("real", "x", "5")]


def test_event_type_resets_after_each_dispatch():
    assert decode(b"event: a\ndata: 1\n\ndata: 2\n\n") == [SSEEvent("a", "1"), SSEEvent(None, "2")]


def test_empty_event_type_means_default():
    assert decode(b"event:\ndata: 1\n\n") == [SSEEvent(None, "1")]


def test_last_event_id_persists_and_nul_ids_are_ignored():
    raw = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x003\ndata: c\n\nid\ndata: d\n\n"
    assert decode(raw) == [
        SSEEvent(None, "a", "1"),
        SSEEvent(None, "b", "1"),
        SSEEvent(None, "c", "1"),
        SSEEvent(None, "d", ""),
    ]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol):
    raw = eol.join([b"event: e", b"data: 1", b"data: 2", b"", b"data: 3", b"", b""])
    assert decode(raw) == [SSEEvent("e", "1\n2"), SSEEvent(None, "3")]


def test_mixed_line_endings():
    raw = b"data: a\r\n\rdata: b\n\r\ndata: c\r\r"
    assert decode(raw) == [SSEEvent(None, "a"), SSEEvent(None, "b"), SSEEvent(None, "c")]


def test_cr_lf_split_across_chunks_is_one_line_ending():
    # A CR at a chunk end followed by LF must not produce an extra blank line (which would dispatch).
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"\ndata: b\r") == []
    assert d.feed(b"\n\r") == [SSEEvent(None, "a\nb")]
    assert d.feed(b"\n") == []


def test_bom_at_start_is_removed_once():
    assert decode(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent(None, "a")]
    assert decode(b"\xef", b"\xbb", b"\xbfevent: e\ndata: a\n\n") == [SSEEvent("e", "a")]
    # A second BOM is part of the field name: an unknown field, so ignored.
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n") == [SSEEvent(None, "b")]
    # A BOM later in the stream is not special either.
    assert decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent(None, "a")]


def test_finish_flushes_a_trailing_event():
    assert decode(b"data: a\n\ndata: b\n") == [SSEEvent(None, "a"), SSEEvent(None, "b")]
    assert decode(b"data: a\n\ndata: b") == [SSEEvent(None, "a"), SSEEvent(None, "b")]
    assert decode(b"event: only-type") == []
    d = SSEDecoder()
    assert d.finish() == []


def test_utf8_split_inside_a_character_and_invalid_bytes():
    text = "data: héllo → 世界 🎉\n\n".encode()
    for i in range(len(text) + 1):
        assert decode(text[:i], text[i:]) == [SSEEvent(None, "héllo → 世界 🎉")]
    assert decode(b"data: \xff\xfeok\n\n") == [SSEEvent(None, "\ufffd\ufffdok")]


def test_empty_chunks_are_harmless():
    assert decode(b"", b"data: a", b"", b"\n", b"", b"\n", b"") == [SSEEvent(None, "a")]


TRANSCRIPT = (
    "\ufeff: hello\r\n"
    "event: message_start\r\n"
    'data: {"type":"message_start","text":"naïve ✓"}\r\n'
    "\r\n"
    "event: ping\n"
    "data: {}\n"
    "\n"
    "id: 7\r"
    "data: line one\r"
    "data:line two 🎉\r"
    "\r"
    "retry: 10\n"
    "event: message_stop\n"
    "data: {}\n"
    "\n"
).encode()
EXPECTED = [
    SSEEvent("message_start", '{"type":"message_start","text":"naïve ✓"}'),
    SSEEvent("ping", "{}"),
    SSEEvent(None, "line one\nline two 🎉", "7"),
    SSEEvent("message_stop", "{}", "7"),
]


def test_transcript_whole():
    assert decode(TRANSCRIPT) == EXPECTED


def test_transcript_split_at_every_byte_position():
    for i in range(len(TRANSCRIPT) + 1):
        assert decode(TRANSCRIPT[:i], TRANSCRIPT[i:]) == EXPECTED, i


def test_transcript_split_at_every_pair_of_positions():
    n = len(TRANSCRIPT)
    for i in range(0, n + 1, 3):
        for j in range(i, n + 1):
            assert decode(TRANSCRIPT[:i], TRANSCRIPT[i:j], TRANSCRIPT[j:]) == EXPECTED, (i, j)


def test_transcript_one_byte_at_a_time():
    assert decode(*[TRANSCRIPT[i : i + 1] for i in range(len(TRANSCRIPT))]) == EXPECTED


def test_long_line_in_small_chunks_stays_linear():
    # A quadratic decoder (re-joining or re-scanning the buffer per chunk) would copy ~200 GB here.
    payload = b"x" * (8 * 2**20)
    raw = b"data: " + payload + b"\n\n"
    d = SSEDecoder()
    events = []
    for i in range(0, len(raw), 16):
        events += d.feed(raw[i : i + 16])
    assert len(events) == 1 and len(events[0].data) == len(payload)


def test_many_events_in_small_chunks():
    frame = b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"ab"}}\n\n'
    raw = frame * 20000
    d = SSEDecoder()
    count = 0
    for i in range(0, len(raw), 16):
        count += len(d.feed(raw[i : i + 16]))
    assert count == 20000
