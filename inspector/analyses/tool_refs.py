"""Which tool calls and results a prompt holds, kept up to date from call to call.

markers.py and effects.py ask, for the few tool results new in a call, the name of the call they
answer and whether the predecessor already had a result for it. Walking every segment of both
prompts for that costs as much as the whole history. ``ToolRefs`` answers from dicts that
incremental.py builds from the base prompt's: a small layer with what the new prompt adds or lacks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxscope.inspector.analyses.canonical_prompt import Segment


class ToolRefs:
    """The tool call ids of a prompt: ``names`` maps each to the name of its last call, ``results``
    holds the ids that have a tool result.

    Built from a similar prompt's refs (``of`` with ``base``): a small layer with what this prompt
    adds or lacks on top of the base's, so a call costs about its new segments. Layers keep counts
    and name lists, so taking segments away is exact; past ``MAX_LAYERS`` they fold into one.
    """

    MAX_LAYERS = 16
    __slots__ = ("_below", "_calls", "_depth", "_results")

    def __init__(
        self, calls: dict[str, tuple[str | None, ...]], results: dict[str, int], below: ToolRefs | None = None
    ):
        self._calls = calls  # ref -> names of all its calls in prompt order; () once none is left
        self._results = results  # ref -> number of tool results with it; 0 once none is left
        self._below = below
        self._depth: int = below._depth + 1 if below is not None else 0

    def calls_of(self, ref: str) -> tuple[str | None, ...]:
        layer: ToolRefs | None = self
        while layer is not None:
            if ref in layer._calls:
                return layer._calls[ref]
            layer = layer._below
        return ()

    def results_of(self, ref: str) -> int:
        layer: ToolRefs | None = self
        while layer is not None:
            if ref in layer._results:
                return layer._results[ref]
            layer = layer._below
        return 0

    @property
    def names(self) -> Mapping[str, str | None]:
        return _Names(self)

    @property
    def results(self) -> AbstractSet[str]:
        return _Results(self)

    def flat(self) -> tuple[dict[str, tuple[str | None, ...]], dict[str, int]]:
        """(ref -> call names, ref -> result count) in one dict each, refs without any left out."""
        layers: list[ToolRefs] = []
        layer: ToolRefs | None = self
        while layer is not None:
            layers.append(layer)
            layer = layer._below
        calls: dict[str, tuple[str | None, ...]] = {}
        results: dict[str, int] = {}
        for layer in reversed(layers):
            calls.update(layer._calls)
            results.update(layer._results)
        return {k: v for k, v in calls.items() if v}, {k: n for k, n in results.items() if n}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolRefs) and self.flat() == other.flat()

    def __repr__(self) -> str:
        calls, results = self.flat()
        return f"ToolRefs({len(calls)} called, {len(results)} with results, {self._depth + 1} layers)"

    @classmethod
    def of(cls, segments: Sequence[Segment], base: ToolRefs | None = None, dropped: Sequence[Segment] = ()) -> ToolRefs:
        """The refs of ``segments``; with ``base``, of the prompt ``base`` describes without its
        trailing segments ``dropped``, followed by ``segments``."""
        calls: dict[str, tuple[str | None, ...]] = {}
        results: dict[str, int] = {}

        def names(ref: str) -> tuple[str | None, ...]:
            return calls[ref] if ref in calls else base.calls_of(ref) if base is not None else ()

        def count(ref: str) -> int:
            return results[ref] if ref in results else base.results_of(ref) if base is not None else 0

        for seg in reversed(dropped if base is not None else ()):  # the last of their refs in base
            if seg.ref and seg.kind == "tool_call":
                calls[seg.ref] = names(seg.ref)[:-1]
            elif seg.ref and seg.kind == "tool_result":
                results[seg.ref] = count(seg.ref) - 1
        for seg in segments:
            if seg.ref and seg.kind == "tool_call":
                calls[seg.ref] = names(seg.ref) + (seg.name,)
            elif seg.ref and seg.kind == "tool_result":
                results[seg.ref] = count(seg.ref) + 1
        if base is None:
            return cls(calls, results)
        if base._depth + 1 >= cls.MAX_LAYERS:  # fold, so a look-up stays a few dict probes
            below_calls, below_results = base.flat()
            below_calls.update(calls)
            below_results.update(results)
            return cls({k: v for k, v in below_calls.items() if v}, {k: n for k, n in below_results.items() if n})
        return cls(calls, results, base)


class _Names(Mapping):
    """ref -> name of its last call, looked up through the layers."""

    def __init__(self, refs: ToolRefs):
        self._refs = refs

    def __getitem__(self, ref: str) -> str | None:
        names = self._refs.calls_of(ref)
        if not names:
            raise KeyError(ref)
        return names[-1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._refs.flat()[0])

    def __len__(self) -> int:
        return len(self._refs.flat()[0])


class _Results(AbstractSet):
    """The refs with at least one tool result, looked up through the layers."""

    def __init__(self, refs: ToolRefs):
        self._refs = refs

    def __contains__(self, ref: object) -> bool:
        return isinstance(ref, str) and self._refs.results_of(ref) > 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._refs.flat()[1])

    def __len__(self) -> int:
        return len(self._refs.flat()[1])
