"""Full-text search: the real daemon and SDK capture, the writer child indexes, `ctxscope search` finds.

Each distinct text is stored once: a conversation that re-sends its history adds only its new
segments to the index, and an answer re-sent as an assistant message is the same text.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time

import pytest
from click.testing import CliRunner

from ctxscope.inspector.pipeline import search_text
from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.inspector.store.deletion import delete_session
from ctxscope.inspector.store.derived.search import HIT_END, HIT_START, index_stats
from ctxscope.inspector.store.derived.search import search as search_in
from ctxscope.inspector.store.queries import open_db
from ctxscope.main import cli

from support import sdk_clients
from support.factories import anthropic_request, anthropic_response, capture, make_exchange

KEY = "sk-ant-test-SECRET-0123456789abcdef"
UNIQUE = "quartz-zebra-4471"


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _conversation(proxy, sim) -> list[dict]:
    """Three calls of one agent loop; the tool result of the second holds UNIQUE."""
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    messages: list = [{"role": "user", "content": "list the files"}]
    sim.state().set_script([{"text": "I will look."}, {"text": "Found the lighthouse keeper."}, {"text": "done"}])
    for turn in range(3):
        msg = client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=100,
            system="You are careful.",
            messages=messages,
            extra_headers={"x-ctxscope-session": "search-e2e"},
        )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": msg.content[0].text}]})
        if turn == 0:
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": f"README.md\n{UNIQUE}.txt\n"}],
                }
            )
        else:
            messages.append({"role": "user", "content": f"next {turn}"})
    return proxy.wait_for_calls(3)


@pytest.mark.slow
def test_a_tool_result_string_is_found_at_its_call_and_pointer(proxy, sim):
    rows = _conversation(proxy, sim)
    db = ("--db", str(proxy.db_path))
    proxy.stop()  # the writer has stored and indexed everything
    hits = json.loads(invoke("search", UNIQUE, *db, "--json"))
    assert [(h["call"], h["pointer"], h["area"], h["body"]) for h in hits] == [
        (rows[1]["id"], "/messages/2/content/0", "tool_results", "request")
    ]
    assert hits[0]["session"] == "search-e2e" and hits[0]["seq"] == 2
    assert hits[0]["snippet"] == f"README.md\n[{UNIQUE}].txt\n"
    assert json.loads(invoke("search", UNIQUE, *db, "--json", "--in", "system")) == []
    [answer] = json.loads(invoke("search", "lighthouse keeper", *db, "--json", "--in", "responses"))
    assert (answer["call"], answer["body"], answer["pointer"]) == (rows[1]["id"], "response", "/content/0/text")
    assert len(json.loads(invoke("search", UNIQUE, *db, "--json", "--session", "search-e2e"))) == 1
    missing = CliRunner().invoke(cli, ["search", UNIQUE, *db, "--session", "nope-no"])
    assert missing.exit_code != 0 and "no session matches" in missing.output
    assert "#2" in invoke("search", UNIQUE, *db)


def test_the_index_holds_each_text_once(proxy, sim):
    _conversation(proxy, sim)
    proxy.stop()
    stats = index_stats(open_db(proxy.db_path, segment_texts=SegmentTexts))
    # call 1: system, user; call 2 adds a tool result; call 3 adds a user message; 3 answers. The
    # assistant messages of calls 2 and 3 are the answers of calls 1 and 2: stored once, as answers.
    assert stats["segments"] == 2 + 1 + 1 + 3
    assert stats["occurrences"] == stats["segments"]


def test_reindex_backfills_captures_made_without_the_index(tmp_path):
    path = tmp_path / "c.db"
    body = anthropic_request([{"role": "user", "content": f"where is {UNIQUE}?"}])
    capture(path, [make_exchange(request=body, response=anthropic_response("nowhere"))]).conn.close()
    db = ("--db", str(path))
    assert json.loads(invoke("search", UNIQUE, *db, "--json")) == []
    assert "ctxscope reindex" in CliRunner().invoke(cli, ["search", UNIQUE, *db]).stderr
    assert json.loads(invoke("reindex", *db, "--json"))["search_indexed"] == 1
    [hit] = json.loads(invoke("search", UNIQUE, *db, "--json"))
    assert (hit["pointer"], hit["area"], hit["session"]) == ("/messages/0/content", "messages", "s1")
    assert json.loads(invoke("reindex", *db, "--json"))["search_indexed"] == 1  # a rebuild, not a second copy
    assert len(json.loads(invoke("search", UNIQUE, *db, "--json"))) == 1


def test_deleting_a_session_takes_its_text_out_of_the_index(tmp_path):
    path = tmp_path / "c.db"
    exchanges = [
        make_exchange(request=anthropic_request([{"role": "user", "content": f"{word} {UNIQUE}"}]), session_label=label)
        for word, label in (("alpha", "keep"), ("beta", "drop"))
    ]
    capture(path, exchanges).conn.close()
    invoke("reindex", "--db", str(path))
    db = open_db(path, segment_texts=SegmentTexts)
    delete_session(db, "drop")
    hits = json.loads(invoke("search", UNIQUE, "--db", str(path), "--json"))
    assert [h["session"] for h in hits] == ["keep"]
    assert json.loads(invoke("search", "beta", "--db", str(path), "--json")) == []
    texts = [r[0] for r in db.execute("SELECT text FROM search_text").fetchall()]
    assert not any("beta" in t for t in texts)


def test_a_connection_reads_texts_only_through_the_reader_it_was_opened_with(tmp_path):
    """No import-time registry: this module imports ``search_text``, yet a connection opened without
    the reader has no ``ctxscope_segment_text`` (an error, never an empty or another text)."""
    path = tmp_path / "c.db"
    capture(path, [make_exchange(request=anthropic_request([{"role": "user", "content": f"where is {UNIQUE}?"}]))])
    invoke("reindex", "--db", str(path))
    plain = open_db(path)
    with pytest.raises(sqlite3.OperationalError, match="no such function: ctxscope_segment_text"):
        plain.execute("SELECT text FROM search_text").fetchall()
    reading = open_db(path, segment_texts=SegmentTexts)
    assert any(UNIQUE in t for (t,) in reading.execute("SELECT text FROM search_text").fetchall())
    plain.close()
    reading.close()


def test_query_syntax_is_taken_as_words(tmp_path):
    path = tmp_path / "c.db"
    capture(path, [make_exchange(request=anthropic_request([{"role": "user", "content": 'say "NEAR(a b)" OR *'}]))])
    invoke("reindex", "--db", str(path))
    assert len(json.loads(invoke("search", 'NEAR(a b)" OR', "--db", str(path), "--json"))) == 1
    result = CliRunner().invoke(cli, ["search", "  ", "--db", str(path)])
    assert result.exit_code != 0 and "empty" in result.output


def _growing(n: int, label: str = "grow") -> list:
    """n calls of one conversation, each re-sending the last with a new turn."""
    messages: list = [{"role": "user", "content": "first question about the anemone-trellis"}]
    out = []
    for i in range(n):
        out.append(
            make_exchange(
                request=anthropic_request(list(messages)),
                response=anthropic_response(f"reply {i}"),
                session_label=label,
            )
        )
        messages += [{"role": "assistant", "content": f"reply {i}"}, {"role": "user", "content": f"turn {i}"}]
    return out


def test_a_session_deleted_and_sent_again_is_indexed_again(tmp_path):
    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.writer.storing.thread import CaptureWriter

    path = tmp_path / "c.db"
    calls = _growing(3)
    writer = CaptureWriter(path, analyzers=writer_analyzers())
    writer.start()
    try:
        for ex in calls[:2]:
            writer.submit(ex)
        deadline = time.monotonic() + 10
        while writer.stats().written < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert writer.delete_session("grow")["calls_deleted"] == 2
        writer.submit(calls[2])  # re-sends the deleted calls' history: it must be indexed with this call
    finally:
        assert writer.stop()
    [hit] = json.loads(invoke("search", "anemone-trellis", "--db", str(path), "--json"))
    assert hit["call"] == calls[2].id
    assert json.loads(invoke("search", "reply 0", "--db", str(path), "--json"))[0]["call"] == calls[2].id


def test_the_writer_indexes_only_new_segments_and_finds_each_at_its_first_call(tmp_path):
    from ctxscope.inspector.pipeline.search_index import writer_analyzers
    from ctxscope.inspector.writer.storing.thread import CaptureWriter

    path = tmp_path / "c.db"
    calls = _growing(5)
    writer = CaptureWriter(path, analyzers=writer_analyzers())
    writer.start()
    for ex in calls:
        writer.submit(ex)
    assert writer.stop()
    for i in range(4):  # "turn i" first appears in call i + 1
        [hit] = json.loads(invoke("search", f"turn {i}", "--db", str(path), "--json", "--in", "messages"))
        assert (hit["call"], hit["pointer"]) == (calls[i + 1].id, f"/messages/{2 * i + 2}/content")
    rebuilt = json.loads(invoke("search", "anemone", "--db", str(path), "--json"))
    invoke("reindex", "--db", str(path))
    assert json.loads(invoke("search", "anemone", "--db", str(path), "--json")) == rebuilt
    # system, first question, turns, replies (each reply re-sent as an assistant message is the same text)
    assert index_stats(open_db(path, segment_texts=SegmentTexts))["segments"] == 1 + 1 + 4 + 5


def _words(seed: int, n: int) -> str:
    """n pseudo-random lowercase words: a text no other test holds, that compresses little."""
    import random

    rng = random.Random(seed)
    return " ".join(
        "".join(rng.choice("bcdfghjklmnpqrstvwxz") + rng.choice("aeiou") for _ in range(rng.randint(2, 5)))
        for _ in range(n)
    )


def _fts_rows(db, word: str) -> list[int]:
    """The segments FTS5 itself lists for a word (its index, not the texts read back)."""
    return [r[0] for r in db.execute("SELECT rowid FROM search_fts WHERE search_fts MATCH ?", [f'"{word}"'])]


def _fts_consistent(db) -> None:
    """FTS5's index holds one document per segment, and each segment's text, read back from the bodies,
    is found by FTS5 under each of its words. (FTS5's own 'integrity-check' is a write statement, inside
    which the reader's queries cannot open their savepoint.)"""
    from ctxscope.inspector.store.derived.search import tokens

    segments = db.execute("SELECT COUNT(*) FROM search_segments").fetchone()[0]
    assert db.execute("SELECT COUNT(*) FROM search_fts_docsize").fetchone()[0] == segments
    for seg, text in db.execute("SELECT id, text FROM search_text").fetchall():
        assert text is not None, seg
        for word in sorted(set(tokens(text)))[:40]:
            assert seg in _fts_rows(db, word), (seg, word)


def test_the_store_holds_no_second_copy_of_a_text(tmp_path):
    from ctxscope.inspector.pipeline.search_index import writer_analyzers

    path = tmp_path / "c.db"
    long_text = _words(22, 6000)  # ~40 KB
    body = anthropic_request([{"role": "user", "content": long_text}])
    capture(
        path, [make_exchange(request=body, response=anthropic_response("noted"))], analyzers=writer_analyzers()
    ).conn.close()
    db = open_db(path, segment_texts=SegmentTexts)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("c.db"))
    assert long_text[1000:1400].encode() not in stored  # nowhere in plain bytes: only compressed, in chunks
    assert "data" not in db["search_segments"].columns_dict and "text" not in db["search_segments"].columns_dict
    sizes = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    chunks = sizes["chunks"]
    assert chunks > 8192  # the text, compressed once
    assert sizes["search_segments"] <= 8192  # a key and an area per segment: one page, no copy of the text
    phrase = " ".join(long_text.split()[3000:3003])
    [hit] = search_in(db, phrase)
    assert (hit["pointer"], hit["area"]) == ("/messages/0/content", "messages")
    assert HIT_START + phrase + HIT_END in hit["snippet"]
    _fts_consistent(db)
    db.close()


