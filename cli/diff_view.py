"""``ctxscope diff`` for people: two calls' prompts compared, the first difference first.

Every line fits the terminal (``--wide``: whole); both excerpts of the first difference are cut
from one start so they stay aligned with the difference in view (docs/architecture.md, "Human
output fits the terminal").
"""

from __future__ import annotations

import click

from .output import fit_line, fmt_int, plural, value_words


def around(excerpts: tuple[str, str], at: int, room: int) -> tuple[str, str]:
    """Both excerpts in ``room`` characters from one start, so they stay aligned, with their
    character ``at`` (the first that differs) in view: a third of the room before it, the rest
    after; "…" marks a cut. Cut from the right only, an excerpt in a narrow terminal showed the
    shared text and hid the difference."""
    longest = max(len(e) for e in excerpts)
    start = max(0, min(at - room // 3, longest - room))

    def cut(excerpt: str) -> str:
        part = excerpt[start : start + room]
        if start > 0:
            part = "…" + part[1:]
        if start + room < len(excerpt):
            part = part[:-1] + "…"
        return part

    a, b = excerpts
    return cut(a), cut(b)


def show_diff(d: dict, width: int) -> None:
    def echo(line: str) -> None:  # each line cut to the terminal (--wide: whole)
        click.echo(fit_line(line, width))

    a, b = d["a"], d["b"]
    echo(f"a: {a['id']}  seq {a['seq']}  {a['model']}  {a['started_at']}")
    if b is None:
        echo(f"b: -  ({d['reason']})")
        return
    echo(
        f"b: {b['id']}  seq {b['seq']}  {b['model']}  {b['started_at']}"
        + ("  (a's predecessor)" if d["b_is_predecessor"] else "")
    )
    rel = d["relation"] + (f" ({d['epoch_reason']})" if d.get("epoch_reason") else "")
    echo(f"relation: {rel}" + (f"  {value_words(d['detail'])}" if d.get("detail") else ""))
    if d.get("reason"):
        echo(d["reason"])
        return
    echo(
        f"shared prefix: {fmt_int(d['shared_segments'])} segments, ~{fmt_int(d['shared_tokens'])} tokens "
        f"(a: {fmt_int(d['segments']['a'])} segments, ~{fmt_int(d['tokens']['a'])} tokens; "
        f"b: {fmt_int(d['segments']['b'])}, ~{fmt_int(d['tokens']['b'])})"
    )
    first = d.get("first_divergence")
    if first:
        echo(f"first difference at {first['pointer_a']}  (b: {first['pointer_b']})")
        text = first.get("text")
        if text:
            echo(f"  at character {fmt_int(text['offset'])}:")
            a_text, b_text = text["a_excerpt"], text["b_excerpt"]
            at = next(
                (k for k, (x, y) in enumerate(zip(a_text, b_text, strict=False)) if x != y),
                min(len(a_text), len(b_text)),
            )
            a_text, b_text = around((a_text, b_text), at, room=max(20, width - len("  b: ")))
            echo(f"  b: {value_words(b_text)}")
            echo(f"  a: {value_words(a_text)}")
        else:
            echo(f"  b: {'(missing)' if first['b_missing'] else value_words(first['b'])}")
            echo(f"  a: {'(missing)' if first['a_missing'] else value_words(first['a'])}")
    for label, key in (("added in a", "added"), ("gone from b", "removed")):
        if d[key]:
            n = len(d[key])
            echo(f"{label}: {plural(n, 'segment')}, ~{fmt_int(sum(s['tokens'] for s in d[key]))} tokens")
            for seg in d[key][:10]:
                echo(
                    f"  {seg['pointer']}  {seg['kind']}  ~{fmt_int(seg['tokens'])}  {value_words(seg['preview'])[:80]}"
                )
            if n > 10:
                echo(f"  ... {fmt_int(n - 10)} more")
    if d["resent"]["segments"]:
        echo(
            f"re-sent after the difference (no longer a cached prefix): {plural(d['resent']['segments'], 'segment')}, "
            f"~{fmt_int(d['resent']['tokens'])} tokens"
        )
    for move in d["markers"]["moved"]:
        b_mark, a_mark = (value_words(move[k]) if move[k] else "no marker" for k in ("b", "a"))
        echo(f"cache marker moved at {move['pointer']}: b {b_mark} -> a {a_mark}")
    for name, change in d["params_changed"].items():
        echo(f"param {name}: b {value_words(change['b'])} -> a {value_words(change['a'])}")
    for name, change in d["cache_policy_changed"].items():
        echo(f"cache policy {name}: b {value_words(change['b'])} -> a {value_words(change['a'])}")
