"""The writer in a child process: everything submitted is stored; a killed parent loses nothing handed over."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ctxscope.inspector.queries import list_calls, open_db
from ctxscope.inspector.writer_process import FLUSH_DELAY, WriterProcess, _can_leave_idle_class
from ctxscope.proxy.exchange import Exchange

ROOT = Path(__file__).resolve().parent.parent


def make_exchange(i: int, **over) -> Exchange:
    body = ('{"model": "m", "messages": [{"role": "user", "content": "hello %d"}]}' % i).encode()
    fields = dict(
        id=f"{time.time_ns():016x}{i:06x}", provider="openai", upstream="http://127.0.0.1:1", method="POST",
        path="/v1/chat/completions", query="", session_label="s", annotations=(), request_headers=(),
        key_fingerprint=None, request_body=body, status=200,
        response_headers=(("Content-Type", "application/json"),),
        response_body=b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}',
        started_at=time.time(), first_byte_at=time.time(), ended_at=time.time(), outcome="ok",
    )
    fields.update(over)
    return Exchange(**fields)


def seen_by_analyzer():
    """An analyzer factory the child imports by name: marks each call it sees."""

    def analyzer(db, call):
        db.execute("UPDATE calls SET error = 'analyzed' WHERE id = ?", [call["id"]])

    return [analyzer]


def test_submitted_calls_are_stored_and_analyzed_in_the_child(tmp_path):
    w = WriterProcess(tmp_path / "c.db", analyzers_factory="test_inspector_writer_process:seen_by_analyzer")
    w.start()
    assert w.capture_epoch == 1
    for i in range(300):
        w.submit(make_exchange(i))
    assert w.stop()
    rows = list_calls(open_db(tmp_path / "c.db"), limit=None)
    assert len(rows) == 300 and {r["error"] for r in rows} == {"analyzed"}
    stats = w.stats()
    assert stats.written == 300 and stats.queued == 0 and not stats.running
    w.submit(make_exchange(999))  # after stop: counted, not raised
    assert w.stats().dropped == 1


def test_a_database_that_cannot_open_fails_start(tmp_path):
    (tmp_path / "dir.db").mkdir()
    w = WriterProcess(tmp_path / "dir.db")
    try:
        w.start(timeout=30)
    except RuntimeError as e:
        assert "could not start" in str(e)
    else:
        raise AssertionError("start should fail")


def test_parent_killed_child_keeps_what_it_received(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from test_inspector_writer_process import make_exchange
        from ctxscope.inspector.writer_process import FLUSH_DELAY, WriterProcess, _can_leave_idle_class
        if __name__ == "__main__":
            w = WriterProcess({str(tmp_path / 'k.db')!r})
            w.start()
            for i in range(200):
                w.submit(make_exchange(i))
            time.sleep(1.5)
            print("ready", flush=True)
            time.sleep(60)
    """)
    (tmp_path / "parent.py").write_text(script)
    # The killed parent's resource tracker rightly reports the queues it never closed: keep that quiet.
    env = dict(os.environ, PYTHONWARNINGS="ignore::UserWarning")
    proc = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        db = open_db(tmp_path / "k.db")
        n = len(list_calls(db, limit=None))
        db.conn.close()
        if n == 200:
            break
        time.sleep(0.1)
    assert n == 200
    assert next(open_db(tmp_path / "k.db").query("PRAGMA integrity_check"))["integrity_check"] == "ok"


async def test_calls_finished_together_travel_as_one_batch_and_stop_sends_the_last_one(tmp_path):
    w = WriterProcess(tmp_path / "b.db")
    w.start()
    sent: list[list] = []
    put = w._queue.put
    w._queue.put = lambda item: (sent.append(item), put(item))
    for i in range(40):
        w.submit(make_exchange(i))
    await asyncio.sleep(FLUSH_DELAY * 4)
    for i in range(40, 50):  # still waiting for their trip when stop() comes
        w.submit(make_exchange(i))
    assert w.stop()
    assert [len(batch) for batch in sent[:-1]] == [40, 10] and sent[-1] is None
    rows = list_calls(open_db(tmp_path / "b.db"), limit=None)
    assert len(rows) == 50 and w.stats().written == 50 and w.stats().queued == 0


def crash_on_start():
    """An analyzer factory that kills the child before it can say it is ready."""
    os._exit(3)


def test_a_child_that_dies_while_starting_fails_start_at_once(tmp_path):
    w = WriterProcess(tmp_path / "d.db", analyzers_factory="test_inspector_writer_process:crash_on_start")
    try:
        w.start(timeout=600)  # a test run that waited for this would be noticed
    except RuntimeError as e:
        assert "exited with code 3" in str(e)
    else:
        raise AssertionError("start should fail")


def test_the_child_yields_to_everything_while_it_keeps_up(tmp_path):
    w = WriterProcess(tmp_path / "i.db")
    w.start()
    try:
        tids = os.listdir(f"/proc/{w._proc.pid}/task")
        policies = {os.sched_getscheduler(int(t)) for t in tids}
        can_leave = _can_leave_idle_class()
    finally:
        assert w.stop()
    assert policies == ({os.SCHED_IDLE} if can_leave else {os.SCHED_OTHER})


def test_the_child_competes_again_when_it_stays_behind(monkeypatch):
    import ctxscope.inspector.writer_process as wp

    calls = []
    monkeypatch.setattr(wp, "_can_leave_idle_class", lambda: True)
    p = wp._Priority(True)
    monkeypatch.setattr(p, "set_idle", lambda idle: calls.append(idle))
    p.update(False, 0.0)
    p.update(True, 1.0)
    p.update(True, 1.0 + wp.MAX_IDLE_LAG / 2)
    p.update(True, 1.0 + wp.MAX_IDLE_LAG + 0.1)
    p.update(False, 9.0)
    assert calls == [True, False, True]


def test_calls_are_held_while_traffic_flows_and_stored_in_the_first_pause():
    from ctxscope.inspector.writer_process import CHILD_BACKLOG, _Held

    held = _Held(quiet_gap=0.05, max_hold=2.0)
    assert not held.due(0.0, quiet=True)  # nothing held
    held.add([("a",)], 10.0)
    held.add([("b",), ("c",)], 10.5)
    assert not held.due(11.0, quiet=False)  # calls still coming
    assert held.due(11.0, quiet=True)  # a pause
    assert held.due(12.0, quiet=False)  # held long enough
    assert held.take() == [("a",), ("b",), ("c",)] and not held.due(12.0, quiet=True)
    held.add([("x",)] * CHILD_BACKLOG, 20.0)
    assert held.due(20.0, quiet=False)  # held enough
