"""The control token: where it comes from and where the daemon keeps it for other processes.

Whoever holds the token may script the simulator (and so steer an agent that talks to it), so
the file is the owner's alone (0600) and is replaced in one step.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_ENV = "CTXSCOPE_SIM_TOKEN"
TOKEN_FILE = "sim-token"  # in $CTXSCOPE_HOME


def token_from_env() -> str:
    """CTXSCOPE_SIM_TOKEN when set (so a script can know it in advance), else a new random one."""
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)


def write_token_file(path: Path, token: str) -> None:
    """Write the token readable by the owner only (0600), replacing the file in one step."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
