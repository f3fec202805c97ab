"""Export and import: a session captured from the real SDKs through the real daemon, exported as HAR
1.2 and as a bundle, imported into new databases; keys planted in headers, the query and a body
never reach an exported file."""

from __future__ import annotations

import base64
import contextlib
import json
import time

import pytest
from click.testing import CliRunner

from ctxscope.inspector.share.bundle import zstd
from ctxscope.inspector.store.queries import get_call, get_request_raw, get_response_raw, list_calls, open_db
from ctxscope.inspector.writer.status import capture_state
from ctxscope.main import cli

from support import sdk_clients

KEY = "sk-ant-api03-EXPORTKEY-0123456789abcdefghijklmnopqrstuvwxyz"
QUERY_KEY = "sk-ant-api03-QUERYKEY-9876543210zyxwvutsrqponmlkjihgfedcba"
BODY_KEY = "sk-ant-api03-BODYKEY-abcdefghijklmnopqrstuvwxyz0123456789"
SECRETS = (KEY, QUERY_KEY, BODY_KEY, "EXPORTKEY", "QUERYKEY", "BODYKEY")
SYSTEM = "You are a careful assistant. " * 300


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _session(proxy, sim) -> None:
    """Session "exp": streamed and plain calls, a tool result, a changed system prompt (a break);
    session "leak": a key the client put inside its body."""
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/s/exp/anthropic", max_retries=0)
    sim.state().set_script([{"text": f"answer {i}"} for i in range(4)])
    msgs: list = [{"role": "user", "content": "list the files"}]
    for turn in range(4):
        system = SYSTEM if turn < 3 else SYSTEM.replace("careful", "careless", 1)
        kwargs = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "messages": msgs,
            "extra_query": {"api_key": QUERY_KEY},
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        }
        if turn % 2:
            with client.messages.stream(**kwargs) as stream:
                text = stream.get_final_message().content[0].text
        else:
            text = client.messages.create(**kwargs).content[0].text
        msgs = msgs + [
            {"role": "assistant", "content": [{"type": "text", "text": text}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{turn}", "content": f"file{turn}.txt"}],
            },
        ]
    leak = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/s/leak/anthropic", max_retries=0)
    sim.state().set_script([{"text": "noted"}])
    leak.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=16,
        messages=[{"role": "user", "content": f"my key is {BODY_KEY}, keep it"}],
    )
    proxy.wait_for_calls(5)
    proxy.stop()


def _require(obj: dict, where: str, fields: dict) -> None:
    for name, kind in fields.items():
        assert name in obj, f"{where}: HAR 1.2 requires {name}"
        assert isinstance(obj[name], kind), f"{where}.{name} is {type(obj[name]).__name__}"


def _valid_har(har: dict) -> list[dict]:
    """The required fields of HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) and their types."""
    _require(har, "", {"log": dict})
    log = har["log"]
    _require(log, "log", {"version": str, "creator": dict, "entries": list})
    assert log["version"] == "1.2"
    _require(log["creator"], "creator", {"name": str, "version": str})
    for i, e in enumerate(log["entries"]):
        _require(
            e,
            f"entries[{i}]",
            {
                "startedDateTime": str,
                "time": (int, float),
                "request": dict,
                "response": dict,
                "cache": dict,
                "timings": dict,
            },
        )
        _require(
            e["request"],
            "request",
            {
                "method": str,
                "url": str,
                "httpVersion": str,
                "cookies": list,
                "headers": list,
                "queryString": list,
                "headersSize": int,
                "bodySize": int,
            },
        )
        _require(
            e["response"],
            "response",
            {
                "status": int,
                "statusText": str,
                "httpVersion": str,
                "cookies": list,
                "headers": list,
                "content": dict,
                "redirectURL": str,
                "headersSize": int,
                "bodySize": int,
            },
        )
        _require(e["response"]["content"], "content", {"size": int, "mimeType": str})
        _require(e["timings"], "timings", {"send": (int, float), "wait": (int, float), "receive": (int, float)})
        for h in e["request"]["headers"] + e["response"]["headers"] + e["request"]["queryString"]:
            _require(h, "header", {"name": str, "value": str})
        if "postData" in e["request"]:
            _require(e["request"]["postData"], "postData", {"mimeType": str, "text": str})
    return log["entries"]


def _relations(path) -> list[tuple]:
    db = open_db(path)
    try:
        return [
            (c["session"], c["seq"], c["relation"], c["pointer"], c["epoch_reason"], c["cache_verdict"], c["thread"])
            for c in list_calls(db, limit=None, newest_first=False)
        ]
    finally:
        db.close()


