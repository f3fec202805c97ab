#!/usr/bin/env python
"""The whole-store reads before and after the per-session totals, on copies of one store.

Each read runs as its own process: the CLI's ``sessions``, ``stats``, ``search cache`` and ``db
status`` (``--db`` a copy of the store), and the sessions endpoint's work (``list_session_overviews``
of 500 sessions, keys masked, JSON-encoded, as ``web/api.py`` answers it, without the HTTP round
trip). "before" runs the code of ``--base-tree`` (a checkout of an older commit, e.g. ``git archive
<commit> | tar x -C DIR``) with this environment's dependencies, on an untouched copy; "after" runs
this checkout on a second copy, which the first open migrates (the migration's time is printed).
Each figure is the best of ``--reps`` runs with a cold page cache (the copy is evicted with
``posix_fadvise`` before each run) and the best of ``--reps`` warm runs: wall seconds and the
process's CPU seconds (user + system), since on a shared machine the wall time mostly measures the
other jobs.

    .venv/bin/python bench/whole_store.py --store /tmp/scale.db --base-tree /tmp/base
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
READS = (("sessions",), ("stats",), ("search", "cache"), ("db", "status"), ("endpoint: sessions",))

# Runs the ctxscope of another tree: the editable install's finder is pointed at it.
_RUN = """
import json, sys, time
tree = sys.argv[1]
if tree:
    import __editable___ctxscope_0_1_0_finder as finder
    for name, path in list(finder.MAPPING.items()):
        finder.MAPPING[name] = path.replace(sys.argv[2], tree)
args = sys.argv[3:]
if args == ["endpoint: sessions"]:
    from ctxscope.inspector.store import queries
    from ctxscope.web import api
    from ctxscope.web.overview import list_session_overviews
    db = queries.open_db(os.environ["WHOLE_STORE_DB"])
    rows = api._masked(db, list_session_overviews)
    body = json.dumps({"sessions": rows})
    print(f"{len(rows)} sessions, {len(body):,} B", file=sys.stderr)
    sys.exit(0)
from ctxscope.main import main
sys.argv = ["ctxscope", *args, "--db", os.environ["WHOLE_STORE_DB"]]
sys.exit(main())
"""


def evict(path: Path) -> None:
    for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if f.exists():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run(tree: str, db: Path, args: tuple[str, ...]) -> tuple[float, float, str]:
    """(wall s, CPU s, its last line on stderr) of one read in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", "import os\n" + _RUN, tree, str(HERE), *args],
        env={**os.environ, "WHOLE_STORE_DB": str(db)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr[-2000:]}")
    return wall, cpu, (done.stderr.strip().splitlines() or [""])[-1]


def best(tree: str, db: Path, args: tuple[str, ...], reps: int, cold: bool) -> tuple[float, float, str]:
    runs = []
    for _ in range(reps):
        if cold:
            evict(db)
        runs.append(run(tree, db, args))
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a built store (e.g. bench/scale.py's)")
    ap.add_argument("--base-tree", type=Path, help="a checkout of the code to compare with (before)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, help="where the copies go (default: a temporary folder)")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="whole-store-"))
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    size = a.store.stat().st_size / 2**20
    print(f"store {a.store} ({size:.0f} MB); load {load[0]:.1f} {load[1]:.1f} on {os.cpu_count()} cores")
    trees = {"after": ""}
    if a.base_tree:
        trees = {"before": str(a.base_tree.resolve()), "after": ""}
    copies = {}
    for name in trees:
        copies[name] = work / f"{name}.db"
        shutil.copyfile(a.store, copies[name])
    evict(copies["after"])
    wall, cpu, _ = run("", copies["after"], ("db", "status"))
    print(f"after: first open (migrations, m020's backfill) with db status: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"\n{'read':<22}" + "".join(f"{n + ' cold':>22}{n + ' warm':>22}" for n in trees) + "   (wall s / CPU s)")
    for args in READS:
        line, note = f"{' '.join(args):<22}", ""
        for name, tree in trees.items():
            for cold in (True, False):
                wall, cpu, note = best(tree, copies[name], args, a.reps, cold)
                line += f"{wall:>13.2f} /{cpu:>6.2f}  "
        print(line + (f"  {note}" if args[0].startswith("endpoint") else ""))
    if not a.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
