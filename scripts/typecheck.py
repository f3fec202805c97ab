"""Run mypy over every ctxscope package, under the names it is installed by.

The folders (cli/, proxy/, agent/, ...) become ``ctxscope.*`` only through pyproject's
``package-dir`` table, which mypy cannot read, and the editable install's import hook is invisible
to it. So we lay out a tree of symlinks, ``.typecheck/ctxscope/...``, built fresh from that table on
every run, and point mypy at it. Extra arguments go to mypy.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".typecheck"


def build_tree() -> Path:
    """The symlinked ``ctxscope`` package, mirroring pyproject's package-dir table."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "ctxscope"
    top.mkdir(parents=True)
    for entry in (ROOT / table["ctxscope"]).iterdir():
        if entry.suffix == ".py" or (entry.is_dir() and (entry / "__init__.py").exists()):
            (top / entry.name).symlink_to(entry)
    for package, folder in table.items():
        if package != "ctxscope":
            (top / package.split(".", 1)[1]).symlink_to(ROOT / folder)
    return top


def main(argv: list[str]) -> int:
    top = build_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(top), *argv]
    return subprocess.call(command, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
