"""The writer child's spool keeping: when storing may begin, feeding the writer, emptying the spool."""

from __future__ import annotations

import sqlite3
import time

import pytest

from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.inspector.writer.child import deferred as wc
from ctxscope.inspector.writer.status import WriterStats
from ctxscope.inspector.writer.storing.thread import CaptureWriter
from ctxscope.inspector.writer.wire.call_fields import ID, call_size
from ctxscope.inspector.writer.wire.call_fields import pack as _pack
from ctxscope.inspector.writer.wire.messages import HandoverRecord
from ctxscope.inspector.writer.wire.spool import Spool
from ctxscope.inspector.writer.wire.spool_format import payload_pieces

from support.factories import make_exchange


def _deferred(tmp_path):
    writer = CaptureWriter(tmp_path / "c.db")
    writer.start()
    return wc.Deferred(Spool(tmp_path / "c.db"), writer), writer


def _wait_written(writer: CaptureWriter, n: int) -> None:
    deadline = time.monotonic() + 20
    while writer.stats().written < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_spooled_calls_wait_until_due_then_are_stored_and_the_spool_emptied(tmp_path, monkeypatch):
    monkeypatch.setattr(wc, "MAX_DEFER_BYTES", 10_000)
    d, writer = _deferred(tmp_path)
    try:
        d.add([_pack(make_exchange(i)) for i in range(3)], now=100.0)
        assert d.calls == 3 and d.received == 3 and d.spool.holds
        assert not d.due(100.0 + wc.MAX_DEFER - 0.1) and d.due(100.0 + wc.MAX_DEFER)  # unbroken traffic
        assert d.stats()["queued"] == 3 and writer.stats().written == 0
        d.add([_pack(make_exchange(9, request_body=b"x" * 10_000))], now=100.5)
        assert d.due(100.5)  # too many bytes waiting
        d.settle()
        assert d.spool.holds  # nothing stored yet: the spool must stay
        assert d.feed() and d.calls == 0 and d.given == 4
        _wait_written(writer, 4)
        d.settle()
        assert not d.spool.holds and d.stats()["queued"] == 0
    finally:
        writer.stop()
    assert len(list_calls(open_db(tmp_path / "c.db"), limit=None)) == 4


def test_feeding_stops_while_the_writer_is_full_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(wc, "CHILD_BACKLOG", 5)
    d, writer = _deferred(tmp_path)
    gate = []
    monkeypatch.setattr(writer, "submit", lambda ex: gate.append(ex))  # a writer that takes nothing off its queue
    monkeypatch.setattr(writer, "stats", lambda: WriterStats(queued=len(gate)))
    try:
        d.add([_pack(make_exchange(i)) for i in range(12)], now=0.0)
        assert not d.feed() and len(gate) == 5 and d.calls == 7  # full: the rest stays spooled
        gate.clear()
        assert not d.feed() and len(gate) == 5 and d.calls == 2
        gate.clear()
        assert d.feed() and len(gate) == 2 and d.calls == 0
    finally:
        monkeypatch.undo()
        writer.stop()


def _disk_full(batch):
    raise OSError(28, "No space left on device")


def test_a_spool_that_cannot_be_written_holds_calls_in_memory_until_stored(tmp_path, monkeypatch):
    d, writer = _deferred(tmp_path)
    monkeypatch.setattr(d.spool, "append", _disk_full)
    try:
        d.add([_pack(make_exchange(i)) for i in range(4)], now=0.0)
        assert d.calls == 0 and d.received == 4 and d.spool_failures == 1
        assert d.stats()["in_memory"] == 4 and d.stats()["queued"] == 4 and d.due(0.0)
        assert d.feed() and d.given == 4
        _wait_written(writer, 4)
        d.settle()
        assert d.stats()["queued"] == 0 and d.lost_at_stop() == 0
    finally:
        writer.stop()
    assert len(list_calls(open_db(tmp_path / "c.db"), limit=None)) == 4


def test_memory_held_for_an_unwritable_spool_is_bounded_and_drops_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(wc, "MEMORY_LIMIT", 50_000)
    d, writer = _deferred(tmp_path)
    monkeypatch.setattr(d.spool, "append", _disk_full)
    try:
        d.add([_pack(make_exchange(i, request_body=b"m" * 20_000)) for i in range(4)], now=0.0)
        st = d.stats()
        assert st["in_memory"] == 2 and st["dropped"] == 2 and d.received == 4
    finally:
        writer.stop()


def test_the_spool_is_emptied_only_after_the_store_committed_its_calls(tmp_path, monkeypatch):
    """A store failing for a while (here: every write fails) keeps the calls in the spool."""
    from ctxscope.inspector.writer.storing import work as writer_module

    failing = {"on": True}
    real = writer_module.ingest

    def ingest(*args, **kwargs):
        if failing["on"]:
            raise sqlite3.OperationalError("database or disk is full")
        return real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "ingest", ingest)
    writer = CaptureWriter(tmp_path / "c.db", retry_interval=0.05, status_file=False)
    writer.start()
    d = wc.Deferred(Spool(tmp_path / "c.db"), writer)
    try:
        d.add([_pack(make_exchange(i)) for i in range(5)], now=0.0)
        assert d.feed()
        deadline = time.monotonic() + 20
        while writer.stats().store_failures < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        d.settle()
        assert d.spool.holds and writer.stats().written == 0 and d.stats()["queued"] == 5
        assert writer.stats().store_down_since is not None and "full" in writer.stats().last_error
        failing["on"] = False
        _wait_written(writer, 5)
        d.settle()
        assert not d.spool.holds
    finally:
        writer.stop()
    assert len(list_calls(open_db(tmp_path / "c.db"), limit=None)) == 5


