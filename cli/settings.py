"""Where things live, which upstreams exist and the abuse limits: home, database, salt, config file,
--upstream, --limit."""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ctxscope.inspector.base import owner_only
from ctxscope.inspector.otlp.settings import PROTOCOLS, ExportSettings, traces_url
from ctxscope.proxy.defence.limits import Limits, parse_limit_option
from ctxscope.proxy.forward.routing import DEFAULT_UPSTREAMS, normalise_base_url, parse_upstream_option

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787


def home_dir() -> Path:
    """CTXSCOPE_HOME, else ~/.ctxscope."""
    return Path(os.environ.get("CTXSCOPE_HOME") or Path.home() / ".ctxscope").expanduser()


def prices_path() -> Path | None:
    """CTXSCOPE_PRICES, else $CTXSCOPE_HOME/prices.json when it exists."""
    env = os.environ.get("CTXSCOPE_PRICES")
    if env:
        return Path(env).expanduser()
    path = home_dir() / "prices.json"
    return path if path.exists() else None


def default_db_path() -> Path:
    env = os.environ.get("CTXSCOPE_DB")
    return Path(env).expanduser() if env else home_dir() / "captures.db"


def secure_home(home: Path) -> list[str]:
    """Create the home folder owner-only (0700), or tighten it and the private files in it (logged
    as warnings); returns the changes made. Raises OSError if it cannot be created."""
    changes = owner_only.private_dir(home)
    for name in ("salt", "sim-token", "daemon-secret"):
        changes += owner_only.private_file(home / name)
    return changes


def ensure_home() -> Path:
    """$CTXSCOPE_HOME, created owner-only (0700) or tightened: every command that puts something in
    the home calls this first, so none creates it open to other users (docs/architecture.md,
    "Files are owner-only"). Raises OSError if it cannot be created."""
    home = home_dir()
    secure_home(home)
    return home


def load_salt(home: Path) -> bytes:
    """A per-home random salt for key fingerprints, created on first use, readable by the owner only."""
    if not home.exists():
        owner_only.private_dir(home)
    path = home / "salt"
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:  # another process made it just now
            return path.read_bytes()
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    owner_only.private_file(path)
    return path.read_bytes()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class DaemonConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    db: Path = field(default_factory=default_db_path)
    upstreams: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_UPSTREAMS))
    allow_remote: bool = False
    # The key the UI and its API need in remote mode (docs/architecture.md, "Remote mode needs a
    # key"): `remote_key` in the config file, else a new random one each start.
    remote_key: str | None = None
    # "process": store and analyse in a low-priority child process (default: forwarding never
    # waits on the GIL for it); "thread": in this process (embedding, some tests).
    writer: str = "process"
    limits: Limits = field(default_factory=Limits)  # timeouts, connection cap, body and decoded sizes
    export: ExportSettings | None = None  # OTLP export of stored calls (None: off)
    # Upstream name -> whether it counts as the provider itself, which leaves its known per-request
    # metadata blocks out of the cache key (inspector/analyses/prompt_metadata.py). Unset: only the
    # provider's own API host does (api.anthropic.com).
    provider_itself: dict[str, bool] = field(default_factory=dict)

    def provider_itself_text(self) -> str:
        """The settings as the analysis takes them (``ProviderItself.from_text``: a JSON object), keyed
        by what a call records as its upstream. Written here, not through the analyses, which a
        fresh daemon does not load before its first store read."""
        sim_named = "sim" not in self.upstreams  # the built-in simulator records its name
        overrides = {
            ("sim" if name == "sim" and sim_named else self.upstreams[name]).rstrip("/"): on
            for name, on in self.provider_itself.items()
        }
        return json.dumps(overrides, sort_keys=True)

    ask_diagnosis: bool = False  # ask providers for their cache diagnosis on the client's behalf


