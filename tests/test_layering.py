"""The import layering of STYLE.md, kept by a test instead of by memory.

Leaves import nothing else of ours; data flows agent -> proxy -> store -> inspector -> web/CLI.
The simulator is a second, independent implementation of the wire formats: it must not import
the proxy (whose SSE and usage parsers it would otherwise share).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# package folder -> ctxscope subpackages it may import (besides itself)
ALLOWED = {
    "vocab": set(),
    "proxy": {"vocab"},
    "simulator": {"vocab"},
    "agent": {"vocab"},
    "inspector": {"proxy", "vocab"},
    "web": {"inspector", "proxy", "vocab"},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return {n[len("ctxscope."):] for n in names if n.startswith("ctxscope.")}


def test_packages_respect_the_layering():
    bad = []
    for folder, allowed in ALLOWED.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            for name in _imports(path):
                top = name.split(".")[0]
                if top == folder:
                    continue
                if not any(name == a or name.startswith(a + ".") for a in allowed):
                    bad.append(f"{path.relative_to(ROOT)} imports ctxscope.{name}")
    assert not bad, "layering violations:\n" + "\n".join(bad)


def test_every_package_folder_is_installed_under_ctxscope():
    import ctxscope.agent
    import ctxscope.inspector
    import ctxscope.proxy
    import ctxscope.simulator
    import ctxscope.web

    for mod, folder in [(ctxscope.proxy, "proxy"), (ctxscope.inspector, "inspector"), (ctxscope.agent, "agent"),
                        (ctxscope.web, "web"), (ctxscope.simulator, "simulator")]:
        assert Path(mod.__file__).parent == ROOT / folder
