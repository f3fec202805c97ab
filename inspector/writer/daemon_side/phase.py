"""The writer supervisor's state machine: where its child is, and the moves between (docs/architecture.md,
"The writer's supervisor"). Each move asserts the phases it may start from, so a move from anywhere
else is a defect that fails loudly in the tests, not a flag quietly out of step with another. The
supervisor makes each move under its lock and does what the move means (counting, starting a child).
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    NEW = "new"  # start() not called yet
    RUNNING = "running"  # a child was started and is not known to be dead
    DOWN = "down"  # the child died or would not start; a new one is tried when the restart policy says
    RESTARTING = "restarting"  # a thread starts a new child (after a death, or waking from ASLEEP)
    ASLEEP = "asleep"  # the child was let go after an idle spell; the next call starts one
    STOPPED = "stopped"  # stop() ran: no child, and no new one


# move -> (the phases it starts from, the phase it ends in); the table docs/architecture.md shows
MOVES: dict[str, tuple[frozenset[Phase], Phase]] = {
    "started": (frozenset({Phase.NEW}), Phase.RUNNING),
    "start_failed": (frozenset({Phase.NEW, Phase.RESTARTING}), Phase.DOWN),
    "died": (frozenset({Phase.RUNNING}), Phase.DOWN),
    "fell_asleep": (frozenset({Phase.RUNNING}), Phase.ASLEEP),
    "restarting": (frozenset({Phase.DOWN, Phase.ASLEEP}), Phase.RESTARTING),
    "restarted": (frozenset({Phase.RESTARTING}), Phase.RUNNING),
    "stopped": (frozenset(Phase), Phase.STOPPED),  # stop() waits for a restart under way first
}


class SupervisorPhase:
    """The current phase; ``move`` is the only way to change it."""

    def __init__(self) -> None:
        self.now = Phase.NEW

    def move(self, name: str) -> Phase:
        """Make a move of ``MOVES``; returns the phase it left."""
        starts, to = MOVES[name]
        was = self.now
        assert was in starts, f"writer supervisor: {name} from {was.name}"
        self.now = to
        return was

    def back(self, was: Phase) -> None:
        """Undo ``restarting`` when no thread could be started to restart: back to DOWN or ASLEEP."""
        assert self.now is Phase.RESTARTING and was in MOVES["restarting"][0], was
        self.now = was
