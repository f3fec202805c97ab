"""The scripted session `ctxscope demo` runs: a workspace, the user's turns and the simulated model's answers.

Our agent talks through the proxy to the built-in simulator, which answers from a script set
before each turn. Window 32,000 tokens and 8,192 output tokens give a trigger line (and input
limit) of 15,616 tokens, so a few dozen KiB of tool output cross it. Each turn is there to make
one effect of the agent happen for real, by its own rules:

1. a 80 KiB command output: ``tool_output_externalized`` (and the first round's ``reminder``);
2. a todo list and 16 file reads: the tool-result watermark (``tool_results_archived``, as a
   ``compaction``) and, 15 steps after the last todowrite, a ``todo_reminder``;
3. a 44 KiB design document: past the trigger line, the next request is compacted first
   (``checkpoint``; ``compaction``, the has_compaction_before side);
4. the model runs the same failing command three times: ``guard_signal`` and ``guard_reminder``;
5. tools succeed, then an empty answer: ``empty_answer_retry``;
6. ``/compact``: a manual checkpoint, shown on the next turn's first request;
7. a sub-agent: no script at all, the simulator plays a small agent (it hands the task to the
   ``task`` tool; the child lists the workspace and reads the README), and the inspector shows the
   child's calls as a side thread of the session.

The texts are ours; files are generated, deterministic and harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WINDOW = 32_000
OUTPUT = 8_192
MODEL = "claude-sonnet-4-5"
MODULES = 16
SETTINGS = {
    # Small lines so a short session crosses them (the defaults are 256 KiB).
    "toolResultCompaction": {"watermarkKiB": 32, "minSavingsKiB": 12, "keepRecentRounds": 3},
}
_WORDS = (
    "request",
    "handler",
    "cache",
    "budget",
    "session",
    "token",
    "marker",
    "stream",
    "window",
    "summary",
    "module",
    "config",
    "parser",
    "history",
    "artifact",
    "reminder",
)


@dataclass(frozen=True)
class DemoTurn:
    title: str  # what the progress line says the turn does
    expect: tuple[str, ...]  # marker kinds this turn is there to produce
    text: str | None  # the user's input; None: ``/compact`` with ``compact`` as instructions
    steps: list[dict] = field(default_factory=list)  # the simulator's answers, in order
    compact: str | None = None
    agentic: bool = False  # no script: the simulator's own small agent answers (and the sub-agent's calls)


def _words(n: int, k: int = 8) -> str:
    return " ".join(_WORDS[(n * 5 + i * 3) % len(_WORDS)] for i in range(k))


def log_text(kib: int) -> str:
    lines: list[str] = []
    n = 0
    while sum(len(x) + 1 for x in lines) < kib * 1024:
        level = "ERROR" if n % 97 == 13 else "WARN" if n % 11 == 5 else "INFO"
        stamp = f"2026-11-30T06:{n // 60 % 60:02d}:{n % 60:02d}Z"
        lines.append(f"{stamp} {level} worker-{n % 4} {_words(n)} id={n * 37 % 9973}")
        n += 1
    return "\n".join(lines) + "\n"


def module_text(i: int, kib: float = 3.2) -> str:
    out = [f'"""Module {i:02d}: {_words(i, 5)}."""', ""]
    n = 0
    while sum(len(x) + 1 for x in out) < kib * 1024:
        out += [
            f"def step_{i:02d}_{n:02d}(value):",
            f'    """{_words(i * 31 + n, 9)}."""',
            f"    return value * {n + 2} + {i}  # {_words(n + i, 4)}",
            "",
        ]
        n += 1
    return "\n".join(out)


def design_text(kib: int) -> str:
    out, n = ["# Design notes", ""], 0
    while sum(len(x) + 1 for x in out) < kib * 1024:
        if n % 12 == 0:
            out += [f"## Part {n // 12 + 1}", ""]
        out.append(
            f"{n + 1}. The {_words(n, 3)} keeps its {_words(n + 7, 4)} until the {_words(n + 3, 2)} "
            f"is flushed (rule {n * 13 % 97})."
        )
        n += 1
    return "\n".join(out) + "\n"


def make_workspace(root: Path) -> Path:
    """The files the scripted turns work on."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "server.log").write_text(log_text(80))
    src = root / "src"
    src.mkdir(exist_ok=True)
    for i in range(1, MODULES + 1):
        (src / f"module_{i:02d}.py").write_text(module_text(i))
    docs = root / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "design.md").write_text(design_text(44))
    (root / "README.md").write_text("# demo project\n\nA small service used by `ctxscope demo`.\n")
    return root


