#!/usr/bin/env python
"""ctxscope at scale: a large store, every read of it timed, and capture under sustained load.

1. The store (``scale_build.py``): ``--calls`` calls in ``--sessions`` sessions (default 100,000 in
   1,000; the first, the long session, of ``--long-calls`` = 1,000, the others ~99 each), plus a
   session growing until its prompt reaches ``--big-tokens`` (default 1M: about 880 calls of
   ~5 KB new content each), stored through the writer's ingest. ``--store DIR`` keeps it by its
   parameters, so a rerun skips the build.
2. The installed ``ctxscope serve`` on it: the whole store's CLI commands (``sessions``, ``stats``,
   ``search``, ``db status``), and for the long, a typical and the big session ``calls``,
   ``findings``, ``advise``, ``export --format har`` (seconds, peak RSS), the JSON endpoints the UI
   reads (seconds, bytes), pages in headless Chromium (the sessions list, the long session's page
   and its findings panel, the big session's last call and its diff with the first), and the
   daemon's RSS at rest, after the reads and ``--settle`` seconds later (``scale_measure.py``).
3. Sustained load (``scale_load.py``): ``--senders`` SDK clients for ``--load-seconds`` beside
   ``--hogs`` CPU hogs through a fresh daemon: calls sent and calls stored.
4. The held-out targets, one PASS/FAIL line each.

    .venv/bin/python bench/scale.py --store /tmp/ctxscope-scale    # full size: ~25 min build, then ~15 min
    .venv/bin/python bench/scale.py --quick                         # a smoke run, about a minute
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_measure
from scale_build import BIG, LONG, TYPICAL, Size, stored_store
from scale_load import LoadResult, sustained
from scale_measure import APP_READY, FINDINGS_SHOWN, Daemon, Figures, endpoints, pages, session_cli, store_cli

MB = 2**20
SESSIONS_SHOWN = "table.grid.sessions tbody tr"


def targets(figures: Figures, rss: tuple[int, int], load: LoadResult) -> list[tuple[bool, str]]:
    """The held-out checks of the scale work, judged on this run's figures."""
    s, b = figures.seconds, figures.size
    out: list[tuple[bool, str]] = []
    for cmd in ("findings", "advise"):
        t, mb = s.get(("cli", "long", cmd), float("inf")), b.get(("cli", "long", cmd), 1 << 40) / MB
        out.append((t < 2 and mb < 200, f"`{cmd}` of the long session: {t:.2f} s (< 2 s), +{mb:.0f} MB (< +200 MB)"))
    panel = s.get(("page", "findings panel"), float("inf"))
    out.append((panel < 2, f"the long session's findings panel: {panel:.2f} s (< 2 s)"))
    call = b.get(("api", "big", "call"), 1 << 40)
    out.append((call < MB, f"call API of the big session's last call, first load: {call:,} B (< 1 MB)"))
    har = b.get(("cli", "typical", "export"), 1 << 40) / MB
    out.append((har < 150, f"`export --format har` of the typical session: +{har:.0f} MB (< +150 MB)"))
    rest, later = rss
    out.append(
        (later <= rest * 1.2, f"daemon after the reads: {later / MB:.0f} MB vs {rest / MB:.0f} MB at rest (within 20%)")
    )
    out.append((load.lost == 0 and load.sent > 0, f"sustained load: {load.sent:,} sent, {load.lost:,} lost (0)"))
    return out


def commit() -> str:
    try:
        here = Path(__file__).resolve().parent
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True).stdout
        return head.stdout.strip() + (" (uncommitted changes)" if dirty.strip() else "")
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[1])
    ap.add_argument("--quick", action="store_true", help="a smoke run: 600 calls, a 60K-token session, 10 s of load")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--long-calls", type=int, default=1_000)
    ap.add_argument("--big-tokens", type=int, default=1_000_000)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--load-seconds", type=float, default=60)
    ap.add_argument("--settle", type=float, default=30, help="seconds after the reads before the last RSS")
    ap.add_argument("--cap", type=float, default=300, help="seconds before a CLI command or endpoint is stopped")
    ap.add_argument("--store", type=Path, help="keep the built store here, reused by a rerun of the same size")
    args = ap.parse_args()
    if args.quick:
        args.calls, args.sessions, args.long_calls, args.big_tokens = 600, 6, 200, 60_000
        args.load_seconds, args.settle = 10, 5
    scale_measure.CAP[0] = args.cap
    size = Size(args.calls, args.sessions, args.long_calls, args.big_tokens)
    print(f"commit {commit()}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    figures = Figures()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        db, _ = stored_store(args.store or tmp / "store", size)
        home = tmp / "home"
        home.mkdir()
        daemon = Daemon(home, db)
        try:
            time.sleep(5)
            resting = daemon.rss()
            print(f"\ndaemon RSS at rest: {resting / MB:.0f} MB")
            store_cli(daemon, figures)
            ends = {}
            for label, session in (("long", LONG), ("typical", TYPICAL), ("big", BIG)):
                session_cli(daemon, session, label, tmp, figures)
                ends[label] = endpoints(daemon, session, label, figures)
            first, last = ends["big"]
            pages(
                daemon,
                [
                    ("sessions list", "#/", SESSIONS_SHOWN),
                    ("long session", f"#/session/{LONG}", APP_READY),
                    ("findings panel", f"#/session/{LONG}", FINDINGS_SHOWN),
                    ("big session's call", f"#/call/{last}", APP_READY),
                    ("big session's diff", f"#/diff/{last}/{first}", APP_READY),
                ],
                figures,
            )
            after = daemon.rss()
            time.sleep(args.settle)
            later = daemon.rss()
            print(
                f"\ndaemon RSS: at rest {resting / MB:.0f} MB, after the reads {after / MB:.0f} MB, "
                f"{args.settle:.0f} s later {later / MB:.0f} MB ({later / max(1, resting):.2f}x rest)"
            )
        finally:
            print(f"SIGTERM to exit: {daemon.stop():.1f} s")
        load = sustained(tmp, args.senders, args.load_seconds, args.hogs)
    print("\nheld-out targets:")
    results = targets(figures, (resting, later), load)
    for ok, line in results:
        print(f"  {'PASS' if ok else 'FAIL'}  {line}")
    print(f"{sum(ok for ok, _ in results)}/{len(results)} targets pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
