import copy

import pytest

from ctxscope.inspector.analyses.accounting import TokenCounter
from ctxscope.inspector.analyses.cache.prediction import Observed, anthropic_minimum, predict_cache
from ctxscope.inspector.analyses.cache.verdicts import parse_provider_diagnostics, verdict
from ctxscope.inspector.analyses.canonical import canonicalize
from ctxscope.inspector.analyses.prices import load_prices
from ctxscope.inspector.analyses.relation import CallContext, classify

from support.inspector_bodies import (
    EPHEMERAL,
    assistant,
    claude_code_turns,
    default_tools,
    long_text,
    make_anthropic_body,
    make_chat_body,
    make_responses_body,
    text,
    tool_result,
    tool_use,
    user,
)

A, CHAT = "anthropic.messages", "openai.chat"
COUNTER = TokenCounter()
PRICES = load_prices()
BIG = long_text(1500, "sys")  # ~3000 tokens: above every Anthropic minimum except 4096


def big_system(ttl=None):
    marker = dict(EPHEMERAL, ttl=ttl) if ttl else dict(EPHEMERAL)
    return [text("You are a coding agent."), text(BIG, cache_control=marker)]


def observe(body, t, api=A):
    prompt = canonicalize(api, body)
    return Observed(prompt, COUNTER.count_prompt(prompt), t)


def analyse(prev_body, cur_body, gap=30.0, usage=None, api=A, provider="anthropic", **kw):
    """Prediction and verdict for cur after prev; usage defaults to what the prediction expects."""
    prev = observe(prev_body, 1000.0, api) if prev_body is not None else None
    cur = observe(cur_body, 1000.0 + gap, api)
    prev_ctx = CallContext(prev.prompt, provider, api, 0, prev_body) if prev else None
    relation = classify(prev_ctx, CallContext(cur.prompt, provider, api, 0, cur_body))
    pred = predict_cache(prev, cur, relation)
    if usage == "expected":
        usage = {
            "input": pred.total_tokens,
            "output": 10,
            "cache_read": pred.predicted_read,
            "cache_write": pred.predicted_write,
        }
    price = PRICES.lookup(cur.prompt.model)
    return pred, verdict(pred, usage, relation, price=price, **kw)


def usage(total, read=0, write=0):
    return {"input": total, "output": 5, "cache_read": read, "cache_write": write}


# --- Anthropic --------------------------------------------------------------------------------


def test_first_call_is_an_expected_write():
    body = claude_code_turns(1, system=big_system())[0]
    pred, v = analyse(None, body, usage="expected")
    assert pred.reason == "first_call" and pred.predicted_read == 0
    assert pred.predicted_write == pred.cacheable_prefix_tokens == pred.total_tokens
    assert pred.last_breakpoint_index == len(pred_segments(body)) - 1
    assert (v.verdict, v.lost_tokens, v.lost_cost_usd) == ("expected_write", 0, 0.0)


def pred_segments(body, api=A):
    return canonicalize(api, body).segments


def test_agent_loop_hits_the_previous_call_prefix():
    bodies = claude_code_turns(4, system=big_system())
    prev_total = COUNTER.count_prompt(canonicalize(A, bodies[2])).total
    pred, v = analyse(bodies[2], bodies[3], usage="expected")
    assert pred.reason == "prefix_reused"
    assert pred.predicted_read == prev_total  # up to the marker on the predecessor's last block
    assert pred.predicted_write == pred.total_tokens - prev_total
    assert pred.client_loss == 0 and not pred.ttl_expired
    assert v.verdict == "hit" and v.lost_tokens == 0