def test_deleting_a_session_removes_its_words_from_fts_and_keeps_shared_texts(tmp_path):
    from ctxscope.inspector.pipeline.search_index import writer_analyzers

    path = tmp_path / "c.db"
    shared = f"You are the {UNIQUE} assistant."
    exchanges = [
        make_exchange(
            request=anthropic_request([{"role": "user", "content": f"{word} question"}], system=shared),
            response=anthropic_response(f"{word} answer"),
            session_label=label,
        )
        for word, label in (("zirconwordalpha", "first"), ("zirconwordbeta", "second"))
    ]
    capture(path, exchanges, analyzers=writer_analyzers()).conn.close()
    db = open_db(path, segment_texts=SegmentTexts)
    _fts_consistent(db)
    # one segment, an occurrence in each session; its text is read back from the first one's body
    assert [h["session"] for h in search_in(db, UNIQUE)] == ["first", "second"]
    assert db.execute("SELECT COUNT(*) FROM search_segments").fetchone()[0] == 1 + 2 + 2
    assert len(_fts_rows(db, "zirconwordalpha")) == 2  # its question and its answer
    delete_session(db, "first")
    assert _fts_rows(db, "zirconwordalpha") == []  # gone from FTS5's own index, not only from the results
    assert len(_fts_rows(db, "zirconwordbeta")) == 2
    # the shared system prompt stays, now read back from the session that still holds it
    [system_hit] = search_in(db, UNIQUE)
    assert system_hit["session"] == "second" and HIT_START + UNIQUE in system_hit["snippet"]
    _fts_consistent(db)
    delete_session(db, "second")
    assert _fts_rows(db, "quartz") == [] and _fts_rows(db, "zirconwordbeta") == []
    assert index_stats(db)["segments"] == 0
    _fts_consistent(db)
    db.close()