def test_calls_held_in_memory_are_fed_within_the_writer_byte_limit(tmp_path, monkeypatch):
    """The spool cannot be written and the store is down: the calls held in memory are given to the
    writer only as far as its byte limit allows, so the writer drops none of them."""
    monkeypatch.setattr(wc, "CHILD_BACKLOG_BYTES", 50_000)
    (tmp_path / "not-a-folder").write_bytes(b"")
    db = tmp_path / "not-a-folder" / "c.db"  # cannot be opened: the writer holds what it gets
    writer = CaptureWriter(db, max_queue_bytes=100_000, retry_interval=30, status_file=False, keep_unstored=False)
    writer.start()
    d = wc.Deferred(None, writer)
    d._reopen_at = float("inf")  # the spool cannot be created either
    try:
        d.add([_pack(make_exchange(i, request_body=b"m" * 20_000)) for i in range(10)], now=0.0)
        assert d.stats()["in_memory"] == 10
        assert not d.feed()  # the writer is full: the rest stays in memory
        assert writer.stats().dropped == 0
        assert 0 < d.given < 10 and d.stats()["in_memory"] == 10 - d.given
    finally:
        writer.stop(timeout=5)


def _record(batch, pause=False):
    """A hand-over as the child reads it off its pipe."""
    return HandoverRecord(
        pause, bytearray(b"".join(payload_pieces(batch))), len(batch), sum(call_size(f) for f in batch)
    )


def test_a_handover_is_spooled_as_it_came_and_near_the_limit_call_by_call(tmp_path):
    d, writer = _deferred(tmp_path)
    try:
        first = [_pack(make_exchange(i, request_body=b"a" * 3000)) for i in range(3)]
        d.add_record(_record(first), now=0.0)  # far from the limit: appended as it is
        assert d.calls == 3 and d.received == 3 and d.bytes == sum(call_size(f) for f in first)
        second = [_pack(make_exchange(i, request_body=b"b" * 3000)) for i in range(3, 6)]
        # reached inside the next hand-over: its calls are taken one by one, as long as they fit
        d.room.cap = d.spool.unstored_size + sum(call_size(f) for f in second[:2]) + 1
        d.add_record(_record(second), now=1.0)
        assert d.received == 6 and d.calls == 5 and d.over_limit == 1 and d.stats()["dropped_spool_full"] == 1
        assert d.feed() and d.given == 5
        _wait_written(writer, 5)
    finally:
        writer.stop()
    stored = {r["id"] for r in list_calls(open_db(tmp_path / "c.db"), limit=None)}
    assert stored == {f[ID] for f in first + second[:2]}


@pytest.mark.slow
def test_the_child_loop_goes_quiet_lets_go_then_sleeps_without_a_timer_and_refuses_a_move_from_elsewhere(tmp_path):
    """A silent proxy: the loop sends its counters, goes QUIET once they are final, lets go of its
    caches after idle_release (RELEASED), says so, then waits with no timer (DORMANT) until the
    proxy stops it. A move from a state it does not start from fails loudly."""
    from ctxscope.inspector.writer.child.loop import ChildLoop, ChildState
    from ctxscope.inspector.writer.priority import Priority
    from ctxscope.inspector.writer.wire.messages import Counters, Stop

    d, writer = _deferred(tmp_path)
    seen: list[ChildState] = []
    waits: list[float | None] = []
    said: list = []

    class SilentProxy:  # an inbox whose proxy sends nothing, then Stop once the child sleeps
        def wait(self, timeout=None):
            seen.append(loop.state)
            waits.append(timeout)
            return timeout is None  # idle_release passes in silence; with no timer, Stop is there

        def get(self, timeout=None):
            seen.append(loop.state)
            if loop.state is ChildState.DORMANT:
                return Stop()
            time.sleep(timeout)
            return None

    class Replies:
        def put(self, message):
            said.append(message)

    loop = ChildLoop(SilentProxy(), Replies(), writer, d, Priority(False), quiet_after=1.0, idle_release=0.5)
    try:
        loop.run()
        order = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] is not s]
        assert order == [ChildState.WORKING, ChildState.QUIET, ChildState.RELEASED, ChildState.DORMANT]
        assert loop.state is ChildState.DRAINING and waits == [0.5, None]  # one timer, then none
        counters = [m for m in said if isinstance(m, Counters)]
        assert counters[-1].stats["idle_releases"] == 1  # the release was said before it slept
        with pytest.raises(AssertionError, match="DRAINING -> RELEASED"):
            loop._idle_spell()
        loop.stopped()
        assert loop.state is ChildState.STOPPED
    finally:
        writer.stop()
