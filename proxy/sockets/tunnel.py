"""A blind tunnel: bytes both ways between the client and the CONNECT target, nothing recorded
(docs/architecture.md, "The forward proxy").

Bounded in every way a client could stretch it: while the target's connect is pending, the client's
bytes are kept up to ``PENDING_BOUND`` and then its socket is no longer read; afterwards each side's
writes pause the other side's reads; a tunnel with no byte either way for ``idle_timeout`` is
closed. Both sockets are closed however it ends: either side closing or resetting, both having
half-closed (EOF each way), the idle timer, or the daemon's shutdown (``close``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import cast

PENDING_BOUND = 64 << 10  # client bytes kept while the target's connect is pending


class BlindTunnel:
    """The two sides of one tunnel; ``on_closed()`` is called once when both are gone."""

    def __init__(self, client: asyncio.Transport, idle_timeout: float, on_closed: Callable[[], None]):
        self.loop = asyncio.get_running_loop()
        self.idle_timeout = idle_timeout
        self.client = _Side(self, client)
        self.target: _Side | None = None
        self._on_closed = on_closed
        self._closed = self._reported = False
        self.last_active = self.loop.time()
        self._idle = self.loop.call_later(idle_timeout, self._idle_check)
        self.idle_closed = False
        client.set_protocol(self.client)

    def connected(self, transport: asyncio.Transport, side: _Side, established: bytes) -> None:
        """The target accepted: the client gets ``established``, then what it sent meanwhile goes on."""
        self.target = side
        if self._closed:
            transport.close()
            return
        self.client.peer, side.peer = transport, self.client.transport
        self.client.transport.write(established)
        pending, self.client.pending = self.client.pending, []
        for chunk in pending:
            transport.write(chunk)
        self.client.pending_size = 0
        if self.client.eof:  # the client half-closed before the target was reached
            self.client.eof_to_peer()
        if not self.client.transport.is_closing():
            self.client.transport.resume_reading()

    def target_side(self) -> _Side:
        """The protocol of the target's socket (for ``loop.create_connection``)."""
        return _Side(self)

    def touch(self) -> None:
        self.last_active = self.loop.time()

    def _idle_check(self) -> None:
        left = self.last_active + self.idle_timeout - self.loop.time()
        if left > 0.01:
            self._idle = self.loop.call_later(left, self._idle_check)
            return
        self.idle_closed = True
        self.close()

    def close(self) -> None:
        """Close both sockets; ``on_closed`` is called once both are gone (at once if they are)."""
        if not self._closed:
            self._closed = True
            self._idle.cancel()
        for side in (self.client, self.target):
            if side is not None and side.transport is not None and not side.transport.is_closing():
                side.transport.close()
        if self.client.lost and (self.target is None or self.target.lost) and not self._reported:
            self._reported = True
            self._on_closed()

    def abort(self) -> None:
        self.close()
        for side in (self.client, self.target):
            if side is not None and side.transport is not None:
                side.transport.abort()

    def both_eof(self) -> bool:
        return self.client.eof and self.target is not None and self.target.eof


class _Side(asyncio.Protocol):
    """One socket of a tunnel: what arrives is written to the peer, with back-pressure."""

    def __init__(self, tunnel: BlindTunnel, transport: asyncio.Transport | None = None):
        self.tunnel = tunnel
        self.transport: asyncio.Transport = cast(asyncio.Transport, transport)  # set by connection_made when None
        self.peer: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream socket's

    def data_received(self, data: bytes) -> None:
        self.tunnel.touch()
        if self.peer is None:  # the target's connect is pending
            self.pending.append(data)
            self.pending_size += len(data)
            if self.pending_size >= PENDING_BOUND:
                self.transport.pause_reading()
            return
        self.peer.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        if self.peer is not None:
            self.eof_to_peer()
        if self.tunnel.both_eof():
            self.tunnel.close()
            return False
        return True  # half-closed: the other direction may still carry bytes

    def eof_to_peer(self) -> None:
        peer = self.peer
        if peer is not None and not peer.is_closing() and peer.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                peer.write_eof()

    def pause_writing(self) -> None:
        if self.peer is not None and not self.peer.is_closing():
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and not self.peer.is_closing():
            self.peer.resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        self.tunnel.close()  # one socket is gone: the other goes too
