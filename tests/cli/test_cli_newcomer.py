"""What a newcomer meets first, on the demo's session: one id rule (a unique prefix or a clean
error listing the candidates, exit code 2), thread names as the views print them, output that fits
100 columns with no Python reprs, numbers in their units, and a `show` that tells a call's story."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxscope.main import cli
from ctxscope.output import fmt_rate, fmt_usd, safe_text

WIDTH = {"COLUMNS": "100"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("newcomer")
    db, home = tmp / "captures.db", tmp / "home"
    out = CliRunner().invoke(cli, ["demo", "--once", "--port", "0", "--db", str(db)], env={"CTXSCOPE_HOME": str(home)})
    assert out.exit_code == 0, out.output + repr(out.exception)
    session = re.search(r"^session (\S+): \d+ calls", out.output, re.M).group(1)
    calls = json.loads(CliRunner().invoke(cli, ["calls", "--db", str(db), "--json", "--limit", "500"]).output)
    return {"db": ["--db", str(db)], "home": home, "session": session, "calls": calls, "output": out.output}


def run(*args, env=None, code=0):
    result = CliRunner().invoke(cli, list(args), env={**WIDTH, **(env or {})})
    assert result.exit_code == code, result.output + repr(result.exception)
    return result.output


def shared_prefix(ids: list[str]) -> str:
    """The longest prefix at least two ids share."""
    best = ""
    for a in ids:
        for b in ids:
            if a != b:
                n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                best = max(best, a[:n], key=len)
    return best


@pytest.mark.slow
def test_an_ambiguous_call_prefix_lists_the_candidates_and_exits_2(demo):
    prefix = shared_prefix([c["id"] for c in demo["calls"]])
    for args in (["show", prefix], ["diff", prefix]):
        out = run(*args, *demo["db"], code=2)
        assert "Traceback" not in out and f"call id prefix {prefix!r} is ambiguous" in out
        listed = re.findall(r"^  (\S+)$", out, re.M)
        assert len(listed) >= 2 and all(c.startswith(prefix) for c in listed if c != "...")
    unknown = run("show", "zzzz", *demo["db"], code=2)
    assert "no call matches 'zzzz'" in unknown
    # The investigate-and-share commands follow the same rule.
    for args in (["curl", prefix], ["replay", prefix, "--daemon", "http://127.0.0.1:9"]):
        out = run(*args, *demo["db"], code=2)
        assert f"call id prefix {prefix!r} is ambiguous" in out, args
    for args in (["curl", "zzzz"], ["replay", "zzzz", "--daemon", "http://127.0.0.1:9"]):
        assert "no call matches 'zzzz'" in run(*args, *demo["db"], code=2), args


def test_every_session_option_takes_a_prefix_and_rejects_an_unknown_id(demo):
    session, db = demo["session"], demo["db"]
    prefix = session[:12]
    listed = json.loads(run("calls", *db, "--session", prefix, "--json", "--limit", "500"))
    assert len(listed) == len(demo["calls"]) and {c["session"] for c in listed} == {session}
    assert json.loads(run("stats", *db, "--session", prefix, "--json"))["session"] == session
    assert json.loads(run("reindex", *db, "--session", prefix, "--json"))["reindexed"] == len(demo["calls"])
    assert json.loads(run("session", prefix, *db, "--json"))["session"] == session
    for args in (
        ["calls", "--session", "nope"],
        ["stats", "--session", "nope"],
        ["reindex", "--session", "nope"],
        ["session", "nope"],
        ["search", "hello", "--session", "nope"],
        ["export", "nope", "-o", str(demo["home"] / "never.har")],
        ["findings", "nope"],
        ["advise", "nope"],
    ):
        out = run(*args, *db, code=2)
        assert "no session matches 'nope'" in out, args


def test_agent_commands_take_a_prefix_of_a_stored_session(tmp_path):
    from ctxscope.agent.host.session_store import SessionStore

    store = SessionStore(tmp_path)
    for sid in ("20261201-034019-aaaaaa", "20261201-034019-bbbbbb", "20261202-101010-cccccc"):
        store.create(session_id=sid, provider="sim", api="anthropic", model="sim-model", workspace=str(tmp_path))
    env = {"CTXSCOPE_HOME": str(tmp_path)}
    assert json.loads(run("agent", "context", "20261202", "--json", env=env))
    assert "no agent session matches '2000'" in run("agent", "context", "2000", env=env, code=2)
    ambiguous = run("agent", "context", "20261201-034019", env=env, code=2)
    assert "is ambiguous" in ambiguous and "20261201-034019-aaaaaa" in ambiguous and "-bbbbbb" in ambiguous


def test_threads_are_chosen_by_the_names_the_views_print(demo):
    db = demo["db"]
    main = json.loads(run("calls", *db, "--thread", "main", "--json", "--limit", "500"))
    side = json.loads(run("calls", *db, "--thread", "side", "--json", "--limit", "500"))
    assert main and side and len(main) + len(side) == len(demo["calls"])
    assert {c["parent_thread"] for c in main} == {None} and {c["thread"] for c in main}.isdisjoint(
        {c["thread"] for c in side}
    )
    assert json.loads(run("calls", *db, "--thread", "T2", "--json")) == json.loads(
        run("calls", *db, "--thread", "side T2", "--json")
    )
    assert len(json.loads(run("calls", *db, "--thread", main[0]["thread"][:14], "--json", "--limit", "500"))) == len(
        main
    )


def test_human_tables_fit_100_columns_and_show_no_reprs(demo):
    db, session = demo["db"], demo["session"]
    for args in (
        ["calls", "--limit", "500"],
        ["sessions"],
        ["session", session],
        ["db", "status"],
        ["stats", "--session", session],
        ["show", demo["calls"][0]["id"]],
        ["diff", next(c["id"] for c in demo["calls"] if c["relation"] == "DIVERGED")],
    ):
        out = run(*args, *db)
        too_wide = [line for line in out.splitlines() if len(line) > 100]
        assert not too_wide, (args, too_wide[:3])
        assert not re.search(r"[{\[]'|'[}\]]|: \{|\bTrue\b|\bNone\b", out), (args, out[:800])
    wide = run("calls", *db, "--wide")
    assert max(len(line) for line in wide.splitlines()) > 100 and "SESSION" in wide and "POINTER" in wide
    chosen = run("calls", *db, "--columns", "seq,est_tokens,prompt").splitlines()
    assert chosen[0].split() == ["SEQ", "EST_TOKENS", "PROMPT"]
    legend = "\n".join(chosen[-2:])
    assert "exactly as the provider reported" in legend and "as ctxscope estimated" in legend
    assert "PROMPT the whole prompt" in legend and "Anthropic: input + cache reads + writes" in legend
    bad = run("calls", *db, "--columns", "nope", code=2)
    assert "unknown column(s) nope" in bad


def test_rates_and_dollars_print_in_their_units(demo):
    db = demo["db"]
    [row] = json.loads(run("sessions", *db, "--json"))
    table = run("sessions", *db)
    assert f"{row['hit_rate']['rate']:.1%}" in table
    assert (fmt_rate(0.849), fmt_usd(0.0216), fmt_usd(12.5), fmt_usd(None)) == ("84.9%", "$0.0216", "$12.50", "-")
    stats = run("stats", "--session", demo["session"], *db)
    assert not re.search(r"\s0\.\d\s*$", stats, re.M)


def test_the_simulator_is_free(demo):
    from ctxscope.inspector.store.queries import open_db
    from ctxscope.web.overview import list_session_overviews
    from ctxscope.web.timeline import session_view

    [row] = json.loads(run("sessions", *demo["db"], "--json"))
    assert row["providers"] == ["u/sim"] and row["lost_tokens"] > 0 and not row["lost_usd"]
    assert all(c["cache"] is None or c["cache"]["lost_cost_usd"] is None for c in demo["calls"])
    assert "$" not in run("sessions", *demo["db"])
    assert "$" not in run("stats", "--session", demo["session"], *demo["db"])
    db = open_db(demo["db"][1])
    try:
        [overview] = list_session_overviews(db)
        assert overview["cost_usd"] is None and not overview["lost_usd"]
        assert session_view(db, demo["session"])["summary"]["cost_usd"] is None
    finally:
        db.conn.close()


def test_show_tells_the_story_of_a_call(demo):
    db = demo["db"]
    brk = next(c for c in demo["calls"] if c["relation"] == "DIVERGED")
    out = run("show", brk["id"][:16], *db)
    pred = next(c for c in demo["calls"] if c["id"] == brk["predecessor"])
    assert f"call {brk['id']}  #{brk['seq']} of session {brk['session']}" in out and "main T1 thread" in out
    assert f"relation: diverged (DIVERGED) to #{pred['seq']} {pred['id']}" in out
    assert f"pointer: {brk['pointer']}" in out
    assert re.search(r"cache: \w+ \(" + brk["cache_verdict"] + r"\)", out)
    assert f"in {brk['usage']['input']:,}" in out and "(by the provider)" in out
    assert f"estimated: {brk['tokens_estimated']:,} prompt tokens" in out
    assert "markers:" in out and "answer:" in out
    answer = out.split("answer:", 1)[1].strip().splitlines()
    assert answer and answer[0].strip() not in ("", "-")


def test_show_refuses_two_raw_bodies_at_once(demo):
    out = run("show", demo["calls"][0]["id"], *demo["db"], "--request-raw", "--response-raw", code=2)
    assert "give one of them" in out


def test_tabs_and_newlines_print_as_signs_everywhere():
    assert safe_text("a\tb\nc\x1bd") == "a→b⏎c?d"


def test_the_summary_names_threads_and_counts_compactions_as_the_sessions_list_does(demo):
    out = demo["output"]
    assert re.search(r"^main T1 \(thread \w+\): \d+ calls$", out, re.M)
    [row] = json.loads(run("sessions", *demo["db"], "--json"))
    stats = json.loads(run("stats", "--session", demo["session"], *demo["db"], "--json"))
    compactions = stats["compactions"]  # what the sessions list shows as "N compactions"
    d = stats["cache_discipline"]
    assert d["breaks_after_compaction"] == compactions and d["checkpoint_request_breaks"] >= 1
    assert (
        f"{d['breaks']} break(s): {compactions} after a compaction, {d['checkpoint_request_breaks']} a "
        "checkpoint request" in out
    )
    assert row["session"] == demo["session"]


def test_once_points_at_commands_that_work_after_it_exits(demo):
    out = demo["output"]
    assert "See it with: ctxscope session" in out and "ctxscope serve --db" in out
    assert not re.search(r"Open http://127\.0\.0\.1:\d+/", out)


@pytest.mark.slow
def test_a_taken_port_gets_a_port_hint_and_the_demo_leaves_no_database(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        db = tmp_path / "x.db"
        out = CliRunner().invoke(
            cli, ["demo", "--once", "--port", str(port), "--db", str(db)], env={"CTXSCOPE_HOME": str(tmp_path / "home")}
        )
        assert out.exit_code == 1 and "--port" in out.output, out.output
        assert not db.exists() and not list(tmp_path.glob("x.db*"))
        served = CliRunner().invoke(
            cli,
            ["serve", "--port", str(port), "--db", str(tmp_path / "s.db")],
            env={"CTXSCOPE_HOME": str(tmp_path / "home")},
        )
        assert served.exit_code == 1 and "pick another port with --port" in served.output, served.output


def test_the_cli_imports_no_heavy_package_before_a_command_runs():
    """`ctxscope --help` and the quick commands start fast because nothing heavy loads at import
    (speed itself is measured in bench/startup.py)."""
    code = (
        "import sys, ctxscope.main; from click.testing import CliRunner; "
        "r = CliRunner().invoke(ctxscope.main.cli, ['--help']); assert r.exit_code == 0, r.output; "
        "print('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    heavy = {
        "aiohttp",
        "sqlite_utils",
        "tiktoken",
        "ctxscope.agent.host.runtime",
        "ctxscope.agent.providers.catalog",
        "ctxscope.inspector.store.db",
        "openai",
        "anthropic",
        "ctxscope.query_commands",
        "ctxscope.demo",
    }
    assert not heavy & loaded, sorted(heavy & loaded)


def test_agent_run_with_the_daemon_down_says_what_to_do_and_leaves_no_session(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(
        cli,
        [
            "agent",
            "run",
            "hello",
            "--provider",
            "sim",
            "--daemon",
            f"http://127.0.0.1:{port}",
            "--workspace",
            str(tmp_path),
        ],
        env={"CTXSCOPE_HOME": str(tmp_path / "home")},
    )
    assert (result.exit_code == 1 and result.exception is None) or isinstance(result.exception, SystemExit)
    assert f"no ctxscope daemon answers at http://127.0.0.1:{port}" in result.output
    assert "ctxscope serve" in result.output and "--direct" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "home" / "sessions").exists() or not any((tmp_path / "home" / "sessions").iterdir())


def test_calls_say_when_captured_calls_still_wait_to_be_stored(demo):
    from ctxscope.inspector.writer.wire import spool as spools
    from ctxscope.inspector.writer.wire.call_fields import pack

    from support.factories import make_exchange

    db = demo["db"][1]
    assert "not stored yet" not in CliRunner().invoke(cli, ["calls", "--db", db]).output
    s = spools.Spool(Path(db), owner=999_001)  # a call handed over by the proxy, not stored yet
    try:
        s.append([pack(make_exchange(1))])
        out = CliRunner().invoke(cli, ["calls", "--db", db]).output
        assert "not stored yet: the daemon stores calls a moment after they end" in out
    finally:
        s.close(remove=True)


def test_sim_help_documents_the_script_format_with_an_example_that_loads(tmp_path):
    from ctxscope.simulator.model.script import load_script_file

    out = run("sim", "--help")
    assert "docs in the README" not in out and "--script FILE is a JSON list of steps" in out
    example = re.search(r"^\s+(\[\{.*?\}\])$", out, re.M | re.S).group(1)
    path = tmp_path / "script.json"
    path.write_text(" ".join(line.strip() for line in example.splitlines()))
    assert len(load_script_file(path)) == 3


def test_a_marker_on_many_calls_gets_one_line_after_the_rarer_effects(demo):
    out = run("session", demo["session"], *demo["db"])
    effects = out.split("effects (declared by the client", 1)[1].split("\ncalls:", 1)[0]
    on_many = {
        k
        for c in demo["calls"]
        for k in {m["kind"] for m in c["markers"] or []}
        if sum(k in {m["kind"] for m in d["markers"] or []} for d in demo["calls"]) > 10
    } - {"tools_executed"}
    assert on_many  # the demo's sources_available
    for kind in on_many:
        assert len(re.findall(rf"^\s+#\d+\s+{kind}\s", effects, re.M)) == 0
        assert re.search(rf"^  {kind} on \d+ calls: #\d+", effects, re.M)


def test_a_mixed_session_costs_what_its_real_calls_cost(tmp_path):
    """The simulator is free also beside a real provider: a session mixing both costs its real calls'
    price, in the CLI's sessions and in the UI's sessions API (the same model name on both sides)."""
    from ctxscope.inspector.store.queries import list_calls
    from ctxscope.web.fields import usage_cost
    from ctxscope.web.overview import list_session_overviews

    from support.factories import capture, make_exchange

    real = [make_exchange(n, session_label="mixed") for n in range(2)]
    sim = [
        make_exchange(n, session_label="mixed", provider="u/sim", upstream="http://127.0.0.1:9") for n in range(2, 5)
    ]
    db = capture(tmp_path / "captures.db", real + sim)
    try:
        calls = list_calls(db, session="mixed", limit=None, newest_first=False)
        [overview] = list_session_overviews(db)
    finally:
        db.conn.close()

    def cost(rows):
        return sum(
            usage_cost(c["model"], *(c["usage"][k] for k in ("input", "output", "cache_read", "cache_write")))[0]
            for c in rows
        )

    assert sorted(c["provider"] for c in calls) == ["anthropic"] * 2 + ["u/sim"] * 3
    real_cost = cost(c for c in calls if c["provider"] != "u/sim")
    assert real_cost > 0 and cost(calls) > real_cost  # pricing every call would give another figure
    assert overview["cost_usd"] == pytest.approx(real_cost)
    [row] = json.loads(run("sessions", "--db", str(tmp_path / "captures.db"), "--json"))
    assert row["cost_usd"] == pytest.approx(real_cost)
    table = run("sessions", "--db", str(tmp_path / "captures.db"), "--columns", "session,cost_usd")
    assert fmt_usd(row["cost_usd"]) in table


def test_small_mistakes_get_one_clear_line(demo, tmp_path):
    """A mistyped command names the nearest ones; an unknown thread is an error, not "(nothing)";
    `db status` with no database says so in one line with exit code 1."""
    typo = run("sesions", code=2)
    assert "No such command 'sesions'. Did you mean 'sessions'" in typo
    assert "Did you mean" not in run("zzzz", code=2)  # nothing near: click's own message
    unknown = run("calls", *demo["db"], "--thread", "T9", code=2)
    assert "no thread 'T9' in any session" in unknown and "(nothing)" not in unknown
    assert run("calls", *demo["db"], "--thread", "T2", "--limit", "1").count("\n") >= 2
    missing = run("db", "status", "--db", str(tmp_path / "none.db"), code=1)
    assert missing.startswith("Error: no capture database at ") and missing.count("\n") == 1
    assert "Traceback" not in missing
