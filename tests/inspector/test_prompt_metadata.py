"""Claude Code's billing header through the real writer and analyzer: for Anthropic's own API a
change limited to that block is changed metadata (no break, no lost tokens); for any other upstream
it is a break, and findings name the one-line fix."""

from __future__ import annotations

import copy
import json

from ctxscope.inspector.advisor.findings import findings
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.analyses.prompt_metadata import ProviderItself
from ctxscope.inspector.pipeline.analyze import Analyzer
from ctxscope.inspector.pipeline.reindex import reindex
from ctxscope.inspector.store import queries

from support.factories import analysed as run
from support.factories import anthropic_response
from support.factories import exchange_at as ex
from support.inspector_bodies import claude_code_turns, default_system, long_text, text

MINIMAX = "https://api.minimax.io/anthropic"


def billing(cch: str) -> dict:
    return text(f"x-anthropic-billing-header: cc_version=2.1.37.3a1; cc_entrypoint=cli; cch={cch};")


def claude_code_bodies(n: int = 5) -> list[dict]:
    """Claude Code's shape: the billing header first, then its system prompt (cached), then the loop;
    every request carries a fresh ``cch``."""
    system = [text("You are Claude Code, Anthropic's official CLI for Claude."), *default_system(long_text(1500))]
    bodies = claude_code_turns(n, system=system)
    for i, body in enumerate(bodies):
        body["system"] = [billing(f"{0xA3F10 + 7 * i:05x}"), *copy.deepcopy(body["system"])]
    return bodies


def usage_like(provider_reads: bool, i: int) -> dict:
    """What the provider reports: Anthropic reads the prefix the previous call wrote; a third-party
    endpoint, whose cache key holds the header, reads nothing and writes it all again."""
    if i and provider_reads:
        return {"input_tokens": 40, "output_tokens": 5, "cache_read_input_tokens": 2000 + 30 * i}
    return {"input_tokens": 40, "output_tokens": 5, "cache_creation_input_tokens": 2000 + 30 * i}


def store(path, upstream: str, analyzer: Analyzer | None = None):
    bodies = claude_code_bodies()
    exchanges = [
        ex(
            body,
            20 * i,
            upstream=upstream,
            response_body=json.dumps(anthropic_response(usage=usage_like("anthropic.com" in upstream, i))).encode(),
        )
        for i, body in enumerate(bodies)
    ]
    db, _ = run(path, exchanges, analyzer)
    return db, [queries.get_call(db, r["id"]) for r in queries.list_calls(db, limit=None, newest_first=False)]


def test_billing_header_to_anthropic_is_changed_metadata_not_a_break(tmp_path):
    db, calls = store(tmp_path / "c.db", "https://api.anthropic.com")
    assert [c["relation"] for c in calls] == ["EPOCH_START"] + ["APPEND_ONLY"] * 4
    assert len({c["thread"] for c in calls}) == 1 and len({c["session"] for c in calls}) == 1
    assert [c["cache_verdict"] for c in calls[1:]] == ["hit"] * 4
    assert sum(c["cache_lost_tokens"] or 0 for c in calls) == 0
    for c in calls[1:]:
        detail = c["relation_detail"]["detail"]
        assert detail.startswith("metadata changed: x-anthropic-billing-header at /system/0/text"), detail
    assert not [f for f in findings(load_session(db, calls[0]["session"])) if f.kind == "per_request_metadata"]


def test_billing_header_to_a_third_party_endpoint_is_a_break_with_the_fix(tmp_path):
    db, calls = store(tmp_path / "c.db", MINIMAX)
    assert [c["relation"] for c in calls] == ["EPOCH_START"] + ["DIVERGED"] * 4
    assert {c["pointer"] for c in calls[1:]} == {"/system/0/text"}
    assert [c["cache_verdict"] for c in calls[1:]] == ["client_break"] * 4
    lost = sum(c["cache_lost_tokens"] for c in calls[1:])
    assert lost > 4 * 2000
    [found] = [f for f in findings(load_session(db, calls[0]["session"])) if f.kind == "per_request_metadata"]
    assert "CLAUDE_CODE_ATTRIBUTION_HEADER=0" in found.summary
    assert found.tokens == lost and set(found.calls) == {c["id"] for c in calls[1:]}
    assert found.evidence["pointer"] == "/system/0"  # the block; the relation names its text


def test_an_upstream_set_as_the_provider_itself_masks_the_header(tmp_path):
    itself = ProviderItself.from_text(ProviderItself({MINIMAX: True}).to_text())
    _db, calls = store(tmp_path / "c.db", MINIMAX, Analyzer(provider_itself=itself))
    assert [c["relation"] for c in calls[1:]] == ["APPEND_ONLY"] * 4


def test_anthropic_set_as_not_the_provider_itself_breaks(tmp_path):
    itself = ProviderItself({"https://api.anthropic.com": False})
    _db, calls = store(tmp_path / "c.db", "https://api.anthropic.com", Analyzer(provider_itself=itself))
    assert [c["relation"] for c in calls[1:]] == ["DIVERGED"] * 4


def test_reindex_and_a_cold_start_keep_the_header_masked(tmp_path):
    db, calls = store(tmp_path / "c.db", "https://api.anthropic.com")
    list(reindex(db))
    again = [queries.get_call(db, c["id"]) for c in calls]
    assert [c["relation"] for c in again] == ["EPOCH_START"] + ["APPEND_ONLY"] * 4


def test_a_hostile_header_shaped_block_is_read_in_linear_time():
    """A system block built to make a backtracking pattern blow up is refused fast, whatever its length."""
    import time

    from ctxscope.inspector.analyses.canonical_prompt import Segment
    from ctxscope.inspector.analyses.prompt_metadata import block_of

    def seg(t: str) -> Segment:
        return Segment("/system/0", "system", "system", t, "0" * 64)

    real = "x-anthropic-billing-header: cc_version=2.1.37.3a1; cc_entrypoint=cli; cch=a3f10;"
    assert block_of(seg(real), "anthropic.messages") is not None
    assert block_of(seg(real), "openai.responses") is None
    assert block_of(seg(real + " You are Claude Code."), "anthropic.messages") is None
    started = time.perf_counter()
    for hostile in (
        "x-anthropic-billing-header:" + "a=" * 240 + "!",
        "x-anthropic-billing-header:" + " a=b" * 120 + ";!",
        "x-anthropic-billing-header: a=" + " " * 480 + "=",
    ):
        assert block_of(seg(hostile), "anthropic.messages") is None
    assert block_of(seg("x-anthropic-billing-header: a=b;" * 40), "anthropic.messages") is None  # too long
    assert time.perf_counter() - started < 0.5
