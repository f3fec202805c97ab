"""Keys a client put inside a body are stored (bodies are byte-exact) but shown nowhere.

A real SDK sends, through the daemon, a body with ``"api_key"`` in it, a key in a message, a
Bearer token in a tool result and a password in JSON quoted inside a tool result. Every web API
answer about those calls, every CLI view and the default raw exports are searched for each
secret; only the explicit exact exports hold them, byte for byte.
"""

from __future__ import annotations

import gzip
import json
import random
import re

import httpx2
import pytest
from click.testing import CliRunner

from ctxscope.inspector.store.queries import get_request_raw, get_response_raw, open_db
from ctxscope.main import cli
from ctxscope.proxy.redaction.mask import REDACTED, mask_key_bytes, mask_key_values, mask_keys_in

from support.web_fixtures import KEY, anthropic_client, start_web_daemon

BODY_KEY = "sk-live-0123456789abcdefXYZ"
BEARER = "ghp9f8e7d6c5b4a39281706abcdefQRS"
PASSWORD = "correct-horse-battery-staple"
SECRETS = (BODY_KEY, BEARER, PASSWORD, KEY)


# -- the masking itself -------------------------------------------------------------------------

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXBhcnQ"
LEAKY = {
    "api_key": BODY_KEY,
    "apiKey": "plain-secret-1",
    "X-API-KEY": "plain-secret-2",
    "Authorization": "Basic dXNlcjpw",
    "access_token": "plain-secret-3",
    "client_secret": "plain-secret-4",
    "password": 'pä"ss\\wörd\n',
    "messages": [
        {"role": "user", "content": f"call it with Bearer {BEARER} and {JWT}, or AIzaSyA-0123456789abcdefghij"},
        {"role": "user", "content": json.dumps({"secret": 'q"uoted\\', "token": "tok-0123456789abcdef"})},
    ],
}
LEAKED = (
    BODY_KEY,
    "plain-secret-1",
    "plain-secret-2",
    "dXNlcjpw",
    "plain-secret-3",
    "plain-secret-4",
    "pä",
    "wörd",
    BEARER,
    "eyJzdWIi",
    "c2lnbmF0dXJl",
    "AIzaSyA-0123",
    "uoted",
    "tok-0123456789abcdef",
)


def test_masking_json_text_keeps_it_valid_and_leaves_nothing_behind():
    text = json.dumps(LEAKY, ensure_ascii=False)
    masked = mask_key_values(text)
    shown = json.loads(masked)  # still JSON
    for leaked in LEAKED:
        assert leaked not in masked, leaked
    assert shown["api_key"] == shown["password"] == shown["Authorization"] == REDACTED
    assert shown["messages"][0]["content"] == f"call it with Bearer {REDACTED} and {REDACTED}, or {REDACTED}"
    assert json.loads(shown["messages"][1]["content"]) == {"secret": REDACTED, "token": REDACTED}
    assert mask_key_values(masked) == masked


def test_masking_bytes_keeps_every_offset_and_valid_utf8():
    data = json.dumps(LEAKY, ensure_ascii=False).encode()
    masked = mask_key_bytes(data)
    assert len(masked) == len(data)
    text = masked.decode("utf-8")  # a multi-byte password became one "*" per byte
    for leaked in LEAKED:
        assert leaked not in text, leaked
    shown = json.loads(text)
    assert shown["api_key"] == "*" * len(BODY_KEY) and set(shown["password"]) == {"*"}
    assert f"Bearer {'*' * len(BEARER)}" in shown["messages"][0]["content"]
    assert "AIza" + "*" * 23 in shown["messages"][0]["content"]  # a key keeps its kind, not its value
    assert mask_key_bytes(masked) == masked
    for i, (a, b) in enumerate(zip(masked, data, strict=True)):
        assert a == b or a == ord("*"), i


