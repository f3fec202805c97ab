"""Identity at the edges against the INSTALLED `ctxscope serve`: Claude Code's billing header to an
upstream configured as the provider itself and to a third-party one (a fake Anthropic-compatible
provider on loopback that caches as each does), and a Responses chain through the simulator."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from ctxscope.inspector.store import queries
from ctxscope.vocab.tokens import count_tokens

from support import sdk_clients
from support.inspector_bodies import EPHEMERAL, long_text, text
from support.serve_process import CTXSCOPE, running_serve

KEY = "sk-ant-api03-IDENTITY-" + secrets.token_hex(16)
SYSTEM = long_text(1500, "cc")


class FakeAnthropic(BaseHTTPRequestHandler):
    """Anthropic's Messages API as far as caching goes. Under ``/first`` it leaves a leading
    ``x-anthropic-billing-header`` block out of its cache key, as Anthropic does; under ``/third``
    it keys on every block, as Anthropic-compatible endpoints do."""

    written: ClassVar[dict[str, str]] = {}  # path prefix -> the cached system prefix's key

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        where = self.path.split("/")[1]
        blocks = body["system"]
        keyed = (
            blocks[1:] if where == "first" and blocks[0]["text"].startswith("x-anthropic-billing-header") else blocks
        )
        key = json.dumps(keyed)
        prefix = sum(count_tokens(b["text"]) for b in blocks)
        rest = count_tokens(json.dumps(body["messages"]))
        hit = self.written.get(where) == key
        self.written[where] = key
        usage = {
            "input_tokens": rest,
            "output_tokens": 3,
            "cache_read_input_tokens": prefix if hit else 0,
            "cache_creation_input_tokens": 0 if hit else prefix,
        }
        answer = {
            "id": "msg_" + secrets.token_hex(6),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": usage,
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAnthropic)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _stored(db: Path, n: int) -> list[dict]:
    deadline = time.monotonic() + 60
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            conn = queries.open_db(db)
            try:
                rows = [queries.get_call(conn, r["id"]) for r in queries.list_calls(conn, newest_first=False)]
            finally:
                conn.conn.close()
            if len(rows) >= n and all(r["relation"] for r in rows):
                return rows
        time.sleep(0.2)
    raise AssertionError(f"expected {n} analysed calls, found {len(rows)}")


def _claude_code_calls(base: str, route: str, session: str) -> None:
    """Five Claude Code requests whose only change is ``cch``: the header, then the cached system prompt."""
    client = sdk_clients.Anthropic(api_key=KEY, base_url=f"{base}/u/{route}", max_retries=0)
    for i in range(5):
        header = f"x-anthropic-billing-header: cc_version=2.1.37.3a1; cc_entrypoint=cli; cch={0xA3F10 + 7 * i:05x};"
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            system=[text(header), text(SYSTEM, cache_control=dict(EPHEMERAL))],
            messages=[{"role": "user", "content": "Fix the bug."}],
            extra_headers={"x-claude-code-session-id": session},
        )


def _findings(tmp_path: Path, session: str) -> list[dict]:
    done = subprocess.run(
        [str(CTXSCOPE), "findings", session, "--json", "--db", str(tmp_path / "c.db")],
        capture_output=True,
        text=True,
        env=dict(os.environ, CTXSCOPE_HOME=str(tmp_path / "home")),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    data = json.loads(done.stdout)
    return data["findings"] if isinstance(data, dict) else data


def test_billing_header_is_metadata_to_the_provider_itself_and_a_break_elsewhere(tmp_path, fake_provider):
    config = tmp_path / "ctxscope.toml"
    config.write_text(
        f'[upstreams]\nfirst = "{fake_provider}/first"\nthird = "{fake_provider}/third"\n\n'
        "[provider_itself]\nfirst = true\n"
    )
    with running_serve(tmp_path, "--config", str(config)) as (_, base):
        _claude_code_calls(base, "first", "cc-first")
        _claude_code_calls(base, "third", "cc-third")
        rows = _stored(tmp_path / "c.db", 10)
    first = [r for r in rows if r["session"] == "cc-first"]
    third = [r for r in rows if r["session"] == "cc-third"]
    assert [r["relation"] for r in first] == ["EPOCH_START"] + ["IDENTICAL"] * 4
    assert [r["cache_verdict"] for r in first[1:]] == ["hit"] * 4
    assert sum(r["cache_lost_tokens"] or 0 for r in first) == 0
    assert all("metadata changed" in r["relation_detail"]["detail"] for r in first[1:])
    assert [r["relation"] for r in third] == ["EPOCH_START"] + ["DIVERGED"] * 4
    assert [r["cache_verdict"] for r in third[1:]] == ["client_break"] * 4
    assert all(r["cache_lost_tokens"] > 1400 for r in third[1:])
    found = _findings(tmp_path, "cc-third")
    [metadata] = [f for f in found if f["kind"] == "per_request_metadata"]
    assert "CLAUDE_CODE_ATTRIBUTION_HEADER=0" in metadata["summary"]
    assert not [f for f in _findings(tmp_path, "cc-first") if f["kind"] in ("per_request_metadata", "cache_churn")]


def test_a_responses_chain_through_serve_is_append_only_with_whole_context_tokens(tmp_path):
    with running_serve(tmp_path) as (_, base):
        client = sdk_clients.OpenAI(api_key="sk-identity-" + secrets.token_hex(8), base_url=base + "/u/sim/v1")
        first = client.responses.create(model="gpt-sim", input="Remember the number 7. " + long_text(400))
        second = client.responses.create(model="gpt-sim", input="What was it?", previous_response_id=first.id)
        client.responses.create(model="gpt-sim", input="Double it.", previous_response_id=second.id)
        rows = _stored(tmp_path / "c.db", 3)
    assert [r["relation"] for r in rows] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    assert [r["predecessor"] for r in rows[1:]] == [rows[0]["id"], rows[1]["id"]]
    assert len({r["thread"] for r in rows}) == 1
    # every link counts the whole context: the first input (~400 tokens) and what came after it
    assert rows[0]["tokens_estimated"] > 400
    assert rows[2]["tokens_estimated"] > rows[1]["tokens_estimated"] > rows[0]["tokens_estimated"]


def _sim_reads(rows: list[dict]) -> list[int]:
    return [r["usage_cache_read"] or 0 for r in rows]


def test_the_simulator_keys_the_billing_header_as_anthropic_does_unless_told_otherwise(tmp_path):
    """The built-in simulator plays Anthropic's own API: five requests differing only in ``cch``
    read its cache, and ctxscope, which counts the simulator as the provider itself, sees no break.
    ``[provider_itself] sim = false`` makes both play a third-party endpoint: every call misses,
    and the break is found with its one-line fix."""
    with running_serve(tmp_path) as (_, base):
        _claude_code_calls(base, "sim", "cc-sim")
        itself = _stored(tmp_path / "c.db", 5)
    assert [r["relation"] for r in itself] == ["EPOCH_START"] + ["IDENTICAL"] * 4
    assert all(n > 1400 for n in _sim_reads(itself)[1:]), _sim_reads(itself)
    assert [r["cache_verdict"] for r in itself[1:]] == ["hit"] * 4
    assert sum(r["cache_lost_tokens"] or 0 for r in itself) == 0
    assert not [f for f in _findings(tmp_path, "cc-sim") if f["kind"] in ("per_request_metadata", "cache_churn")]

    other = tmp_path / "third"
    other.mkdir()
    config = other / "ctxscope.toml"
    config.write_text("[provider_itself]\nsim = false\n")
    with running_serve(other, "--config", str(config)) as (_, base):
        _claude_code_calls(base, "sim", "cc-sim")
        third = _stored(other / "c.db", 5)
    assert _sim_reads(third) == [0] * 5
    assert [r["relation"] for r in third] == ["EPOCH_START"] + ["DIVERGED"] * 4
    assert [r["cache_verdict"] for r in third[1:]] == ["client_break"] * 4
    [metadata] = [f for f in _findings(other, "cc-sim") if f["kind"] == "per_request_metadata"]
    assert "CLAUDE_CODE_ATTRIBUTION_HEADER=0" in metadata["summary"]