def test_system_edit_is_a_client_break_before_the_last_breakpoint():
    bodies = claude_code_turns(3, system=big_system())
    cur = copy.deepcopy(bodies[2])
    cur["system"][1]["text"] = BIG + " Today is Tuesday."
    prev_total = COUNTER.count_prompt(canonicalize(A, bodies[2])).total
    pred, v = analyse(bodies[2], cur, usage=usage(prev_total + 10, 0, prev_total + 10))
    assert pred.predicted_read == 0 and pred.client_loss == prev_total
    assert (v.verdict, v.break_pointer, v.break_segment_kind) == ("client_break", "/system/1/text", "system")
    assert v.before_prev_last_breakpoint is True
    price = PRICES.lookup("claude-sonnet-4-5")
    assert v.lost_tokens == pytest.approx(prev_total * (prev_total + 10) / pred.total_tokens, abs=1)
    assert v.lost_cost_usd == pytest.approx(v.lost_tokens * (price.cache_write - price.cache_read) / 1e6)


def test_break_with_a_full_read_anyway_is_a_hit():
    bodies = claude_code_turns(3, system=big_system())
    cur = copy.deepcopy(bodies[2])
    cur["system"][1]["text"] = BIG + " edited"
    pred, _ = analyse(bodies[2], cur)
    _, v = analyse(bodies[2], cur, usage=usage(pred.total_tokens, pred.client_loss))
    assert v.verdict == "hit" and v.lost_tokens == 0 and v.break_pointer == "/system/1/text"


def test_change_after_the_last_cached_point_is_harmless():
    sys_only = [text("You are a coding agent."), text(BIG, cache_control=dict(EPHEMERAL))]
    a = make_anthropic_body(system=sys_only, messages=[user("one"), assistant("two"), user("three")])
    b = make_anthropic_body(system=sys_only, messages=[user("one"), assistant("changed"), user("three")])
    pred, v = analyse(a, b, usage="expected")
    sys_tokens = COUNTER.count_prompt(canonicalize(A, a)).prefix_tokens(2)
    assert pred.predicted_read == sys_tokens and pred.client_loss == 0
    assert pred.before_prev_last_breakpoint is False and pred.break_pointer == "/messages/1/content"
    assert (v.verdict, v.before_prev_last_breakpoint, v.break_segment_kind) == ("hit", False, "assistant_text")


def test_ttl_expired_after_five_minutes_but_not_with_one_hour():
    bodies = claude_code_turns(3, system=big_system())
    pred, v = analyse(bodies[1], bodies[2], gap=400, usage=usage(5000, 0, 5000))
    assert pred.ttl_expired and pred.predicted_read == 0 and pred.would_read > 0
    assert v.verdict == "ttl_expired" and v.lost_tokens > 0 and v.detail.startswith("400s")
    one_hour = claude_code_turns(3, system=big_system("1h"))
    for body in one_hour:  # every marker 1h
        for m in body["messages"]:
            for blk in m["content"] if isinstance(m["content"], list) else []:
                if "cache_control" in blk:
                    blk["cache_control"]["ttl"] = "1h"
    pred, v = analyse(one_hour[1], one_hour[2], gap=400, usage="expected")
    assert not pred.ttl_expired and v.verdict == "hit"
    assert pred.ttl == "1h"


def test_partial_expiry_keeps_the_long_lived_system_cache():
    turns = claude_code_turns(3, system=[text(long_text(700, "s"), cache_control={"type": "ephemeral", "ttl": "1h"})])
    for body in turns:  # make the conversation much larger than the 1h-cached system block
        body["messages"][0] = (
            user(long_text(3000, "doc"))
            if isinstance(body["messages"][0]["content"], str)
            else user([text(long_text(3000, "doc"), cache_control=dict(EPHEMERAL))])
        )
    pred, v = analyse(turns[1], turns[2], gap=600)
    sys_tokens = COUNTER.count_prompt(canonicalize(A, turns[1])).prefix_tokens(4)
    assert pred.predicted_read == sys_tokens and pred.ttl_expired
    v = verdict(
        pred,
        usage(pred.total_tokens, sys_tokens, pred.total_tokens - sys_tokens),
        classify(None, CallContext(canonicalize(A, turns[2]), "anthropic", A)),
    )
    assert v.verdict == "ttl_expired" and v.lost_tokens == pred.would_read - sys_tokens


