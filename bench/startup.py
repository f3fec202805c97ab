#!/usr/bin/env python
"""How fast `ctxscope` starts: `--help` and the quick commands, whole process, timed from outside.

The commands import what they need when they run (the agent runtime, aiohttp, sqlite-utils), so
asking for help or a path does not pay for them. This runs each command ``--runs`` times after one
warm-up and prints the median wall time, and the modules an import of the CLI pulls in:

    .venv/bin/python bench/startup.py            # 7 runs of each
    farm-bench -n 9 -- .venv/bin/ctxscope --help  # the same, by the farm's timer

Measured figures go in the report that changes them, not here.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXE = Path(sys.executable).with_name("ctxscope")
COMMANDS = [["--help"], ["--version"], ["db", "path"], ["calls", "--help"], ["agent", "--help"]]
HEAVY = ("aiohttp", "sqlite_utils", "ctxscope.agent.host", "tiktoken")


def median_wall(args: list[str], runs: int) -> float:
    subprocess.run([str(EXE), *args], capture_output=True, check=True)  # warm-up: page cache, .pyc files
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([str(EXE), *args], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def heavy_imports() -> list[str]:
    """The heavy packages `import ctxscope.main` loads (none is the goal)."""
    code = "import sys, ctxscope.main; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return [name for name in HEAVY if name in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    for command in COMMANDS:
        print(
            f"ctxscope {' '.join(command):<16} median {median_wall(command, args.runs) * 1000:6.0f} ms "
            f"({args.runs} runs)"
        )
    print(f"heavy modules loaded by `import ctxscope.main`: {', '.join(heavy_imports()) or 'none'}")


if __name__ == "__main__":
    main()
