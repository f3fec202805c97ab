"""OTLP export of stored calls, checked by an independent OTLP/HTTP receiver on loopback.

The real anthropic and openai SDKs talk to the real daemon (writer child, simulator upstream);
the daemon exports through the OpenTelemetry SDK's OTLP exporter; the receiver here decodes the
protobuf with opentelemetry-proto's generated classes, not with anything of ctxscope's.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource

from ctxscope.daemon import start_daemon
from ctxscope.inspector.otlp.backfill import BackfillFailed, backfill
from ctxscope.inspector.otlp.settings import ExportSettings, traces_url
from ctxscope.inspector.otlp.spans import CONTENT_CAP, call_span, span_id
from ctxscope.inspector.reading.db_status import db_status
from ctxscope.inspector.store import db as store
from ctxscope.main import cli
from ctxscope.settings import DaemonConfig, build_config

from support import sdk_clients
from support.factories import capture, make_exchange

KEY = "sk-ant-test-otlp-0123456789abcdefghijklmnop"


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class Receiver:
    """An OTLP/HTTP traces endpoint: decodes each request and keeps its spans; can hang or be down."""

    def __init__(self, loop_thread, port: int):
        self.loop_thread, self.port = loop_thread, port
        self.spans: list[dict] = []
        self.requests = 0
        self.headers: list[dict[str, str]] = []
        self.runner: web.AppRunner | None = None
        self.hold: asyncio.Event | None = None  # set: answer; clear: hang (a slow collector)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        if self.hold is not None:
            await self.hold.wait()
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.requests += 1
        self.headers.append(dict(request.headers))
        for rs in message.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        {
                            "span_id": s.span_id.hex(),
                            "trace_id": s.trace_id.hex(),
                            "name": s.name,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "kind": s.kind,
                            "attributes": {a.key: _value(a.value) for a in s.attributes},
                            "events": [
                                (e.name, e.time_unix_nano, {a.key: _value(a.value) for a in e.attributes})
                                for e in s.events
                            ],
                            "resource": resource,
                            "scope": ss.scope.name,
                        }
                    )
        return web.Response(body=b"", content_type="application/x-protobuf")

    def start(self) -> None:
        async def up():
            app = web.Application()
            app.router.add_post("/v1/traces", self._traces)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            return runner

        self.runner = self.loop_thread.call(up())

    def stop(self) -> None:
        if self.runner is not None:
            if self.hold is not None:
                self.loop_thread.loop.call_soon_threadsafe(self.hold.set)
            self.loop_thread.call(self.runner.cleanup())
            self.runner = None

    def wait_for(self, n: int, timeout: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.spans) < n:
            time.sleep(0.05)
        assert len(self.spans) >= n, f"expected {n} spans, received {len(self.spans)}"
        return self.spans


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def receiver(loop_thread):
    r = Receiver(loop_thread, _free_port())
    yield r
    r.stop()


def _settings(url: str, **kw) -> ExportSettings:
    """Short pauses so a test sees the retries quickly (the defaults are a second to half a minute)."""
    return ExportSettings(traces_url(url), poll_s=0.05, retry_max_s=0.3, timeout_s=2.0, **kw)


@pytest.fixture
def daemons(loop_thread, sim, tmp_path, monkeypatch):
    """Start daemons on one database with the export configured; all are stopped at the end."""
    monkeypatch.setenv("CTXSCOPE_HOME", str(tmp_path / "home"))
    started = []
    db_path = tmp_path / "captures.db"

    def start(settings: ExportSettings | None):
        cfg = DaemonConfig(
            host="127.0.0.1",
            port=0,
            db=db_path,
            export=settings,
            upstreams={"anthropic": sim.url, "openai": sim.url, "sim": sim.url},
        )
        daemon = loop_thread.call(start_daemon(cfg))
        started.append(daemon)
        return daemon

    start.db_path = db_path
    yield start
    for daemon in started:
        loop_thread.call(daemon.stop())


def _anthropic_calls(url: str, session: str, n: int) -> None:
    client = sdk_clients.Anthropic(
        api_key=KEY, base_url=url + "/anthropic", max_retries=0, default_headers={"x-ctxscope-session": session}
    )
    messages: list[dict] = []
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i}: what is in the file?"})
        answer = client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=messages)
        messages.append({"role": "assistant", "content": answer.content[0].text})


def _stored(db_path: Path, n: int) -> list[dict]:
    from ctxscope.inspector.store.queries import list_calls, open_db

    deadline = time.monotonic() + 20
    rows: list[dict] = []
    while time.monotonic() < deadline:
        db = open_db(db_path)
        rows = list_calls(db, limit=1000, newest_first=False)
        db.conn.close()
        if len(rows) >= n:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"expected {n} stored calls, found {len(rows)}")


def _settle(receiver: Receiver, n: int) -> list[dict]:
    """The spans once ``n`` arrived and a few more polls brought nothing more (no late duplicate)."""
    spans = receiver.wait_for(n)
    requests = receiver.requests
    time.sleep(0.5)  # ten polls of the export: a duplicate would be sent in them
    assert receiver.requests == requests
    return spans


def test_one_span_per_call_with_genai_and_ctxscope_attributes(daemons, receiver):
    receiver.start()
    daemon = daemons(_settings(receiver.url))
    _anthropic_calls(daemon.url, "team-a", 3)
    openai = sdk_clients.OpenAI(
        api_key="sk-test-otlp-0123456789abcdef",
        base_url=daemon.url + "/openai/v1",
        max_retries=0,
        default_headers={"x-ctxscope-session": "team-b"},
    )
    openai.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}])
    rows = _stored(daemons.db_path, 4)
    spans = _settle(receiver, 4)
    assert len(spans) == 4
    by_call = {s["attributes"]["ctxscope.call_id"]: s for s in spans}
    assert set(by_call) == {r["id"] for r in rows}
    for row in rows:
        span = by_call[row["id"]]
        attrs = span["attributes"]
        assert span["span_id"] == f"{span_id(row['id']):016x}"
        assert span["resource"]["service.name"] == "ctxscope" and span["scope"] == "ctxscope"
        assert attrs["gen_ai.conversation.id"] == row["session"]
        assert attrs["gen_ai.request.model"] == row["model"]
        assert attrs["gen_ai.response.model"]
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.usage.input_tokens"] == row["usage"]["input"]
        assert attrs["gen_ai.usage.output_tokens"] == row["usage"]["output"]
        assert attrs["ctxscope.relation"] == row["relation"]
        assert attrs["ctxscope.thread"] == row["thread"]
        assert attrs["ctxscope.cache.verdict"] == row["cache_verdict"]
        assert attrs.get("ctxscope.epoch_reason") == row["epoch_reason"]
        assert span["start"] < span["end"]
        assert [e[0] for e in span["events"]] == ["gen_ai.first_token"]  # content is off by default
        assert span["start"] <= span["events"][0][1] <= span["end"]
    team_a = [by_call[r["id"]]["attributes"] for r in rows if r["session"] == "team-a"]
    assert [a["gen_ai.system"] for a in team_a] == ["anthropic"] * 3
    assert [a["ctxscope.relation"] for a in team_a] == ["EPOCH_START", "APPEND_ONLY", "APPEND_ONLY"]
    assert all("ctxscope.cache.verdict" in a and "ctxscope.markers" in a for a in team_a)
    team_b = [by_call[r["id"]]["attributes"] for r in rows if r["session"] == "team-b"]
    assert [a["gen_ai.system"] for a in team_b] == ["openai"]


@pytest.mark.slow
def test_collector_down_then_up_and_a_restart_deliver_every_call_once(daemons, receiver, loop_thread):
    daemon = daemons(_settings(receiver.url))  # nothing listens on the receiver's port yet
    _anthropic_calls(daemon.url, "outage", 3)
    rows = _stored(daemons.db_path, 3)  # storing went on while the collector was down
    deadline = time.monotonic() + 20
    while daemon.otlp.failures < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon.otlp.failures >= 2  # it tried, failed, and is retrying
    lag = db_status(daemons.db_path)["export"]
    assert [(x["target"], x["pending"]) for x in lag] == [(traces_url(receiver.url), 3)]
    receiver.start()
    spans = _settle(receiver, 3)
    assert sorted(s["attributes"]["ctxscope.call_id"] for s in spans) == sorted(r["id"] for r in rows)
    assert db_status(daemons.db_path)["export"][0]["pending"] == 0
    text = CliRunner().invoke(cli, ["db", "status", "--db", str(daemons.db_path)]).output
    assert f"export: {traces_url(receiver.url)}: 0 calls behind, last sent 20" in text
    loop_thread.call(daemon.stop())  # a restart resumes from the position kept in the database
    again = daemons(_settings(receiver.url))
    _anthropic_calls(again.url, "after-restart", 1)
    rows = _stored(daemons.db_path, 4)
    spans = _settle(receiver, 4)
    ids = [s["attributes"]["ctxscope.call_id"] for s in spans]
    assert sorted(ids) == sorted(r["id"] for r in rows)  # each exactly once


def test_a_hanging_collector_never_holds_up_traffic_or_storage(daemons, receiver, loop_thread):
    receiver.hold = loop_thread.call(_event())
    receiver.start()
    daemon = daemons(_settings(receiver.url))
    _anthropic_calls(daemon.url, "slow-collector", 3)  # answered while the collector hangs
    _stored(daemons.db_path, 3)
    loop_thread.loop.call_soon_threadsafe(receiver.hold.set)
    spans = _settle(receiver, 3)
    assert len({s["span_id"] for s in spans}) == 3


async def _event() -> asyncio.Event:
    return asyncio.Event()


@pytest.mark.slow
def test_content_export_is_off_by_default_and_masks_keys_when_on(daemons, receiver):
    receiver.start()
    daemon = daemons(_settings(receiver.url, content=True, headers={"x-team-token": "t0ken"}))
    client = sdk_clients.Anthropic(api_key=KEY, base_url=daemon.url + "/anthropic", max_retries=0)
    leaked = "sk-ant-api03-" + "A" * 40
    client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=32,
        system="be brief",
        messages=[{"role": "user", "content": f"my key is {leaked}, keep it"}],
    )
    span = _settle(receiver, 1)[0]
    events = {name: attrs for name, _at, attrs in span["events"]}
    assert set(events) == {"gen_ai.first_token", "gen_ai.content.prompt", "gen_ai.content.completion"}
    prompt = events["gen_ai.content.prompt"]
    assert "keep it" in prompt["gen_ai.input.messages"] and leaked not in prompt["gen_ai.input.messages"]
    assert json.loads(prompt["gen_ai.system_instructions"]) == "be brief"
    assert json.loads(events["gen_ai.content.completion"]["gen_ai.output.messages"])
    assert not any(leaked in json.dumps(s) for s in receiver.spans)
    assert {h.get("x-team-token") for h in receiver.headers} == {"t0ken"}


def test_content_longer_than_the_cap_is_cut_and_says_so():
    row = {
        "id": "c1",
        "started_at": "2026-12-01T09:00:00.000000Z",
        "ended_at": "2026-12-01T09:00:01.000000Z",
        "api": "openai.chat",
        "model": "m",
        "outcome": "ok",
    }
    huge = {"messages": [{"role": "user", "content": "x" * (CONTENT_CAP * 2)}]}
    span = call_span(row, Resource.create({}), response={"choices": []}, request=huge, content=True)
    prompt = next(e for e in span.events if e.name == "gen_ai.content.prompt").attributes["gen_ai.input.messages"]
    assert CONTENT_CAP < len(prompt) < CONTENT_CAP + 100 and prompt.endswith("more characters]")
    plain = call_span(row, Resource.create({}), response={"choices": []}, request=huge)
    assert [e.name for e in plain.events] == []  # content off, and no first byte recorded


def _captured(tmp_path: Path) -> Path:
    path = tmp_path / "captures.db"
    exchanges = [make_exchange(i, session_label="one" if i < 2 else "two") for i in range(5)]
    capture(path, exchanges).conn.close()
    return path


@pytest.mark.slow
def test_backfill_sends_the_chosen_calls_and_says_when_the_collector_is_down(tmp_path, receiver):
    path = _captured(tmp_path)
    seen: list[tuple[int, int]] = []
    with pytest.raises(BackfillFailed):
        backfill(path, _settings(receiver.url), session="one")
    receiver.start()
    result = backfill(path, _settings(receiver.url, batch=1), session="one", progress=lambda *a: seen.append(a))
    assert (result.total, result.sent) == (2, 2) and seen == [(1, 2), (2, 2)]
    assert {s["attributes"]["gen_ai.conversation.id"] for s in receiver.spans} == {"one"}
    out = CliRunner().invoke(cli, ["export", "--otlp", receiver.url, "--db", str(path), "--since", "2000-01-01"])
    assert out.exit_code == 0, out.output
    assert "sent 5 of 5 calls" in out.output
    assert len(receiver.spans) == 7 and len({s["span_id"] for s in receiver.spans}) == 5  # same call, same span
    bad = CliRunner().invoke(cli, ["export", "--otlp", "ftp://x", "--db", str(path)])
    assert bad.exit_code == 2 and "not an http(s) OTLP endpoint" in bad.output
    both = CliRunner().invoke(cli, ["export", "--otlp", receiver.url, "-o", str(tmp_path / "x.har"), "--db", str(path)])
    assert both.exit_code == 2 and "writes no file" in both.output and not (tmp_path / "x.har").exists()
    neither = CliRunner().invoke(cli, ["export", "--db", str(path)])
    assert neither.exit_code == 2 and "SESSION and -o FILE" in neither.output


def test_export_settings_from_the_config_file_and_the_command_line(tmp_path):
    config = tmp_path / "ctxscope.toml"
    config.write_text('[export]\notlp_endpoint = "http://collector:4318"\nheaders = { authorization = "Bearer t" }\n')
    cfg = build_config(config_file=config, host=None, port=None, db=None, upstream_options=(), allow_remote=False)
    assert cfg.export == ExportSettings("http://collector:4318/v1/traces", headers={"authorization": "Bearer t"})
    cfg = build_config(
        config_file=config,
        host=None,
        port=None,
        db=None,
        upstream_options=(),
        allow_remote=False,
        otlp_endpoint="http://other:4318/v1/traces",
    )
    assert cfg.export is not None and cfg.export.endpoint == "http://other:4318/v1/traces"
    assert (
        build_config(config_file=None, host=None, port=None, db=None, upstream_options=(), allow_remote=False).export
        is None
    )
    config.write_text('[export]\notlp_endpoint = "http://c:4318"\nprotocol = "grpc"\n')
    with pytest.raises(ValueError, match=r"\[export\]: protocol 'grpc' is not supported"):
        build_config(config_file=config, host=None, port=None, db=None, upstream_options=(), allow_remote=False)


def test_stored_order_numbers_are_never_reused_after_a_deletion(tmp_path):
    path = _captured(tmp_path)
    db = store.connect(path)
    try:
        before = db.execute("SELECT MAX(seq) FROM stored_order").fetchone()[0]
        db.execute("DELETE FROM calls WHERE session = 'two'")  # the newest calls: their rowids come free
        db.conn.commit()
        assert db.execute("SELECT COUNT(*) FROM stored_order").fetchone()[0] == 2
    finally:
        db.close()
    capture(path, [make_exchange(9)]).conn.close()
    db = store.connect(path)
    try:
        assert db.execute("SELECT MAX(seq) FROM stored_order").fetchone()[0] == before + 1
    finally:
        db.close()


def test_the_span_says_the_providers_cache_diagnosis_and_its_agreement():
    row = {
        "id": "c2",
        "started_at": "2026-12-01T09:00:00.000000Z",
        "ended_at": "2026-12-01T09:00:01.000000Z",
        "api": "anthropic.messages",
        "model": "m",
        "outcome": "ok",
        "cache_verdict": "client_break",
        "cache": json.dumps(
            {
                "verdict": "client_break",
                "provider_agreement": "agree",
                "provider_diagnostics": {"status": "system_changed", "reason": "system_changed", "missed_tokens": 1700},
            }
        ),
    }
    attrs = call_span(row, Resource.create({})).attributes
    assert attrs["ctxscope.provider_cache_diagnosis"] == "system_changed, 1,700 tokens missed"
    assert attrs["ctxscope.provider_cache_diagnosis.agreement"] == "agree"
    unasked = call_span(dict(row, cache=json.dumps({"verdict": "hit"})), Resource.create({})).attributes
    assert "ctxscope.provider_cache_diagnosis" not in unasked