def read_config_file(path: Path) -> dict:
    """TOML: top-level host, port, db, allow_remote, a table [upstreams] of NAME = "URL", a table
    [limits] of KEY = number (sizes may be text such as "256MiB"), a table [export]
    (otlp_endpoint, headers, protocol, content) and a table [provider_itself] of NAME = true/false
    (an upstream that counts, or not, as the provider itself)."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    unknown = set(data) - {
        "host",
        "port",
        "db",
        "upstreams",
        "allow_remote",
        "remote_key",
        "limits",
        "export",
        "provider_itself",
        "ask_diagnosis",
    }
    if unknown:
        raise ValueError(f"{path}: unknown settings {sorted(unknown)}")
    itself = data.get("provider_itself", {})
    if not isinstance(itself, dict) or not all(isinstance(v, bool) for v in itself.values()):
        raise ValueError(f"{path}: [provider_itself] must be a table of UPSTREAM = true or false")
    key = data.get("remote_key")
    if key is not None and not (
        isinstance(key, str)
        and len(key) >= 16
        and key.isascii()
        and key.isprintable()
        and " " not in key
        and ";" not in key
    ):
        raise ValueError(
            f"{path}: remote_key must be at least 16 printable ASCII characters, without spaces or semicolons"
        )
    limits = data.get("limits", {})
    if not isinstance(limits, dict):
        raise ValueError(f"{path}: [limits] must be a table of KEY = value")
    try:
        Limits().with_values(limits)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: [limits]: {exc}") from None
    try:
        export_settings(data.get("export"), None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: [export]: {exc}") from None
    return data


_EXPORT_KEYS = {"otlp_endpoint", "headers", "protocol", "content"}


def export_settings(table: object, endpoint: str | None) -> ExportSettings | None:
    """The `[export]` table, with `--otlp-endpoint` over its endpoint; None when no endpoint is set."""
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise ValueError("must be a table of otlp_endpoint, headers, protocol, content")
    unknown = set(table) - _EXPORT_KEYS
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}")
    headers = table.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ValueError('headers must be a table of NAME = "value"')
    protocol = table.get("protocol", "http/protobuf")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not supported (use one of {list(PROTOCOLS)})")
    content = table.get("content", False)
    if not isinstance(content, bool):
        raise ValueError("content must be true or false")
    url = endpoint or table.get("otlp_endpoint")
    if not url:
        return None
    if not isinstance(url, str):
        raise ValueError("otlp_endpoint must be a URL")
    return ExportSettings(traces_url(url), headers=dict(headers), protocol=protocol, content=content)


def build_config(
    *,
    config_file: Path | None,
    host: str | None,
    port: int | None,
    db: Path | None,
    upstream_options: tuple[str, ...],
    allow_remote: bool,
    limit_options: tuple[str, ...] = (),
    otlp_endpoint: str | None = None,
    ask_diagnosis: bool = False,
) -> DaemonConfig:
    """Defaults < config file < command line."""
    cfg = DaemonConfig()
    data: dict = {}
    if config_file is not None:
        data = read_config_file(config_file)
        cfg.host = data.get("host", cfg.host)
        cfg.port = int(data.get("port", cfg.port))
        if "db" in data:
            cfg.db = Path(data["db"]).expanduser()
        cfg.allow_remote = bool(data.get("allow_remote", False))
        if not isinstance(data.get("ask_diagnosis", False), bool):
            raise ValueError(f"{config_file}: ask_diagnosis must be true or false")
        cfg.ask_diagnosis = data.get("ask_diagnosis", False)
        cfg.remote_key = data.get("remote_key")
        for name, url in (data.get("upstreams") or {}).items():
            cfg.upstreams[name] = normalise_base_url(url)
        cfg.limits = cfg.limits.with_values(data.get("limits") or {})
    if host is not None:
        cfg.host = host
    if port is not None:
        cfg.port = port
    if db is not None:
        cfg.db = db
    cfg.allow_remote = cfg.allow_remote or allow_remote
    cfg.ask_diagnosis = cfg.ask_diagnosis or ask_diagnosis
    if cfg.allow_remote and cfg.remote_key is None:
        cfg.remote_key = secrets.token_urlsafe(24)
    for text in upstream_options:
        name, url = parse_upstream_option(text)
        cfg.upstreams[name] = url
    if limit_options:
        cfg.limits = cfg.limits.with_values(dict(parse_limit_option(text) for text in limit_options))
    cfg.export = export_settings(data.get("export"), otlp_endpoint)
    itself = data.get("provider_itself") or {}
    unknown_names = sorted(set(itself) - set(cfg.upstreams) - {"sim"})
    if unknown_names:
        raise ValueError(f"[provider_itself] names no configured upstream: {', '.join(unknown_names)}")
    cfg.provider_itself = dict(itself)
    return cfg
