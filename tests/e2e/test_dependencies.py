"""Every third-party module mixzoo and its built-in plugins import is a declared dependency.

The imports are read from the source (``import x`` / ``from x import y``, and ``importlib.import_module("x")`` with a
literal name) and mapped to the distributions that provide them with ``importlib.metadata``. A module imported only
by the code of an optional feature must be declared in that feature's extra (``EXTRA_OF``); every other one in the
base dependencies. A plain ``pip install mixzoo`` then starts: nothing it imports arrives only by chance, through
another package's dependencies.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"mixzoo", "mixzoo_plugins"}
# modules whose distribution is named differently from what importlib.metadata can tell from this environment
# (compat.py imports AutoAttack under either name; PyPI's distribution is pyautoattack)
DISTRIBUTION_OF = {"autoattack": "pyautoattack", "pyautoattack": "pyautoattack"}
# optional features: the modules only their code imports, and the extra that declares them
EXTRA_OF = {"onnx": "export", "onnxruntime": "export", "onnxscript": "export"}


def imported_modules(text: str) -> set[str]:
    """Top-level names of the modules a Python source imports, first-party and standard library left out."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) ==
              "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    tops = {name.split(".")[0] for name in names}
    return {t for t in tops if t not in sys.stdlib_module_names and t not in FIRST_PARTY}


def declared() -> dict[str | None, set[str]]:
    """Canonical distribution names by extra (None: the base dependencies), as pyproject.toml declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out: dict[str | None, set[str]] = {None: {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        out[extra] = {canonicalize_name(Requirement(r).name) for r in reqs}
    return out


def source_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in ("mixzoo", "plugins"):
        for path in (ROOT / folder).rglob("*.py"):
            for module in imported_modules(path.read_text()):
                found.setdefault(module, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_imported_module_is_declared_where_it_is_needed():
    providers = md.packages_distributions()
    deps = declared()
    missing = []
    for module, files in sorted(source_imports().items()):
        dists = [DISTRIBUTION_OF[module]] if module in DISTRIBUTION_OF else providers.get(module)
        assert dists, f"{module} (imported by {sorted(files)}) is not installed: cannot tell its distribution"
        wanted = {canonicalize_name(d) for d in dists}
        allowed = deps[None] | deps.get(EXTRA_OF.get(module), set())
        if not wanted & allowed:
            where = f"extra [{EXTRA_OF[module]}]" if module in EXTRA_OF else "dependencies"
            missing.append(f"{module} ({'/'.join(sorted(wanted))}) imported by {sorted(files)[0]} is not in {where}")
    assert not missing, "undeclared dependencies:\n" + "\n".join(missing)


def test_extra_only_modules_are_not_imported_outside_their_feature():
    """The export extra's modules stay inside mixzoo/share/export.py, so a base install never needs them."""
    for module, files in source_imports().items():
        if module in EXTRA_OF:
            assert files <= {"mixzoo/share/export.py"}, f"{module} imported by {sorted(files)}"


def test_the_import_reader_sees_every_form():
    text = "import a.b\nfrom c.d import e\nfrom . import f\nimport os\nimportlib.import_module('g.h')\nimport mixzoo\n"
    assert imported_modules(text) == {"a", "c", "g"}
