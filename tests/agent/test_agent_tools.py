"""The built-in tools against a real temporary workspace."""

from __future__ import annotations

import asyncio

import pytest

from ctxscope.agent.core.messages import ToolCall
from ctxscope.agent.core.state import ModelInfo, SessionState, SessionView
from ctxscope.agent.core.tools import ToolContext, run_tool, validate_arguments
from ctxscope.agent.tools.fs import EDIT, GREP, LS, READ, READ_MAX_BYTES, WRITE
from ctxscope.agent.tools.shell import BASH
from ctxscope.agent.tools.todo import TODOWRITE


@pytest.fixture
def ctx(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    state = SessionState()
    view = SessionView("s", tmp_path, tmp_path / "artifacts", ws, state, ModelInfo("p", "a", "m", 1, 1))
    return ToolContext(view, "c1", 3, 2)


async def call(tool, ctx, **args):
    return await run_tool(tool, ToolCall("c1", tool.name, args), ctx)


async def test_read_pages_with_offset_and_limit(ctx):
    (ctx.workspace / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    r = await call(READ, ctx, path="f.txt", offset=3, limit=2)
    assert r.content == "     3\tline 3\n     4\tline 4\n[lines 3-4 of 10; continue with offset=5]"
    r = await call(READ, ctx, path="f.txt", offset=9)
    assert r.content == "     9\tline 9\n    10\tline 10" and r.details["last_line"] == 10
    r = await call(READ, ctx, path="f.txt", offset=11)
    assert r.is_error and "past the end" in r.content


async def test_read_is_bounded_in_bytes(ctx):
    (ctx.workspace / "big.txt").write_text(("x" * 100 + "\n") * 5000)
    r = await call(READ, ctx, path="big.txt")
    assert len(r.content) < READ_MAX_BYTES + 200 and "continue with offset=" in r.content


async def test_read_errors(ctx):
    (ctx.workspace / "bin").write_bytes(b"\x00\x01\x02")
    (ctx.workspace / "d").mkdir()
    assert "binary" in (await call(READ, ctx, path="bin")).content
    assert "directory" in (await call(READ, ctx, path="d")).content
    assert "not found" in (await call(READ, ctx, path="nope")).content
    assert (await call(READ, ctx, path="bin", offset=0)).is_error


async def test_read_absolute_paths_outside_the_workspace(ctx, tmp_path):
    (tmp_path / "artifact.txt").write_text("kept elsewhere\n")
    r = await call(READ, ctx, path=str(tmp_path / "artifact.txt"))
    assert "kept elsewhere" in r.content


async def test_write_creates_folders_and_edit_needs_a_unique_match(ctx):
    r = await call(WRITE, ctx, path="a/b/c.py", content="x = 1\ny = 1\n")
    assert not r.is_error and "2 lines" in r.content
    f = ctx.workspace / "a/b/c.py"
    r = await call(EDIT, ctx, path="a/b/c.py", old_string="= 1", new_string="= 2")
    assert r.is_error and "occurs 2 times" in r.content and f.read_text() == "x = 1\ny = 1\n"
    r = await call(EDIT, ctx, path="a/b/c.py", old_string="y = 1", new_string="y = 2")
    assert not r.is_error and f.read_text() == "x = 1\ny = 2\n"
    r = await call(EDIT, ctx, path="a/b/c.py", old_string="= 1", new_string="= 3", replace_all=True)
    assert "1 occurrence" in r.content
    r = await call(EDIT, ctx, path="a/b/c.py", old_string="zzz", new_string="q")
    assert r.is_error and "not found" in r.content
    assert (await call(EDIT, ctx, path="a/b/c.py", old_string="", new_string="q")).is_error


async def test_edit_keeps_crlf_line_endings(ctx):
    f = ctx.workspace / "w.txt"
    f.write_bytes(b"one\r\ntwo\r\n")
    await call(EDIT, ctx, path="w.txt", old_string="two", new_string="three")
    assert f.read_bytes() == b"one\r\nthree\r\n"


async def test_ls(ctx):
    (ctx.workspace / "sub").mkdir()
    (ctx.workspace / "b.txt").write_text("")
    assert (await call(LS, ctx)).content == "b.txt\nsub/"
    assert (await call(LS, ctx, path="sub")).content == "(empty directory)"
    assert (await call(LS, ctx, path="b.txt")).is_error


async def test_grep_is_bounded_and_skips_noise(ctx):
    for i in range(30):
        (ctx.workspace / f"f{i:02}.py").write_text("import os\nTODO fix\n")
    (ctx.workspace / ".git").mkdir()
    (ctx.workspace / ".git" / "x.py").write_text("TODO hidden\n")
    (ctx.workspace / "blob.bin").write_bytes(b"TODO\x00")
    r = await call(GREP, ctx, pattern="TODO", max_results=5)
    lines = r.content.splitlines()
    assert lines[0] == "f00.py:2: TODO fix" and len(lines) == 6 and "stopped after 5" in lines[-1]
    r = await call(GREP, ctx, pattern="todo", ignore_case=True, glob="f0[0-1].py")
    assert r.content.splitlines() == ["f00.py:2: TODO fix", "f01.py:2: TODO fix"]
    r = await call(GREP, ctx, pattern="nothing-here")
    assert r.content == "No matches found." and not r.is_error
    assert "invalid regular expression" in (await call(GREP, ctx, pattern="(")).content


async def test_bash_exit_code_output_and_timeout(ctx):
    r = await call(BASH, ctx, command="echo out; echo err >&2; pwd")
    assert r.content.splitlines() == ["out", "err", str(ctx.workspace), "[exit code 0]"] and not r.is_error
    r = await call(BASH, ctx, command="exit 7")
    assert r.is_error and r.details == {"exit_code": 7, "timed_out": False} and "(no output)" in r.content
    r = await call(BASH, ctx, command="echo before; sleep 5", timeout=0.3)
    assert r.is_error and r.details["timed_out"] and "before" in r.content and "timed out" in r.content
    assert (await call(BASH, ctx, command="true", timeout=10_000)).is_error


async def test_bash_output_is_bounded(ctx):
    r = await call(BASH, ctx, command="head -c 3000000 /dev/zero | tr '\\0' 'x'")
    assert "bytes of output omitted" in r.content and len(r.content) < 1_100_000


async def test_todowrite_keeps_the_list_as_session_state(ctx):
    r = await call(
        TODOWRITE,
        ctx,
        todos=[
            {"content": "write tests", "status": "in_progress"},
            {"content": "ship", "status": "pending"},
            {"content": "plan", "status": "completed"},
        ],
    )
    assert "2 open of 3" in r.content and "[>] write tests" in r.content and "[x] plan" in r.content
    assert [t["content"] for t in ctx.session.state.get("todos")] == ["write tests", "ship", "plan"]
    assert ctx.session.state.get("todos_written") == {"turn": 3, "step": 2}
    r = await call(TODOWRITE, ctx, todos=[{"content": "x", "status": "someday"}])
    assert r.is_error and ctx.session.state.get("todos")[0]["content"] == "write tests"


def test_argument_validation():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "flag": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["a", "b"]},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    assert validate_arguments(schema, {"n": 1}) is None
    assert "missing" in validate_arguments(schema, {})
    assert "integer" in validate_arguments(schema, {"n": "1"})
    assert "integer" in validate_arguments(schema, {"n": True})
    assert "one of" in validate_arguments(schema, {"n": 1, "mode": "c"})
    assert "unknown argument" in validate_arguments(schema, {"n": 1, "x": 2})


async def test_a_cancelled_tool_propagates_cancellation(ctx):
    task = asyncio.create_task(call(BASH, ctx, command="sleep 30"))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
