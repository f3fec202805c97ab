"""Abuse cases against the control plane and the data at rest: the simulator's control endpoints,
a planted spool, file modes, upstream paths and pages, and secrets in unusual places."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import posixpath
import secrets
import shlex
import string
import struct
import subprocess
from pathlib import Path
from urllib.parse import unquote

import abuse_wire as wire
from abuse_ctx import LABEL_HEADER, Ctx, Result, Stored, label, read_calls, row_tag, tagged, wait_stored
from abuse_procs import CTXSCOPE, env_for, start_daemon, stop_daemon

JSON = {"Content-Type": "application/json"}
CHAT = "/v1/chat/completions"


def _chat(text: str) -> bytes:
    return json.dumps({"model": "gpt-sim", "messages": [{"role": "user", "content": text}]}).encode()


async def cross_origin_script(ctx: Ctx) -> Result:
    """A page on another origin posts a bash step to the simulator the way a no-cors fetch can."""
    token = ctx.sim_token()
    auth = {"X-Sim-Token": token} if token else {}
    st, _, before = await ctx.http("GET", "/u/sim/_sim/script", headers=auth)
    if st != 200:
        return Result(
            False,
            f"cannot read the queue with the token: GET answered {st}"
            + ("" if token else " (no sim-token file in $CTXSCOPE_HOME)"),
        )
    step = [{"tool_calls": [{"name": "bash", "arguments": {"command": f"touch {ctx.work / 'scripted-by-a-page'}"}}]}]
    attack = {
        "Content-Type": "text/plain;charset=UTF-8",
        "Origin": "http://evil.example",
        "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "no-cors",
        "Sec-Fetch-Dest": "empty",
    }
    posted, _, _ = await ctx.http("POST", "/u/sim/_sim/script", body=json.dumps(step).encode(), headers=attack)
    st, _, after = await ctx.http("GET", "/u/sim/_sim/script", headers=auth)
    unchanged = st == 200 and json.loads(after) == json.loads(before)
    if st == 200 and not unchanged:  # put the queue back so later cases get the simulator's own replies
        await ctx.http("POST", "/u/sim/_sim/script", body=before, headers=JSON | auth)
    held = 400 <= posted < 500 and unchanged
    state = (
        "unchanged" if unchanged else ("CHANGED (holds the page's bash step)" if st == 200 else f"unreadable ({st})")
    )
    return Result(held, f"cross-site text/plain POST answered {posted}, queue {state}")


async def dns_rebinding_read(ctx: Ctx) -> Result:
    """A rebound name (Host: evil.example) asks for the simulator's request log."""
    marker, key = "abuse-prompt-" + secrets.token_hex(8), "sk-abuse-" + secrets.token_hex(16)
    tag = ctx.expect("c02")
    st, _, _ = await ctx.http(
        "POST", tagged(f"/u/sim{CHAT}?key={key}", tag), body=_chat(marker), headers=JSON | {LABEL_HEADER: label(tag)}
    )
    if st != 200:
        return Result(False, f"the legit prompt to the simulator answered {st}")
    got, _, body = await ctx.http("GET", "/u/sim/_sim/requests", headers={"Host": f"evil.example:{ctx.port}"})
    leaked = [name for name, s in (("prompt", marker), ("?key=", key)) if s.encode() in body]
    held = 400 <= got < 500 and not leaked
    return Result(
        held,
        f"Host evil.example answered {got}, body {len(body)} B"
        + (f", LEAKS the {' and '.join(leaked)}" if leaked else ", no prompt text"),
    )


PLANT_ID = 99999


