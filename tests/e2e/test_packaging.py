"""mixzoo as a plain (non-editable) ``pip install`` gets it: the wheel holds every package and the data files.

The full check (a built wheel installed into a fresh venv, then list / plugins / mix / bench run from outside the
checkout) is ``.ci/wheel-check``, which ``.ci/run`` runs after the test suite.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mixzoo
from mixzoo.core.errors import RegistryError
from mixzoo.core.registry import default_registry_path, load_registry_file

ROOT = Path(__file__).resolve().parents[2]


def test_registry_is_read_from_inside_the_package(monkeypatch):
    monkeypatch.delenv("MIXZOO_REGISTRY", raising=False)
    path = default_registry_path()
    assert Path(str(path)).parent == Path(mixzoo.__file__).resolve().parent
    assert any(s.name == "digits-std" for s in load_registry_file(path))


def test_missing_registry_named_by_the_variable_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXZOO_REGISTRY", str(tmp_path / "nope.toml"))
    with pytest.raises(RegistryError, match="nope.toml does not exist; set MIXZOO_REGISTRY to an existing file"):
        load_registry_file(default_registry_path())


def _can_build_wheels() -> bool:
    return any(importlib.util.find_spec(m) is not None for m in ("setuptools.command.bdist_wheel", "wheel"))


@pytest.mark.subprocess
def test_wheel_ships_registry_weights_and_every_package(tmp_path):
    # offline with this environment's setuptools when it can build wheels (>= 70.1 or `wheel`), else pip's isolated
    # build environment (from the package index, as `make test` installs)
    isolation = ["--no-build-isolation"] if _can_build_wheels() else []
    had_build = (ROOT / "build").exists()
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp_path),
                               str(ROOT)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        if not had_build:  # setuptools builds in the source tree
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("mixzoo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "mixzoo/registry.toml" in names
    for init in ROOT.glob("mixzoo/**/__init__.py"):
        assert init.relative_to(ROOT).as_posix() in names, f"{init} is not in the wheel"
    for init in ROOT.glob("plugins/**/__init__.py"):
        assert "mixzoo_plugins/" + init.relative_to(ROOT / "plugins").as_posix() in names
    for weights in (ROOT / "plugins" / "weights").glob("*.safetensors"):
        assert f"mixzoo_plugins/weights/{weights.name}" in names


def test_torchvision_is_bounded_by_the_release_paired_with_the_oldest_torch():
    """Every torchvision release requires one exact torch; unbounded, pip may pick a torchvision that moves torch
    below mixzoo's floor. torchvision 0.19 is the release paired with torch 2.4."""
    import tomllib

    from packaging.requirements import Requirement

    deps = {r.name: r for r in map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                                   ["dependencies"])}
    assert str(deps["torch"].specifier) == ">=2.4"
    assert "0.18.1" not in deps["torchvision"].specifier and "0.19.0" in deps["torchvision"].specifier
