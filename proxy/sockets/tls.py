"""Server-side TLS over a connection that is already open, fed by hand (docs/architecture.md,
"The forward proxy").

``loop.start_tls`` cannot take bytes that were already read: a ClientHello that came in the same
read as the CONNECT head was lost, and one that came between the ``200`` and ``start_tls`` was
read by the previous protocol. Here the TLS layer is an ``ssl.SSLObject`` over two memory BIOs,
installed as the connection's protocol in the same call that finds the end of the CONNECT head and
handed the bytes after it at once: no byte after the head is read by anyone else, on asyncio's
loop and uvloop's alike. The HTTP inside sees a transport of its own (``TLSTransport``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterable
from typing import Any, cast

READ_CHUNK = 64 << 10


class TLSServer(asyncio.Protocol):
    """The protocol of the client's socket: decrypts into ``app``, encrypts what ``app`` writes.

    ``on_failed(reason)`` is told once when the handshake fails or does not finish within
    ``handshake_timeout``; ``on_lost()`` once when the socket is gone, however it ended."""

    def __init__(
        self,
        context: ssl.SSLContext,
        app: asyncio.Protocol,
        handshake_timeout: float,
        on_failed: Callable[[str], None],
        on_lost: Callable[[], None],
    ):
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.context, self.app = context, app
        self.handshake_timeout = handshake_timeout
        self._on_failed, self._on_lost = on_failed, on_lost
        self.raw: asyncio.Transport | None = None
        self.inner = TLSTransport(self)
        self.handshaken = False
        self._timer: asyncio.TimerHandle | None = None
        self._lost = False

    # -- the raw socket's events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)  # a stream socket's
        self._timer = asyncio.get_running_loop().call_later(self.handshake_timeout, self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        if self._lost or self.raw is None or self.raw.is_closing():
            return
        self._incoming.write(data)
        if not self.handshaken and not self._handshake():
            return
        self._read_plain()

    def eof_received(self) -> bool:
        if self.handshaken and not self._lost:
            with contextlib.suppress(Exception):
                self.app.eof_received()
        return False  # the socket closes: TLS without close_notify has nothing half-open to keep

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            if self.handshaken:
                self.app.connection_lost(exc)  # type: ignore[arg-type]  # typeshed: BaseException | None
        finally:
            self._on_lost()

    def pause_writing(self) -> None:
        if self.handshaken:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self.handshaken:
            self.app.resume_writing()

    # -- TLS

    def _handshake(self) -> bool:
        try:
            self.ssl.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return False
        except (ssl.SSLError, ValueError) as exc:  # not TLS, or a client that refused our certificate
            self.flush()  # the alert, if any
            self._fail(f"TLS handshake failed: {_reason(exc)}")
            return False
        self.handshaken = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        self.app.connection_made(self.inner)
        return True

    def _read_plain(self) -> None:
        while not self._lost and self.raw is not None and not self.raw.is_closing():
            try:
                chunk = self.ssl.read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify: the client has finished
                self.flush()
                keep = False
                with contextlib.suppress(Exception):
                    keep = bool(self.app.eof_received())
                if not keep:
                    self.inner.close()
                return
            except (ssl.SSLError, ValueError) as exc:
                self._fail(f"TLS record error: {_reason(exc)}")
                return
            if not chunk:
                break
            self.app.data_received(chunk)
        self.flush()  # session tickets, key updates

    def flush(self) -> None:
        data = self._outgoing.read()
        if data and self.raw is not None and not self.raw.is_closing():
            self.raw.write(data)

    def _fail(self, reason: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._on_failed(reason)
        if self.raw is not None:
            self.raw.close()

    def _handshake_expired(self) -> None:
        self._timer = None
        if not self.handshaken and not self._lost:
            self._fail(f"no TLS handshake within {self.handshake_timeout:g}s")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return " ".join(str(exc).split())[:200] or type(exc).__name__


class TLSTransport(asyncio.Transport):
    """What the HTTP inside the tunnel writes to and closes: plaintext in, TLS records out."""

    def __init__(self, tls: TLSServer):
        super().__init__()
        self._tls = tls
        self._protocol: asyncio.BaseProtocol = tls.app
        self._closing = False

    def _raw(self) -> asyncio.Transport | None:
        return self._tls.raw

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sslcontext":
            return self._tls.context
        if name == "ssl_object":
            return self._tls.ssl
        if name == "peercert":
            return self._tls.ssl.getpeercert()
        if name == "cipher":
            return self._tls.ssl.cipher()
        raw = self._raw()
        return raw.get_extra_info(name, default) if raw is not None else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._tls.app = protocol  # type: ignore[assignment]  # typeshed: set_protocol takes any BaseProtocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def is_closing(self) -> bool:
        raw = self._raw()
        return self._closing or raw is None or raw.is_closing()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.is_closing() or not data:
            return
        try:
            self._tls.ssl.write(data)
        except (ssl.SSLError, ValueError):  # the TLS session broke: nothing more can be sent
            self.abort()
            return
        self._tls.flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("TLS has no half-close")

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        raw = self._raw()
        if raw is None:
            return
        if self._tls.handshaken and not raw.is_closing():
            with contextlib.suppress(ssl.SSLError, ValueError):
                self._tls.ssl.unwrap()  # our close_notify; the client's is not waited for
            self._tls.flush()
        raw.close()

    def abort(self) -> None:
        self._closing = True
        raw = self._raw()
        if raw is not None:
            raw.abort()

    def pause_reading(self) -> None:
        raw = self._raw()
        if raw is not None and not raw.is_closing():
            raw.pause_reading()

    def resume_reading(self) -> None:
        raw = self._raw()
        if raw is not None and not raw.is_closing():
            raw.resume_reading()

    def is_reading(self) -> bool:
        raw = self._raw()
        return raw is not None and raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        raw = self._raw()
        if raw is not None:
            raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        raw = self._raw()
        return raw.get_write_buffer_size() if raw is not None else 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        raw = self._raw()
        return raw.get_write_buffer_limits() if raw is not None else (0, 0)
