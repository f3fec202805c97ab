"""Advice per cause, on sessions stored through the real writer: the top advice names the cause and
its pointer, its what-if session no longer carries the cause, and no placement that reads nothing
(or places as sent) is recommended while another reads something."""

from __future__ import annotations

import pytest

from ctxscope.inspector.advisor.alternatives import advise
from ctxscope.inspector.advisor.findings import Finding
from ctxscope.inspector.advisor.load import load_session
from ctxscope.inspector.advisor.rewrite import tool_name, value_at

from support import cause_sessions as cases
from support.factories import T0, analysed, anthropic_request, make_exchange


def _advice(tmp_path, exchanges, label="sess"):
    db, _ = analysed(tmp_path / "c.db", exchanges)
    session = load_session(db, label)
    assert session is not None
    advice = advise(session)
    assert advice is not None
    return advice


@pytest.mark.slow
@pytest.mark.parametrize("provider", cases.PROVIDERS)
@pytest.mark.parametrize("cause", cases.CAUSES)
def test_the_top_advice_names_the_cause_and_its_what_if_is_without_it(tmp_path, provider, cause):
    advice = _advice(tmp_path, cases.exchanges(provider, cause, "sess"))
    top = advice.top
    assert top is not None
    assert (top.cause, top.pointer) == cases.expected(provider, cause), [a.as_dict() for a in advice.causes]
    assert top.saving_usd > 0 and top.result.cache_read > top.baseline.cache_read
    assert [a.saving_usd for a in advice.causes] == sorted((a.saving_usd for a in advice.causes), reverse=True)
    assert advice.advice.startswith(top.change)
    bodies = [c.body for c in top.calls]
    if cause == "timestamp":
        assert "char 29: a timestamp" in top.change and "10:01" in (top.after or "")
        assert len({repr(value_at(b, top.pointer)) for b in bodies}) == 1  # held at its first value
    elif cause == "tool_order":
        assert len({tuple(tool_name(t) for t in b["tools"]) for b in bodies}) == 1
    elif cause == "billing_header":
        assert "x-anthropic-billing-header" not in repr(bodies)
        assert "x-anthropic-billing-header" in repr(cases.bodies(provider, cause))
    else:
        assert "1h" in top.change or '"ttl": "30m"' in top.change


def test_a_placement_that_reads_nothing_is_not_advised_while_the_one_sent_reads(tmp_path):
    """Each call sends a fresh 5,000-token message after a stable 1,100-token one: the client's
    breakpoints read the stable part and write the fresh one at the write price, which costs more
    than no caching; no caching is still not advised, since it reads nothing."""
    stable = " ".join(f"rule{i}" for i in range(600))
    exchanges = []
    for i in range(6):
        fresh = " ".join(f"doc{i}x{j}" for j in range(1700))
        messages = [
            {"role": "user", "content": [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": fresh, "cache_control": {"type": "ephemeral"}}]},
        ]
        exchanges.append(
            make_exchange(request=anthropic_request(messages), started_at=T0 + 10 * i, session_label="sess")
        )
    advice = _advice(tmp_path, exchanges)
    by_name = {a.name: a for a in advice.alternatives}
    assert by_name["as_sent"].result.cache_read > 0
    assert by_name["none"].result.cost_usd < by_name["as_sent"].result.cost_usd  # cheaper, reading nothing
    assert advice.best.name == "as_sent" and advice.best.result.cache_read > 0
    assert all(a.cause != "placement" or a.result.cache_read > 0 for a in advice.causes)


def test_a_billing_header_finding_alone_is_advised_by_its_pointer(tmp_path):
    """A ``billing_header`` finding (its pointer, no churn finding beside it) is enough: the block is dropped."""
    db, _ = analysed(tmp_path / "c.db", cases.exchanges("anthropic", "billing_header", "sess"))
    session = load_session(db, "sess")
    assert session is not None
    found = [Finding("billing_header", "billing header", 0, None, (), {"pointer": "/system/0"})]
    advice = advise(session, found)
    assert advice is not None and advice.top is not None
    assert (advice.top.cause, advice.top.pointer) == ("billing_header", "/system/0")
    assert "x-anthropic-billing-header" not in repr([c.body for c in advice.top.calls])