def test_below_minimum_per_model():
    small = claude_code_turns(2)  # a few hundred tokens at most
    pred, v = analyse(small[0], small[1], usage=usage(300))
    assert pred.below_minimum and pred.cacheable_prefix_tokens == 0
    assert v.verdict == "below_minimum"
    mid = claude_code_turns(2, system=big_system(), model="claude-haiku-4-5")  # ~3000 < 4096
    pred, v = analyse(mid[0], mid[1], usage=usage(3200))
    assert pred.minimum == 4096 and v.verdict == "below_minimum"
    mid = claude_code_turns(2, system=big_system(), model="claude-sonnet-4-5")
    pred, v = analyse(mid[0], mid[1], usage="expected")
    assert pred.minimum == 1024 and v.verdict == "hit"


def test_minimum_table():
    assert anthropic_minimum("claude-opus-4-5-20251101") == 4096
    assert anthropic_minimum("claude-opus-4-6") == 4096
    assert anthropic_minimum("claude-sonnet-4-6") == 2048
    assert anthropic_minimum("claude-opus-5") == 512
    assert anthropic_minimum("claude-sonnet-4-5") == 1024
    assert anthropic_minimum(None) == 1024


def test_provider_miss_when_the_prefix_is_identical_and_alive():
    bodies = claude_code_turns(3, system=big_system())
    pred, v = analyse(bodies[1], bodies[2], usage=usage(4000, 0, 4000))
    assert pred.predicted_read > 0 and pred.client_loss == 0
    assert v.verdict == "provider_miss" and v.lost_tokens > 0
    pred, v = analyse(bodies[1], bodies[2], usage=usage(pred.total_tokens, pred.predicted_read // 4))
    assert v.verdict == "provider_miss" and v.lost_tokens == pred.predicted_read - pred.predicted_read // 4


def test_not_requested_without_any_marker():
    a = make_anthropic_body(system=BIG, messages=[user("a")])
    b = make_anthropic_body(system=BIG, messages=[user("a"), assistant("b"), user("c")])
    pred, v = analyse(a, b, usage=usage(3000))
    assert pred.reason == "no_breakpoints" and v.verdict == "not_requested"


def test_top_level_cache_control_caches_the_last_block():
    a = make_anthropic_body(system=BIG, messages=[user("a")], cache_control=dict(EPHEMERAL))
    b = make_anthropic_body(system=BIG, messages=[user("a"), assistant("b"), user("c")], cache_control=dict(EPHEMERAL))
    pred, v = analyse(a, b, usage="expected")
    assert pred.predicted_read == COUNTER.count_prompt(canonicalize(A, a)).total
    assert pred.last_breakpoint_index == 3 and v.verdict == "hit"


def test_model_switch_loses_the_whole_cache():
    bodies = claude_code_turns(3, system=big_system())
    cur = copy.deepcopy(bodies[2])
    cur["model"] = "claude-opus-4-1"
    pred, v = analyse(bodies[1], cur, usage=usage(5000, 0, 5000))
    assert pred.reason == "model_change" and pred.predicted_read == 0
    # the cost is the switch's (another model's cache starts empty), not a break of the client's prompt
    assert (v.verdict, v.break_pointer, v.break_segment_kind) == ("model_switch", "/model", "model")
    assert v.before_prev_last_breakpoint is True and v.lost_tokens > 0


def test_tool_choice_change_keeps_tools_and_system():
    bodies = claude_code_turns(3, system=big_system())
    cur = copy.deepcopy(bodies[2])
    cur["tool_choice"] = {"type": "any"}
    pred, v = analyse(bodies[1], cur, usage="expected")
    sys_tokens = COUNTER.count_prompt(canonicalize(A, bodies[1])).prefix_tokens(5)
    assert pred.predicted_read == sys_tokens and pred.reason == "params_change"
    assert (v.verdict, v.break_pointer, v.break_segment_kind) == ("client_break", "/tool_choice", "params")


def test_lookback_beyond_twenty_blocks_misses_the_previous_entry():
    system = big_system()
    msgs = [user([text("go", cache_control=dict(EPHEMERAL))])]
    a = make_anthropic_body(system=system, tools=default_tools(), messages=copy.deepcopy(msgs))
    msgs[0]["content"][0].pop("cache_control")
    calls = [tool_use(f"t{i}", "bash", command=str(i)) for i in range(12)]
    results = [tool_result(f"t{i}", str(i)) for i in range(12)]
    results[-1]["cache_control"] = dict(EPHEMERAL)
    b = make_anthropic_body(system=system, tools=default_tools(), messages=msgs + [assistant(calls), user(results)])
    pred, v = analyse(a, b, usage="expected")
    sys_tokens = COUNTER.count_prompt(canonicalize(A, a)).prefix_tokens(5)
    assert pred.reason == "lookback_exceeded" and pred.predicted_read == sys_tokens
    assert (v.verdict, v.break_segment_kind, v.break_pointer) == ("client_break", "lookback", "/messages/2/content/11")
    # With fewer new blocks the same structure hits.
    b_small = make_anthropic_body(
        system=system, tools=default_tools(), messages=msgs + [assistant(calls[:3]), user(results[9:])]
    )
    assert analyse(a, b_small, usage="expected")[1].verdict == "hit"


def test_lost_tokens_are_rescaled_to_provider_units():
    bodies = claude_code_turns(3, system=big_system())
    pred, _ = analyse(bodies[1], bodies[2])
    _, v = analyse(bodies[1], bodies[2], usage=usage(2 * pred.total_tokens, 0, 0))
    assert v.verdict == "provider_miss" and v.lost_tokens == 2 * pred.predicted_read


def test_unknown_without_usage_and_not_comparable():
    bodies = claude_code_turns(2, system=big_system())
    _, v = analyse(bodies[0], bodies[1], usage=None)
    assert (v.verdict, v.detail) == ("unknown", "usage not reported")
    api = "openai.responses"
    a = make_responses_body(input=BIG)
    b = make_responses_body(input="next", previous_response_id="resp_1")
    pred, v = analyse(a, b, api=api, provider="openai", usage=usage(4000, 3000))
    assert pred.reason == "not_comparable" and v.verdict == "hit"
    _, v = analyse(a, b, api=api, provider="openai", usage=usage(4000, 0))
    assert v.verdict == "unknown"


# --- OpenAI -----------------------------------------------------------------------------------


def chat_turns(n, system=BIG, model="gpt-4.1", **params):
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "start"}]
    out = [make_chat_body(messages=copy.deepcopy(msgs), model=model, **params)]
    for i in range(1, n):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"go on {i}"}]
        out.append(make_chat_body(messages=copy.deepcopy(msgs), model=model, **params))
    return out


