"""Summary + host appendix replaces the history; post-admission; failures that let the turn go on."""

from __future__ import annotations

from ctxscope.agent.context.compaction.events import context_events
from ctxscope.agent.context.compaction.replace import (
    APPENDIX_CLOSE,
    APPENDIX_OPEN,
    POST_ADMISSION_FAILED,
    SUMMARY_INTRO,
    admit,
    build_appendix,
    render_appendix,
    summary_message,
)
from ctxscope.agent.core import activity as act
from ctxscope.agent.core.messages import assistant_message, user_message
from ctxscope.agent.providers.scripted import answer

from support.agent_context_fixtures import blob, filler, make_rt, summary, user

TRICKY = 'second ask: keep "quotes", <tags>, 中文 and\n  indented lines\n```code```'


def test_appendix_keeps_the_last_two_genuine_inputs_verbatim():
    msgs = [
        user("first ask"),
        assistant_message("ok"),
        user(TRICKY),
        user_message("please answer again", kind="retry", hidden=True),
        user_message("steer from an extension", kind="steer"),
        user_message("user steer: also check tests", kind="steer", source="cli"),
        user("/compact keep the API notes"),
    ]
    app = build_appendix(msgs, {}, turn=3, step=1)
    assert app.recent_inputs == (TRICKY, "user steer: also check tests")
    text = render_appendix(app)
    assert f'<user-request n="1">\n{TRICKY}\n</user-request>' in text
    assert "first ask" not in text and "/compact" not in text and "extension" not in text


def test_a_previous_summary_carries_its_inputs_forward():
    earlier = summary_message("old summary", build_appendix([user("ask one"), user("ask two")], {}, turn=1, step=1))
    app = build_appendix([earlier, user("ask three")], {}, turn=5, step=1)
    assert app.recent_inputs == ("ask two", "ask three")


def test_todos_cadence_background_and_subagents():
    state = {
        "todos": [
            {"id": "1", "content": "write tests", "status": "in_progress"},
            {"id": "2", "content": "ship", "status": "pending"},
        ],
        "todos_written": {"turn": 2, "step": 7},
        "background_tasks": {"build": "running"},
        "subagents": {"explorer": "done"},
    }
    app = build_appendix([user("go")], state, turn=4, step=3)
    text = render_appendix(app)
    assert "[>] write tests\n[ ] ship" in text
    assert '"todos_written": {"step": 7, "turn": 2}' in text and '"now": {"step": 3, "turn": 4}' in text
    assert '"build": "running"' in text and '"explorer": "done"' in text
    assert text.startswith(APPENDIX_OPEN) and text.endswith(APPENDIX_CLOSE)
    assert "explorer" not in render_appendix(app, with_subagents=False)


def test_the_summary_message_says_what_happened_and_marks_itself_for_the_anchor():
    msg = summary_message("## Goal\nx", build_appendix([user("go")], {}, turn=1, step=1), rung="h0")
    assert msg.role == "user" and msg.text.startswith(SUMMARY_INTRO)
    assert "<checkpoint-summary>\n## Goal\nx\n</checkpoint-summary>" in msg.text
    assert msg.meta["kind"] == "compaction_summary" and msg.meta["kept_message_count"] == 0
    assert msg.meta["recent_inputs"] == ["go"] and msg.meta["rung"] == "h0"


def test_admission_drops_the_subagent_snapshot_first():
    app = build_appendix([user("go")], {"subagents": {"big": "z" * 5000}}, turn=1, step=1)
    fits = lambda ms: (len(ms[0].text) < 3000, len(ms[0].text))  # noqa: E731
    adm = admit("summary", app, fits)
    assert adm.ok and adm.dropped == ("subagents",) and "zzz" not in adm.messages[0].text
    nothing_fits = admit("summary", app, lambda ms: (False, 99))
    assert not nothing_fits.ok and nothing_fits.error == POST_ADMISSION_FAILED


async def test_a_summary_that_does_not_fit_aborts_the_turn_with_post_admission_failed(tmp_path):
    """Window 20000 / output 4096: input limit 3616. The summary (about 3900 tokens) is within the checkpoint's
    output limit (4096) but the history it would become does not fit the next request."""
    big_summary = summary(body=filler("s", 470))
    _rt, model, s = make_rt(
        tmp_path,
        [answer("", blob("big", tokens=4000)), "never asked"],
        window=20_000,
        checkpoint=lambda req: big_summary,
        core=False,
    )
    r = await s.run("analyse it")
    assert r.outcome == act.ABORTED and r.reason.startswith(POST_ADMISSION_FAILED)
    assert len(model.main_requests) == 1 and len(model.checkpoints) == 1  # no request after the failure
    assert s.history.epoch == 0 and s.messages[0].text == "analyse it"  # nothing was replaced
    [ev] = [e for e in context_events(s.view.dir) if e.get("error")]
    assert ev["error"] == POST_ADMISSION_FAILED and ev["tokens_after"] > 3616


async def test_other_failures_are_recorded_and_the_turn_continues_uncompacted(tmp_path):
    _rt, model, s = make_rt(
        tmp_path,
        [answer("", blob("big", tokens=4000)), answer("", blob("more", tokens=50)), "answered anyway"],
        window=20_000,
        checkpoint=lambda req: "   ",
        core=False,
    )
    r = await s.run("analyse it")
    assert r.ok and r.text == "answered anyway" and s.history.epoch == 0
    second, last = model.main_requests[1:]
    assert len(second.messages) == 3  # the full history went to the provider, who has the final word
    assert "compaction_failed; stage=checkpoint; error=CHECKPOINT_INVALID" in second.headers["x-ctxscope-event"]
    assert len(model.checkpoints) == 1 and "x-ctxscope-event" not in last.headers  # not retried every step
    state = s.view.state.get("compaction")
    assert state["last"]["status"] == "failed" and state["last"]["detail"] == "empty"
