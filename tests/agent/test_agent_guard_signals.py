"""Runaway guard cores: fingerprints, error families, tool policies, consecutive counting, ABAB, priority."""

from __future__ import annotations

import pytest

from ctxscope.agent.core.messages import ToolCall, ToolResult
from ctxscope.agent.guard.policy import DEFAULT_POLICY, default_policies, is_lone_search
from ctxscope.agent.guard.projection import Fingerprinter, error_family, family_label, normalise, project_step
from ctxscope.agent.guard.signals import (
    ABAB,
    NO_PROGRESS,
    POLLING,
    REPEATED_ACTION,
    REPEATED_RESULT,
    SAME_ERROR_FAMILY,
    Signal,
    SignalTracker,
    choose_reminder,
    remind_threshold,
)

POLICIES = default_policies()
KEY = b"k" * 32


def call(name, i=0, **args):
    return ToolCall(f"c{i}", name, args)


def res(c, content="ok", is_error=False, **details):
    return ToolResult(c.id, c.name, content, is_error, details)


def step(fp, n, *pairs):
    calls = tuple(c for c, _ in pairs)
    return project_step(fp, n, calls, tuple(r for _, r in pairs), POLICIES)


def run(tracker, fp, steps):
    """steps: list of lists of (call, result); returns the signals after each step as {kind: count}."""
    out = []
    for n, pairs in enumerate(steps, 1):
        out.append({s.kind: s.count for s in tracker.observe(step(fp, n, *pairs))})
    return out


# --- fingerprints -------------------------------------------------------------------------------------


def test_fingerprints_are_keyed_hmacs_stable_within_a_key_and_unlinkable_across_keys():
    a, b = Fingerprinter(KEY), Fingerprinter(b"x" * 32)
    assert a("action", "read", {"path": "secret.txt"}) == a("action", "read", {"path": "secret.txt"})
    assert a("action", "read", {"path": "secret.txt"}) != b("action", "read", {"path": "secret.txt"})
    assert "secret" not in a("action", "read", {"path": "secret.txt"})
    assert Fingerprinter().key != Fingerprinter().key and len(Fingerprinter().key) == 32
    with pytest.raises(ValueError):
        Fingerprinter(b"short")


def test_action_uses_the_policys_stable_fields():
    fp = Fingerprinter(KEY)
    c1, c2 = call("bash", command="make", timeout=10), call("bash", command="make", timeout=99)
    v1, v2 = step(fp, 1, (c1, res(c1))), step(fp, 2, (c2, res(c2)))
    assert v1.calls[0].action == v2.calls[0].action
    r1, r2 = call("read", path="a", offset=1), call("read", path="a", offset=50)
    assert step(fp, 1, (r1, res(r1))).calls[0].action != step(fp, 1, (r2, res(r2))).calls[0].action


def test_volatile_values_do_not_make_a_result_new():
    assert (
        normalise("Ran 3 tests in 0.41s at 2026-01-02T10:11:12Z, obj 0x7f3a9c0d1e2f")
        == "Ran 3 tests in <duration> at <time>, obj <addr>"
    )
    assert normalise("step 3/10 done") == "step 3/10 done"  # counters that mean progress stay


# --- error families ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,details,family",
    [
        ("boom", {"error_code": "E_LOCKED"}, "code:E_LOCKED"),
        ("Error: missing required argument(s): path", {"reason": "invalid_arguments"}, "code:invalid_arguments"),
        ("cat: a.txt: No such file or directory\n[exit code 1]", {"exit_code": 1}, "class:not_found"),
        ("Error: file not found: b.txt", {"reason": "tool_error"}, "class:not_found"),
        ("[timed out after 5 s; the command was killed]", {"timed_out": True}, "class:timeout"),
        ("HTTP 429 Too Many Requests", {}, "class:rate_limit"),
        ("bash: ./run.sh: Permission denied", {}, "class:permission_denied"),
        ("curl: (7) Failed to connect: Connection refused", {}, "class:connection"),
        ("SyntaxError: invalid syntax", {}, "class:syntax_error"),
        ("usage: tool [-h] FILE", {}, "class:invalid_arguments"),
        ("fatal: No space left on device", {}, "class:resource_exhausted"),
    ],
)
def test_error_family_prefers_codes_then_classes(content, details, family):
    assert error_family(ToolResult("1", "t", content, True, details)) == family


def test_unclassified_errors_fall_back_to_their_first_1024_characters():
    long = "weird failure " + "z" * 3000
    assert error_family(ToolResult("1", "t", long, True)) == "text:" + long[:1024]
    assert family_label("text:whatever secret") == "the same error message"
    assert family_label("class:not_found") == "not found" and family_label("code:E1") == "error code E1"


