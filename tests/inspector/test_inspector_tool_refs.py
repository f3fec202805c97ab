"""ToolRefs layered on a base prompt's must say what refs built from scratch say."""

from __future__ import annotations

import random

from ctxscope.inspector.analyses.canonical_prompt import Segment
from ctxscope.inspector.analyses.tool_refs import ToolRefs


def _seg(kind, ref, name=None):
    return Segment("/x", kind, None, "", f"{kind}{ref}{name}", ref=ref, name=name)


def _naive_refs(segments):
    names = {s.ref: s.name for s in segments if s.kind == "tool_call" and s.ref}
    return names, {s.ref for s in segments if s.kind == "tool_result" and s.ref}


def test_tool_refs_layered_on_a_base_equal_refs_built_from_scratch():
    rng = random.Random(3)
    pool = [
        _seg(
            rng.choice(("tool_call", "tool_result", "user_text")),
            rng.choice(("a", "b", "c", "d", "", None)),
            rng.choice(("read", "write")),
        )
        for _ in range(300)
    ]
    segments, refs = [], ToolRefs.of([])
    for step in range(60):  # keep some, drop the rest, add new ones; layers fold past MAX_LAYERS
        keep = rng.randrange(max(1, len(segments) - 3), len(segments) + 1) if segments else 0
        added = rng.sample(pool, rng.randrange(4))
        refs = ToolRefs.of(added, refs, tuple(segments[keep:]))
        segments = segments[:keep] + added
        names, results = _naive_refs(segments)
        assert dict(refs.names) == names and set(refs.results) == results, step
        assert all(refs.names.get(r) == names.get(r) for r in "abcd") and all(
            (r in refs.results) == (r in results) for r in "abcd"
        )
        assert refs == ToolRefs.of(segments)
    assert refs._depth < ToolRefs.MAX_LAYERS
