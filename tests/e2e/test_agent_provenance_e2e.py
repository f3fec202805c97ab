"""Source provenance as the inspector sees it: the real agent, through the real daemon, to the simulator."""

from __future__ import annotations

from click.testing import CliRunner

from ctxscope.agent.host.builtins import default_extensions
from ctxscope.agent.host.runtime import AgentRuntime
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.main import cli

from support.provenance_fixtures import NOTES, PAGE, QUOTE, fake_tools

SCRIPT = [
    {
        "tool_calls": [
            {"name": "read", "arguments": {"path": "NOTES.md"}},
            {"name": "fetch", "arguments": {"url": "https://docs.example/cache"}},
        ]
    },
    {"text": QUOTE},  # quotes the notes, cites nothing: asked again once
    {"text": QUOTE + " [NOTES.md#L2-L3]"},
    {"text": "You are welcome."},  # turn 2
]


def declared(row) -> dict[str, dict]:
    return {m["kind"]: m["detail"] for m in row["markers"] if m.get("detail", {}).get("declared")}


async def test_sources_citations_and_the_retry_are_declared_markers(proxy, sim, tmp_path):
    sim.state().set_script(SCRIPT)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "NOTES.md").write_text(NOTES)
    client = make_client(resolve("sim", api="anthropic", model="claude-sonnet-4-5", proxy=proxy.url))
    rt = AgentRuntime(
        client,
        home=tmp_path / "agent-home",
        workspace=ws,
        extensions=[*default_extensions(), fake_tools(PAGE)],
        host_builtins=[],
    )
    s = rt.create_session()
    try:
        first = await s.run("how is a release published?")
        assert first.ok and first.text == QUOTE + " [NOTES.md:2-3]"
        assert (await s.run("thanks")).ok
    finally:
        await rt.aclose()

    rows = proxy.wait_for_calls(4)
    marks = [declared(r) for r in rows]
    assert "sources_available" not in marks[0]
    assert marks[1]["sources_available"] == {"count": 2, "new": 2, "kinds": "file+web", "declared": True}
    assert marks[2]["source_citation_retry"]["reason"] == "missing_source_citation"
    assert marks[2]["source_citation_retry"]["source"] == "S1"
    assert (marks[2]["citations"]["count"], marks[2]["citations"]["missing"]) == (0, 1)
    assert (marks[3]["citations"]["count"], marks[3]["citations"]["missing"], marks[3]["citations"]["turn"]) == (
        1,
        0,
        1,
    )
    # the model saw the web page's marker, and the read without one
    [results] = [m["content"] for m in sim.state().requests()[1]["body"]["messages"] if m["role"] == "user"][-1:]
    read, page = (r["content"] if isinstance(r["content"], str) else r["content"][0]["text"] for r in results)
    assert "ctxscope-source" not in read and page.endswith("cite it as [S2].\n</ctxscope-source>")

    timeline = CliRunner().invoke(cli, ["session", rows[0]["session"], "--db", str(proxy.db_path), "--json"])
    assert timeline.exit_code == 0, timeline.output
    text = timeline.output
    for kind in ("sources_available", "source_citation_retry", "citations"):
        assert kind in text