def test_masking_a_key_glued_to_a_unicode_escape_keeps_the_escape():
    # "\u00dA" is one character (Ú) whose last hex digit starts "AIza"; "\u002e" (.) likewise starts "eyJ"
    text = r'{"a": "\u00dAIzaSyA-0123456789abcdefghij", "b": "\u002eyJhbGciOiJIUzI1NiIsInR5c.x"}'
    for masked in (mask_key_values(text), mask_key_bytes(text.encode()).decode()):
        shown = json.loads(masked)
        assert shown["a"].startswith("\u00da") and "0123456789" not in shown["a"]
        assert shown["b"].startswith(".") and "hbGci" not in shown["b"]


def test_credential_parameters_of_a_url_written_in_a_body_are_masked():
    """An upstream that echoes its URL, or a logged request line, carries the query the proxy redacted."""
    text = json.dumps(
        {
            "path": "/v1/chat?auth=S1cret9x&key[]=S2cret9x&model=gpt-4o&access_token=S3cret9x",
            "log": "GET https://h/x?sig=S4cret9x&page=2 HTTP/1.1",
        }
    )
    masked, raw = mask_key_values(text), mask_key_bytes(text.encode())
    for secret in ("S1cret9x", "S2cret9x", "S3cret9x", "S4cret9x"):
        assert secret not in masked and secret.encode() not in raw
    assert json.loads(masked)["path"].endswith("&model=gpt-4o&access_token=[redacted]")
    assert "page=2" in masked and len(raw) == len(text.encode()) and json.loads(raw)


def test_what_only_looks_like_a_credential_is_left_alone():
    body = {
        "model": "gpt-4o",
        "max_tokens": 100,
        "password_hint": "ask",
        "token": "Hello",
        "tools": [
            {
                "name": "login",
                "parameters": {
                    "properties": {"password": {"type": "string"}, "token": {"type": "string"}},
                    "required": ["password"],
                },
            }
        ],
        "logprobs": {
            "content": [{"token": " world", "logprob": -0.2, "top_logprobs": [{"token": "Hi", "logprob": -1}]}]
        },
        "messages": [{"role": "user", "content": "I am the bearer of bad news; my password policy says 12 chars"}],
        "secret": "",
        "api_key": None,
        "apiKey": 42,
    }
    text = json.dumps(body)
    assert mask_key_values(text) is text and mask_key_bytes(text.encode()) == text.encode()
    assert mask_keys_in(body) is body


def test_masking_objects_masks_names_values_and_keys_without_touching_the_input():
    value = {"outer": [{"Api-Key": "abc", "note": f"see {BODY_KEY}"}, ("t", BODY_KEY)], BODY_KEY: 1, "n": 3}
    before = json.dumps(value)
    shown = mask_keys_in(value)
    assert shown == {"outer": [{"Api-Key": REDACTED, "note": f"see {REDACTED}"}, ("t", REDACTED)], REDACTED: 1, "n": 3}
    assert json.dumps(value) == before
    clean = {"a": [{"b": "nothing here"}] * 3}
    assert mask_keys_in(clean) is clean


def test_random_json_with_glued_keys_escapes_and_nesting_stays_valid_and_masked():
    rnd = random.Random(13)
    secrets = [BODY_KEY, "AIzaSyA-0123456789abcdefghij", JWT, f"Bearer {BEARER}"]
    atoms = secrets + [
        '"',
        "\\",
        "\n",
        "é",
        "你",
        "\u001e",
        "password",
        "token",
        "api_key",
        ":",
        " ",
        "x",
        "\\u00d",
        "{",
    ]
    names = ["api_key", "password", "token", "Authorization", "content", "text", "secret", "apiKey"]

    def text() -> str:
        return "".join(rnd.choice(atoms) for _ in range(rnd.randint(0, 10)))

    def value(depth=0):
        r = rnd.random()
        if depth > 3 or r < 0.4:
            return text()
        if r < 0.55:
            return json.dumps(value(depth + 1))  # JSON quoted inside a string, as tool results are
        if r < 0.75:
            return [value(depth + 1) for _ in range(rnd.randint(0, 4))]
        return {rnd.choice(names + [text()]): value(depth + 1) for _ in range(rnd.randint(0, 4))}

    survivors = ("live-0123456789abc", "SyA-0123456789abcdefghij", "hbGciOiJIUzI1NiIs", BEARER)
    for _ in range(3000):
        v = value()
        for ascii_only in (True, False):
            raw = json.dumps(v, ensure_ascii=ascii_only)
            shown = mask_key_bytes(raw.encode())
            assert len(shown) == len(raw.encode())
            outputs = (
                mask_key_values(raw),
                shown.decode("utf-8"),
                json.dumps(mask_keys_in(v), ensure_ascii=ascii_only),
            )
            for out in outputs:
                json.loads(out)
                assert not any(s in out for s in survivors), (raw, out)


