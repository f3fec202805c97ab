"""An idle writer lets go of its caches and token engine, and the calls it stores afterwards are
analysed and indexed exactly as without the release (docs/architecture.md, "Memory")."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

import pytest

from ctxscope.db_commands import capture_line
from ctxscope.inspector.pipeline import idle_release
from ctxscope.inspector.pipeline.idle_release import release
from ctxscope.inspector.pipeline.search_index import WRITER_ANALYZERS, writer_analyzers
from ctxscope.inspector.store.ingest import IngestState
from ctxscope.inspector.store.queries import open_db
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
from ctxscope.inspector.writer.status import capture_state
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.vocab import tokens

from support.factories import T0, analysis_and_index, make_exchange
from support.inspector_bodies import claude_code_turns, make_chat_body

ANALYSIS = (
    "session",
    "seq",
    "session_source",
    "grouped_by",
    "thread",
    "parent_thread",
    "predecessor",
    "relation",
    "pointer",
    "epoch_reason",
    "relation_detail",
    "tokens_estimated",
    "tokens_by_category",
    "cache_verdict",
    "cache",
    "cache_lost_tokens",
    "cache_lost_usd",
    "markers",
    "has_compaction_before",
    "response_id",
    "attempt",
    "retry_of",
    "request_sha256",
    "model",
)
CHAT_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 1},
}


def traffic() -> list:
    """Two sessions going on side by side: a labelled Claude-Code-like loop and an unlabelled chat."""
    out = []
    chat = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Fix it."}]
    for i, body in enumerate(claude_code_turns(10, reminders=(3, 7))):
        out.append(make_exchange(request_body=json.dumps(body).encode(), session_label="loop", started_at=T0 + 9 * i))
        out.append(
            make_exchange(
                request_body=json.dumps(make_chat_body(list(chat))).encode(),
                session_label=None,
                provider="openai",
                path="/v1/chat/completions",
                client="chat-agent/1",
                response_body=json.dumps(CHAT_RESPONSE).encode(),
                started_at=T0 + 9 * i + 4,
            )
        )
        chat += [{"role": "assistant", "content": f"Step {i}"}, {"role": "user", "content": f"More {i}."}]
    return out


def stored(path) -> tuple[dict, list]:
    return analysis_and_index(path, ANALYSIS)


def until(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.02)


def store_in_process(path, exchanges, release_after: int | None) -> tuple[dict, list]:
    analyzers = writer_analyzers()
    writer = CaptureWriter(path, analyzers=analyzers, status_file=False)
    writer.start()
    for n, ex in enumerate(exchanges):
        if n == release_after:
            until(lambda n=n: writer.stats().written == n, "the first calls to be stored")
            writer.release_memory()
            until(lambda: writer.stats().idle_releases == 1, "the release")
            # What it let go of: the token engine, the recent calls and counts, the parsed bodies.
            assert tokens.encoding.cache_info().currsize == 0
            assert analyzers[0].memory.bytes == 0 and analyzers[0].memory.calls(("loop", None)) is None
        writer.submit(ex)
    assert writer.stop()
    stats = writer.stats()
    assert stats.written == len(exchanges) and stats.failed == stats.analysis_failed == 0, stats.last_error
    assert stats.idle_releases == (0 if release_after is None else 1)
    return stored(path)


@pytest.mark.slow
def test_calls_stored_after_a_release_are_analysed_and_indexed_as_without_it(tmp_path):
    exchanges = traffic()
    plain = store_in_process(tmp_path / "plain.db", exchanges, None)
    released = store_in_process(tmp_path / "released.db", exchanges, len(exchanges) // 2)
    assert released[0] == plain[0]
    assert released[1] == plain[1]
    # The traffic reaches what the comparison is about: sessions continued across the release.
    calls = list(plain[0].values())
    assert {"APPEND_ONLY", "EPOCH_START"} <= {c["relation"] for c in calls}
    assert len({c["session"] for c in calls}) == 2 and all(c["tokens_estimated"] for c in calls)


def test_a_release_queued_before_calls_is_skipped_for_them(tmp_path):
    writer = CaptureWriter(tmp_path / "c.db", analyzers=writer_analyzers(), status_file=False)
    writer.release_memory()
    for ex in traffic()[:4]:  # queued behind the release before the thread starts
        writer.submit(ex)
    writer.start()
    assert writer.stop()
    stats = writer.stats()
    assert stats.written == 4 and stats.queued == 0 and stats.idle_releases == 0


@pytest.mark.slow
def test_the_idle_child_releases_after_each_idle_spell_and_stores_the_same(tmp_path):
    exchanges = traffic()
    half = len(exchanges) // 2
    plain = store_in_process(tmp_path / "plain.db", exchanges, None)

    w = WriterProcess(tmp_path / "child.db", analyzers_factory=WRITER_ANALYZERS, idle_release=0.2, status_file=False)
    w.start()
    try:
        for ex in exchanges[:half]:
            w.submit(ex)
        until(lambda: w.stats().written == half and w.stats().idle_releases >= 1, "the child's release")
        first = w.stats().idle_releases  # one per idle spell: a slow hand-over may have made two
        for ex in exchanges[half:]:
            w.submit(ex)
        until(lambda: w.stats().written == len(exchanges) and w.stats().idle_releases > first, "the next release")
    finally:
        assert w.stop()
    stats = w.stats()
    assert stats.failed == stats.analysis_failed == 0, stats.last_error
    assert stored(tmp_path / "child.db") == plain


def test_a_release_forgets_the_ids_the_store_knows():
    """What outlives a burst pins the heap it sits in: the ids go too, and are looked up again."""
    state = IngestState(1)
    state.ids.keep(state.ids.chunks, b"c" * 32, 7)
    state.ids.keep(state.ids.segments, b"s" * 32, 8)
    generation = state.ids.generation
    release(None, state, [])
    assert not state.ids.chunks and not state.ids.segments
    assert state.ids.generation != generation  # what an analyzer noted under the old one is checked again


def _epochs_and_starts(path) -> tuple[list, list, int]:
    db = open_db(path)
    try:
        rows = db.execute("SELECT capture_epoch, epoch_reason FROM calls ORDER BY rowid").fetchall()
        starts = db.execute("SELECT COUNT(*) FROM store_events WHERE kind = 'writer_started'").fetchone()[0]
        wakes = db.execute("SELECT COUNT(*) FROM store_events WHERE kind = 'writer_woke'").fetchone()[0]
        stops = db.execute("SELECT COUNT(*) FROM store_events WHERE kind = 'writer_stopped'").fetchone()[0]
    finally:
        db.close()
    assert stops == starts + wakes  # every child that started or woke says it stopped
    return [r[0] for r in rows], [r[1] for r in rows], starts


def _asleep_after(w: WriterProcess, exchanges) -> int:
    """Submit, wait until the child that stored them has been let go and has exited; its pid."""
    pid = w._proc.pid
    for ex in exchanges:
        w.submit(ex)
    until(lambda: w.stats().asleep, "the idle child to be let go")
    until(lambda: not os.path.exists(f"/proc/{pid}"), "the idle child to exit")
    return pid


@pytest.mark.slow
def test_an_idle_child_goes_and_the_next_call_starts_one_that_continues_its_epoch(tmp_path):
    """An idle daemon holds no writer child; the capture did not pause, so no call says it resumed."""
    exchanges = traffic()[:8]
    w = WriterProcess(tmp_path / "c.db", analyzers_factory=WRITER_ANALYZERS, idle_release=0.05, status_file=False)
    w.start()
    try:
        first = _asleep_after(w, exchanges[:4])
        st = w.stats()
        assert st.running and st.written == 4 and st.queued == 0 and st.idle_releases >= 1
        assert st.restarts == st.store_failures == st.dropped == 0 and st.last_error is None
        for ex in exchanges[4:]:
            w.submit(ex)
        until(lambda: w.stats().written == 8, "the calls after the idle spell")
        assert w._proc.pid != first
        st = w.stats()
        assert st.restarts == st.store_failures == st.dropped == st.failed == 0 and st.last_error is None
    finally:
        assert w.stop()
    epochs, reasons, starts = _epochs_and_starts(tmp_path / "c.db")
    assert epochs == [1] * 8 and starts == 1
    assert "capture_resumed" not in reasons and reasons.count("session_start") == 2  # the two sessions' first calls


@pytest.mark.slow
def test_a_deletion_wakes_the_sleeping_writer_and_db_status_says_it_sleeps(tmp_path):
    exchanges = traffic()[:6]
    w = WriterProcess(tmp_path / "d.db", idle_release=0.05)
    w.start()
    try:
        _asleep_after(w, exchanges)
        until(lambda: capture_state(tmp_path / "d.db").get("asleep"), "the published status to say so")
        line = capture_line(capture_state(tmp_path / "d.db"))
        assert line.startswith("storing (6 stored since start, 0 waiting, 0 failures)") and "idle" in line
        result = w.delete_session("loop")
        assert result["session"] == "loop" and result["calls_deleted"] == 3
        assert not w.stats().store_failures
    finally:
        assert w.stop()
    epochs, _, _ = _epochs_and_starts(tmp_path / "d.db")
    assert len(epochs) == 3


@pytest.mark.slow
async def test_a_call_held_while_the_writer_sleeps_is_stored_at_stop(tmp_path):
    """Stopping with a call still held (its hand-over timer has not fired): a child starts to store it."""
    exchanges = traffic()[:3]
    w = WriterProcess(tmp_path / "s.db", idle_release=0.05, status_file=False)
    w.start()
    pid = w._proc.pid
    w.submit(exchanges[0])
    while not (w.stats().asleep and not os.path.exists(f"/proc/{pid}")):
        await asyncio.sleep(0.02)
    w.submit(exchanges[1])
    w.submit(exchanges[2])  # held: the loop is blocked in stop() below before the hand-over's timer
    assert w.stop()
    st = w.stats()
    assert st.written == 3 and st.queued == 0 and st.restarts == 0
    epochs, _, starts = _epochs_and_starts(tmp_path / "s.db")
    assert epochs == [1, 1, 1] and starts == 1


@pytest.mark.slow
def test_an_unused_child_goes_and_a_call_that_begins_wakes_the_writer(tmp_path):
    """A child that gets no work goes after one idle spell; ``expect`` (the proxy calls it as each
    request arrives) starts a new one at once, before the call is submitted, so the call is handed
    over as soon as it ends."""
    w = WriterProcess(tmp_path / "e.db", idle_release=0.05, status_file=False)
    w.start()
    try:
        first = w._proc.pid
        until(lambda: w.stats().asleep and not os.path.exists(f"/proc/{first}"), "the unused first child to go")
        w.expect()
        until(lambda: w._proc.pid != first, "a new child, with no call submitted")
        second = w._proc.pid
        until(lambda: w.stats().asleep and not os.path.exists(f"/proc/{second}"), "the unused child to go")
        w.submit(make_exchange(1))
        until(lambda: w.stats().written == 1, "the call, stored by a third child")
        st = w.stats()
        assert st.restarts == st.store_failures == 0 and st.running
    finally:
        assert w.stop()
    assert w.capture_epoch == 1


@pytest.mark.slow
async def test_calls_that_arrive_as_the_idle_child_goes_are_all_stored_in_one_epoch(tmp_path):
    """Bursts of calls (some with ``expect`` first) right after the writer fell asleep, while its
    child exits, or after pauses of about the length that lets it go, which race with the decision:
    every call is stored once, in one epoch, with no failure, drop or restart."""
    rnd = random.Random(7)
    w = WriterProcess(tmp_path / "r.db", idle_release=0.05, status_file=False)
    w.start()
    n, children, woken = 0, {w._proc.pid}, 0
    for cycle in range(4):
        for _ in range(rnd.randint(1, 20)):
            if rnd.random() < 0.3:
                w.expect()
            w.submit(make_exchange(n))
            n += 1
            if rnd.random() < 0.2:
                await asyncio.sleep(rnd.random() * 0.01)
        children.add(w._proc.pid)
        if cycle % 2:  # the next burst as soon as the writer is asleep
            while not w.stats().asleep:
                await asyncio.sleep(0.005)
            woken += 1
        else:  # about when the child would be let go
            await asyncio.sleep(0.7 + rnd.random() * 0.6)
    w.submit(make_exchange(n))  # a call after the last sleep too: each sleep seen is followed by a call
    n += 1
    children.add(w._proc.pid)
    assert w.stop()
    children.add(w._proc.pid)
    st = w.stats()
    assert st.written == n and st.dropped == st.store_failures == st.restarts == st.failed == 0, st
    assert len(children) > woken  # a new child after each time it slept (the even cycles' pauses may add more)
    epochs, _, starts = _epochs_and_starts(tmp_path / "r.db")
    assert len(epochs) == n and set(epochs) == {1} and starts == 1


@pytest.mark.slow
def test_calls_stored_after_a_trim_are_analysed_and_indexed_as_without_it(tmp_path, monkeypatch):
    """The trim once a burst is stored (here down to nothing) costs the next calls a reload from the
    store, never a different analysis or index."""
    monkeypatch.setattr(idle_release, "SETTLED_BYTES", 0)
    exchanges = traffic()
    plain = store_in_process(tmp_path / "plain.db", exchanges, None)
    analyzers = writer_analyzers()
    writer = CaptureWriter(tmp_path / "trimmed.db", analyzers=analyzers, status_file=False)
    writer.start()
    half = len(exchanges) // 2
    for ex in exchanges[:half]:
        writer.submit(ex)
    until(lambda: writer.stats().written == half, "the first calls to be stored")
    assert analyzers[0].memory.bytes > 0
    assert writer.release_memory(full=False).wait(30)
    assert analyzers[0].memory.bytes == 0 and analyzers[0].memory.calls(("loop", None)) is None
    for ex in exchanges[half:]:
        writer.submit(ex)
    assert writer.stop()
    stats = writer.stats()
    assert stats.written == len(exchanges) and stats.failed == stats.analysis_failed == 0, stats.last_error
    assert stats.idle_releases == 0  # a trim is not the idle release: the child stays
    assert stored(tmp_path / "trimmed.db") == plain
