"""The writer in a child process: everything submitted is stored; a killed parent loses nothing handed over."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ctxscope.inspector.store.queries import list_calls, open_db
from ctxscope.inspector.writer.daemon_side.holding import MAX_HOLD, QUIET_GAP
from ctxscope.inspector.writer.daemon_side.phase import Phase
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
from ctxscope.inspector.writer.priority import can_leave_idle_class
from ctxscope.inspector.writer.wire.messages import Handover

from support.environment import require
from support.factories import make_exchange

ROOT = Path(__file__).resolve().parents[2]


def seen_by_analyzer():
    """An analyzer factory the child imports by name: marks each call it sees."""

    def analyzer(db, call):
        db.execute("UPDATE calls SET error = 'analyzed' WHERE id = ?", [call["id"]])

    return [analyzer]


@pytest.mark.slow
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


def test_a_call_submit_fails_on_is_counted_told_to_the_child_and_recorded(tmp_path, caplog):
    """``submit`` failing on a call (a body that is no bytes) loses that call only: it is counted as
    dropped and submit_failed, said in one log line, and the child records the drop in the store;
    the ledger of calls in flight is not left holding it."""
    import dataclasses

    from ctxscope.inspector.reading.db_status import db_status

    w = WriterProcess(tmp_path / "c.db", status_file=False)
    w.start()
    with caplog.at_level(logging.ERROR, logger="ctxscope.store"):
        w.submit(dataclasses.replace(make_exchange(1), response_body=None))  # never raises
    w.submit(make_exchange(2))
    assert w.stop()
    stats = w.stats()
    assert (stats.submit_failed, stats.dropped, stats.written, stats.queued) == (1, 1, 1, 0)
    assert sum("submitting it failed" in r.getMessage() and not r.exc_info for r in caplog.records) == 1
    assert db_status(tmp_path / "c.db")["writer"]["dropped"] == 1


def test_a_database_that_cannot_open_does_not_fail_start_and_is_reported(tmp_path):
    from ctxscope.inspector.writer.wire import spool as spools

    (tmp_path / "dir.db").mkdir()  # a folder where the database should be
    w = WriterProcess(tmp_path / "dir.db", retry_interval=0.05)
    w.start(timeout=30)
    try:
        st = w.stats()
        assert st.running and st.store_failures >= 1 and st.store_down_since is not None
        assert "unable to open" in st.last_error
        ex = make_exchange(1)
        w.submit(ex)
    finally:
        assert w.stop() is False  # the call could not be stored ...
    [_left] = spools.spool_files(tmp_path / "dir.db")  # ... and waits in the spool
    (tmp_path / "dir.db").rmdir()
    nxt = WriterProcess(tmp_path / "dir.db")
    nxt.start()
    assert nxt.stop()
    assert [r["id"] for r in list_calls(open_db(tmp_path / "dir.db"), limit=None)] == [ex.id]


@pytest.mark.slow
def test_parent_killed_child_keeps_what_it_received(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from support.factories import make_exchange
        from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess
        if __name__ == "__main__":
            w = WriterProcess({str(tmp_path / "k.db")!r})
            w.start()
            for i in range(200):
                w.submit(make_exchange(i))
            time.sleep(1.5)
            print("ready", flush=True)
            time.sleep(60)
    """)
    (tmp_path / "parent.py").write_text(script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
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


def _tap_batches(w: WriterProcess, pauses: list | None = None) -> list:
    """What goes into the queue to the child, batch by batch (and whether each came in a pause)."""
    sent: list = []
    put = w._queue.put

    def tap(item):
        sent.append(item.batch if isinstance(item, Handover) else None)  # None: the stop message
        if pauses is not None and isinstance(item, Handover):
            pauses.append(item.pause)
        put(item)

    w._queue.put = tap
    return sent


async def test_calls_finished_together_travel_as_one_batch_and_stop_sends_the_last_one(tmp_path):
    w = WriterProcess(tmp_path / "b.db")
    w.start()
    sent = _tap_batches(w)
    for i in range(40):
        w.submit(make_exchange(i))
    await asyncio.sleep(QUIET_GAP * 4)
    for i in range(40, 50):  # still held when stop() comes
        w.submit(make_exchange(i))
    assert w.stop()
    assert [len(batch) for batch in sent[:-1]] == [40, 10] and sent[-1] is None
    rows = list_calls(open_db(tmp_path / "b.db"), limit=None)
    assert len(rows) == 50 and w.stats().written == 50 and w.stats().queued == 0


async def test_calls_are_held_while_traffic_flows_and_handed_over_in_the_first_pause(tmp_path):
    w = WriterProcess(tmp_path / "h.db")
    w.start()
    pauses: list[bool] = []
    sent = _tap_batches(w, pauses)
    try:
        began = time.monotonic()
        stamps = []
        for i in range(10):  # a call every 10 ms: never a pause of QUIET_GAP
            w.submit(make_exchange(i))
            stamps.append(time.monotonic())
            await asyncio.sleep(QUIET_GAP / 5)
        during = len(sent)
        stamps.append(time.monotonic())
        await asyncio.sleep(QUIET_GAP * 3)
        assert time.monotonic() - began < MAX_HOLD  # so only the pause can have handed them over
        # A loaded machine can stretch a 10 ms sleep past QUIET_GAP: that is a real pause in the
        # traffic, and a hand-over in it is right; never more hand-overs than such pauses.
        stalls = sum(1 for a, b in itertools.pairwise(stamps) if b - a >= QUIET_GAP)
        if stalls == 0:
            assert during == 0 and [len(b) for b in sent] == [10] and pauses == [True]
        else:
            assert during <= stalls and sum(len(b) for b in sent) == 10 and all(pauses), (stalls, pauses)
    finally:
        assert w.stop()


@pytest.mark.slow
async def test_a_burst_without_a_pause_is_handed_over_after_max_hold(tmp_path, quiet_gap):
    w = WriterProcess(tmp_path / "m.db")
    w.start()
    pauses: list[bool] = []
    sent = _tap_batches(w, pauses)
    try:
        began, i = time.monotonic(), 0
        while not sent:
            assert time.monotonic() - began < MAX_HOLD * 3, "a burst held its calls for too long"
            w.submit(make_exchange(i))
            i += 1
            await asyncio.sleep(quiet_gap / 5)
        held_for = time.monotonic() - began
        assert held_for >= MAX_HOLD * 0.9 and len(sent[0]) == i  # every call so far, in one batch
        assert pauses == [False]  # the child is told the traffic goes on: it only spools them
    finally:
        assert w.stop()
    assert len(list_calls(open_db(tmp_path / "m.db"), limit=None)) == i


async def test_a_big_call_is_handed_over_at_once(tmp_path):
    from ctxscope.inspector.writer.daemon_side.holding import HOLD_BYTES

    w = WriterProcess(tmp_path / "big.db")
    w.start()
    sent = _tap_batches(w)
    try:
        w.submit(make_exchange(1, response_body=b"x" * HOLD_BYTES))
        assert [len(b) for b in sent] == [1]  # no pickle of many megabytes piles up on the loop
    finally:
        assert w.stop()


def crash_on_start():
    """An analyzer factory that kills the child before it can say it is ready."""
    os._exit(3)


@pytest.mark.slow
def test_a_child_that_dies_while_starting_is_reported_at_once_and_its_calls_kept(tmp_path):
    from ctxscope.inspector.writer.wire import spool as spools

    w = WriterProcess(tmp_path / "d.db", analyzers_factory="test_inspector_writer_process:crash_on_start")
    began = time.monotonic()
    w.start(timeout=600)  # does not raise, and does not wait for the timeout either
    assert time.monotonic() - began < 60
    st = w.stats()
    assert not st.running and st.store_failures == 1 and "exited with code 3" in st.last_error
    assert st.store_down_since is not None
    exs = [make_exchange(i) for i in range(3)]
    for ex in exs:
        w.submit(ex)
    assert w.stats().queued == 3 and w.stats().dropped == 0
    assert w.stop() is False
    assert len(spools.spool_files(tmp_path / "d.db")) == 1  # kept for the next writer
    nxt = WriterProcess(tmp_path / "d.db")
    nxt.start()
    assert nxt.stop()
    assert {r["id"] for r in list_calls(open_db(tmp_path / "d.db"), limit=None)} == {e.id for e in exs}


def test_only_the_storing_thread_yields_while_the_child_keeps_up(tmp_path):
    """The main thread takes hand-overs off the pipe at ordinary priority (a busy machine must
    not starve it into filling the proxy's queue); the storing thread yields."""
    w = WriterProcess(tmp_path / "i.db")
    w.start()
    try:
        pid = w._proc.pid
        policies = {int(t): os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{pid}/task")}
        can_leave = can_leave_idle_class()
    finally:
        assert w.stop()
    yielding = os.SCHED_IDLE if can_leave else os.SCHED_BATCH
    assert policies[pid] == os.SCHED_OTHER
    assert sorted(policies.values()).count(yielding) == 1, policies


def test_the_storing_thread_climbs_with_its_backlog_and_comes_back_down():
    import ctxscope.inspector.writer.priority as wp

    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        tid = thread.native_id
        assert tid is not None
        p = wp.Priority(True, nice=10)
        p.tids = [tid]
        privileged = wp.can_leave_idle_class()

        def rung() -> tuple[int, int]:
            return os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)

        p.update(False, 0, 0.0)
        assert rung() == ((os.SCHED_IDLE, 0) if privileged else (os.SCHED_BATCH, 0))
        p.update(True, 0, 1.0)
        p.update(True, 0, 1.0 + wp.MAX_IDLE_LAG / 2)
        assert p.level == 0  # a short lag: still yielding
        p.update(True, 0, 1.0 + wp.MAX_IDLE_LAG + 0.1)
        assert rung() == ((os.SCHED_OTHER, 10) if privileged else (os.SCHED_OTHER, 0))
        p.update(True, wp.FAR_BYTES, 1.0 + wp.MAX_IDLE_LAG + 0.2)
        assert p.level == 2 and rung() == (os.SCHED_OTHER, 0)  # far behind: nice 0 again, even unprivileged
        p.update(False, 0, 30.0)
        assert p.level == 0 and rung() == ((os.SCHED_IDLE, 0) if privileged else (os.SCHED_BATCH, 0))
        assert p.moves == 4
    finally:
        release.set()
        thread.join()


def test_an_unprivileged_child_cannot_come_back_from_a_nice_or_the_idle_class_but_from_batch():
    """Why the ladder is what it is: as a user with RLIMIT_NICE 0, leaving the idle class and
    lowering the nice value are refused; batch <-> ordinary is not."""
    probe_as: list[str] = []  # unprivileged already: the probe runs as ourselves
    if os.geteuid() == 0:
        require(shutil.which("setpriv") is not None, "setpriv, to drop root for the probe")
        probe_as = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    code = (
        "import os,resource\n"
        "assert resource.getrlimit(resource.RLIMIT_NICE)[0]==0\n"
        "os.sched_setscheduler(0,os.SCHED_BATCH,os.sched_param(0));os.sched_setscheduler(0,os.SCHED_OTHER,os.sched_param(0))\n"
        "os.setpriority(os.PRIO_PROCESS,0,10)\n"
        "try:\n os.setpriority(os.PRIO_PROCESS,0,0);print('renice back')\nexcept PermissionError:print('no renice')\n"
        "try:\n os.sched_setscheduler(0,os.SCHED_IDLE,os.sched_param(0));"
        "os.sched_setscheduler(0,os.SCHED_OTHER,os.sched_param(0));print('idle back')\n"
        "except PermissionError:print('no idle')\n"
        "import ctxscope.inspector.writer.priority as wp\nprint(wp.can_leave_idle_class())\n"
    )

    def as_a_plain_user() -> None:  # a machine may raise RLIMIT_NICE: the probe runs with a user's 0
        import resource

        resource.setrlimit(resource.RLIMIT_NICE, (0, 0))

    out = subprocess.run(
        [*probe_as, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=as_a_plain_user if os.geteuid() == 0 else None,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["no", "renice", "no", "idle", "False"]


def test_held_calls_are_due_in_a_pause_after_max_hold_or_when_full():
    from ctxscope.inspector.writer.daemon_side.holding import Held

    held = Held(quiet_gap=0.05, max_hold=2.0, max_calls=10, max_bytes=100)
    assert held.wait(0.0) <= 0 and held.take() == []  # nothing held: nothing to wait for
    held.add(("a",), 10, 10.0)
    held.add(("b",), 10, 10.5)
    assert abs(held.wait(10.5) - 0.05) < 1e-9  # calls still coming: wait for a pause
    assert held.wait(10.56) <= 0  # a pause
    held.add(("c",), 10, 11.99)  # a burst that never pauses ...
    assert 0 < held.wait(11.99) <= 0.01 + 1e-9 and held.wait(12.0) <= 0  # ... is due after max_hold
    assert held.take() == [("a",), ("b",), ("c",)] and held.bytes == 0
    held.add(("big",), 100, 30.0)
    assert held.full() and held.wait(30.0) <= 0  # too many bytes: due at once
    held.take()
    for _ in range(10):
        held.add(("n",), 1, 40.0)
    assert held.full() and held.wait(40.0) <= 0  # too many calls


@pytest.mark.slow
async def test_a_writer_child_that_dies_is_replaced_and_nothing_it_had_spooled_is_lost(tmp_path, quiet_gap):
    db = tmp_path / "r.db"
    w = WriterProcess(db)
    w.start()
    n = 0
    try:
        # a burst: past MAX_HOLD one hand-over without a pause, which the child only spools
        while not w._handover.in_flight.acked:
            w.submit(make_exchange(n))
            n += 1
            await asyncio.sleep(quiet_gap / 5)
            w.stats()  # reads the child's acknowledgements
            assert n < 2000, "the child never acknowledged a hand-over"
        assert len(list_calls(open_db(db), limit=None)) == 0  # spooled, not stored
        first = w._proc
        os.kill(first.pid, signal.SIGKILL)  # the OOM killer, say
        first.join(10)
        for _ in range(40):
            w.submit(make_exchange(n))
            n += 1
            await asyncio.sleep(0.005)
        deadline = time.monotonic() + 60
        while (w._proc is first or w.phase is Phase.RESTARTING) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert w._proc is not first and w._proc.is_alive() and w.restarts == 1
    finally:
        assert w.stop()
    ids = [r["id"] for r in list_calls(open_db(db), limit=None)]
    assert len(ids) == len(set(ids)) == n  # what the dead child had spooled, and everything after
    assert w.stats().dropped == 0
    assert not list(tmp_path.glob("r.db.spool-*"))


def crash_on_store():
    """An analyzer factory whose analyzer kills the child on every call it stores."""

    def analyzer(db, call):
        os._exit(1)

    return [analyzer]


@pytest.mark.slow
async def test_a_child_that_crashes_in_a_loop_is_counted_honestly_and_its_call_kept(tmp_path, monkeypatch):
    import ctxscope.inspector.writer.daemon_side.restart as wp
    from ctxscope.inspector.writer.wire import spool as spools

    monkeypatch.setattr(wp, "FIRST_BACKOFF", 0.1)
    monkeypatch.setattr(wp, "RESTART_BACKOFF", 0.5)  # a child killed before its "ready" left the pipe
    w = WriterProcess(tmp_path / "loop.db", analyzers_factory="test_inspector_writer_process:crash_on_store")
    w.start()
    w.submit(make_exchange(1))  # every child that stores it dies: a crash loop
    deadline = time.monotonic() + 60
    seen_down = False
    while (w.stats().restarts < 2 or w.stats().store_failures < 3) and time.monotonic() < deadline:
        seen_down = seen_down or not w.stats().running
        await asyncio.sleep(0.05)
    st = w.stats()
    assert st.restarts >= 2 and st.store_failures >= 3, st
    assert "exited with code 1" in (st.last_error or "") and st.written == 0
    assert seen_down  # between a death and the next start, status says it is not running
    w.stop()
    assert spools.spool_files(tmp_path / "loop.db")  # the call was never lost: it waits in a spool
    assert len(list_calls(open_db(tmp_path / "loop.db"), limit=None)) == 0


def _peak_rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))


@pytest.mark.slow
def test_a_gzip_bomb_is_stored_as_sent_analysed_no_further_and_the_writer_stays_small(tmp_path):
    import zlib

    zeros, c = b"\0" * (8 << 20), zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(c.compress(zeros) for _ in range(75)) + c.flush()  # 600 MB once inflated
    assert len(bomb) < 700_000
    gz = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    w = WriterProcess(tmp_path / "b.db", analyzers_factory="ctxscope.inspector.pipeline.analyze:writer_analyzers")
    w.start()
    try:
        pid = w._proc.pid
        up = make_exchange(1, request_headers=gz, request_body=bomb)
        down = make_exchange(2, response_headers=gz, response_body=bomb)
        w.submit(up)
        w.submit(down)
        deadline = time.monotonic() + 60
        while w.stats().written < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        peak = _peak_rss_mb(pid)
    finally:
        assert w.stop()
    assert peak < 256, f"the writer child peaked at {peak} MB"  # the bomb is 600 MB; the cap alone 128 MB
    db = open_db(tmp_path / "b.db")
    from ctxscope.inspector.store import queries

    calls = {c["id"]: queries.get_call(db, c["id"]) for c in list_calls(db, limit=None)}
    assert "decoded size over limit" in calls[up.id]["request_decode_error"]
    assert "decoded size over limit" in calls[down.id]["response_decode_error"]
    assert queries.get_request_raw(db, up.id) == bomb and queries.get_response_raw(db, down.id) == bomb


def test_the_decoded_size_cap_is_a_writer_setting(tmp_path):
    import gzip

    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * 5000 + b'"}]}'
    gz = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    w = WriterProcess(tmp_path / "cap.db", max_decoded_bytes=1000)
    w.start()
    no_model = {"type": "message", "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}
    ex = make_exchange(1, request_headers=gz, request_body=gzip.compress(body), response=no_model)
    w.submit(ex)
    assert w.stop()
    from ctxscope.inspector.store import queries

    call = queries.get_call(open_db(tmp_path / "cap.db"), ex.id)
    assert "over limit" in call["request_decode_error"] and call["model"] is None  # not analysed


_PROBE = '''
import json, sys
from ctxscope.inspector.pipeline.analyze import writer_analyzers

def report(out):
    """Analyzers for the child, after writing down every module the child has imported."""
    analyzers = writer_analyzers()
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
    return analyzers
'''

_DAEMON_LIKE_MAIN = """
import json, os, sys, time
import ctxscope.daemon  # what `ctxscope serve` has imported: the proxy's server, the web routes, the simulator
import ctxscope.main  # the CLI (click)
from ctxscope.inspector.pipeline.analyze import writer_analyzers
from ctxscope.inspector.writer.daemon_side.supervisor import WriterProcess

if __name__ == "__main__":
    db, out = sys.argv[1], sys.argv[2]
    w = WriterProcess(db, analyzers_factory="writer_probe:report", analyzers_args=(out,), status_file=False)
    w.start()
    try:
        assert w.stats().running, w.stats().last_error
        kids = [k for t in os.listdir("/proc/self/task") for k in open(f"/proc/self/task/{t}/children").read().split()]
        commands = [open(f"/proc/{k}/cmdline", "rb").read().replace(b"\\0", b" ").decode() for k in kids]
    finally:
        w.stop()
    print(json.dumps(commands))
    print(json.dumps(sorted(sys.modules)))
"""

FORBIDDEN_IN_WRITER = (
    "ctxscope.web",
    "ctxscope.simulator",
    "ctxscope.proxy.server",
    "ctxscope.main",
    "ctxscope.daemon",
    "ctxscope.agent",
)


@pytest.mark.slow
def test_the_writer_child_imports_the_inspector_and_not_the_cli_proxy_web_or_simulator(tmp_path):
    """The real child, started from a main module that imports the whole CLI, as the daemon's does."""
    (tmp_path / "writer_probe.py").write_text(_PROBE)
    (tmp_path / "daemon_like.py").write_text(_DAEMON_LIKE_MAIN)
    out = tmp_path / "child-modules.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "daemon_like.py"), str(tmp_path / "w.db"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    parent = set(json.loads(done.stdout.strip().splitlines()[-1]))
    child = set(json.loads(out.read_text()))
    [command] = json.loads(done.stdout.strip().splitlines()[-2])  # one process: no resource tracker beside it
    assert "-m ctxscope.inspector.writer.child.entry" in command
    assert not {m for m in parent | child if m == "multiprocessing" or m.startswith("multiprocessing.")}
    assert {"click", "ctxscope.web.routes", "ctxscope.proxy.server"} <= parent  # the main module did import them
    assert "ctxscope.inspector.pipeline.analyze" in child and "ctxscope.inspector.writer.child" in child
    leaked = sorted(m for m in child if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_WRITER))
    assert not leaked, f"the writer child imported {leaked}"
    # click: only what the store's SQLite library (sqlite_utils) imports itself, none of the CLI's use of it
    alone = subprocess.run(
        [sys.executable, "-c", "import sys, sqlite_utils; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert {m for m in child if m == "click" or m.startswith("click.")} <= set(alone)


def _recorded_drops(db_path: Path) -> int:
    from ctxscope.inspector.reading.db_status import db_status

    return db_status(db_path)["writer"]["dropped"]


@pytest.mark.slow
def test_calls_the_proxy_drops_while_the_child_lags_are_recorded_in_the_store(tmp_path):
    """A child that takes nothing (stopped here) fills the proxy's queue: the calls past it are
    dropped, counted live, and recorded in the store, so ``db status`` still says so after the stop."""
    w = WriterProcess(tmp_path / "q.db", max_queue=5)
    w.start()
    assert w._proc is not None and w._proc.pid is not None
    os.kill(w._proc.pid, signal.SIGSTOP)
    try:
        for i in range(30):
            w.submit(make_exchange(i))
        live = w.stats().dropped
    finally:
        os.kill(w._proc.pid, signal.SIGCONT)
    assert live == 25
    assert w.stop()
    assert len(list_calls(open_db(tmp_path / "q.db"), limit=None)) == 5
    assert _recorded_drops(tmp_path / "q.db") == w.stats().dropped == 25


@pytest.mark.slow
def test_calls_past_a_full_spool_are_recorded_as_dropped_in_the_store(tmp_path):
    """A spool with no room (a limit below its own header) drops every call handed over: each is
    counted as dropped_spool_full while the daemon runs and recorded in the store for afterwards."""
    w = WriterProcess(tmp_path / "s.db", max_spool_bytes=1)
    w.start()
    for i in range(12):
        w.submit(make_exchange(i))
    assert w.stop()
    stats = w.stats()
    assert stats.dropped == stats.dropped_spool_full == 12 and stats.written == 0
    assert _recorded_drops(tmp_path / "s.db") == 12


@pytest.mark.slow
def test_submit_never_waits_for_a_child_that_does_not_read(tmp_path):
    """Hand-overs far past the pipe's 64 KB buffer, to a stopped child: the feeder thread waits for
    the pipe, submit does not; once the child reads again, every call is stored."""
    import threading

    w = WriterProcess(tmp_path / "p.db")
    w.start()
    os.kill(w._proc.pid, signal.SIGSTOP)
    exs = [make_exchange(i, response_body=os.urandom(1 << 20)) for i in range(8)]
    try:
        submitting = threading.Thread(target=lambda: [w.submit(ex) for ex in exs])  # no loop: each handed over now
        submitting.start()
        submitting.join(60)
        returned = not submitting.is_alive()
        live = w.stats()
    finally:
        os.kill(w._proc.pid, signal.SIGCONT)
    assert returned and live.queued == 8 and live.dropped == 0
    assert w.stop()
    assert {r["id"] for r in list_calls(open_db(tmp_path / "p.db"), limit=None)} == {ex.id for ex in exs}


def test_the_supervisor_phase_moves_only_from_the_phases_a_move_starts_from():
    from ctxscope.inspector.writer.daemon_side.phase import MOVES, SupervisorPhase

    phase = SupervisorPhase()
    for name in ("started", "fell_asleep", "restarting", "restarted", "died", "restarting", "start_failed"):
        phase.move(name)
    assert phase.now is Phase.DOWN
    with pytest.raises(AssertionError, match="died from DOWN"):
        phase.move("died")  # a death is counted once: from RUNNING only
    with pytest.raises(AssertionError, match="fell_asleep from DOWN"):
        phase.move("fell_asleep")
    assert phase.now is Phase.DOWN and phase.move("stopped") is Phase.DOWN and phase.now is Phase.STOPPED
    assert {to for _, to in MOVES.values()} | {Phase.NEW} == set(Phase)  # every phase is reached by a move