def test_a_big_body_with_nothing_to_mask_comes_back_as_it_is():
    data = json.dumps(
        {"max_tokens": 5, "messages": [{"role": "user", "content": "the tokens, the keys " * 50}] * 2000}
    ).encode()
    assert mask_key_bytes(data) is data
    assert mask_key_values(data.decode()) == data.decode()


# -- every view of a real capture ---------------------------------------------------------------


@pytest.fixture
def web(tmp_path):
    d = start_web_daemon(tmp_path)
    yield d
    d.stop()


def _get(web, path: str) -> tuple[int, dict, bytes]:
    r = httpx2.get(web.url + path, timeout=10)
    return r.status_code, dict(r.headers), r.content


def _assert_clean(blob: bytes | str, where: str) -> None:
    text = blob.decode("utf-8", "replace") if isinstance(blob, bytes) else blob
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown in {where}"


def _capture_secret_session(web) -> list[dict]:
    """Three calls of session "leaky": the secrets appear in the second and third, and the third
    edits the first message (which holds the key) so the diff's first difference sits next to it."""
    client = anthropic_client(web.url, "leaky")
    first = {"role": "user", "content": f"my key is {BODY_KEY}, keep it"}
    tool_use = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "env"}}],
    }
    tool_result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": f"curl -H 'Authorization: Bearer {BEARER}' https://api.example\n"
                + json.dumps({"user": "me", "password": PASSWORD}),
            }
        ],
    }
    extra = {"api_key": BODY_KEY}
    client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[first], extra_body=extra)
    client.messages.create(
        model="claude-sonnet-4-6", max_tokens=20, messages=[first, tool_use, tool_result], extra_body=extra
    )
    edited = {"role": "user", "content": f"my key is {BODY_KEY}, keep it safe"}
    client.messages.create(
        model="claude-sonnet-4-6", max_tokens=20, messages=[edited, tool_use, tool_result], extra_body=extra
    )
    return web.wait_for_calls(3, session="leaky")


def _ranges(web, call_id: str, kind: str, form: str, length: int) -> tuple[list[dict], bytes]:
    """Every range of a body, ``length`` bytes at a time, and the bytes they add up to."""
    parts, offset = [], 0
    while offset is not None:
        status, _, body = _get(
            web, f"/_ctxscope/api/raw?id={call_id}&kind={kind}&form={form}&offset={offset}&length={length}"
        )
        assert status == 200
        r = json.loads(body)
        assert r["offset"] == offset
        parts.append(r)
        offset = r["next_offset"]
    data = b"".join(_unhex(r["text"]) if r["binary"] else r["text"].encode() for r in parts)
    return parts, data


def _unhex(dump: str) -> bytes:
    """The bytes of the UI's hex dump (offset, 16 hex bytes, text column)."""
    out = b""
    for line in dump.splitlines():
        out += bytes.fromhex(line[10:57])
    return out


def _masked_only_at_secrets(shown: bytes, exact: bytes) -> None:
    """Same length; every byte that differs is a '*' standing where a secret's byte was."""
    assert len(shown) == len(exact)
    spans = [(m.start(), m.end()) for s in SECRETS for m in re.finditer(re.escape(s.encode()), exact)]
    for i, (a, b) in enumerate(zip(shown, exact, strict=True)):
        if a != b:
            assert a == ord("*") and any(s <= i < e for s, e in spans), (i, shown[i - 10 : i + 10])