@pytest.fixture
def captured(proxy, sim, tmp_path):
    _session(proxy, sim)
    return proxy.db_path


def test_har_is_valid_with_one_entry_per_call_and_bodies_byte_exact(captured, tmp_path):
    out = tmp_path / "exp.har"
    invoke("export", "exp", "--db", str(captured), "--format", "har", "-o", str(out))
    entries = _valid_har(json.loads(out.read_text()))
    db = open_db(captured)
    rows = list_calls(db, session="exp", limit=None, newest_first=False)
    assert [e["_ctxscope"]["id"] for e in entries] == [r["id"] for r in rows] and len(rows) == 4
    for e, row in zip(entries, rows, strict=True):
        assert e["request"]["postData"]["text"].encode() == get_request_raw(db, row["id"])
        assert e["response"]["content"]["text"].encode() == get_response_raw(db, row["id"])
        assert e["response"]["status"] == 200
    streamed = [e for e, r in zip(entries, rows, strict=True) if r["stream"]]
    assert len(streamed) == 2 and all(e["response"]["content"]["text"].startswith("event: ") for e in streamed)
    assert any(q["name"] == "api_key" for q in entries[0]["request"]["queryString"])
    db.close()


@pytest.mark.parametrize("fmt", ["har", "bundle"])
@pytest.mark.slow
def test_import_into_a_new_database_gives_the_same_relations(captured, tmp_path, fmt):
    out = tmp_path / f"exp.{fmt}"
    invoke("export", "exp", "--db", str(captured), "--format", fmt, "-o", str(out))
    fresh = tmp_path / f"imported-{fmt}.db"
    report = json.loads(invoke("import", str(out), "--db", str(fresh), "--json"))
    assert (report["format"], report["stored"], report["analysis_failed"]) == (fmt, 4, 0)
    assert report["checked"] == 4 and report["analysis_differences"] == [], report["analysis_differences"]
    original = [r for r in _relations(captured) if r[0] == "exp"]
    assert _relations(fresh) == original
    assert {r[2] for r in original} >= {"EPOCH_START", "APPEND_ONLY", "DIVERGED"}
    again = json.loads(invoke("import", str(out), "--db", str(fresh), "--json"))
    assert (again["stored"], again["skipped"]) == (0, 4)
    assert json.loads(invoke("search", "file2.txt", "--db", str(fresh), "--json"))[0]["seq"] == 4


@pytest.mark.slow
def test_no_key_in_any_exported_file(captured, tmp_path):
    files = []
    for session in ("exp", "leak"):
        for fmt in ("har", "bundle"):
            out = tmp_path / f"{session}.{fmt}"
            invoke("export", session, "--db", str(captured), "--format", fmt, "-o", str(out))
            files.append(out)
            assert out.stat().st_mode & 0o777 == 0o600
    db = open_db(captured)
    curls = [invoke("curl", r["id"], "--db", str(captured)).encode() for r in list_calls(db, limit=None)]
    assert BODY_KEY.encode() in get_request_raw(db, list_calls(db, session="leak")[0]["id"])  # stored as sent
    db.close()
    for blob in [f.read_bytes() for f in files] + curls:
        if blob.startswith(b"\x28\xb5\x2f\xfd"):
            blob = zstd.decompress(blob)
        texts = [blob]
        for chunk in blob.split(b'"'):  # base64 bodies, decoded
            with contextlib.suppress(ValueError):
                texts.append(base64.b64decode(chunk, validate=True))
        for text in texts:
            for secret in SECRETS:
                assert secret.encode() not in text


FOREIGN_REQUEST = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
FOREIGN_RESPONSE = {
    "id": "msg_x",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "yo"}],
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


