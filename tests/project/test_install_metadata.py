"""pyproject.toml builds without setuptools' warnings: the license is an SPDX string (the TOML table
is deprecated; builds stop accepting it in 2027-02) and the data folders, which are not packages,
ship through package-data alone (else setuptools prints a "Package would be ignored" banner each)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_an_spdx_string_and_the_backend_supports_it():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    assert "setuptools>=77" in " ".join(meta["build-system"]["requires"])


def test_every_data_folder_ships_as_package_data_not_as_a_package():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["include-package-data"] is False
    dirs = {pkg: ROOT / folder for pkg, folder in tool["package-dir"].items()}
    data = tool["package-data"]
    for pkg in tool["packages"]:
        top = max((p for p in dirs if pkg == p or pkg.startswith(p + ".")), key=len)
        folder = dirs[top].joinpath(*pkg[len(top) :].split(".")[1:]) if pkg != top else dirs[top]
        for sub in folder.iterdir():
            if sub.is_dir() and not (sub / "__init__.py").exists() and not sub.name.startswith((".", "_")):
                files = [f for f in sub.iterdir() if f.is_file()]
                if files:
                    shipped = any(p.startswith(sub.name + "/") for p in data.get(pkg, []))
                    assert shipped, f"{pkg}: {sub.name}/ not in package-data"
