"""The HAR export written as a stream (``share/har_writer.py``): the same bytes the whole-document
writer gave, on a hostile session (invalid UTF-8, compressed bodies, a body of one multi-megabyte
line whose multibyte characters straddle the chunks, text that imitates the writer's
placeholders, a key inside a body), no key in the file, and a byte-exact import back."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import os
import pty
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from click.testing import CliRunner

from ctxscope.inspector.share.exchanges import Exported, exchange_fields, exported_call
from ctxscope.inspector.share.har import _REASONS, _base, har_log
from ctxscope.inspector.share.har_writer import CHUNK, write_har
from ctxscope.inspector.store.analysis_rows import call_ids
from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, open_db
from ctxscope.main import cli
from ctxscope.proxy.wire.decoding import BodyDecodeError, decode_body

from support.factories import anthropic_request, anthropic_response, capture, make_exchange

BODY_KEY = "sk-ant-api03-STREAMKEY-abcdefghijklmnopqrstuvwxyz0123456789"
DAEMON = "http://127.0.0.1:9"
CTXSCOPE = Path(sys.executable).parent / "ctxscope"


# -- the writer before streaming, kept as the reference ---------------------------------------------


def _old_content(wire: bytes, encoding: str | None, decoded_already: bool) -> dict:
    data, wire_field = wire, None
    if encoding and not decoded_already and wire:
        try:
            data = decode_body(wire, encoding, allow_truncated=True)
            wire_field = base64.b64encode(wire).decode()
        except BodyDecodeError:
            data = wire
    out: dict[str, Any] = {"size": len(data)}
    try:
        out["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        out["text"], out["encoding"] = base64.b64encode(data).decode(), "base64"
    if wire_field is not None and data != wire:
        out["_wire"] = wire_field
    return out


def _old_entry(e: Exported, daemon_url: str | None) -> dict:
    ex = e.exchange
    url = _base(ex, daemon_url) + ex.path + ("?" + ex.query if ex.query else "")
    total = max(0.0, (ex.ended_at - ex.started_at) * 1000.0)
    wait = max(0.0, ((ex.first_byte_at or ex.ended_at) - ex.started_at) * 1000.0)
    req = _old_content(ex.request_body, ex.header("content-encoding"), e.request_decoded)
    resp = _old_content(ex.response_body, ex.header("content-encoding", response=True), e.response_decoded)
    post: dict[str, Any] = {"mimeType": ex.header("content-type") or "", "text": req["text"]}
    if req.get("encoding"):
        post["_encoding"] = "base64"
    if req.get("_wire"):
        post["_wire"] = req["_wire"]
    request: dict[str, Any] = {
        "method": ex.method,
        "url": url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": [{"name": k, "value": v} for k, v in ex.request_headers],
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(ex.query, keep_blank_values=True)],
        "headersSize": -1,
        "bodySize": len(ex.request_body),
    }
    if ex.request_body:
        request["postData"] = post
    resp["mimeType"] = ex.header("content-type", response=True) or ""
    status = ex.status or 0
    fields = exchange_fields(ex)
    for key in ("request_body", "response_body", "request_headers", "response_headers", "method", "status"):
        fields.pop(key)
    iso = datetime.fromtimestamp(ex.started_at, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return {
        "startedDateTime": iso,
        "time": round(total, 3),
        "request": request,
        "response": {
            "status": status,
            "statusText": _REASONS.get(status, ""),
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": [{"name": k, "value": v} for k, v in ex.response_headers],
            "content": resp,
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": len(ex.response_body),
        },
        "cache": {},
        "timings": {
            "blocked": -1,
            "dns": -1,
            "connect": -1,
            "ssl": -1,
            "send": 0,
            "wait": round(wait, 3),
            "receive": round(max(0.0, total - wait), 3),
        },
        "_ctxscope": dict(fields, capture_epoch=e.capture_epoch, analysis=e.analysis),
    }


def _old_har(calls: list[Exported], version: str, daemon_url: str | None) -> bytes:
    entries = [_old_entry(e, daemon_url) for e in calls]
    return json.dumps(har_log(entries, version), ensure_ascii=False, indent=1).encode("utf-8")


# -- a hostile session ------------------------------------------------------------------------------


def _hostile_exchanges() -> list:
    huge = "é" * (CHUNK // 2 + 1) + "x" + "😀" * (CHUNK // 3)  # one line; characters across the chunk edges
    text_like_ours = '"\\u0000' + "0" * 32 + ':0\\u0000" \x00' + "0" * 32 + ':1\x00 \u2028 \\ " \t'
    request = json.dumps(anthropic_request([{"role": "user", "content": huge + text_like_ours}]), ensure_ascii=False)
    response = json.dumps(anthropic_response("squeezed — ✓")).encode()
    invalid = b'{"model": "claude-sonnet-4-5", "x": "\xff\xfe\xc3"}' + bytes(range(256)) * (CHUNK // 200)
    keyed = json.dumps(anthropic_request([{"role": "user", "content": f"my key is {BODY_KEY} ok"}]))
    ct = ("content-type", "application/json")
    return [
        make_exchange(session_label="hostile", request_body=request.encode()),
        make_exchange(
            session_label="hostile",
            response_body=gzip.compress(response, mtime=0),
            response_headers=(ct, ("content-encoding", "gzip")),
        ),
        make_exchange(session_label="hostile", request_body=invalid, response_body=b"\x80not utf-8"),
        make_exchange(
            session_label="hostile",
            response_body=gzip.compress(b"\xff\x00binary", mtime=0),
            response_headers=(ct, ("content-encoding", "gzip")),
        ),
        make_exchange(session_label="hostile", request_body=keyed.encode()),
        make_exchange(session_label="hostile", request_body=b"", response_body=b"", status=None, outcome="cancelled"),
        make_exchange(session_label="hostile", query="beta=true&x=%E2%9C%93"),
    ]


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_streamed_har_is_byte_identical_to_the_whole_document_writer(tmp_path):
    from ctxscope import __version__

    exchanges = _hostile_exchanges()
    path = tmp_path / "c.db"
    db = capture(path, exchanges)
    out = tmp_path / "s.har"
    _invoke("export", "hostile", "--db", str(path), "--daemon", DAEMON, "-o", str(out))
    (session,) = {row[0] for row in db.execute("SELECT session FROM calls").fetchall()}
    calls = [exported_call(db, i) for i in call_ids(db, session)]
    assert len(calls) == len(exchanges)
    assert out.read_bytes() == _old_har(calls, __version__, DAEMON)
    empty = io.BytesIO()
    assert list(write_har(empty, [], __version__, None)) == []
    assert empty.getvalue() == _old_har([], __version__, None)
    one = io.BytesIO()
    assert list(write_har(one, calls[:1], __version__, None)) == [exchanges[0].id]
    assert one.getvalue() == _old_har(calls[:1], __version__, None)


def test_a_hostile_session_exports_without_a_key_and_imports_back_byte_exact(tmp_path):
    exchanges = _hostile_exchanges()
    path = tmp_path / "c.db"
    capture(path, exchanges).close()
    out = tmp_path / "s.har"
    _invoke("export", "hostile", "--db", str(path), "-o", str(out))
    data = out.read_bytes()
    assert BODY_KEY.encode() not in data and b"STREAMKEY" not in data
    fresh = tmp_path / "fresh.db"
    done = json.loads(_invoke("import", str(out), "--db", str(fresh), "--json"))
    assert done["stored"] == len(exchanges)  # (the store had no analysis: its differences are not the point)
    db = open_db(fresh)
    try:
        for ex in exchanges:
            request = get_request_raw(db, ex.id)
            if BODY_KEY.encode() in ex.request_body:  # masked, length for length
                assert len(request) == len(ex.request_body) and BODY_KEY.encode() not in request
            else:
                assert request == ex.request_body
            assert get_response_raw(db, ex.id) == ex.response_body
    finally:
        db.close()


def test_progress_is_shown_on_a_pipe_only_when_asked(tmp_path):
    path = tmp_path / "c.db"
    capture(path, _hostile_exchanges()[4:]).close()
    quiet = CliRunner().invoke(cli, ["export", "hostile", "--db", str(path), "-o", str(tmp_path / "a.har")])
    assert quiet.exit_code == 0 and "exporting" not in quiet.stderr
    asked = CliRunner().invoke(
        cli, ["export", "hostile", "--db", str(path), "--format", "bundle", "-o", str(tmp_path / "b"), "--progress"]
    )
    assert asked.exit_code == 0 and "exporting: 3/3" in asked.stderr


@pytest.mark.slow
def test_progress_shows_on_a_terminal_and_not_with_no_progress(tmp_path):
    """The installed command with its stderr on a pseudo-terminal, as a user runs it."""
    path = tmp_path / "c.db"
    capture(path, _hostile_exchanges()[4:]).close()

    def stderr_on_a_terminal(*more: str) -> str:
        leader, follower = pty.openpty()
        args = [str(CTXSCOPE), "export", "hostile", "--db", str(path), "-o", str(tmp_path / "t.har"), *more]
        done = subprocess.run(args, stderr=follower, stdout=subprocess.DEVNULL, timeout=60)
        os.close(follower)
        seen = b""
        with contextlib.suppress(OSError):  # EIO once everything written is read
            while chunk := os.read(leader, 4096):
                seen += chunk
        os.close(leader)
        assert done.returncode == 0, seen
        return seen.decode(errors="replace")

    shown = stderr_on_a_terminal()
    assert "exporting" in shown and "3/3" in shown
    assert "exporting" not in stderr_on_a_terminal("--no-progress")
