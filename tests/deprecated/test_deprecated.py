"""Every shim lives in :mod:`mixzoo.deprecated`, with its removal version as data, and the library never uses it:
no module of ``mixzoo/`` (outside the package and the facade ``mixzoo/__init__``, which installs its finder) or of
``plugins/`` imports it, and no docstring or comment of theirs names it or a former home of a moved module."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mixzoo.deprecated import DEPRECATIONS, SHIMS
from mixzoo.deprecated.modules import CALLABLE, MOVED_MODULES

REPO = Path(__file__).resolve().parents[2]
LIBRARY = [p for root in (REPO / "mixzoo", REPO / "plugins") for p in sorted(root.rglob("*.py"))
           if "deprecated" not in p.relative_to(REPO).parts]


def _imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return found


def users_of_the_shims(paths: list[Path]) -> list[str]:
    """``path: what`` for each import of :mod:`mixzoo.deprecated` or of a moved module name, and each mention of
    them in the text (docstrings, comments, messages), outside ``mixzoo/__init__.py``'s one ``install``."""
    old = "|".join(re.escape(m) for m in MOVED_MODULES if m not in CALLABLE)  # mixzoo.calibrate: the function
    mention = re.compile(rf"mixzoo\.deprecated|\b({old})\b(?!\.\w)")
    bad = []
    for path in paths:
        text = path.read_text()
        where = path.relative_to(REPO)
        facade = where == Path("mixzoo/__init__.py")
        for name in _imports(ast.parse(text)):
            if (name.startswith("mixzoo.deprecated") and not facade) or name in MOVED_MODULES or \
                    name.rpartition(".")[0] in MOVED_MODULES:
                bad.append(f"{where}: imports {name}")
        for line in text.splitlines():
            if mention.search(line) and not (facade and "deprecated.install()" in line):
                bad.append(f"{where}: {line.strip()}")
    return bad


def test_the_library_never_uses_the_shims():
    assert not users_of_the_shims(LIBRARY)


def test_the_check_can_fail(tmp_path):
    sources = {"imports.py": "from mixzoo.deprecated import modules\n",
               "former.py": "from mixzoo.attacks.evaluation import Attack\n",
               "docstring.py": '"""The attack base (see mixzoo.attacks.evaluation)."""\n',
               "moved.py": "import mixzoo.pipeline\n"}
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        found = users_of_the_shims(sorted(tmp_path.glob("*.py")))
    finally:
        REPO = saved
    assert {line.split(":")[0] for line in found} == set(sources)
    assert not users_of_the_shims([saved / "mixzoo" / "__init__.py"])  # the one place that installs the finder


def test_every_shim_has_its_removal_version_and_is_importable():
    assert DEPRECATIONS and all(re.fullmatch(r"\d+\.\d+", d.removed_in) for d in DEPRECATIONS.values())
    for target, shims in SHIMS.items():
        importlib.import_module(target)
        for shim in shims:
            module, _, function = shim.partition(":")
            assert module.startswith("mixzoo.deprecated.") and callable(getattr(importlib.import_module(module),
                                                                                function))


def test_a_former_home_answers_with_a_warning_naming_the_real_one():
    import mixzoo.attacks.evaluation as former
    from mixzoo.attacks import adapters, base, suites

    for name, home in (("Attack", base), ("FiniteGuard", adapters), ("APGDEnsemble", suites)):
        with pytest.warns(DeprecationWarning, match=rf"mixzoo\.attacks\.evaluation\.{name} is deprecated and will be"
                                                    rf" removed in mixzoo 0\.3; use {home.__name__}\.{name}$"):
            assert getattr(former, name) is getattr(home, name)


@pytest.mark.subprocess
def test_importing_mixzoo_imports_only_the_finder():
    """The finder costs ``import mixzoo`` nothing: no shim module, no module with a shim, no torch."""
    code = ("import sys, mixzoo\nprint(','.join(sorted(m for m in sys.modules if m.startswith('mixzoo.deprecated'))),"
            " 'torch' in sys.modules, 'mixzoo.core.plugins' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["mixzoo.deprecated,mixzoo.deprecated.modules", "False", "False"]
    # the plugin machinery's shims attach without torch (`mixzoo plugins` needs none)
    code = "import sys, mixzoo.core.plugins\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_a_shim_is_attached_when_its_module_is_imported():
    import mixzoo.core.plugins
    from mixzoo.core.plugins import listing, sources

    for attached in (sources.load_network, listing.plugin_infos, listing.module_facts):
        assert Path(attached.__code__.co_filename) == REPO / "mixzoo" / "deprecated" / "hooks.py"
        assert Path(attached.__wrapped__.__code__.co_filename).parent == REPO / "mixzoo" / "core" / "plugins"
    assert mixzoo.core.plugins.load_network is sources.load_network  # what the package re-exports

