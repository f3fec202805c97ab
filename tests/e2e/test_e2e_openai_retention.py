"""OpenAI's cache retention, one rule (``inspector/analyses/cache/openai_retention.py``) that the
simulator models with code of its own: the two agree on every documented and undocumented policy,
and a Responses session with 6-minute gaps sent through the INSTALLED serve's simulator (its clock
at each call's time) is judged call by call exactly as the simulator cached it: every later call
``ttl_expired``, never a provider miss (docs/architecture.md, "Cache verdicts")."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from ctxscope.inspector.analyses.cache.openai_retention import openai_ttl_seconds
from ctxscope.inspector.store import queries
from ctxscope.simulator.control.client import SimulatorControl
from ctxscope.simulator.model.prompt import openai_caching

from support import cause_sessions as cases
from support import sdk_clients
from support.factories import analysed
from support.serve_process import running_serve

TOKEN = "openai-retention-token-0123456789abcdef"

POLICIES = [
    {},
    {"prompt_cache_retention": "in_memory"},
    {"prompt_cache_retention": "24h"},
    {"prompt_cache_retention": "7d"},
    {"prompt_cache_retention": 24},
    {"prompt_cache_options": {"ttl": "30m"}},
    {"prompt_cache_options": {"ttl": "12h"}},
    {"prompt_cache_options": {"ttl": "24h"}},
    {"prompt_cache_options": {"ttl": 900}},
    {"prompt_cache_options": "30m"},
    {"prompt_cache_options": {"ttl": "30m"}, "prompt_cache_retention": "24h"},
    {"prompt_cache_options": {"ttl": "bogus"}, "prompt_cache_retention": "24h"},
    {"prompt_cache_options": {"mode": "explicit"}, "prompt_cache_retention": "in_memory"},
]


@pytest.mark.parametrize("policy", POLICIES, ids=[str(p) for p in POLICIES])
def test_the_simulator_and_the_analysis_keep_an_entry_equally_long(policy):
    assert openai_caching(dict(policy)).ttl == openai_ttl_seconds(policy)


def test_six_minute_gaps_are_ttl_expired_as_the_simulator_cached_them(tmp_path):
    bodies, times = cases.bodies("responses", "ttl_gaps"), cases.times("ttl_gaps")
    assert min(b - a for a, b in itertools.pairwise(times)) == 360.0  # a gap past the 5-minute rule
    with running_serve(tmp_path, env={"CTXSCOPE_SIM_TOKEN": TOKEN}) as (_, base):
        control = SimulatorControl(base + "/u/sim", TOKEN)
        client = sdk_clients.OpenAI(base_url=base + "/s/gaps/u/sim/v1", api_key="sk-retention", max_retries=0)
        answers: list[bytes] = []
        try:
            for body, t in zip(bodies, times, strict=True):
                control.config(clock=t)
                answers.append(client.responses.with_raw_response.create(**body).http_response.content)
        finally:
            control.config(clock=None)

    cached = [json.loads(a)["usage"]["input_tokens_details"]["cached_tokens"] for a in answers]
    assert cached == [0] * len(bodies)  # the simulator kept nothing across 6 minutes

    exchanges = [
        dataclasses.replace(ex, response_body=answer)
        for ex, answer in zip(cases.exchanges("responses", "ttl_gaps", "gaps"), answers, strict=True)
    ]
    db, _ = analysed(tmp_path / "judged.db", exchanges)
    try:
        rows = [queries.get_call(db, r["id"]) for r in queries.list_calls(db, newest_first=False)]
    finally:
        db.close()
    assert [r["cache_verdict"] for r in rows[1:]] == ["ttl_expired"] * (len(rows) - 1)
    assert all(r["cache"]["predicted_read"] == 0 for r in rows)
