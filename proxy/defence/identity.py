"""The daemon proves to the launcher that it is this user's ctxscope: an HMAC over the launcher's nonce.

Anything can answer on a port: another local user's listener that speaks JSON would otherwise be
handed the launched agent's key. The secret lives owner-only in ``$CTXSCOPE_HOME/daemon-secret``
(0600, in a 0700 home), so only this user's processes can read it. The launcher sends a fresh
nonce; the daemon answers ``HMAC-SHA256(secret, nonce | its address | its port)``, the address
and port of the socket the question came in on. A listener without the secret cannot answer, and
one that relays the question to the real daemon on another address or port gets a proof for
that one, which the launcher refuses (docs/architecture.md, "The launcher proves its daemon").

Only the standard library: the launcher imports this before it starts anything.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
from pathlib import Path

SECRET_FILE = "daemon-secret"
NONCE = re.compile(r"[0-9a-f]{32,128}")
_SECRET_BYTES = 32


def load_secret(home: Path) -> bytes:
    """The home's daemon secret, created owner-only on first use (the home must exist). Raises
    OSError when it cannot be read or made, or when it is not this user's private file."""
    path = home / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_hex(_SECRET_BYTES).encode())
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise OSError(f"{path} is not private to this user (mode {st.st_mode & 0o777:04o}): remove it")
        secret = f.read(4096).strip()
    if len(secret) < _SECRET_BYTES:
        raise OSError(f"{path} holds no secret: remove it and start again")
    return secret


def address(sockname: object) -> tuple[str, int] | None:
    """(IP in its canonical text, port) of a socket's own address; an IPv4 address mapped into
    IPv6 is the IPv4 one. None when it is not an IP socket's."""
    if not isinstance(sockname, tuple) or len(sockname) < 2:
        return None
    try:
        ip = ipaddress.ip_address(str(sockname[0]).split("%", 1)[0])
        port = int(sockname[1])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), port


def proof(secret: bytes, nonce: str, ip: str, port: int) -> str:
    """The answer only a holder of ``secret`` listening at ``ip``:``port`` gives to ``nonce``."""
    message = f"ctxscope-daemon|{nonce}|{ip}|{port}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def new_nonce() -> str:
    return secrets.token_hex(16)
