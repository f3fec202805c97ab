"""Starting the writer child and talking to it over two pipes, without multiprocessing.

The child is ``python -m ctxscope.inspector.writer.child.entry DB ...``: a fresh interpreter that
imports only the inspector and says in its command line what it is. Nothing re-runs the daemon's
main module, and no resource tracker process or semaphore comes with it (docs/architecture.md,
"The writer child imports only the inspector"). It gets its ends of two pipes with ``pass_fds``;
the parent closes its copies of them, so the end of a pipe means the other side is gone.

Sending never makes the proxy wait: ``put`` appends a message to a list and a feeder thread
writes it, as multiprocessing's queues did. A hand-over may hold HOLD_BYTES (4 MB) of bodies, more
than the pipe holds (64 KB by default, raised to PIPE_BYTES), so a write may wait for the child to
read; the feeder waits in ``writev`` with the GIL released, which costs the proxy nothing.
Non-blocking writes from the event loop would have to keep each half-written message's place
between callbacks, and ``stop`` and ``delete_session`` send from other threads. The feeder
encodes too, so the loop only appends to a list.

Replies are read by a thread as they come, so a child that sends counters while nobody asks
never blocks on a full pipe; they wait in a ``queue.Queue`` until the writer polls. Counters that
count one more idle release go to ``on_idle`` too (the writer may then let the child go). The end
of the replies pipe is the child's exit: the thread reaps it, then calls ``on_exit``.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from ctxscope.inspector.base.json_splice import RepeatedTexts
from ctxscope.inspector.writer.protocol import IDLE_RELEASE
from ctxscope.inspector.writer.wire.body_delta import SentBodies
from ctxscope.inspector.writer.wire.messages import Counters, Forget, FromChild, Stop, ToChild, receive, send
from ctxscope.vocab.heap import release_heap

log = logging.getLogger("ctxscope.store")

ENTRY = "ctxscope.inspector.writer.child.entry"
PIPE_BYTES = 1 << 20  # the inbox pipe's buffer (Linux's limit for a user, by default); pages are taken as used


class Outbox:
    """Messages to the child, written by a feeder thread in the order they were put."""

    def __init__(self, fd: int, forget_after: float = IDLE_RELEASE):
        self._fd = fd
        self.forget_after = forget_after  # idle seconds before the bodies kept for the next hand-over go
        self._items: collections.deque[ToChild] = collections.deque()
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._feed, name="ctxscope-writer-feed", daemon=True)
        self._thread.start()

    def put(self, message: ToChild) -> None:
        """Queue a message; never blocks. Messages put after the child is gone are dropped (the
        writer counts what was in flight from what the next child recovers)."""
        with self._wake:
            if self._fd >= 0:
                self._items.append(message)
                self._wake.notify()

    def close(self) -> None:
        """Send what is queued, then close the pipe (the child reads its end after the last message)."""
        with self._wake:
            self._closing = True
            self._wake.notify()

    def join_thread(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _next(self, sent: SentBodies, headers: RepeatedTexts) -> ToChild | None:
        """The next message to send; None once closing with nothing left. Idle for
        ``forget_after`` while it remembers bodies, it lets go of them (and of the header lists'
        texts) and says so (``Forget``): that one timeout, then none (an idle daemon's feeder
        never wakes)."""
        with self._wake:
            while not self._items and not self._closing:
                if not self._wake.wait(self.forget_after if sent.holds else None):
                    sent.clear()
                    headers.clear()
                    return Forget()
            return self._items.popleft() if self._items else None

    def _feed(self) -> None:
        fd = self._fd
        sent = SentBodies()  # what this pipe carried: a repeated request goes as its new bytes
        headers = RepeatedTexts()  # ... and a repeated header list as the text it had
        try:
            while (message := self._next(sent, headers)) is not None:
                send(fd, message, sent, headers)
                if isinstance(message, Stop):  # the child reads nothing after it: its bodies go now,
                    sent.clear()  # not at the next Forget (a retired child's feeder waits for one)
                    headers.clear()
                if isinstance(message, Forget | Stop):  # outside the lock: ``put`` must never wait for it
                    release_heap()  # what the bodies held goes back to the system, not only to malloc
                del message  # an idle feeder must not keep the last hand-over's bodies alive
        except OSError:  # the child is gone (EPIPE): what was queued dies with it
            pass
        except Exception:  # pragma: no cover - a message that cannot be encoded: the child is cut off
            log.exception("capture writer: a message to the child could not be sent")
        finally:
            with self._wake:
                self._items.clear()
                self._fd = -1
            os.close(fd)


class ChildProcess:
    """The running writer child: its process, its inbox (``Outbox``) and its replies (a queue)."""

    def __init__(
        self,
        db_path: str,
        config: dict[str, Any],
        on_exit: Callable[[], None] | None = None,
        on_idle: Callable[[ChildProcess, Counters], None] | None = None,
    ):
        inbox_r, inbox_w = os.pipe()
        replies_r, replies_w = os.pipe()
        with contextlib.suppress(OSError):  # a bigger pipe: a 1 MB hand-over in one write, not 16 wakes
            fcntl.fcntl(inbox_w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        argv = [
            sys.executable,
            "-m",
            ENTRY,
            db_path,
            str(inbox_r),
            str(replies_w),
            json.dumps({**config, "sys_path": sys.path}),
        ]
        try:
            self._popen = subprocess.Popen(argv, pass_fds=(inbox_r, replies_w), stdin=subprocess.DEVNULL)
        except BaseException:
            for fd in (inbox_w, replies_r):
                os.close(fd)
            raise
        finally:
            for fd in (inbox_r, replies_w):  # the child's ends: only the child may hold them
                os.close(fd)
        self.pid = self._popen.pid
        self.on_exit = on_exit
        self.on_idle = on_idle
        self.inbox = Outbox(inbox_w, config.get("idle_release", IDLE_RELEASE))
        self.replies: queue.Queue[FromChild] = queue.Queue()
        self._reader = threading.Thread(
            target=self._read, args=(replies_r,), name="ctxscope-writer-replies", daemon=True
        )
        self._reader.start()

    def _read(self, fd: int) -> None:
        was: tuple[int, int] = (0, 0)  # queued and written, as the last counters said
        releases = 0  # idle releases, as the last counters said
        try:
            while (message := receive(fd)) is not None:
                if isinstance(message, Counters):
                    now = (message.stats.get("queued", 0), message.stats.get("written", 0))
                    if not now[0] and now != was:  # all stored: the burst's free heap goes back first,
                        release_heap()  # before anyone reads these counters (docs/architecture.md, "Memory")
                    was = now
                self.replies.put(message)  # type: ignore[arg-type]  # the child sends only FromChild
                if isinstance(message, Counters) and message.stats.get("idle_releases", 0) > releases:
                    releases = message.stats["idle_releases"]
                    self._idle(message)
        except (OSError, ValueError) as exc:  # torn by its death, or garbled: it is as good as gone
            if self._popen.poll() is None:
                log.error("capture writer: unreadable reply (%s); stopping the child", exc)
                self._popen.kill()
        finally:
            os.close(fd)
            self._popen.wait()  # it closed its end: it is exiting
            if self.on_exit is not None:
                self.on_exit()

    def _idle(self, counters: Counters) -> None:
        if self.on_idle is not None:
            try:
                self.on_idle(self, counters)
            except Exception:  # pragma: no cover - the replies must still be read
                log.exception("capture writer: handling the child's idle release failed")

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()

    def close(self, timeout: float = 5.0) -> None:
        """Let go of a child that has exited (or is told to by the end of its inbox): close the
        inbox, wait for both threads, which close the pipes and reap the child."""
        self.inbox.close()
        self.inbox.join_thread(timeout)
        self._reader.join(timeout)
