"""The proxy bench's report: medians across rounds, paired ratios, CPU per request, the capture check."""

from __future__ import annotations

import json
import statistics
import subprocess

from proxy_bench_load import PHASES, Phase
from proxy_bench_procs import VENV_BIN, Target


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def med(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def paired(a: Target, b: Target, phase: str, fn, op) -> float:
    return med([op(fn(x), fn(y)) for x, y in zip(a.results[phase], b.results[phase], strict=False)])


def _ratio(x: float, y: float) -> float:
    return x / y if y else float("nan")


def _diff(x: float, y: float) -> float:
    return x - y


def rps(p: Phase) -> float:
    return p.rps


def ttfb_p50(p: Phase) -> float:
    return 1e3 * pct(p.ttfb, 0.5)


def total_p50(p: Phase) -> float:
    return 1e3 * pct(p.latencies, 0.5)


class Pooled:
    """CPU ms per request over all rounds together: one phase's CPU is only a few 10 ms clock ticks."""

    def __init__(self, attr: str):
        self.attr = attr

    def of(self, phases: list[Phase]) -> float:
        if not phases or getattr(phases[0], self.attr) is None:
            return float("nan")
        return 1e3 * sum(getattr(p, self.attr) for p in phases) / max(1, sum(len(p.latencies) for p in phases))


cpu_ms, loop_cpu_ms, child_cpu_ms = Pooled("cpu"), Pooled("loop_cpu"), Pooled("child_cpu")


class PooledSum(Pooled):
    """The proxy process and its children together."""

    def __init__(self, *attrs: str):
        self.parts = [Pooled(a) for a in attrs]

    def of(self, phases: list[Phase]) -> float:
        return sum(p.of(phases) for p in self.parts)


total_cpu_ms = PooledSum("cpu", "child_cpu")


def figure(t: Target, phase: str, fn) -> float:
    """Median across rounds, or the pooled value for CPU."""
    phases = t.results.get(phase, [])
    return fn.of(phases) if isinstance(fn, Pooled) else med([fn(p) for p in phases])


ROWS = [  # label, phase, per-round figure, format
    ("small JSON c1   req/s", "c1", rps, "{:.0f}"),
    ("small JSON c1   p50 ms", "c1", total_p50, "{:.2f}"),
    ("small JSON c1   p99 ms", "c1", lambda p: 1e3 * pct(p.latencies, 0.99), "{:.2f}"),
    ("small JSON c32  req/s", "c32", rps, "{:.0f}"),
    ("small JSON c32  p50 ms", "c32", total_p50, "{:.2f}"),
    ("small JSON c32  p99 ms", "c32", lambda p: 1e3 * pct(p.latencies, 0.99), "{:.2f}"),
    ("stream 200ch    TTFB p50 ms", "stream", ttfb_p50, "{:.2f}"),
    ("stream 200ch    TTFB p99 ms", "stream", lambda p: 1e3 * pct(p.ttfb, 0.99), "{:.2f}"),
    ("stream 200ch    total p50 ms", "stream", total_p50, "{:.2f}"),
    ("stream 200ch    total p99 ms", "stream", lambda p: 1e3 * pct(p.latencies, 0.99), "{:.2f}"),
    ("paced stream    TTFB p50 ms", "paced", ttfb_p50, "{:.2f}"),
    ("paced stream    total p50 ms", "paced", total_p50, "{:.2f}"),
    ("1 MB body c1    req/s", "upload", rps, "{:.1f}"),
    ("1 MB body c1    p50 ms", "upload", total_p50, "{:.2f}"),
    *((f"proxy CPU ms/req   {ph}", ph, cpu_ms, "{:.3f}") for ph in PHASES),
    *((f"  on loop thread   {ph}", ph, loop_cpu_ms, "{:.3f}") for ph in PHASES),
    *((f"capture writer CPU ms/req {ph}", ph, child_cpu_ms, "{:.3f}") for ph in PHASES),
]
LABEL_W = max(30, *(len(row[0]) + 1 for row in ROWS))


def report(targets: list[Target], cfg) -> bool:
    w = max(12, *(len(t.name) + 2 for t in targets))
    print(f"\n{'median of ' + str(cfg.rounds) + ' rounds':<{LABEL_W}}" + "".join(f"{t.name:>{w}}" for t in targets))
    for label, phase, fn, fmt in ROWS:
        values = [figure(t, phase, fn) for t in targets]
        print(f"{label:<{LABEL_W}}" + "".join(f"{'-' if v != v else fmt.format(v):>{w}}" for v in values))
    drains = [max(figure(t, ph, lambda p: 1e3 * p.drain) for ph in PHASES) for t in targets]
    print(f"{'drain after a phase, max ms':<{LABEL_W}}" + "".join(f"{d:>{w}.0f}" for d in drains))
    errors = [sum(p.errors for ps in t.results.values() for p in ps) for t in targets]
    print(f"{'failed requests':<{LABEL_W}}" + "".join(f"{e:>{w}}" for e in errors))
    print(
        "  CPU: utime+stime per answered request, pooled over rounds, including the drain (the wait after\n"
        "  a phase until the proxy and its children used no CPU for 60 ms, i.e. the capture writer's\n"
        "  backlog). Proxy CPU: the proxy process (all threads; for ctxscope that includes the thread that\n"
        "  hands calls to the writer); loop thread: its main thread; capture writer CPU: the proxy's child\n"
        "  processes (ctxscope stores and analyses calls in one, at a lower priority).\n"
        "  Ratios and differences below are paired per round, then the median is taken."
    )
    ok = not any(errors)
    direct = targets[0]
    for loop in dict.fromkeys(t.loop for t in targets[1:]):
        mini = next(t for t in targets if t.kind == "minimal" and t.loop == loop)
        for ctx in (t for t in targets if t.loop == loop and t.kind in ("ctxscope", "nocapture", "otlp-down")):
            print(f"\n{ctx.name} vs {mini.name} and direct:")
            for ph, what in (("c1", "small JSON c1"), ("c32", "small JSON c32"), ("upload", "1 MB body c1")):
                print(
                    f"  throughput {what:<15} {paired(ctx, mini, ph, rps, _ratio):5.2f}x minimal "
                    f"{paired(ctx, direct, ph, rps, _ratio):5.2f}x direct "
                    f"(minimal: {paired(mini, direct, ph, rps, _ratio):.2f}x direct)"
                )
            for ph, name, fn in (
                ("stream", "TTFB p50", ttfb_p50),
                ("stream", "stream total p50", total_p50),
                ("paced", "paced TTFB p50", ttfb_p50),
            ):
                print(
                    f"  added {name:<17} {paired(ctx, direct, ph, fn, _diff):+6.2f} ms vs direct, "
                    f"{paired(ctx, mini, ph, fn, _diff):+6.2f} ms vs minimal "
                    f"(minimal adds {paired(mini, direct, ph, fn, _diff):+.2f} ms to direct)"
                )
            print(
                "  proxy CPU per request vs minimal: "
                + ", ".join(f"{ph} {_ratio(figure(ctx, ph, cpu_ms), figure(mini, ph, cpu_ms)):.2f}x" for ph in PHASES)
            )
            print(
                "  proxy + capture writer CPU per request vs minimal: "
                + ", ".join(
                    f"{ph} {_ratio(figure(ctx, ph, total_cpu_ms), figure(mini, ph, total_cpu_ms)):.2f}x"
                    for ph in PHASES
                )
            )
            if ctx.kind == "otlp-down":  # the same daemon with export on, to a collector that is down
                base = next(t for t in targets if t.kind == "ctxscope" and t.loop == loop)
                print(
                    "  throughput vs ctxscope with export off: "
                    + ", ".join(f"{ph} {paired(ctx, base, ph, rps, _ratio):.2f}x" for ph in ("c1", "c32", "upload"))
                )
            print(
                "  proxy + capture writer CPU per small call (c1 and c32 pooled) vs minimal: "
                f"{small_cpu_ratio(ctx, mini):.2f}x ({small_cpu_ms(ctx):.3f} vs {small_cpu_ms(mini):.3f} ms)"
            )
            if ctx.rss:
                print(
                    f"  after the bench: RSS of the process tree {sum(ctx.rss.values()):.0f} MB ("
                    + ", ".join(f"{k} {v:.0f}" for k, v in sorted(ctx.rss.items(), key=lambda kv: -kv[1]))
                    + f"; minimal passthrough {sum(mini.rss.values()):.0f} MB); idle CPU {ctx.idle:.2f}% of one "
                    f"core (minimal {mini.idle:.2f}%)"
                )
            if ctx.rss_released:
                print(
                    f"  after a minute without calls (the writer child let go and exited): RSS of the process tree "
                    f"{sum(ctx.rss_released.values()):.0f} MB ("
                    + ", ".join(f"{k} {v:.0f}" for k, v in sorted(ctx.rss_released.items(), key=lambda kv: -kv[1]))
                    + ("" if "writer child" in ctx.rss_released else "; no writer child")
                    + ")"
                )
            elif ctx.kind == "ctxscope":
                print("  the writer child did not let go and exit within 120 s without calls")
            if ctx.kind in ("ctxscope", "otlp-down"):
                print(f"  capture writer scheduling when idle: {ctx.sched}")
                ok &= check_capture(ctx)
    return ok


def check_capture(t: Target) -> bool:
    """Every call answered 200 through ctxscope must be in its capture DB with outcome ok."""
    ctl = str(VENV_BIN / "ctxscope")
    listed = subprocess.run(
        [ctl, "calls", "--db", str(t.db), "--json", "--limit", "100000000"], capture_output=True, text=True
    )
    status = subprocess.run([ctl, "db", "status", "--db", str(t.db), "--json"], capture_output=True, text=True)
    if listed.returncode or status.returncode:
        print(f"  capture check FAILED: {(listed.stderr or status.stderr).strip()[-800:]}")
        return False
    rows, st = json.loads(listed.stdout), json.loads(status.stdout)
    outcomes: dict[str, int] = {}
    for row in rows:
        outcomes[str(row.get("outcome"))] = outcomes.get(str(row.get("outcome")), 0) + 1
    writer = st.get("writer") or {}
    dropped = writer.get("dropped", 0)  # counted, not lost: a burst past the spool's or the queue's bound
    failures = {k: v for k, v in writer.items() if k not in ("last_error", "dropped") and v}
    good = len(rows) + dropped == t.sent_ok and outcomes.get("ok", 0) == len(rows) and not failures
    print(
        f"  capture: {len(rows)} calls in the DB, {t.sent_ok} answered through {t.name} (outcomes {outcomes}; "
        f"writer failures {failures or 'none'}; DB {st.get('size_bytes', 0) / 2**20:.1f} MB) -> "
        + (
            "MISMATCH"
            if not good
            else "none dropped"
            if not dropped
            else f"every call stored or counted: {dropped} dropped and recorded ({writer.get('last_error')})"
        )
    )
    return good


def small_cpu_ms(t: Target) -> float:
    """CPU ms of the proxy and its children per small call, the c1 and c32 phases pooled."""
    phases = t.results.get("c1", []) + t.results.get("c32", [])
    return total_cpu_ms.of(phases)


def small_cpu_ratio(ctx: Target, mini: Target) -> float:
    return _ratio(small_cpu_ms(ctx), small_cpu_ms(mini))


def print_last_line(targets: list[Target]) -> None:
    """The pair on the loop the daemon itself picks (uvloop when installed)."""
    loop = targets[-1].loop
    direct = targets[0]
    mini = next(t for t in targets if t.kind == "minimal" and t.loop == loop)
    ctx = next(t for t in targets if t.kind == "ctxscope" and t.loop == loop)
    c1 = paired(ctx, mini, "c1", rps, _ratio)
    c32 = paired(ctx, mini, "c32", rps, _ratio)
    ttfb = paired(ctx, direct, "stream", ttfb_p50, _diff)
    added = paired(ctx, mini, "stream", ttfb_p50, _diff)
    cpu = small_cpu_ratio(ctx, mini)
    rss = sum(ctx.rss.values())
    idle = ctx.idle if ctx.idle is not None else float("nan")
    met = c1 >= 0.9 and c32 >= 0.9 and added <= 0.2 and cpu <= 2.0 and rss <= 120 and idle < 0.05
    print(
        "targets (>= 0.90x minimal at c1 and c32; <= 0.2 ms TTFB p50 added vs minimal; CPU per small call "
        f"<= 2x minimal; RSS <= 120 MB; idle 0.0%): {'MET' if met else 'NOT MET'}"
    )
    print(f"added TTFB p50 {ttfb:.2f} ms vs direct, {added:.2f} ms vs minimal")
    print(
        f"ratio vs minimal passthrough: c1 {c1:.2f}, c32 {c32:.2f}; CPU per call {cpu:.2f}×; RSS {rss:.0f} MB; "
        f"idle {idle:.2f}%"
    )