class _Payload:
    """Unpickling this runs a shell command: what a planted pickle spool could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def _plant(db: Path, marker: Path) -> Path:
    """``<db>.spool-99999`` holding one frame whose pickle would run ``touch marker``."""
    path = db.with_name(f"{db.name}.spool-{PLANT_ID}")
    data = pickle.dumps([_Payload(marker)])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(struct.pack("<Q", len(data)) + data)
    return path


async def planted_spool(ctx: Ctx) -> Result:
    """A spool file dropped next to the database before serve starts must run nothing, and capture
    goes on. Its own daemon, so a capture it kills does not hide what the other cases find."""
    marker, tag = ctx.work / "spool-payload-ran", "c03"
    (ctx.work / "planted").mkdir(mode=0o700)
    db = ctx.work / "planted" / "captures.db"
    plant = _plant(db, marker)
    config = ctx.work / "ctxscope.toml"
    daemon = await asyncio.to_thread(
        start_daemon, "planted", ctx.work, ctx.work / "home-planted", db, {"fast": ctx.bg.upstream}, config
    )
    ctx.others.append(daemon)
    try:
        ctx.sampler.roots.append(daemon.pid)
        st, _, _ = await ctx.http(
            "POST",
            tagged(f"/u/fast{CHAT}", tag),
            body=_chat("after the plant"),
            base=daemon.url,
            headers=JSON | {LABEL_HEADER: label(tag)},
        )
        stored_live = await wait_stored(db, tag, 15)
        ran, in_place = marker.exists(), plant.exists()
    finally:
        how = await asyncio.to_thread(stop_daemon, daemon, 20)
    stored = any(row_tag(r) == tag for r in await asyncio.to_thread(read_calls, db))
    ctx.lost_elsewhere += not stored
    ran = ran or marker.exists()
    kept = sorted(p.name for p in db.parent.iterdir() if str(PLANT_ID) in p.name and p != plant)
    held = st == 200 and stored_live and not ran and not in_place
    return Result(
        held,
        f"payload {'RAN' if ran else 'did not run'}, planted spool "
        f"{'STILL IN PLACE' if in_place else 'moved away'}{' (now ' + ', '.join(kept) + ')' if kept else ''}"
        f"; call answered {st}, {'stored' if stored_live else 'NOT stored within 15 s'}"
        f"{'' if stored_live == stored else (', stored at stop' if stored else ', NOT stored at stop')}"
        f"; daemon {how}",
    )


def _loose(path: Path, want_exact: int | None = None) -> str | None:
    mode = path.stat().st_mode & 0o777
    bad = mode != want_exact if want_exact is not None else mode & 0o077
    return f"{path.name} {mode:04o}" if bad else None


async def file_modes(ctx: Ctx) -> Result:
    """Home 0700; everything under it and every file of the database owner-only."""
    tag = ctx.expect("c04")  # a stored call, so the WAL and the spool exist
    await ctx.http(
        "POST", tagged(f"/u/fast{CHAT}", tag), body=_chat("modes"), headers=JSON | {LABEL_HEADER: label(tag)}
    )
    await wait_stored(ctx.db, tag, 10)
    bad, checked = [], 0
    if not ctx.home.is_dir():
        return Result(False, f"no home at {ctx.home}")
    bad.append(_loose(ctx.home, 0o700))
    for root, dirs, files in os.walk(ctx.home):
        for name in dirs + files:
            checked += 1
            bad.append(_loose(Path(root) / name))
    for path in ctx.db.parent.iterdir():
        if path.is_file() and path.name.startswith(ctx.db.name):
            checked += 1
            bad.append(_loose(path))
    bad = [b for b in bad if b]
    return Result(
        not bad, f"{checked + 1} paths checked" + (f", too open: {', '.join(bad)}" if bad else ", all owner-only")
    )


DOTDOT = [
    "/u/pref/../echo",
    "/u/pref/%2e%2e/echo",
    "/u/pref/a/../../echo",
    "/u/pref/./../echo",
    "/u/pref/%2E%2E/%2E%2E/echo",
]


def _inside_base(raw_path: str) -> bool:
    path = posixpath.normpath(unquote(raw_path.split("?", 1)[0]))
    return path == "/base" or path.startswith("/base/")


async def dotdot_escape(ctx: Ctx) -> Result:
    """Dot segments, plain and percent-encoded, must not leave the upstream's base path."""
    n0, answers = len(ctx.up.seen), []
    for i, path in enumerate(DOTDOT):
        reader, writer = await wire.connect(ctx.port)
        try:
            writer.write(wire.head("GET", tagged(path, f"c14-{i}"), ctx.port, [("Connection", "close")]))
            resp = await wire.read_response(reader, 10)
            answers.append(f"{path} -> {resp.status if resp else 'no answer'}")
        finally:
            wire.close(writer)
    await asyncio.sleep(0.2)
    seen = [s.raw_path for s in ctx.up.seen[n0:] if "call=c14-" in s.raw_path]
    outside = [p for p in seen if not _inside_base(p)]
    return Result(
        not outside,
        "; ".join(answers)
        + (
            f"; upstream SAW {', '.join(outside)}"
            if outside
            else f"; upstream saw {len(seen)} request(s), all under /base"
        ),
    )


async def upstream_html_csp(ctx: Ctx) -> Result:
    """HTML an upstream returns is served on the daemon's origin: it must be sandboxed."""
    tag = ctx.expect("c15")
    st, headers, _ = await ctx.http("GET", tagged("/u/up/docs/page.html", tag), headers={LABEL_HEADER: label(tag)})
    csp = headers.get("Content-Security-Policy", "")
    held = st == 200 and "sandbox" in csp.lower()
    return Result(held, f"answered {st}, Content-Security-Policy: {csp or 'MISSING'}")


def _secret(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


async def credential_redaction(ctx: Ctx) -> Result:
    """Credentials in query parameters and in an unknown header never reach the store or the log."""
    found = {
        "auth": _secret(32),
        "key[]": _secret(32),
        "access_token": _secret(32),
        "sig": _secret(32),
        "X-Custom-Auth-Thing": _secret(48),
    }
    tag = ctx.expect("c16")
    query = "&".join(f"{k}={v}" for k, v in found.items() if not k.startswith("X-"))
    body = _chat("redaction")
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        (LABEL_HEADER, label(tag)),
        ("X-Custom-Auth-Thing", found["X-Custom-Auth-Thing"]),
        ("Connection", "close"),
    ]
    n0 = len(ctx.up.seen)
    reader, writer = await wire.connect(ctx.port)
    try:
        writer.write(wire.head("POST", tagged(f"/u/up{CHAT}?{query}", tag), ctx.port, headers) + body)
        resp = await wire.read_response(reader, 15)
    finally:
        wire.close(writer)
    forwarded = any(found["auth"] in s.raw_path for s in ctx.up.seen[n0:])
    db, daemon = ctx.db, ctx.daemon

    def later(stored: Stored) -> tuple[bool, str]:
        rows = stored.of(tag)
        if not rows:
            return False, "the call was NOT stored"
        files = [p for p in db.parent.iterdir() if p.is_file() and p.name.startswith(db.name)]
        raw = b"".join(p.read_bytes() for p in files)
        shown = subprocess.run(
            [CTXSCOPE, "show", rows[0]["id"], "--json", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env_for(ctx.home),
        ).stdout
        log = daemon.log_text()
        leaks = [
            f"{name} in {where}"
            for name, value in found.items()
            for where, hay in (("db files", raw), ("ctxscope show", shown.encode()), ("daemon log", log.encode()))
            if value.encode() in hay
        ]
        return not leaks, f"LEAKED: {', '.join(leaks)}" if leaks else f"no secret in {len(files)} db files, show or log"

    return Result(
        resp is not None and resp.status == 200 and forwarded,
        f"answered {resp.status if resp else 'nothing'}, forwarded with the secrets: {forwarded}",
        later,
    )
