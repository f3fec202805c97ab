"""An idle `ctxscope serve` (no traffic, no page open) wakes for nothing: no busy or polling loop
in the daemon, the writer child or the simulator child (docs/architecture.md, "A quiet idle daemon").
Not a speed target: a generous bound that any polling loop's steady cost would break."""

from __future__ import annotations

import os
import time
from pathlib import Path

from support.serve_process import running_serve

BOUND_MS = 200  # CPU of the whole tree in WINDOW_S: 2% of one core
WINDOW_S = 10.0
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def _tree_ticks(root: int) -> dict[int, int]:
    """utime+stime ticks of ``root`` and every process below it, from /proc."""
    parents, ticks = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2 :].split()
        parents[int(name)], ticks[int(name)] = int(rest[1]), int(rest[11]) + int(rest[12])
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in ticks:
            out[pid] = ticks[pid]
            todo.extend(p for p, parent in parents.items() if parent == pid)
    return out


def _command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def test_an_idle_serve_uses_next_to_no_cpu(tmp_path):
    with running_serve(tmp_path) as (proc, _):
        time.sleep(3)  # let start-up work (imports, migrations, the first status) finish
        before = _tree_ticks(proc.pid)
        commands = sorted(_command(pid) for pid in before)  # the simulator starts on its first request
        assert len(before) == 2 and any("ctxscope.inspector.writer.child.entry" in c for c in commands), commands
        assert not any("multiprocessing" in c or "resource_tracker" in c for c in commands), commands
        time.sleep(WINDOW_S)
        after = _tree_ticks(proc.pid)
        used = {pid: (after[pid] - before.get(pid, 0)) * TICK_MS for pid in after}
        assert sum(used.values()) < BOUND_MS, f"an idle serve used {used} ms of CPU in {WINDOW_S:.0f} s"