def checkpoint_summary() -> str:
    """The simulated model's checkpoint: all eight sections, so validation says ``exact``."""
    body = {
        "Goal": "Review the demo service: its log, its modules under src/ and docs/design.md.",
        "Constraints & Preferences": "Change nothing; report findings only.",
        "Completed Work": "Read server.log (errors every 97 lines), reviewed src/module_01.py to module_16.py, "
        "read docs/design.md.",
        "Current State": "Review written; todo items 2 and 3 still open.",
        "Blockers": "None.",
        "Key Decisions": "Treat the step_* functions as pure helpers.",
        "Pending User Asks": "None beyond the open todo items.",
        "Critical Context & Relevant Files": "server.log, src/module_*.py, docs/design.md",
    }
    from ctxscope.agent.context.compaction.checkpoint import SECTIONS  # at run time: quick start-up

    return "\n".join(f"## {s}\n{body.get(s, '-')}" for s in SECTIONS)


def checkpoint_steps(n: int = 2) -> list[dict]:
    """Answers reserved for checkpoint requests (taken only by a request carrying the control tag)."""
    from ctxscope.agent.context.compaction.checkpoint import CONTROL_OPEN

    return [{"match": CONTROL_OPEN, "text": checkpoint_summary()} for _ in range(n)]


def _call(name: str, **arguments: Any) -> dict:
    return {"name": name, "arguments": arguments}


TODOS = [
    {"id": "1", "content": "Review every module under src/", "status": "in_progress"},
    {"id": "2", "content": "List the functions that look risky", "status": "pending"},
    {"id": "3", "content": "Write the review summary", "status": "pending"},
]


def turns() -> list[DemoTurn]:
    reads = [{"tool_calls": [_call("read", path=f"src/module_{i:02d}.py")]} for i in range(1, MODULES + 1)]
    done_first = [dict(t, status="completed") if t["id"] == "1" else t for t in TODOS]
    return [
        DemoTurn(
            "a command prints 80 KiB: the output goes to an artifact, a receipt takes its place",
            ("tool_output_externalized", "reminder"),
            "What went wrong in server.log?",
            [
                {"text": "Let me look at the whole log.", "tool_calls": [_call("bash", command="cat server.log")]},
                {"tool_calls": [_call("grep", pattern="ERROR", glob="*.log", max_results=5)]},
                {"text": "The log shows a recurring ERROR from the workers every 97 lines; the rest is routine."},
            ],
        ),
        DemoTurn(
            "a todo list and 16 file reads: old tool results are archived, then a todo nudge",
            ("tool_results_archived", "compaction", "todo_reminder"),
            "Review every module under src/ and keep a todo list while you do it.",
            [
                {"tool_calls": [_call("todowrite", todos=TODOS)]},
                *reads,
                {"tool_calls": [_call("todowrite", todos=done_first)]},
                {"text": f"I reviewed all {MODULES} modules; each defines small step_* helpers."},
            ],
        ),
        DemoTurn(
            "a 44 KiB design document crosses the trigger line: a checkpoint summary replaces the history",
            ("checkpoint", "compaction"),
            "Now read docs/design.md and tell me whether the modules follow it.",
            [
                {"tool_calls": [_call("read", path="docs/design.md")]},
                {"text": "The modules follow the design notes: every step_* helper is pure, as part 1 asks."},
            ],
        ),
        DemoTurn(
            "the same failing command three times: the runaway guard notices and says so once",
            ("guard_signal", "guard_reminder"),
            "Where are the settings loaded from? Look at config/settings.yml.",
            [
                *[{"tool_calls": [_call("bash", command="cat config/settings.yml")]} for _ in range(3)],
                {"tool_calls": [_call("ls", path=".")]},
                {"text": "There is no config/ directory: the service has no settings file yet."},
            ],
        ),
        DemoTurn(
            "tools succeed, then an empty answer: it is asked for once more",
            ("empty_answer_retry",),
            "How many modules are there?",
            [
                {"tool_calls": [_call("bash", command="ls src | wc -l")]},
                {"empty": True},
                {"text": f"There are {MODULES} modules under src/."},
            ],
        ),
        DemoTurn("/compact: a manual checkpoint", (), None, [], compact="keep the list of open todo items"),
        DemoTurn(
            "the first request after /compact carries the summary",
            ("checkpoint", "compaction"),
            "What is still open?",
            [{"text": "Items 2 and 3 of the todo list are open: the risky functions and the summary."}],
        ),
        DemoTurn(
            "a sub-agent lists the workspace and reads the README: a child thread of the session",
            (),
            "Ask a sub-agent to list the files and read the README.",
            agentic=True,
        ),
    ]


EXPECTED = (
    "tool_output_externalized",
    "tool_results_archived",
    "checkpoint",
    "compaction",
    "reminder",
    "todo_reminder",
    "guard_signal",
    "guard_reminder",
    "empty_answer_retry",
)