def oa(prev, cur, gap=30.0, use=None, api=CHAT):
    return analyse(prev, cur, gap=gap, usage=use, api=api, provider="openai")


def test_openai_automatic_prefix_cache_in_128_token_steps():
    turns = chat_turns(3)
    pred, v = oa(None, turns[0], use=usage(3000))
    assert pred.family == "openai" and v.verdict == "expected_write"
    prev_total = COUNTER.count_prompt(canonicalize(CHAT, turns[1])).total
    pred, v = oa(turns[1], turns[2], use="expected")
    assert pred.predicted_read == 1024 + (prev_total - 1024) // 128 * 128
    assert pred.predicted_read % 128 == 0 and v.verdict == "hit"


def test_openai_ttl_and_extended_retention():
    turns = chat_turns(3)
    pred, v = oa(turns[1], turns[2], gap=700, use=usage(3500))
    assert pred.ttl_expired and v.verdict == "ttl_expired"
    long_lived = chat_turns(3, prompt_cache_retention="24h")
    pred, v = oa(long_lived[1], long_lived[2], gap=7200, use="expected")
    assert not pred.ttl_expired and v.verdict == "hit"


def test_openai_below_minimum_and_breaks():
    small = chat_turns(2, system="Be brief.")
    assert oa(small[0], small[1], use=usage(40))[1].verdict == "below_minimum"
    turns = chat_turns(3)
    edited = copy.deepcopy(turns[2])
    edited["messages"][0]["content"] = "v2 " + BIG  # at the start: no token of the cached prefix survives
    _pred, v = oa(turns[1], edited, use=usage(3500))
    assert (v.verdict, v.break_pointer, v.break_segment_kind) == ("client_break", "/messages/0/content", "system")
    assert v.before_prev_last_breakpoint is True
    switched = copy.deepcopy(turns[2])
    switched["model"] = "gpt-4o"
    assert oa(turns[1], switched, use=usage(3500))[1].break_pointer == "/model"
    tier = copy.deepcopy(turns[2])
    tier["service_tier"] = "flex"
    _, v = oa(turns[1], tier, use=usage(3500))
    assert (v.verdict, v.break_pointer, v.break_segment_kind) == ("client_break", "/service_tier", "params")


