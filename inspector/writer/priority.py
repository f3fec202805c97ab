"""The writer child's CPU priority: out of the way of forwarding, but never starved.

Nice 10 alone did not keep the child out of the way. On a 2-core machine under the
bench's c32 load, a niced child that is behind still takes CPU from the proxy, the upstream and
the client (the kernel may let a running task finish its slice before a woken one gets the CPU):
ctxscope reached 0.49x of the throughput it has with capture stubbed out (nice 19: 0.56x); in the
idle scheduling class, where any ordinary task that wakes up takes the CPU at once, 0.87x (one
interleaved run of 10 rounds). So on Linux the child runs in the idle class while it keeps up, and
returns to ordinary scheduling at its nice level when it has been behind for MAX_IDLE_LAG seconds
and while it drains on shutdown, so a busy machine cannot starve it. Leaving the idle class needs
root, CAP_SYS_NICE or a RLIMIT_NICE that allows the nice level; a process without that could not
get out again, so it stays at nice 10 only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

log = logging.getLogger("ctxscope.store")

IDLE_CLASS = True  # use the idle scheduling class where the child may leave it again
MAX_IDLE_LAG = 2.0  # seconds the child may stay behind before it stops yielding to everything


def can_leave_idle_class() -> bool:
    """Whether this process may return from the idle class at its nice level: tried on a
    throwaway thread (the policy belongs to each thread), so no other thread is left in it."""
    allowed: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            allowed.append(True)
        except (OSError, AttributeError):
            allowed.append(False)

    thread = threading.Thread(target=probe, name="ctxscope-sched-probe")
    thread.start()
    thread.join()
    return allowed == [True]


class Priority:
    """The child's scheduling: idle class while it keeps up, ordinary (niced) while it is behind."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and hasattr(os, "SCHED_IDLE") and can_leave_idle_class()
        self.idle = False
        self.behind_since: float | None = None

    def set_idle(self, idle: bool) -> None:
        if idle == self.idle or not self.enabled:
            return
        policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
        for tid in os.listdir("/proc/self/task"):  # every thread; new ones inherit their creator's
            try:
                os.sched_setscheduler(int(tid), policy, os.sched_param(0))
            except ProcessLookupError:  # the thread just ended
                pass
            except OSError as exc:
                if self.enabled:
                    log.warning("capture writer: cannot change its scheduling (%s)", exc)
                self.enabled = False
        self.idle = idle

    def update(self, behind: bool, now: float) -> None:
        if not behind:
            self.behind_since = None
            self.set_idle(True)
        elif self.behind_since is None:
            self.behind_since = now
        elif now - self.behind_since > MAX_IDLE_LAG:
            self.set_idle(False)


def leave_idle_class(pid: int) -> None:
    """Ordinary scheduling for every thread of the child, where this process may grant it (the
    child does the same once it reads the stop marker, but an idle-class child may not get the CPU
    to read it on a saturated machine)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