@pytest.mark.slow
def test_web_api_never_shows_a_key_from_a_body_and_raw_ranges_stay_aligned(web):
    rows = _capture_secret_session(web)
    db = open_db(web.db_path)
    stored = {r["id"]: (get_request_raw(db, r["id"]), get_response_raw(db, r["id"])) for r in rows}
    db.close()
    assert BODY_KEY.encode() in stored[rows[2]["id"]][0] and BEARER.encode() in stored[rows[2]["id"]][0]
    assert PASSWORD.encode() in stored[rows[2]["id"]][0]  # the store keeps the body exact

    for path in ("/_ctxscope/api/sessions", "/_ctxscope/api/session?s=leaky", "/_ctxscope/api/status"):
        status, _, body = _get(web, path)
        assert status == 200
        _assert_clean(body, path)
    for r in rows:
        status, _, body = _get(web, f"/_ctxscope/api/call?id={r['id']}")
        assert status == 200
        _assert_clean(body, f"call {r['seq']}")
        detail = json.loads(body)
        if r["seq"] > 1:
            assert detail["request"]["api_key"] == "[redacted]"
            assert "Bearer [redacted]" in json.dumps(detail["request"])
        for base in ("", f"&base={rows[0]['id']}"):
            status, _, body = _get(web, f"/_ctxscope/api/diff?id={r['id']}{base}")
            assert status == 200
            _assert_clean(body, f"diff of call {r['seq']}")
        for kind, exact in zip(("request", "response"), stored[r["id"]], strict=True):
            for form in ("decoded", "wire"):
                # the last call in 23-byte ranges: each secret (27 bytes or more) is cut by a range boundary
                parts, shown = _ranges(web, r["id"], kind, form, 23 if r["seq"] == 3 and form == "decoded" else 65536)
                for p in parts:
                    _assert_clean(p["text"], f"raw {kind} {form} range of call {r['seq']}")
                    assert p["total"] == len(exact)
                _masked_only_at_secrets(shown, exact)  # the simulator's answer quotes the key too
                status, headers, body = _get(web, f"/_ctxscope/api/raw.bin?id={r['id']}&kind={kind}&form={form}")
                assert status == 200 and "attachment" in headers["content-disposition"]
                _assert_clean(body, f"{kind} {form} download of call {r['seq']}")
                assert body == shown  # not compressed: the download is the same masked bytes
            status, headers, body = _get(web, f"/_ctxscope/api/raw.bin?id={r['id']}&kind={kind}&form=wire&exact=1")
            assert status == 200 and body == exact and "-exact.bin" in headers["content-disposition"]
    last = rows[2]["id"]
    _, headers, _ = _get(web, f"/_ctxscope/api/raw.bin?id={last}&kind=request&form=wire")
    assert "-masked.bin" in headers["content-disposition"] and "keys masked" in headers["x-ctxscope-body"]


