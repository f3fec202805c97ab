"""The writer child's entry point: ``python -m ctxscope.inspector.writer.child.entry DB IN OUT CONFIG``.

The parent (:mod:`~ctxscope.inspector.writer.daemon_side.launch`) passes the database's path, the file
descriptors of the child's ends of its two pipes and the writer's settings as JSON. This module
adapts the pipes to what :func:`~ctxscope.inspector.writer.child.life.child_main` reads and writes;
the end of the inbox pipe means the parent is gone (or stops it), and a reply the parent can no
longer read is dropped: the child then only stores what it received and exits.
"""

from __future__ import annotations

import json
import os
import select
import sys

from ctxscope.inspector.writer.child.life import child_main
from ctxscope.inspector.writer.wire.messages import FromChild, Received, receive, send


class PipeInbox:
    """What the parent sends, read from a pipe; ``get`` raises EOFError once the parent is gone."""

    def __init__(self, fd: int):
        self.fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def wait(self, timeout: float | None = None) -> bool:
        """Whether a message (or the end of the pipe) is there, waiting up to ``timeout`` (None: no timer)."""
        return bool(self._poll.poll(None if timeout is None else max(0, int(timeout * 1000))))

    def get(self, timeout: float | None = None) -> Received | None:
        """The next message, or None if none came within ``timeout``."""
        if not self.wait(timeout):
            return None
        message = receive(self.fd)
        if message is None:
            raise EOFError("the parent closed the pipe")
        return message  # type: ignore[return-value]  # the parent sends only ToChild


class PipeReplies:
    """What the child says to the parent; once the parent cannot read any more, nothing is sent."""

    def __init__(self, fd: int):
        self.fd = fd
        self.gone = False

    def put(self, message: FromChild) -> None:
        if not self.gone:
            try:
                send(self.fd, message)
            except OSError:  # the parent was killed: storing what was received is all that is left
                self.gone = True


def main(argv: list[str]) -> None:
    db_path, inbox_fd, replies_fd, config = argv[0], int(argv[1]), int(argv[2]), json.loads(argv[3])
    sys.path.extend(p for p in config.pop("sys_path") if p not in sys.path)  # where the analyzers' module may be
    inbox, replies = PipeInbox(inbox_fd), PipeReplies(replies_fd)
    try:
        child_main(db_path, inbox=inbox, replies=replies, **config)
    finally:
        os.close(inbox_fd)
        os.close(replies_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