def test_a_search_page_reads_each_body_once(tmp_path, monkeypatch):
    from ctxscope.inspector.pipeline.search_index import writer_analyzers

    path = tmp_path / "c.db"
    parts = [f"{UNIQUE} part {i}" for i in range(12)]
    body = anthropic_request([{"role": "user", "content": [{"type": "text", "text": p} for p in parts]}])
    capture(path, [make_exchange(request=body)], analyzers=writer_analyzers()).conn.close()
    loads: list[str] = []
    real = search_text.queries.get_request_body
    monkeypatch.setattr(search_text.queries, "get_request_body", lambda db, cid: loads.append(cid) or real(db, cid))
    db = open_db(path, segment_texts=SegmentTexts)
    hits = search_in(db, UNIQUE)
    assert len(hits) == 12 and all(HIT_START in h["snippet"] for h in hits)
    assert len(loads) == 1
    db.close()


def test_an_index_written_with_text_copies_migrates_to_reading_the_bodies(tmp_path):
    """A file indexed before m014 (compressed copies; one text under two keys, as the indexer's hash
    once keyed it) opens with one segment per text, no copies, and the same hits."""
    if sys.version_info >= (3, 14):
        from compression import zstd
    else:
        from backports import zstd

    from ctxscope.inspector.store import db as store
    from ctxscope.inspector.store.ingest import IngestState, ingest
    from ctxscope.inspector.store.migrations import migrations

    path = tmp_path / "c.db"
    text = f"the old lighthouse keeper {UNIQUE}"
    ex = make_exchange(request=anthropic_request([{"role": "user", "content": text}]))
    db = store.connect(path, migrate=False, segment_texts=SegmentTexts)
    migrations.apply(db, stop_before="m014_search_text_from_bodies")
    with db.atomic():
        ingest(db, ex, IngestState(capture_epoch=1))
        session = db.execute("SELECT session FROM calls WHERE id = ?", [ex.id]).fetchone()[0]
        for key, holder in ((b"a" * 16, session), (b"b" * 16, "other")):  # the triggers of m013 feed FTS5
            seg = db.execute(
                "INSERT INTO search_segments (hash, area, data) VALUES (?, 'messages', ?)",
                [key, zstd.compress(text.encode())],
            ).lastrowid
            db.execute(
                "INSERT INTO search_occurrences (segment, session, call_id, body, pointer) "
                "VALUES (?, ?, ?, 'request', '/messages/0/content')",
                [seg, holder, ex.id],
            )
    db.close()
    db = open_db(path, segment_texts=SegmentTexts)  # migrates
    assert set(db["search_segments"].columns_dict) == {"id", "hash", "area", "size"}
    [(seg,)] = db.execute("SELECT id FROM search_segments").fetchall()
    assert _fts_rows(db, "lighthouse") == [seg]
    hits = search_in(db, "lighthouse keeper")
    assert sorted(h["session"] for h in hits) == sorted([session, "other"])
    assert all(h["snippet"] == f"the old {HIT_START}lighthouse keeper{HIT_END} {UNIQUE}" for h in hits)
    _fts_consistent(db)
    db.close()
