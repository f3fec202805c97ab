"""The compaction ladder's rungs h0 -> htrim -> hall -> hvideo -> hmid -> hmin, local pre-checks, provider
refusals, screenshots."""

from __future__ import annotations

import pytest

from ctxscope.agent.context.compaction.engine import CompactionInput
from ctxscope.agent.context.compaction.events import context_events
from ctxscope.agent.context.compaction.history import (
    last_input_only,
    placeholder_all,
    prune_screenshots,
    reduce_middle,
    segments,
    strip_media,
)
from ctxscope.agent.core.messages import assistant_message, user_message
from ctxscope.agent.core.model import ContextOverflowError
from ctxscope.agent.providers.catalog import make_client, resolve
from ctxscope.agent.providers.retry import RetryPolicy

from support.agent_context_fixtures import filler, make_rt, manager_for, round_messages, rung_of, summary, user
from support.sim_fixtures import loop_simulator

SHOT = {"type": "image", "origin": "computer_use", "data": "..."}


def test_hall_replaces_every_result_and_keeps_calls():
    msgs = [user("go"), *round_messages("a", "secret output", error=True), *round_messages("b", "more")]
    hall = placeholder_all(msgs)
    assert [m.id for m in hall] == [m.id for m in msgs] and hall[1] == msgs[1]
    expected = "[blob result left out of this checkpoint input (13 bytes), it was an error]"
    assert hall[2].tool_results[0].content == expected
    assert "more" not in hall[4].tool_results[0].content and msgs[4].tool_results[0].content == "more"


def test_hvideo_strips_images_and_video_with_a_note():
    msgs = round_messages("a", "look", details={"media": [SHOT, {"type": "video"}]})
    out = strip_media(msgs)
    r = out[1].tool_results[0]
    assert "media" not in r.details and r.content == "look\n[2 image/video attachment(s) removed]"


def test_screenshot_pruning_keeps_the_last_two():
    msgs = [user("go")]
    for i in range(4):
        msgs += round_messages(f"s{i}", f"shot {i}", name="computer", details={"media": [SHOT]})
    msgs += round_messages("x", "a chart", details={"media": [{"type": "image", "origin": "plot"}]})
    pruned, dropped = prune_screenshots(msgs, keep=2)
    assert dropped == 2
    kept = [bool(m.tool_results[0].details.get("media")) for m in pruned if m.role == "tool"]
    assert kept == [False, False, True, True, True]  # the chart is not a computer-use screenshot
    assert "older screenshot(s) removed" in pruned[2].tool_results[0].content
    assert prune_screenshots(pruned, keep=2) == (pruned, 0)


def test_hmid_removes_middle_segments_but_keeps_the_first_and_every_user_segment():
    msgs = [user("first")]
    for i in range(6):
        msgs += round_messages(f"r{i}", "x" * 100)
        if i == 2:
            msgs.append(user("a steer in the middle"))
    segs = segments(msgs)
    assert segs[0] == (0, 1) and len(segs) == 8
    kept = reduce_middle(msgs, lambda ms: len(ms) <= 9)
    texts = [m.text or m.tool_calls[0].arguments["tag"] for m in kept if m.role != "tool"]
    assert texts == ["first", "r0", "a steer in the middle", "r4", "r5"]
    assert reduce_middle(msgs, lambda ms: False) is None  # cannot fit: the rung is skipped
    assert reduce_middle([user("only")], lambda ms: True) is None


def test_hmin_is_the_last_genuine_input_only():
    msgs = [
        user("old ask"),
        assistant_message("ok"),
        user("/compact focus on x"),
        user("the real last ask"),
        user_message("retry please", kind="retry"),
    ]
    [only] = last_input_only(msgs)
    assert only.text == "the real last ask" and only.meta["genuine_text"] == "the real last ask"


CHUNK = filler("w", 1000)