@pytest.mark.slow
def test_a_foreign_har_is_imported_under_a_label_and_bad_files_change_nothing(captured, tmp_path):
    har = {
        "log": {
            "version": "1.2",
            "creator": {"name": "browser", "version": "1"},
            "entries": [
                {
                    "startedDateTime": "2026-01-02T03:04:05.000Z",
                    "time": 120,
                    "cache": {},
                    "timings": {"send": 0, "wait": 100, "receive": 20},
                    "request": {
                        "method": "POST",
                        "url": "https://api.anthropic.com/v1/messages",
                        "httpVersion": "HTTP/2",
                        "cookies": [],
                        "headers": [
                            {"name": "x-api-key", "value": KEY},
                            {"name": "content-type", "value": "application/json"},
                        ],
                        "queryString": [],
                        "headersSize": -1,
                        "bodySize": 10,
                        "postData": {"mimeType": "application/json", "text": json.dumps(FOREIGN_REQUEST)},
                    },
                    "response": {
                        "status": 200,
                        "statusText": "OK",
                        "httpVersion": "HTTP/2",
                        "cookies": [],
                        "headers": [
                            {"name": "content-type", "value": "application/json"},
                            {"name": "content-encoding", "value": "gzip"},
                        ],
                        "content": {"size": 10, "mimeType": "application/json", "text": json.dumps(FOREIGN_RESPONSE)},
                        "redirectURL": "",
                        "headersSize": -1,
                        "bodySize": 10,
                    },
                }
            ],
        }
    }
    path = tmp_path / "browser.har"
    path.write_text(json.dumps(har))
    fresh = tmp_path / "foreign.db"
    assert json.loads(invoke("import", str(path), "--db", str(fresh), "--json"))["stored"] == 1
    db = open_db(fresh)
    [row] = list_calls(db, limit=None)
    assert (row["session"], row["relation"], row["usage"]["output"]) == ("import:browser", "EPOCH_START", 1)
    stored = json.dumps(get_call(db, row["id"])["request_headers"])
    stored += str(db.execute("SELECT * FROM header_sets").fetchall())
    assert "x-api-key" in stored and KEY not in stored  # the import redacts like the proxy does
    db.close()
    har["log"]["entries"].append({"request": "broken"})
    path.write_text(json.dumps(har))
    other = tmp_path / "other.db"
    bad = CliRunner().invoke(cli, ["import", str(path), "--db", str(other)])
    assert bad.exit_code != 0 and "HAR entry 1" in bad.output
    assert not other.exists()
    (tmp_path / "junk.bin").write_bytes(b"\x28\xb5\x2f\xfdnot really")
    bad = CliRunner().invoke(cli, ["import", str(tmp_path / "junk.bin"), "--db", str(other)])
    assert bad.exit_code != 0 and "cannot import" in bad.output


@pytest.mark.slow
def test_import_refuses_a_database_a_daemon_is_capturing_into(proxy, sim, tmp_path):
    sim.state().set_script([{"text": "x"}])
    sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/s/busy/anthropic", max_retries=0).messages.create(
        model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    proxy.wait_for_calls(1)
    out = tmp_path / "busy.har"
    invoke("export", "busy", "--db", str(proxy.db_path), "-o", str(out))
    deadline = time.monotonic() + 10  # the writer publishes its state every half second
    while capture_state(proxy.db_path)["state"] == "no writer running" and time.monotonic() < deadline:
        time.sleep(0.05)
    busy = CliRunner().invoke(cli, ["import", str(out), "--db", str(proxy.db_path)])
    assert busy.exit_code != 0 and "daemon is capturing" in busy.output
    proxy.stop()
    done = json.loads(invoke("import", str(out), "--db", str(proxy.db_path), "--json"))
    assert (done["stored"], done["skipped"]) == (0, 1)  # the same call, already there


def test_compressed_and_binary_bodies_round_trip_byte_exact(tmp_path):
    import gzip

    from support.factories import anthropic_request, anthropic_response, capture, make_exchange

    response = json.dumps(anthropic_response("squeezed")).encode()
    gz = gzip.compress(response, mtime=0)
    binary = bytes(range(256)) * 4
    exchanges = [
        make_exchange(
            session_label="bin",
            response_body=gz,
            response_headers=(("content-type", "application/json"), ("content-encoding", "gzip")),
        ),
        make_exchange(
            session_label="bin",
            request_body=binary,
            request_headers=(("content-type", "application/octet-stream"),),
            request=anthropic_request(),
            path="/v1/files",
        ),
    ]
    path = tmp_path / "c.db"
    capture(path, exchanges).close()
    out = tmp_path / "bin.har"
    invoke("export", "bin", "--db", str(path), "-o", str(out))
    first, second = _valid_har(json.loads(out.read_text()))
    assert first["response"]["content"]["text"].encode() == response  # HAR's text is decoded
    assert base64.b64decode(first["response"]["content"]["_wire"]) == gz  # the bytes sent are kept
    assert second["request"]["postData"]["_encoding"] == "base64"
    assert base64.b64decode(second["request"]["postData"]["text"]) == binary
    for fmt, file in (("har", out), ("bundle", tmp_path / "bin.bundle")):
        if fmt == "bundle":
            invoke("export", "bin", "--db", str(path), "--format", "bundle", "-o", str(file))
        fresh = tmp_path / f"{fmt}.db"
        invoke("import", str(file), "--db", str(fresh))
        db = open_db(fresh)
        assert get_response_raw(db, exchanges[0].id) == gz
        assert get_request_raw(db, exchanges[1].id) == binary
        db.close()