# --- tool policies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command,lone",
    [
        ("grep -rn needle src", True),
        ("rg needle", True),
        ("git grep -n needle", True),
        ("/usr/bin/grep x f", True),
        ("grep x f | wc -l", False),
        ("grep x f && echo y", False),
        ("grep x f > out", False),
        ("cat f", False),
        ("grep x $(ls)", False),
        ("git log", False),
    ],
)
def test_lone_search_commands(command, lone):
    assert is_lone_search(command) is lone


def test_grep_exit_1_in_a_shell_is_no_match_not_an_error():
    bash = POLICIES["bash"]
    c = call("bash", command="grep -rn needle .")
    assert not bash.errored(c, res(c, "(no output)\n[exit code 1]", True, exit_code=1))
    assert bash.errored(c, res(c, "grep: bad regex\n[exit code 2]", True, exit_code=2))
    piped = call("bash", command="grep needle f | head")
    assert bash.errored(piped, res(piped, "[exit code 1]", True, exit_code=1))
    for shell in ("sh", "shell", "zsh"):
        assert not POLICIES[shell].errored(c, res(c, "[exit code 1]", True, exit_code=1))


def test_grep_tool_no_matches_is_not_an_error():
    g = call("grep", pattern="x")
    assert not POLICIES["grep"].errored(g, res(g, "No matches found.", True))
    assert POLICIES["grep"].errored(g, res(g, "Error: invalid regex", True))
    assert DEFAULT_POLICY.errored(g, res(g, "No matches found.", True))  # only the policy knows


def test_polling_tools_are_judged_by_status_and_cursor():
    fp = Fingerprinter(KEY)
    t = call("task_output", task_id="build")
    same1 = step(fp, 1, (t, res(t, "compiling", status="running", cursor=10))).calls[0]
    same2 = step(fp, 2, (t, res(t, "compiling", status="running", cursor=10))).calls[0]
    moved = step(fp, 3, (t, res(t, "linking", status="running", cursor=20))).calls[0]
    assert same1.polling and same1.loop == moved.loop and same1.position == same2.position != moved.position


# --- counting --------------------------------------------------------------------------------------------


def test_consecutive_steps_count_up_and_a_break_resets():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    a, b = call("read", path="a"), call("read", path="b")
    A, B = [(a, res(a, "alpha"))], [(b, res(b, "beta"))]
    counts = run(tr, fp, [A, A, B, A, A])
    assert [c.get(REPEATED_ACTION) for c in counts] == [1, 2, 1, 1, 2]


def test_a_step_without_tool_calls_resets_everything():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    a = call("read", path="a")
    A = [(a, res(a, "alpha"))]
    run(tr, fp, [A, A])
    assert run(tr, fp, [[]]) == [{}]
    assert run(tr, fp, [A])[0][REPEATED_ACTION] == 1


def test_same_action_with_a_new_result_is_not_a_repeat():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    c = call("debugger", command="next")
    counts = run(tr, fp, [[(c, res(c, f"line {n}"))] for n in range(5)])
    assert all(REPEATED_ACTION not in x or x[REPEATED_ACTION] == 1 for x in counts)
    assert all(NO_PROGRESS not in x for x in counts)


def test_same_error_family_counts_across_varying_arguments():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    steps = []
    for n in range(3):
        c = call("read", path=f"missing{n}.txt")
        steps.append([(c, res(c, f"Error: file not found: missing{n}.txt", True, reason="tool_error"))])
    counts = run(tr, fp, steps)
    assert [c.get(SAME_ERROR_FAMILY) for c in counts] == [1, 2, 3]
    assert [c.get(REPEATED_ACTION) for c in counts] == [1, 1, 1]


def test_abab_needs_four_steps_of_alternation():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    a, b = call("read", path="a"), call("bash", command="make")
    A, B = [(a, res(a, "alpha"))], [(b, res(b, "error 2", True, exit_code=2))]
    counts = run(tr, fp, [A, B, A, B, A, B])
    assert [c.get(ABAB) for c in counts] == [None, 1, 1, 2, 2, 3]
    assert [c.get(NO_PROGRESS) for c in counts] == [None, None, 1, 2, 3, 4]
    assert SignalTracker()._alternation() == 0
    tr2 = SignalTracker()
    assert all(ABAB not in c for c in run(tr2, fp, [A, A, A, A]))  # a repeat is not an alternation


