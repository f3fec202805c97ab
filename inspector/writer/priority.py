"""The writer child's CPU priority: out of the way of forwarding, rising with its backlog.

Nice 10 alone did not keep the child out of the way. On a 2-core machine under the
bench's c32 load, a niced child that is behind still takes CPU from the proxy, the upstream and
the client (the kernel may let a running task finish its slice before a woken one gets the CPU):
ctxscope reached 0.49x of the throughput it has with capture stubbed out (nice 19: 0.56x); in the
idle scheduling class, where any ordinary task that wakes up takes the CPU at once, 0.87x (one
interleaved run of 10 rounds).

But a whole child in the idle class, or at nice 10, starves on a busy machine: beside two CPU hogs
and four senders it fell behind for good, its spool filled and 24% of the calls forwarded were never
stored. So only the storing thread (SQLite and the analyses: the child's real work) yields; the
child's main thread, which takes hand-overs off the pipe and appends them to the spool (one write
each), runs at ordinary priority, so the proxy's queue never fills and the spool absorbs the rest.
The storing thread climbs a ladder of ``Level`` as its backlog grows and comes back down when it
has drained (docs/architecture.md, "A bounded spool"):

- level 0, keeping up: the idle class (where it may leave it again), else ``SCHED_BATCH``;
- level 1, behind for MAX_IDLE_LAG seconds: ordinary scheduling at the child's ``nice``;
- level 2, behind for FAR_LAG seconds or FAR_BYTES unstored: ordinary scheduling at nice 0.

Going back up needs root, CAP_SYS_NICE or a RLIMIT_NICE that allows it: an unprivileged process
may neither leave the idle class nor lower its nice value again (checked: both EPERM as uid 65534
with the usual RLIMIT_NICE of 0), but may move between ``SCHED_BATCH`` and ``SCHED_OTHER`` at
nice 0. So without that right the ladder is batch → ordinary → ordinary, all at nice 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass

log = logging.getLogger("ctxscope.store")

IDLE_CLASS = True  # use the idle scheduling class where the child may leave it again
MAX_IDLE_LAG = 2.0  # seconds the storing thread may stay behind before it stops yielding to everything
FAR_LAG = 8.0  # seconds behind after which it runs at ordinary priority, nice 0
FAR_BYTES = 64 << 20  # ... or unstored bytes


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: a scheduling policy and a nice value."""

    policy: int
    nice: int


def can_leave_idle_class() -> bool:
    """Whether this process may return from the idle class at nice 0: tried on a throwaway
    thread (the policy belongs to each thread), so no other thread is left in it."""
    allowed: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, 10)
            os.setpriority(os.PRIO_PROCESS, tid, 0)
            allowed.append(True)
        except (OSError, AttributeError):
            allowed.append(False)

    thread = threading.Thread(target=probe, name="ctxscope-sched-probe")
    thread.start()
    thread.join()
    return allowed == [True]


def ladder(idle_class: bool, nice: int) -> tuple[Level, Level, Level]:
    """The three levels this process may move between in both directions."""
    if not hasattr(os, "SCHED_BATCH"):
        return (Level(0, 0), Level(0, 0), Level(0, 0))  # nothing to move: the policies stay as they are
    if idle_class and hasattr(os, "SCHED_IDLE") and can_leave_idle_class():
        return (Level(os.SCHED_IDLE, 0), Level(os.SCHED_OTHER, nice), Level(os.SCHED_OTHER, 0))
    return (Level(os.SCHED_BATCH, 0), Level(os.SCHED_OTHER, 0), Level(os.SCHED_OTHER, 0))


def level_for(behind_for: float | None, unstored_bytes: int) -> int:
    """The rung a backlog calls for: ``behind_for`` seconds behind (None: keeping up)."""
    if behind_for is None:
        return 0
    if behind_for > FAR_LAG or unstored_bytes >= FAR_BYTES:
        return 2
    return 1 if behind_for > MAX_IDLE_LAG else 0


class Priority:
    """The storing thread's rung on the ladder, moved by the child's loop as its backlog changes."""

    def __init__(self, enabled: bool, nice: int = 10):
        self.levels = ladder(enabled, nice) if enabled else None
        self.level: int | None = None
        self.behind_since: float | None = None
        self.tids: list[int] = []  # the threads that yield (the storing thread)
        self.moves = 0  # changes of rung, for the counters and the tests

    def set_level(self, level: int, tids: list[int] | None = None) -> None:
        """Move the given threads (the storing ones by default) to ``level``."""
        if self.levels is None or (level == self.level and tids is None):
            return
        rung = self.levels[level]
        for tid in self.tids if tids is None else tids:
            try:
                os.sched_setscheduler(tid, rung.policy, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, tid, rung.nice)
            except ProcessLookupError:  # the thread just ended
                pass
            except OSError as exc:
                log.warning("capture writer: cannot change its scheduling (%s)", exc)
                self.levels = None
                return
        if tids is None:
            self.moves += level != self.level
            self.level = level

    def update(self, behind: bool, unstored_bytes: int, now: float) -> None:
        if not behind:
            self.behind_since = None
        elif self.behind_since is None:
            self.behind_since = now
        self.set_level(level_for(None if self.behind_since is None else now - self.behind_since, unstored_bytes))

    def all_threads_ordinary(self) -> None:
        """Draining is all that is left: every thread at the top rung, none waits for an idle CPU."""
        with contextlib.suppress(OSError):
            tids = [int(t) for t in os.listdir("/proc/self/task")]
            self.set_level(2, tids)
        self.level = 2


def leave_idle_class(pid: int) -> None:
    """Ordinary scheduling for every thread of the child, where this process may grant it (the
    child does the same once it reads the stop marker, but an idle-class thread may not get the
    CPU to finish on a saturated machine)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
