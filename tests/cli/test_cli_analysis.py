"""The analysis commands on a capture the real daemon wrote from real SDK traffic."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from ctxscope.main import cli

from support import sdk_clients
from support.inspector_bodies import EPHEMERAL, claude_code_turns, long_text, make_anthropic_body, text, user

KEY = "sk-test-cli-analysis-0123456789"
MODEL = "claude-sonnet-4-6"


@pytest.fixture
def captured(proxy, sim):
    """A session of 4 calls: a loop, a system edit (DIVERGED at /system/1/text), then a side call."""
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    system = [text("You are a coding agent."), text(long_text(1500, "sys"), cache_control=dict(EPHEMERAL))]
    bodies = claude_code_turns(3, system=system, model=MODEL)
    bodies[2]["system"][1]["text"] += " Be terse."
    side = make_anthropic_body(system=[text("Title this.")], messages=[user("Fix the bug.")], model="claude-haiku-4-5")
    for body in bodies + [side]:
        client.messages.create(**copy.deepcopy(body))
    rows = proxy.wait_for_calls(4)
    return ["--db", str(proxy.db_path)], rows


def invoke(*args, columns: int = 100):
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns)})  # the same width everywhere
    assert result.exit_code == 0, result.output
    return result.output


def test_calls_filters_by_analysis(captured):
    db, rows = captured
    diverged = json.loads(invoke("calls", *db, "--relation", "DIVERGED", "--json"))
    assert [c["id"] for c in diverged] == [rows[2]["id"]]
    assert diverged[0]["pointer"] == "/system/1/text" and diverged[0]["cache_verdict"] == "client_break"
    for key in (
        "relation",
        "pointer",
        "epoch_reason",
        "predecessor",
        "thread",
        "tokens_estimated",
        "tokens_by_category",
        "cache_verdict",
        "has_compaction_before",
        "markers",
    ):
        assert key in diverged[0], key
    assert [c["id"] for c in json.loads(invoke("calls", *db, "--pointer-prefix", "/system", "--json"))] == [
        rows[2]["id"]
    ]
    assert json.loads(invoke("calls", *db, "--pointer-prefix", "/sys", "--json")) == []  # whole tokens only
    hits = json.loads(invoke("calls", *db, "--verdict", "hit", "--json"))
    assert [c["id"] for c in hits] == [rows[1]["id"]]
    starts = json.loads(invoke("calls", *db, "--relation", "epoch_start", "--json"))
    assert len(starts) == 2  # the first main call and the side call
    main_thread = rows[0]["thread"]
    assert len(json.loads(invoke("calls", *db, "--thread", main_thread, "--json"))) == 3
    table = invoke("calls", *db, "--columns", "id,relation,pointer,verdict")
    assert "diverged" in table and "/system/1/text" in table and "break" in table  # the UI's words


def test_session_timeline(captured):
    db, rows = captured
    session = rows[0]["session"]
    timeline = json.loads(invoke("session", session[:8], *db, "--json"))
    assert timeline["session"] == session and timeline["session_source"] == "key"
    assert [c["seq"] for c in timeline["calls"]] == [1, 2, 3, 4]
    assert [c["relation"] for c in timeline["calls"]] == ["EPOCH_START", "APPEND_ONLY", "DIVERGED", "EPOCH_START"]
    [main] = timeline["threads"]
    assert main["calls"] == 3 and [c["calls"] for c in main["children"]] == [1]
    text_out = invoke("session", session, *db, "--wide")
    for needle in (
        "SEQ",
        "RELATION",
        "VERDICT",
        "MARKERS",
        "/system/1/text",
        "epoch:session_start",
        "tools_executed",
        "main T1",
        "side T2",
        "GROUPED_BY",
        "grouped by: lineage 2",
        "calls that read it: 1/2",
    ):
        assert needle in text_out, needle
    missing = CliRunner().invoke(cli, ["session", "nope", *db])
    assert missing.exit_code == 2 and "no session matches" in missing.output


def test_stats(captured):
    db, rows = captured
    s = json.loads(invoke("stats", *db, "--json"))
    assert s["calls"] == s["analysed"] == 4 and s["threads"] == 2
    assert s["hit_rate"] == {"hits": 1, "eligible": 2, "rate": 0.5}
    assert s["by_verdict"] == {"expected_write": 1, "hit": 1, "client_break": 1, "not_requested": 1}
    [brk] = s["breaks"]
    assert (brk["cause"], brk["segment_kind"], brk["area"], brk["calls"]) == ("client_break", "system", "/system", 1)
    assert s["lost_tokens"] == brk["lost_tokens"] > 2000 and s["lost_usd"] > 0
    assert s["token_hit_rate"]["cache_read"] == rows[1]["usage"]["cache_read"]
    one = json.loads(invoke("stats", *db, "--session", rows[0]["session"][:6], "--json"))
    assert one["session"] == rows[0]["session"] and one["calls"] == 4
    missing = CliRunner().invoke(cli, ["stats", *db, "--session", "nope"])
    assert missing.exit_code != 0 and "no session matches" in missing.output
    out = invoke("stats", *db)
    assert "calls that read it: 1/2 = 50.0%" in out and "breaks by cause" in out and "/system" in out
    hit = next(line for line in out.splitlines() if line.startswith("cache hit rate: "))
    assert hit.split()[3] == f"{s['token_hit_rate']['rate']:.1%}", hit  # the token share leads


def test_diff(captured):
    db, rows = captured
    d = json.loads(invoke("diff", rows[2]["id"], *db, "--json"))
    assert d["b"]["id"] == rows[1]["id"] and d["pointer"] == "/system/1/text"
    assert d["first_divergence"]["text"]["a_excerpt"].endswith("Be terse.")
    for columns in (100, 80, 60):  # the differing text stays in view in a narrow terminal
        out = invoke("diff", rows[2]["id"], *db, columns=columns)
        assert "first difference at /system/1/text" in out and "Be terse." in out, out
        assert max(len(line) for line in out.splitlines()) <= columns
    moved = invoke("diff", rows[1]["id"], rows[0]["id"], *db)
    assert "relation: APPEND_ONLY" in moved and "cache marker moved at /messages/0/content" in moved
    bad = CliRunner().invoke(cli, ["diff", "nope", *db])
    assert bad.exit_code == 2 and "no call matches 'nope'" in bad.output


def test_reindex_recomputes_the_same_analysis(captured):
    db, _rows = captured
    before = json.loads(invoke("calls", *db, "--json", "--limit", "100"))
    from ctxscope.inspector.store.queries import open_db

    conn = open_db(db[1])
    conn.execute("UPDATE calls SET relation = NULL, cache_verdict = NULL, thread = NULL")
    conn.conn.commit()
    assert json.loads(invoke("reindex", *db, "--json")) == {"reindexed": 4, "search_indexed": 4, "session": None}
    after = json.loads(invoke("calls", *db, "--json", "--limit", "100"))
    assert after == before


@pytest.mark.slow
def test_reindex_one_session_and_a_bad_price_file(captured, tmp_path, monkeypatch):
    db, rows = captured
    assert json.loads(invoke("reindex", *db, "--session", rows[0]["session"], "--json"))["reindexed"] == 4
    nope = CliRunner().invoke(cli, ["reindex", *db, "--session", "nope"])
    assert nope.exit_code == 2 and "no session matches 'nope'" in nope.output
    bad = tmp_path / "prices.json"
    bad.write_text('{"claude-sonnet-4-6": {"output": 1}}')
    monkeypatch.setenv("CTXSCOPE_PRICES", str(bad))
    result = CliRunner().invoke(cli, ["reindex", *db])
    assert result.exit_code != 0 and "bad price file" in result.output


@pytest.mark.slow
def test_price_overrides_change_the_lost_cost(captured, tmp_path, monkeypatch):
    db, _rows = captured
    cheap = tmp_path / "prices.json"
    cheap.write_text(json.dumps({MODEL: {"input": 0.0, "cache_read": 0.0, "cache_write": 0.0}}))
    monkeypatch.setenv("CTXSCOPE_PRICES", str(cheap))
    invoke("reindex", *db)
    assert json.loads(invoke("stats", *db, "--json"))["lost_usd"] == 0.0


def test_diff_excerpts_keep_the_difference_in_view_and_aligned():
    from ctxscope.diff_view import around

    a, b = "x" * 80 + "AAAA" + "y" * 80, "x" * 80 + "BBBB" + "y" * 80
    cut_a, cut_b = around((a, b), 80, room=40)
    assert len(cut_a) == len(cut_b) == 40 and cut_a.index("AAAA") == cut_b.index("BBBB") == 13
    assert cut_a[0] == cut_b[0] == cut_a[-1] == cut_b[-1] == "…"
    assert around(("short", "shore"), 4, room=40) == ("short", "shore")  # what fits is left whole


def test_diff_prints_values_in_words_never_a_python_repr(proxy, sim):
    """Changed params holding lists, a tool definition clipped to --max-chars, a moved cache marker:
    all in words, with the side each value is from (no `{'` or `['` anywhere)."""
    client = sdk_clients.Anthropic(api_key=KEY, base_url=proxy.url + "/anthropic", max_retries=0)
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)}}
    tool = {"name": "read", "description": "Read a file.", "input_schema": schema}
    base = make_anthropic_body(system=[text("You are a coding agent.")], messages=[user("Fix the bug.")], model=MODEL)
    first = dict(
        copy.deepcopy(base),
        tools=[dict(tool, input_schema={"type": "object"})],
        stop_sequences=[],
        metadata={"user_id": "u1"},
    )
    second = dict(
        copy.deepcopy(base),
        tools=[tool],
        stop_sequences=["None", "END"],
        metadata={"user_id": "u2"},
    )
    second["system"][0]["cache_control"] = dict(EPHEMERAL)
    for body in (first, second):
        client.messages.create(**body)
    rows = proxy.wait_for_calls(2)
    out = invoke("diff", rows[1]["id"], rows[0]["id"], "--db", str(proxy.db_path), "--max-chars", "100", "--wide")
    assert "{'" not in out and "['" not in out and "': " not in out, out
    assert "param stop_sequences: b none -> a None, END" in out, out
    assert "characters, clipped)" in out, out  # the schema's new properties, longer than --max-chars
    assert "b: -> a" not in out


def test_key_cells_are_whole_at_100_columns_and_the_others_give_way(captured):
    """Model and pointer cells of `calls` are never cut, whatever columns are asked for; --wide
    cuts nothing; a session's markers go on more lines rather than being cut."""
    db, _rows = captured
    rows = json.loads(invoke("calls", *db, "--json"))
    asked = "id,session,started,api,model,outcome,relation,pointer,verdict,prompt,cache_r,out"
    for args in ((), ("--columns", asked), ("--wide",)):
        out = invoke("calls", *db, *args, columns=100)
        assert "…" not in out or not args or args[0] != "--wide", out
        for r in rows:
            line = next(ln for ln in out.splitlines() if ln.startswith(r["id"]))
            assert f"  {r['model']}  " in line, line
            if args and r["pointer"]:
                assert f"  {r['pointer']}  " in line, line
    out = invoke("calls", *db, "--columns", asked, columns=100)
    assert "/system/1/text" in out and "claude-haiku-4-5" in out and "…" in out  # STARTED gave way
    timeline = invoke("session", rows[0]["session"], *db, columns=100)
    assert "remind…" not in timeline and "tools_…" not in timeline