@pytest.mark.slow
def test_cli_views_mask_a_key_from_a_body_and_only_exact_shows_it(web):
    rows = _capture_secret_session(web)
    db = ["--db", str(web.db_path)]
    runner = CliRunner()
    last, first = rows[2]["id"], rows[0]["id"]
    exact = get_request_raw(open_db(web.db_path), last)

    def run(*args) -> str:
        result = runner.invoke(cli, [*args, *db])
        assert result.exit_code == 0, result.output
        return result.output

    outputs = {
        "show": run("show", last),
        "show --json": run("show", last, "--json"),
        "diff": run("diff", last),
        "diff --json": run("diff", last, "--json"),
        "diff vs first": run("diff", last, first),
        "session": run("session", "leaky"),
        "session --json": run("session", "leaky", "--json"),
        "calls --json": run("calls", "--json"),
        "sessions --json": run("sessions", "--json"),
    }
    for where, text in outputs.items():
        _assert_clean(text, where)
    shown = json.loads(outputs["show --json"])
    assert (
        shown["request"]["api_key"] == "[redacted]" and "my key is [redacted], keep it safe" in outputs["show --json"]
    )
    assert "[redacted]" in outputs["diff"]  # the first difference's excerpt, next to the key

    raw = runner.invoke(cli, ["show", last, *db, "--request-raw"])
    assert raw.exit_code == 0 and "masked" in raw.stderr
    _assert_clean(raw.stdout_bytes, "show --request-raw")
    _masked_only_at_secrets(raw.stdout_bytes, exact)
    assert json.loads(raw.stdout_bytes)["api_key"] == "*" * len(BODY_KEY)  # still valid JSON
    raw_exact = runner.invoke(cli, ["show", last, *db, "--request-raw", "--exact"])
    assert raw_exact.exit_code == 0 and raw_exact.stdout_bytes == exact and BODY_KEY.encode() in raw_exact.stdout_bytes
    response = runner.invoke(cli, ["show", last, *db, "--response-raw", "--exact"]).stdout_bytes
    assert response == get_response_raw(open_db(web.db_path), last)
    assert "secrets" in runner.invoke(cli, ["show", "--help"]).output
    alone = runner.invoke(cli, ["show", last, *db, "--exact"])
    assert alone.exit_code != 0 and "--request-raw" in alone.output


@pytest.mark.slow
def test_a_compressed_body_holding_a_key_is_exported_decoded_and_masked(web):
    body = json.dumps(
        {
            "model": "claude-sonnet-4-6",
            "max_tokens": 5,
            "api_key": BODY_KEY,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    packed = gzip.compress(body, compresslevel=0)  # stored blocks: the key is readable in the wire bytes
    assert BODY_KEY.encode() in packed
    httpx2.post(
        web.url + "/s/zipped/anthropic/v1/messages",
        content=packed,
        timeout=10,
        headers={"content-type": "application/json", "content-encoding": "gzip", "x-api-key": KEY},
    )
    [row] = web.wait_for_calls(1, session="zipped")
    assert get_request_raw(open_db(web.db_path), row["id"]) == packed

    _, wire_view = _ranges(web, row["id"], "request", "wire", 64)
    assert len(wire_view) == len(packed) and BODY_KEY.encode() not in wire_view
    status, headers, data = _get(web, f"/_ctxscope/api/raw.bin?id={row['id']}&kind=request&form=wire")
    assert status == 200 and headers["x-ctxscope-body"] == "decoded; keys masked"
    assert json.loads(data)["api_key"] == "*" * len(BODY_KEY) and len(data) == len(body)
    assert _get(web, f"/_ctxscope/api/raw.bin?id={row['id']}&kind=request&form=wire&exact=1")[2] == packed

    runner = CliRunner()
    out = runner.invoke(cli, ["show", row["id"], "--db", str(web.db_path), "--request-raw"])
    assert out.exit_code == 0 and "compressed (gzip)" in out.stderr and "written decoded" in out.stderr
    assert out.stdout_bytes == data
    exact = runner.invoke(cli, ["show", row["id"], "--db", str(web.db_path), "--request-raw", "--exact"])
    assert exact.stdout_bytes == packed


@pytest.mark.slow
def test_a_compressed_body_without_keys_is_exported_as_sent(web):
    body = json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    packed = gzip.compress(body.encode())
    httpx2.post(
        web.url + "/s/plainzip/anthropic/v1/messages",
        content=packed,
        timeout=10,
        headers={"content-type": "application/json", "content-encoding": "gzip", "x-api-key": KEY},
    )
    [row] = web.wait_for_calls(1, session="plainzip")
    status, headers, data = _get(web, f"/_ctxscope/api/raw.bin?id={row['id']}&kind=request&form=wire")
    assert status == 200 and data == packed and headers["x-ctxscope-body"] == "wire"
    out = CliRunner().invoke(cli, ["show", row["id"], "--db", str(web.db_path), "--request-raw"])
    assert out.exit_code == 0 and out.stdout_bytes == packed and "note" not in out.stderr
