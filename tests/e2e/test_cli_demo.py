"""`ctxscope demo --once` on a temporary database and home: every declared effect of our agent shows up
in `ctxscope session S --json` on the call where it took effect, placed at the text it added or
replaced, and the session keeps its cache discipline (`ctxscope stats --session S`)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from ctxscope.demo_script import EXPECTED
from ctxscope.inspector.analyses.effects import block_text
from ctxscope.inspector.store.queries import get_request_json, open_db
from ctxscope.main import cli

from support.demo_fixtures import MARKER_TEXT


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    db = tmp / "captures.db"
    runner = CliRunner()
    out = runner.invoke(
        cli, ["demo", "--once", "--port", "0", "--db", str(db)], env={"CTXSCOPE_HOME": str(tmp / "home")}
    )
    assert out.exit_code == 0, out.output + repr(out.exception)
    session = re.search(r"^session (\S+): \d+ calls", out.output, re.M).group(1)
    return runner, db, session, out.output


def _session(runner, db, session):
    out = runner.invoke(cli, ["session", session, "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_demo_prints_progress_each_effect_and_the_ui_address(demo):
    _, _, session, output = demo
    assert output.count("model call(s); effects declared:") == 7  # seven turns; the sixth step is /compact
    # the last turn hands its task to a sub-agent: a side thread of the session in the inspector
    assert re.search(r"sub-agent session \S+: 3 model call\(s\), completed", output)
    assert re.search(r"^  side T2 \(thread \w+\): 3 calls, from call #\d+$", output, re.M)
    assert "/compact: compacted: checkpoint at rung h0 (exact" in output
    for kind in EXPECTED:
        assert re.search(rf"call #\d+\s+{kind} ", output), kind
    assert "(missing)" not in output
    assert f"/#/session/{session}" in output


def test_every_declared_effect_is_on_its_call_at_the_text_it_added(demo):
    runner, db, session, _ = demo
    calls = _session(runner, db, session)["calls"]
    declared = {}
    for call in calls:
        for m in call["markers"]:
            if m["detail"].get("declared"):
                declared.setdefault(m["kind"], (call, m))
    assert set(EXPECTED) <= set(declared), sorted(declared)
    con = open_db(db)
    try:
        for kind, needle in MARKER_TEXT.items():  # the kinds whose marker points at text
            call, m = declared[kind]
            assert m["pointer"], (kind, m)
            text = block_text(get_request_json(con, call["id"]), m["pointer"])
            span = m["detail"].get("span")
            if span:
                text = text[span[0] : span[1]]
            assert needle in text, (kind, m["pointer"], text[:200])
    finally:
        con.close()
    # the details a reader needs, on the call where the effect happened
    ext = declared["tool_output_externalized"][1]["detail"]
    assert ext["tool"] == "bash" and ext["bytes"] > 64 * 1024 and ext["artifact"].startswith("artifacts/")
    arch = declared["tool_results_archived"][1]["detail"]
    assert arch["archived"] >= 2 and arch["saved_bytes"] >= 12 * 1024 and len(arch["pointers"]) == arch["archived"]
    cp_call, cp = declared["checkpoint"]
    assert cp["detail"]["validation"] == "exact" and cp["detail"]["tokens_before"] > cp["detail"]["tokens_after"]
    assert cp_call["has_compaction_before"]
    assert declared["reminder"][1]["detail"]["scope"] == "round"
    assert "agent_context" in declared["reminder"][1]["detail"]["providers"]
    assert declared["todo_reminder"][1]["detail"]["scope"] == "in_turn"
    assert declared["guard_reminder"][1]["detail"]["steer"] is True  # the generic steer folded into it
    assert declared["empty_answer_retry"][1]["detail"]["retry"] is True


def test_declared_and_inferred_markers_of_one_meaning_are_one_marker(demo):
    runner, db, session, _ = demo
    calls = _session(runner, db, session)["calls"]
    for call in calls:
        kinds = [m["kind"] for m in call["markers"]]
        assert kinds.count("compaction") <= 1, (call["seq"], kinds)
        reminders = [m for m in call["markers"] if m["kind"] in ("reminder", "todo_reminder", "guard_reminder")]
        assert len({m["pointer"] for m in reminders}) == len(reminders), (call["seq"], reminders)
        assert "steer" not in kinds and "retry" not in kinds, (call["seq"], kinds)
    compactions = [m for c in calls for m in c["markers"] if m["kind"] == "compaction"]
    assert all(m["detail"]["declared"] for m in compactions)
    assert any(m["detail"].get("inferred") for m in compactions)  # the summary-shaped history was seen too
    # the checkpoint request itself is not "after a compaction"
    request = next(c for c in calls if any(m["kind"] == "checkpoint_request" for m in c["markers"]))
    assert not request["has_compaction_before"]


def test_stats_show_the_cache_discipline_of_the_demo_session(demo):
    runner, db, session, output = demo
    out = runner.invoke(cli, ["stats", "--session", session, "--db", str(db), "--json"])
    d = json.loads(out.output)["cache_discipline"]
    assert d["comparable"] == d["prefix_kept"] + d["breaks"] and d["breaks"] >= 3
    assert d["violations"] == 0 and d["compaction_breaks"] == d["breaks"]
    assert 0.7 < d["prefix_kept_share"] < 1 and d["lost_tokens"] > 0
    text = runner.invoke(cli, ["stats", "--session", session, "--db", str(db)]).output
    assert re.search(r"prefix kept \(APPEND_ONLY or IDENTICAL\): \d+/\d+ calls = \d+\.\d%", text)
    assert "breaks inside the cached prefix that are not compactions: 0" in text
    assert "breaks inside the previous call's cached prefix that are not compactions: 0" in output


def test_session_text_lists_each_effect_in_words(demo):
    runner, db, session, _ = demo
    out = runner.invoke(cli, ["session", session, "--db", str(db)]).output
    assert "effects (declared by the client, or inferred from the prompt):" in out
    assert re.search(r"tool_output_externalized\s+declared\s+at \S+\s+bash output, [\d,]+ bytes → artifacts/", out)
    assert re.search(
        r"checkpoint\s+declared\s+at \S+\s+rung \w+, exact \(reuse mode, trigger threshold\); [\d,]+ → [\d,]+ tokens",
        out,
    )
    assert re.search(r"reminder\s+declared\s+at \S+\s+round reminder from agent_context", out)


def test_the_provider_diagnoses_the_demos_breaks_and_agrees(demo):
    runner, db, session, output = demo
    line = next(x for x in output.splitlines() if x.startswith("provider's cache diagnosis against ours"))
    agree = int(re.search(r"agree (\d+)", line).group(1))
    assert agree > 10 and "disagree 0," in line and "(100.0% agreement)" in line, line
    assert re.search(
        r"the break at call #\d+: the provider says messages_changed, [\d,]+ tokens missed; agrees", output
    )
    out = runner.invoke(cli, ["stats", "--session", session, "--db", str(db), "--json"])
    counts = json.loads(out.output)["provider_agreement"]
    assert (counts["agree"], counts["disagree"], counts["rate"]) == (agree, 0, 1.0)


def _transcript(db, session, *args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run(
        [str(Path(sys.executable).parent / "ctxscope"), "transcript", session[:12], "--db", str(db), *args],
        env={k: v for k, v in os.environ.items() if k != "CTXSCOPE_DAEMON"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
    return out.stdout


def test_the_demo_transcript_lists_every_user_assistant_and_tool_turn_in_order(demo):
    """Every user message, scripted answer and tool call of the demo (the sub-agent's task too), in
    the order the script has them, across its two compactions, each tool call followed by its result."""
    from ctxscope.demo_script import turns

    _, db, session, _ = demo
    listed = [json.loads(line) for line in _transcript(db, session, "--format", "jsonl").splitlines()]
    expected: list[tuple[str, str]] = []
    for turn in turns():
        if turn.text:
            expected.append(("user", turn.text))
        for step in turn.steps:
            if step.get("text"):
                expected.append(("assistant", step["text"]))
            expected += [("tool_call", call["name"]) for call in step.get("tool_calls", ())]
    expected.append(("tool_call", "task"))  # the last turn's agent hands its task to a sub-agent
    at = 0
    for kind, text in expected:
        while at < len(listed) and not _is(listed[at], kind, text):
            at += 1
        assert at < len(listed), f"{kind} {text!r} missing or out of order"
        at += 1
    by_id = {}
    for i, t in enumerate(listed):
        if t["kind"] in ("tool_call", "tool_result"):
            by_id.setdefault(t["call_id"], []).append((i, t["kind"]))
    assert by_id and all(kinds[0][1] == "tool_call" for kinds in by_id.values())
    assert all(len(kinds) == 2 and kinds[1][1] == "tool_result" for kinds in by_id.values()), by_id
    kinds = {t["kind"] for t in listed}
    assert {"system", "reminder", "compaction", "text", "tool_call", "tool_result"} <= kinds
    assert sum(t["kind"] == "compaction" for t in listed) == 2
    assert all(t["pointer"].startswith("/") for t in listed)
    markdown = _transcript(db, session)
    assert markdown.startswith(f"# {session}\n")  # titled by the demo's label
    assert "What went wrong in server.log?" in markdown
    assert markdown.count("## Tool call: read") == 17 and "## Compaction summary" in markdown
    only_last = [json.loads(line) for line in _transcript(db, session, "--format", "jsonl", "--as-seen").splitlines()]
    assert len(only_last) < len(listed)
    assert not any(t.get("text") == "What went wrong in server.log?" for t in only_last)  # compacted away


def _is(turn: dict, kind: str, text: str) -> bool:
    if kind == "tool_call":
        return turn["kind"] == "tool_call" and turn.get("tool_name") == text
    return turn["kind"] == "text" and turn["role"] == kind and turn["text"].strip() == text


def test_the_demo_agent_names_itself_in_its_user_agent(demo):
    """ctxscope's own agent sends `ctxscope-agent/<version>`, so its calls show as the ctxscope agent."""
    from ctxscope import __version__
    from ctxscope.inspector.store.queries import get_call, list_calls

    _, db, session, _ = demo
    handle = open_db(db)
    try:
        calls = list_calls(handle, session=session, limit=None)
        agents = {
            {k.lower(): v for k, v in get_call(handle, c["id"])["request_headers"]}.get("user-agent") for c in calls
        }
    finally:
        handle.conn.close()
    assert agents == {f"ctxscope-agent/{__version__}"}
