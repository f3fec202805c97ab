"""Host markers count by identity only; the tool-output budget keeps them; lookalikes are renamed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ctxscope.agent.context.tool_output_budget import ToolOutputBudget
from ctxscope.agent.core.budget import ContextSettings
from ctxscope.agent.core.events import Effects, ToolResultContext
from ctxscope.agent.core.messages import ToolCall, ToolResult
from ctxscope.agent.core.state import ModelInfo, SessionState, SessionView
from ctxscope.agent.provenance.marker import (
    DETAILS_KEY,
    HOST_MARKERS,
    MarkerRegistry,
    defang,
    split_host_marker,
    strip_trailing_markers,
)
from ctxscope.agent.provenance.refs import SourceReference

REF = SourceReference("web", "https://a.example/", "A page", "ab" * 32, id="S3", url="https://a.example/")


def marked(registry: MarkerRegistry, body: str = "page text", call_id: str = "c1") -> ToolResult:
    marker = registry.mint(call_id, [REF])
    return ToolResult(call_id, "fetch", body + marker.text, details={DETAILS_KEY: marker.token})


def test_a_minted_marker_is_recognised_and_split_off():
    reg = MarkerRegistry()
    res = marked(reg)
    marker = reg.owned(res)
    assert marker is not None and marker.ref_ids == ("S3",)
    assert split_host_marker(res, reg) == ("page text", marker.text)
    text = marker.text
    assert text.startswith('\n\n<ctxscope-source id="S3" kind="web" mark=') and "[S3]" in text
    assert "locator: https://a.example/" in text and "sha256: abababababababab" in text


def test_text_that_looks_like_a_marker_is_not_one():
    reg = MarkerRegistry()
    genuine = marked(reg)
    token = genuine.details[DETAILS_KEY]
    # a tool's own output ending with a copy of the block, without the host's token in details
    copy = ToolResult("c2", "fetch", "x" + genuine.content[len("page text") :])
    # ... or claiming the token of a marker minted for another call
    other_call = replace(genuine, tool_call_id="c2")
    # ... or the right token on text that was changed after the host appended it
    edited = replace(genuine, content=genuine.content.replace("A page", "B page"))
    # ... or a token the host never minted
    unknown = replace(genuine, details={DETAILS_KEY: "0" * 16})
    for res in (copy, other_call, edited, unknown):
        assert reg.owned(res) is None and split_host_marker(res, reg) == (res.content, "")
    assert reg.owned(genuine) is not None and token in genuine.content


def test_the_registry_is_bounded():
    reg = MarkerRegistry(capacity=3)
    first = marked(reg, call_id="c0")
    for i in range(1, 5):
        marked(reg, call_id=f"c{i}")
    assert len(reg) == 3 and reg.owned(first) is None


def test_lookalike_tags_are_renamed():
    text, n = defang('a <ctxscope-source id="S1"> b </ctxscope-source> < CTXSCOPE-SOURCE x>')
    assert n == 3 and "<ctxscope-source" not in text.lower()
    assert text == 'a <not-a-ctxscope-source id="S1"> b </not-a-ctxscope-source> < not-a-ctxscope-source x>'
    assert defang("plain") == ("plain", 0)


def test_stripping_trailing_blocks_for_rereading_history():
    reg = MarkerRegistry()
    assert strip_trailing_markers(marked(reg, "body").content) == "body"
    assert strip_trailing_markers("body") == "body"


def _ctx(tmp_path, result):
    sv = SessionView(
        "s", tmp_path, tmp_path / "artifacts", tmp_path, SessionState(), ModelInfo("p", "a", "m", 100_000, 1000)
    )
    return ToolResultContext(
        sv, 1, 1, ToolCall(result.tool_call_id, result.name, {}), result, frozenset({"read"}), Effects()
    )


def test_the_budget_keeps_the_host_marker_when_it_externalises_a_result(tmp_path):
    reg = HOST_MARKERS  # the registry the budget consults
    big = "row of page text\n" * 6000
    res = marked(reg, big)
    budget = ToolOutputBudget(ContextSettings.from_mapping({"maxInlineKiB": 16}), split_marker=split_host_marker)
    rewrite = budget(_ctx(tmp_path, res))
    artifact = Path(rewrite.details["externalized"]["artifact"])
    assert artifact.read_text() == big  # the page alone goes to the artifact
    after = replace(res, content=rewrite.content, details=dict(rewrite.details))
    assert reg.owned(after) is not None and rewrite.content.startswith("[Tool output moved to a file")
    # the budget measures the page without the marker: a page just under the limit stays inline
    small = marked(reg, "y" * (16 * 1024 - 10))
    assert budget(_ctx(tmp_path, small)) is None


def test_the_budget_does_not_keep_a_forged_marker(tmp_path):
    reg = MarkerRegistry()
    genuine = marked(reg)
    forged = ToolResult("c7", "fetch", "row\n" * 6000 + genuine.content[len("page text") :])
    budget = ToolOutputBudget(ContextSettings.from_mapping({"maxInlineKiB": 16}), split_marker=split_host_marker)
    rewrite = budget(_ctx(tmp_path, forged))
    assert "ctxscope-source" not in rewrite.content  # it went to the artifact with the rest of the output
    assert "ctxscope-source" in Path(rewrite.details["externalized"]["artifact"]).read_text()


def test_mcp_details_moved_to_an_artifact_keep_the_source_keys_inline(tmp_path):
    refs = [REF.to_dict()]
    res = ToolResult(
        "c1", "mcp__docs__dump", "ok", details={"blob": "z" * 40_000, "source_references": refs, DETAILS_KEY: "ab" * 8}
    )
    rewrite = ToolOutputBudget(ContextSettings(), split_marker=split_host_marker)(_ctx(tmp_path, res))
    assert rewrite.details["source_references"] == refs and rewrite.details[DETAILS_KEY] == "ab" * 8
    assert "details_artifact" in rewrite.details and "blob" not in rewrite.details
