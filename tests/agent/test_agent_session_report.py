"""Session report: llm-call.json with SHA-256 skip and 4 MiB cap, frozen copies, rewind, failures
that never reach the model call, and the `agent report` bundle with its collection manifest."""

from __future__ import annotations

import json
import tarfile

import pytest
from click.testing import CliRunner

from ctxscope.agent.core.events import Event, ReplaceHistory
from ctxscope.agent.core.messages import user_message
from ctxscope.agent.core.model import ModelRequest, ToolSpec
from ctxscope.agent.core.spi import Extension
from ctxscope.agent.host import session_report_bundle
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.host.session_report import (
    MAX_ENVELOPE_BYTES,
    REPORT_FILE,
    LlmCallReportStore,
    call_envelope,
    capped,
    discard_frozen_report,
    freeze_for_compaction,
    freeze_report,
    session_report_extension,
)
from ctxscope.agent.host.session_report_bundle import MANIFEST, bundle_session
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.scripted import ScriptedModel, answer, tool_call
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.agent_commands import agent_group

TOOLS = (ToolSpec("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)


def prepared(api, system="You are a test agent.", messages=("hi",), tools=TOOLS, max_out=1234, **kw):
    settings = resolve(
        "sim",
        api=api,
        model="claude-sonnet-4-5" if api == "anthropic" else "gpt-4.1",
        direct=True,
        base_url="http://127.0.0.1:9",
        **kw,
    )
    client = make_client(settings)
    return client.prepare(
        ModelRequest(system, tools, tuple(user_message(m) for m in messages), max_out, {"x-ctxscope-session": "s"})
    )


@pytest.mark.parametrize("api", ["anthropic", "openai-chat", "openai-responses"])
def test_the_envelope_is_everything_but_the_conversation(api):
    env = call_envelope(prepared(api, messages=("a secret question",)))
    assert env["system"] == ["You are a test agent."] and env["tools"] and env["output_limit"] == 1234
    assert env["api"] == api and env["provider"] == "sim" and env["model"]
    assert "a secret question" not in json.dumps(env)
    if api == "anthropic":
        assert env["cache_policy"]["breakpoints"] == {"system": 1, "tools": 1, "messages": 1}


def test_anthropic_thinking_level_is_recorded():
    env = call_envelope(prepared("anthropic", thinking_budget=2048))
    assert env["thinking"] == {"thinking": {"type": "enabled", "budget_tokens": 2048}}


def test_unchanged_envelopes_are_not_rewritten(tmp_path):
    store = LlmCallReportStore()
    assert store.record("s", tmp_path, prepared("anthropic", messages=("one",)), 1, 1)
    first = (tmp_path / REPORT_FILE).read_bytes()
    assert not store.record("s", tmp_path, prepared("anthropic", messages=("one", "two", "three")), 1, 2)
    assert (tmp_path / REPORT_FILE).read_bytes() == first and store.writes == 1
    assert store.record("s", tmp_path, prepared("anthropic", system="changed"), 1, 3)
    doc = json.loads((tmp_path / REPORT_FILE).read_text())
    assert doc["envelope"]["system"] == ["changed"] and doc["step"] == 3 and len(doc["sha256"]) == 64
    # a restarted runtime compares against the file's recorded hash
    assert not LlmCallReportStore().record("s", tmp_path, prepared("anthropic", system="changed"), 2, 1)


def test_an_envelope_over_4_mib_is_capped_by_omitting_its_largest_field(tmp_path):
    huge = "x" * (MAX_ENVELOPE_BYTES + 10)
    store = LlmCallReportStore()
    assert store.record("s", tmp_path, prepared("anthropic", system=huge), 1, 1)
    data = (tmp_path / REPORT_FILE).read_bytes()
    assert len(data) <= MAX_ENVELOPE_BYTES
    system = json.loads(data)["envelope"]["system"]
    assert system["omitted"] is True and system["bytes"] > MAX_ENVELOPE_BYTES and len(system["sha256"]) == 64
    assert json.loads(data)["envelope"]["tools"]  # the small fields stay


def test_capping_that_cannot_succeed_is_reported_not_raised(tmp_path):
    env = {f"k{i}": "y" * 200 for i in range(50)}  # many small fields: none big enough to omit
    assert capped(env, 1000) is None
    store = LlmCallReportStore(max_bytes=1100)
    assert not store.record("s", tmp_path, prepared("anthropic"), 1, 1)
    assert store.failures and "even with fields omitted" in store.failures[0].error


def test_a_failed_write_is_reported_and_never_fatal(tmp_path):
    (tmp_path / REPORT_FILE).mkdir()  # the file's place is taken: the write cannot succeed
    store = LlmCallReportStore()
    assert store.record("s", tmp_path, prepared("openai-chat"), 1, 1) is False
    assert store.failures[-1].session_id == "s" and REPORT_FILE in store.failures[-1].path


def runtime(tmp_path, script, *extra, store=None):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    model = ScriptedModel(script)
    rt = AgentRuntime(
        model,
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension(), *extra],
        host_builtins=[session_report_extension(store)],
    )
    return rt, model, rt.create_session()


async def test_a_turn_writes_the_report_once_and_survives_a_broken_session_dir(tmp_path):
    store = LlmCallReportStore()
    rt, _model, s = runtime(tmp_path, [answer("", tool_call("ls", {})), "done"], store=store)
    assert (await s.run("go")).ok
    doc = json.loads((rt.store.dir(s.id) / REPORT_FILE).read_text())
    assert doc["session"] == s.id and doc["envelope"]["model"] == "scripted-model" and store.writes == 1
    (rt.store.dir(s.id) / REPORT_FILE).unlink()
    (rt.store.dir(s.id) / REPORT_FILE).mkdir()
    rt._system_prompt = "a changed system prompt"  # a new envelope: the write is attempted and fails
    assert (await s.run("again")).ok  # the failure never reaches the model call
    assert store.failures


async def test_a_rewind_deletes_the_stale_live_report(tmp_path):
    store = LlmCallReportStore()
    deleted = []

    def rewind(ctx):
        if ctx.step == 2:
            deleted.append((ctx.session.dir / REPORT_FILE).exists())
            return ReplaceHistory(ctx.history[:1], "rewind to the first message")

    ext = Extension("rewinder", lambda api: api.on(Event.BEFORE_LLM_CALL, rewind))
    _rt, _model, s = runtime(tmp_path, [answer("", tool_call("ls", {})), "done"], ext, store=store)
    await s.run("go")
    assert deleted == [True] and store.writes == 2  # deleted by the rewind, written fresh by the next call


async def test_each_compaction_in_a_turn_freezes_a_copy_beside_its_epoch(tmp_path):
    def compact(ctx):
        if ctx.step == 2:
            return ReplaceHistory(ctx.history[:1], "compaction:checkpoint")

    ext = Extension("compactor", lambda api: api.on(Event.BEFORE_LLM_CALL, compact))
    rt, _model, s = runtime(tmp_path, [answer("", tool_call("ls", {})), "done"], ext)
    await s.run("go")
    d = rt.store.dir(s.id)
    frozen = d / f"compaction-1.{REPORT_FILE}"
    assert frozen.exists() and json.loads(frozen.read_text())["envelope"]["model"] == "scripted-model"
    assert freeze_for_compaction(d, 2) == d / f"compaction-2.{REPORT_FILE}"  # what a manual /compact calls


def test_freeze_beside_a_snapshot_file_or_inside_a_snapshot_folder_and_discard(tmp_path):
    session = tmp_path / "s"
    session.mkdir()
    assert freeze_report(session, session / "snap-1.json") is None  # nothing to freeze yet
    (session / REPORT_FILE).write_text('{"sha256": "a"}')
    snap_file = session / "compaction-1.json"
    snap_file.write_text("{}")
    frozen = freeze_report(session, snap_file)
    assert frozen == session / f"compaction-1.json.{REPORT_FILE}" and frozen.read_text() == '{"sha256": "a"}'
    folder = session / "compaction-2"
    folder.mkdir()
    assert freeze_report(session, folder) == folder / REPORT_FILE
    (session / REPORT_FILE).write_text('{"sha256": "b"}')  # later changes do not touch frozen copies
    assert frozen.read_text() == '{"sha256": "a"}'
    assert discard_frozen_report(snap_file) and not frozen.exists() and not discard_frozen_report(snap_file)
    assert freeze_report(session, tmp_path / "missing-dir" / "snap.json") is None  # failure: reported, not raised


# --- bundling ---------------------------------------------------------------------------------------------


async def make_family(tmp_path):
    rt, _model, s = runtime(tmp_path, ["parent answer", "child answer", "grandchild answer"])
    await s.run("parent task")
    child = rt.create_session()
    await child.run("child task")
    grand = rt.create_session()
    await grand.run("grandchild task")
    other = rt.create_session()
    for sub, parent in ((child, s), (grand, child)):
        meta_path = rt.store.dir(sub.id) / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["parent_session"] = parent.id
        meta_path.write_text(json.dumps(meta))
    (rt.store.dir(s.id) / "artifacts" / "big-output.txt").write_text("artifact body")
    return rt, s, child, grand, other


async def test_report_bundles_the_session_and_its_sub_sessions_with_a_manifest(tmp_path, monkeypatch):
    rt, s, child, grand, other = await make_family(tmp_path)
    secret = rt.store.dir(s.id) / "unreadable.log"
    secret.write_text("x")
    (rt.store.dir(s.id) / "link").symlink_to("/etc/hostname")
    real_open = open

    def guarded_open(path, *a, **kw):
        if str(path) == str(secret):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(session_report_bundle, "open", guarded_open, raising=False)
    result = bundle_session(rt.home, s.id, tmp_path / "out.tar.gz")
    assert result.sessions == (s.id, child.id, grand.id)
    with tarfile.open(result.archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(MANIFEST).read())
        assert tar.extractfile(f"sessions/{s.id}/artifacts/big-output.txt").read() == b"artifact body"
    assert f"sessions/{s.id}/history.jsonl" in names and f"sessions/{grand.id}/history.jsonl" in names
    assert f"sessions/{s.id}/{REPORT_FILE}" in names
    assert not any(other.id in n for n in names)
    assert manifest["unreadable"] == [
        {"path": f"sessions/{s.id}/unreadable.log", "error": "PermissionError: Permission denied"}
    ]
    assert {"path": f"sessions/{s.id}/link", "reason": "link"} in manifest["skipped"]
    assert [x["parent"] for x in manifest["sessions"]] == [None, s.id, child.id]
    assert len(manifest["files"]) == result.files == len(names) - 1


async def test_report_command(tmp_path, monkeypatch):
    rt, s, child, grand, _other = await make_family(tmp_path)
    monkeypatch.setenv("CTXSCOPE_HOME", str(rt.home))
    out = tmp_path / "r.tar.gz"
    res = CliRunner().invoke(agent_group, ["report", s.id, "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["archive"] == str(out) and data["sessions"] == [s.id, child.id, grand.id] and out.exists()
    missing = CliRunner().invoke(agent_group, ["report", "no-such-session"])
    assert missing.exit_code == 2 and "no agent session matches" in missing.output  # the one id rule