def test_polling_without_change_counts_and_moving_output_resets():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    t = call("task_status", task_id="build")
    still = [(t, res(t, "running", status="running", cursor=5))]
    counts = run(tr, fp, [still, still, still])
    assert [c.get(POLLING) for c in counts] == [1, 2, 3] and all(REPEATED_ACTION not in c for c in counts)
    tr2 = SignalTracker()
    moving = [[(t, res(t, "running", status="running", cursor=n))] for n in range(5)]
    assert all(c.get(POLLING) == 1 and NO_PROGRESS not in c for c in run(tr2, fp, moving))


def test_verified_progress_from_the_host_counts_as_progress():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    a = call("read", path="a")
    view = step(fp, 1, (a, res(a, "same")))
    tr.observe(view, "v1")
    assert any(s.kind == NO_PROGRESS for s in tr.observe(view, "v1"))
    assert not any(s.kind == NO_PROGRESS for s in tr.observe(view, "v2"))


def test_repeated_result_is_tracked_whatever_produced_it():
    fp, tr = Fingerprinter(KEY), SignalTracker()
    steps = []
    for n in range(3):
        c = call("bash", command=f"grep pattern{n} .")
        steps.append([(c, res(c, "(no output)\n[exit code 1]", True, exit_code=1))])
    counts = run(tr, fp, steps)
    assert [c.get(REPEATED_RESULT) for c in counts] == [1, 2, 3]
    assert all(SAME_ERROR_FAMILY not in c and NO_PROGRESS not in c for c in counts)


# --- thresholds and choice ----------------------------------------------------------------------------------


def test_the_reminder_threshold_is_never_below_three():
    assert remind_threshold(None) == 3 and remind_threshold(1) == 3 and remind_threshold("2") == 3
    assert remind_threshold(5) == 5 and remind_threshold("nonsense") == 3


def test_priority_no_progress_then_error_family_then_repeated_action_then_polling():
    s = lambda kind, n=3: Signal(kind, n, "")  # noqa: E731
    everything = [
        s(POLLING),
        s(REPEATED_ACTION),
        s(SAME_ERROR_FAMILY),
        s(NO_PROGRESS),
        s(ABAB, 9),
        s(REPEATED_RESULT, 9),
    ]
    assert choose_reminder(everything, 3).kind == NO_PROGRESS
    assert choose_reminder(everything[:3], 3).kind == SAME_ERROR_FAMILY
    assert choose_reminder(everything[:2], 3).kind == REPEATED_ACTION
    assert choose_reminder(everything[:1], 3).kind == POLLING
    assert choose_reminder([s(ABAB, 9), s(REPEATED_RESULT, 9)], 3) is None  # observe-only signals
    assert choose_reminder([s(NO_PROGRESS, 2), s(POLLING, 3)], 3).kind == POLLING  # under threshold: not eligible


def test_an_externalised_output_is_fingerprinted_by_its_content_not_its_receipt():
    fp = Fingerprinter(KEY)
    c = call("bash", command="cat big.log")

    def moved(n, sha):
        path = f"/home/s/artifacts/t1s{n}-bash-c0.txt"
        return res(
            c,
            f"Tool output moved to a file: {path}",
            externalized={"artifact": path, "bytes": 204800, "wrapped": False, "sha256": sha},
        )

    a, b, other = (step(fp, n, (c, moved(n, sha))) for n, sha in ((1, "ab" * 32), (2, "ab" * 32), (3, "cd" * 32)))
    assert a.calls[0].result == b.calls[0].result and a.calls[0].pair == b.calls[0].pair
    assert other.calls[0].result != a.calls[0].result  # a different output behind the same kind of receipt
    tr = SignalTracker()
    counts = run(tr, fp, [[(c, moved(n, "ab" * 32))] for n in range(1, 4)])
    assert [x.get(REPEATED_ACTION) for x in counts] == [1, 2, 3]


def test_the_error_family_signal_says_whether_the_arguments_changed():
    from ctxscope.agent.guard.reminder import reminder_text

    def last_family(steps):
        fp, tr = Fingerprinter(KEY), SignalTracker()
        signals = []
        for n, pairs in enumerate(steps, 1):
            signals = tr.observe(step(fp, n, *pairs))
        return next(s for s in signals if s.kind == SAME_ERROR_FAMILY)

    same_call = call("read", path="missing.txt")
    repeated = last_family([[(same_call, res(same_call, "Error: file not found", True))] for _ in range(3)])
    varied_calls = [call("read", path=f"missing{n}.txt") for n in range(3)]
    varied = last_family([[(c, res(c, f"Error: file not found: {c.arguments['path']}", True))] for c in varied_calls])
    assert (repeated.count, repeated.varied, varied.count, varied.varied) == (3, False, 3, True)
    assert "even though the arguments changed" not in reminder_text(repeated)
    assert "the same call" in reminder_text(repeated) and "not found" in reminder_text(repeated)
    assert "even though the arguments changed" in reminder_text(varied)