async def test_each_rung_is_checked_locally_and_refusals_walk_down_to_hmin(tmp_path):
    """h0 and hall too big locally (120k text, 90 screenshots), hvideo and hmid refused by the provider, hmin taken."""

    def checkpoint(req):
        if rung_of(req) in ("hvideo", "hmid"):
            return ContextOverflowError("prompt is too long: 200000 tokens > 100000 maximum")
        return summary()

    rt, model, s = make_rt(tmp_path, window=128_000, output=4096, checkpoint=checkpoint)
    msgs = [user("build the report")]
    for i in range(30):
        msgs += round_messages(f"r{i}", "\n".join([CHUNK] * 4), details={"media": [SHOT] * 3})
    engine = manager_for(rt).engine()
    inp = CompactionInput(s.view, 1, 1, "threshold", tuple(msgs), "sys", (), 130_000, allow_archive=False)
    out = await engine.run(inp)
    assert [(a.rung, a.outcome) for a in out.attempts] == [
        ("h0", "skipped_local"),
        ("hall", "skipped_local"),
        ("hvideo", "provider_overflow"),
        ("hmid", "provider_overflow"),
        ("hmin", "accepted"),
    ]
    assert out.replaced and out.rung == "hmin" and out.validation == "exact"
    assert [rung_of(r) for r in model.checkpoints] == ["hvideo", "hmid", "hmin"]
    hmid, hmin = model.checkpoints[1], model.checkpoints[2]
    assert len(hmid.messages) < 2 * 30 + 2 and hmid.messages[0].text == "build the report"
    assert [m.text for m in hmin.messages[:-1]] == ["build the report"]
    assert all(
        a.tokens <= engine.checkpoint_lines.provider_input_limit for a in out.attempts if a.outcome != "skipped_local"
    )


async def test_no_rung_fits_is_compaction_input_too_large_and_the_turn_goes_on(tmp_path):
    rt, _model, s = make_rt(tmp_path, checkpoint=lambda req: ContextOverflowError("prompt is too long"))
    msgs = [user("x"), *round_messages("a", "y" * 100)]
    out = await manager_for(rt).engine().run(CompactionInput(s.view, 1, 1, "threshold", tuple(msgs), "sys", (), 1))
    assert not out.replaced and out.error == "COMPACTION_INPUT_TOO_LARGE"
    assert [(a.rung, a.outcome) for a in out.attempts] == [
        (rung, "provider_overflow") for rung in ("h0", "hall", "hmid", "hmin")
    ]


@pytest.fixture
async def simulator():
    async with loop_simulator() as running:
        yield running


async def test_a_session_over_the_trigger_line_walks_the_ladder_against_the_simulator(tmp_path, simulator):
    """The simulator refuses h0 and htrim as too long (its window for the checkpoint step is 60k); hall is taken."""
    state, url = simulator
    rounds = [3000] + [14000] * 7  # 101k tokens of tool output: over the 96k trigger line of a 128k window
    state.set_script(
        [{"tool_calls": [{"name": "blob", "arguments": {"tag": f"r{i}", "tokens": n}}]} for i, n in enumerate(rounds)]
        + [{"match": "<checkpoint-request>", "context_window": 60_000, "text": summary()}, {"text": "finished"}]
    )
    client = make_client(
        resolve(
            "sim", direct=True, base_url=url + "/v1", model="gpt-sim", context_window=128_000, max_output_tokens=4096
        ),
        retry=RetryPolicy(max_retries=0),
    )
    st = {"keep_recent_rounds": 7, "min_savings_kib": 8}  # r0 alone is archivable, not enough to fit
    rt, _, s = make_rt(tmp_path, model=client, settings=st)
    try:
        r = await s.run("gather the data")
    finally:
        await rt.aclose()
    assert r.ok and r.text == "finished"
    [ev] = [e for e in context_events(s.view.dir) if e["event"] == "checkpoint"]
    assert [(a["rung"], a["outcome"]) for a in ev["attempts"]] == [
        ("h0", "provider_overflow"),
        ("htrim", "provider_overflow"),
        ("hall", "accepted"),
    ]
    assert ev["rung"] == "hall" and ev["validation"] == "exact" and ev["trigger"] == "threshold"
    assert ev["tokens_before"] > 96_000 > ev["tokens_after"]
    requests = [q for q in state.requests() if q["path"].endswith("/chat/completions")]
    checkpoint_calls = [q for q in requests if "<checkpoint-request>" in str(q["body"]["messages"][-1])]
    assert len(checkpoint_calls) == 3
    sizes = [len(str(q["body"])) for q in checkpoint_calls]
    assert sizes[0] > sizes[1] > 10 * sizes[2]
    assert "rung=htrim" in checkpoint_calls[1]["headers"]["x-ctxscope-event"]
    htrim = str(checkpoint_calls[1]["body"])
    assert "[An older" not in htrim and "Older tool result moved" in htrim  # archived with receipts, not trimmed
    last = requests[-1]
    assert "checkpoint; rung=hall; validation=exact" in last["headers"]["x-ctxscope-event"]
    assert [m["role"] for m in last["body"]["messages"]] == ["system", "user"]
    assert "gather the data" in last["body"]["messages"][1]["content"]  # the appendix keeps the ask verbatim
