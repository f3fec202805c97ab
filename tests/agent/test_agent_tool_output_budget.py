"""Large tool outputs go to artifacts behind a recoverable receipt; read pages them back, grep searches them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ctxscope.agent.context.compaction.events import context_events
from ctxscope.agent.context.tool_output_budget import ToolOutputBudget, head_and_tail, tool_output_budget_extension
from ctxscope.agent.core.budget import ContextSettings
from ctxscope.agent.core.events import Effects, ToolResultContext
from ctxscope.agent.core.messages import ToolCall, ToolResult
from ctxscope.agent.core.tools import ToolContext
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.retry import RetryPolicy
from ctxscope.agent.providers.scripted import answer
from ctxscope.agent.tools.core_tools import core_tools_extension
from ctxscope.agent.tools.fs import READ

from support.agent_context_fixtures import blob, make_rt

BIG = 70 * 1024


def artifact_of(result: ToolResult) -> Path:
    return Path(result.details["externalized"]["artifact"])


async def test_large_output_becomes_an_artifact_and_a_receipt(tmp_path):
    _rt, model, s = make_rt(tmp_path, [answer("", blob("big", kib=70)), "ok"])
    await s.run("make output")
    result = s.messages[2].tool_results[0]
    path = artifact_of(result)
    assert path.parent == s.view.artifacts_dir and path.read_text().startswith("big line 00000")
    assert len(path.read_bytes()) >= BIG and len(result.content) < 2000
    assert "Tool: blob" in result.content and str(path) in result.content
    assert "grep" in result.content and "read(path=" in result.content and "not evidence" in result.content
    event = model.requests[1].headers["x-ctxscope-event"]
    assert event.startswith("tool_output_externalized; tool=blob; bytes=") and "artifact=artifacts/t1s1-blob" in event
    [rec] = [e for e in context_events(s.view.dir) if e["event"] == "tool_output_externalized"]
    assert rec["artifact"] == str(path) and rec["bytes"] == len(path.read_bytes())


async def test_small_outputs_and_turns_without_read_are_left_alone(tmp_path):
    _, _, s = make_rt(tmp_path, [answer("", blob("small", kib=10)), "ok"])
    await s.run("go")
    assert s.messages[2].tool_results[0].content.startswith("small line 00000")
    # without a read tool the model could never page an artifact back: keep the output inline
    _rt, _model, s = make_rt(tmp_path / "noread", [answer("", blob("big", kib=70)), "ok"], core=False)
    await s.run("go")
    assert len(s.messages[2].tool_results[0].content) >= BIG and not list(s.view.artifacts_dir.iterdir())


def _ctx(tmp_path, rt, s, result, tools=frozenset({"read"})):
    call = ToolCall(result.tool_call_id, result.name, {})
    return ToolResultContext(s.view, 1, 1, call, result, tools, Effects())


async def test_media_stay_and_errors_are_flagged(tmp_path):
    rt, _model, s = make_rt(tmp_path)
    media = [{"type": "image", "origin": "computer_use", "data": "AAAA"}]
    result = ToolResult("c1", "computer", "y" * BIG, True, {"media": media})
    rewrite = ToolOutputBudget(ContextSettings())(_ctx(tmp_path, rt, s, result))
    assert rewrite.details["media"] == media and "reported this result as an error" in rewrite.content
    assert rewrite.is_error is None  # the error flag itself is untouched


async def test_unwritable_artifacts_keep_head_and_tail(tmp_path):
    rt, _model, s = make_rt(tmp_path)
    s.view.artifacts_dir.rmdir()
    s.view.artifacts_dir.write_text("not a folder")  # writing the artifact fails
    text = "".join(f"{i:06d}\n" for i in range(20000))
    ctx = _ctx(tmp_path, rt, s, ToolResult("c1", "bash", text))
    rewrite = ToolOutputBudget(ContextSettings())(ctx)
    head, cut, tail = rewrite.content.split("\n[...")[0], "bytes cut here", rewrite.content.rsplit("...]\n", 1)[1]
    assert cut in rewrite.content and len(head.encode()) + len(tail.encode()) == 2048
    assert text.startswith(head) and text.endswith(tail)
    assert rewrite.details["externalized"]["failed"] and "fallback=head_tail" in ctx.effects.pending[0]
    assert head_and_tail("short") == "short"


async def test_long_lines_are_wrapped_so_read_can_show_them(tmp_path):
    rt, _model, s = make_rt(tmp_path)
    line = "".join(f"{i:05d}," for i in range(12000))  # one 72 KB line: read shows only 2000 characters of a line
    rewrite = ToolOutputBudget(ContextSettings())(_ctx(tmp_path, rt, s, ToolResult("c1", "bash", line)))
    path = Path(rewrite.details["externalized"]["artifact"])
    assert "".join(path.read_text().split("\n")) == line and max(map(len, path.read_text().split("\n"))) == 1000
    assert path.with_suffix(".raw").read_text() == line and ".raw" in rewrite.content


async def test_mcp_details_over_their_budget_go_to_an_artifact(tmp_path):
    rt, _model, s = make_rt(tmp_path)
    details = {"structured": "z" * 40_000, "media": [{"type": "image"}]}
    rewrite = ToolOutputBudget(ContextSettings())(
        _ctx(tmp_path, rt, s, ToolResult("c1", "mcp__fs__dump", "ok", details=details))
    )
    assert rewrite.content is None and rewrite.details["media"] == [{"type": "image"}]
    moved = json.loads(Path(rewrite.details["details_artifact"]).read_text())
    assert moved == {"structured": "z" * 40_000}


async def test_receipt_is_recovered_by_paging_read_and_grep_through_the_proxy(tmp_path, proxy, sim):
    """A 70 KB bash output as the inspector sees it: receipt marked on call 2, artifact read back page by page."""
    ws = tmp_path / "ws"
    ws.mkdir()
    command = "seq -f 'row %04g padding-padding-padding-padding-padding-padding-padding' 1 1100; echo NEEDLE-4242"
    sim.state().set_script(
        [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}, {"text": "saved it"}]
    )
    settings = resolve("sim", proxy=proxy.url, model="gpt-sim")
    rt = AgentRuntime(
        make_client(settings, retry=RetryPolicy(max_retries=0)),
        home=tmp_path / "home",
        workspace=ws,
        extensions=[core_tools_extension()],
        host_builtins=[tool_output_budget_extension()],
    )
    s = rt.create_session()
    try:
        assert (await s.run("dump the table")).ok
        result = s.messages[2].tool_results[0]
        path = artifact_of(result)
        original = path.read_text()
        assert len(original.encode()) > 70_000 and str(path) in result.content  # a 70 KB output
        # the model follows the receipt: grep first, then bounded reads, each continuing where the last stopped
        offsets, offset = [], 1
        while offset:
            out = await READ.execute(
                {"path": str(path), "offset": offset, "limit": 2000}, ToolContext(s.view, "x", 0, 0)
            )
            offsets.append(offset)
            more = re.search(r"continue with offset=(\d+)", out.content)
            offset = int(more.group(1)) if more else 0
        assert len(offsets) >= 2  # one read could not return it all
        sim.state().set_script(
            [{"tool_calls": [{"name": "grep", "arguments": {"pattern": "NEEDLE", "path": str(path)}}]}]
            + [
                {"tool_calls": [{"name": "read", "arguments": {"path": str(path), "offset": o, "limit": 2000}}]}
                for o in offsets
            ]
            + [{"text": "the table has 1000 rows"}]
        )
        assert (await s.run("what does the table say?")).ok
    finally:
        await rt.aclose()
    results = [r for m in s.messages if m.role == "tool" for r in m.tool_results]
    grep_hit, pages = results[1], results[2:]
    assert "NEEDLE-4242" in grep_hit.content and str(path) in grep_hit.content
    recovered = [
        re.sub(r"^\s*\d+\t", "", line)
        for page in pages
        for line in page.content.splitlines()
        if not line.startswith("[lines ")
    ]
    assert recovered == original.splitlines()  # every byte came back, in order
    rows = proxy.wait_for_calls(2 + 1 + len(offsets) + 1)
    [marker] = [m for m in rows[1]["markers"] if m["kind"] == "tool_output_externalized"]
    assert marker["detail"]["tool"] == "bash" and marker["detail"]["bytes"] == len(original.encode())
    assert marker["detail"]["artifact"].startswith("artifacts/t1s1-bash") and marker["detail"]["declared"]
    assert not any(m["kind"] == "tool_output_externalized" for r in rows[2:] for m in r["markers"])