def test_openai_cost_uses_the_input_rate_for_rewrites():
    turns = chat_turns(3)
    pred, v = oa(turns[1], turns[2], use=usage(0, 0))  # input 0: no rescaling
    price = PRICES.lookup("gpt-4.1")
    _, v = oa(turns[1], turns[2], use=usage(pred.total_tokens, 0))
    assert v.verdict == "provider_miss"
    assert v.lost_cost_usd == pytest.approx(v.lost_tokens * (price.input - price.cache_read) / 1e6)


# --- provider diagnostics ---------------------------------------------------------------------


def test_anthropic_diagnostics_parsed_beside_ours():
    req = make_anthropic_body(diagnostics={"previous_message_id": "msg_1"})
    assert parse_provider_diagnostics(A, make_anthropic_body(), {"diagnostics": None}) is None
    first = parse_provider_diagnostics(A, make_anthropic_body(diagnostics={"previous_message_id": None}), {})
    assert first["status"] == "baseline"
    assert parse_provider_diagnostics(A, req, {"id": "msg_2"})["status"] == "no_divergence"
    assert parse_provider_diagnostics(A, req, {"diagnostics": {"cache_miss_reason": None}})["status"] == "pending"
    resp = {"diagnostics": {"cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 4200}}}
    d = parse_provider_diagnostics(A, req, resp)
    assert (d["provider"], d["comparison_id"], d["status"], d["missed_tokens"]) == (
        "anthropic",
        "msg_1",
        "system_changed",
        4200,
    )
    bodies = claude_code_turns(2, system=big_system())
    _, v = analyse(bodies[0], bodies[1], usage="expected", provider_diagnostics=d)
    assert v.provider_diagnostics is d


def test_openai_diagnostics_parsed():
    api = "openai.responses"
    req = make_responses_body(prompt_cache_options={"comparison_response_id": "resp_1"})
    assert parse_provider_diagnostics(api, make_responses_body(), {}) is None
    assert parse_provider_diagnostics(api, req, {})["status"] == "not_reported"
    resp = {
        "prompt_cache_diagnostics": {
            "type": "cache_miss",
            "cache_missed_tokens": 900,
            "reason": "tools_changed",
            "comparison_reusable_tokens": 1100,
        }
    }
    d = parse_provider_diagnostics(api, req, resp)
    assert (d["status"], d["reason"], d["missed_tokens"], d["reusable_tokens"]) == (
        "cache_miss",
        "tools_changed",
        900,
        1100,
    )
    hit = parse_provider_diagnostics(api, req, {"prompt_cache_diagnostics": {"type": "cache_hit"}})
    assert hit["status"] == "cache_hit"
    assert parse_provider_diagnostics(api, "junk", {}) is None
