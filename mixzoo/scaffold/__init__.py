"""Plugin packages from a template: :func:`new_plugin` (``mixzoo new-plugin NAME``) writes a package whose tests
pass and which installs and runs at once; its files are what the "Writing a plugin" tutorial shows. The module of
each kind is in :mod:`mixzoo.scaffold.kinds` and :mod:`mixzoo.scaffold.method_kinds`; the files around them are
below, with the placeholders of :mod:`mixzoo.scaffold.kinds` and ``PLUGDIST`` (the distribution name),
``PLUGKINDS`` (the README's list) and ``PLUGVERSION`` (mixzoo's).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from mixzoo.core import __version__
from mixzoo.core.errors import InputError
from mixzoo.scaffold.kinds import ATTACK, CLAMP, DATASET, MODEL, OPTIMIZER, KindTemplate
from mixzoo.scaffold.method_kinds import COMMAND, METHOD

PYPROJECT = '''[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "PLUGDIST"
version = "0.1.0"
description = "A mixzoo plugin: PLUGNAME."
readme = "README.md"
requires-python = ">=3.11"
license = "MIT"
dependencies = ["mixzoo>=PLUGVERSION", "torch"]

[project.optional-dependencies]
test = ["pytest"]

# the line that makes this a mixzoo plugin: mixzoo loads every entry point of group "mixzoo"
[project.entry-points.mixzoo]
PLUGNAME = "PLUGMOD"

[tool.setuptools.packages.find]
where = ["src"]
'''

README = '''# PLUGDIST

A [mixzoo](https://pypi.org/project/mixzoo/) plugin. It adds

PLUGKINDS

Install it next to mixzoo and every name above works like a built-in one:

```bash
pip install -e .            # or, once published: pip install PLUGDIST
mixzoo plugins              # PLUGNAME, with what it provides
python -m pytest tests      # its tests
```

Publish it with `python -m build` and `twine upload dist/*`.
'''

INIT = '''"""PLUGDIST: a mixzoo plugin.

mixzoo imports this module at every start (entry point ``PLUGNAME`` of group ``mixzoo`` in ``pyproject.toml``), so
it stays light: no torch here, each hook imports its module when mixzoo calls it. ``PROVIDES`` says what the hooks
provide, so that ``mixzoo plugins`` lists it without calling a hook; ``mixzoo plugins --check`` (and this package's
tests) check it against the hooks.
"""

from __future__ import annotations

from typing import Any

from mixzoo import hookimpl

__version__ = "0.1.0"
PROVIDES = PLUGPROVIDES
'''

TEST_HEAD = '''"""The plugin through mixzoo's public API. The tests register the package at run time when it is not
installed (an installed one is already loaded through its entry point)."""

from __future__ import annotations

import pytestPLUGIMPORTS

import PLUGMOD


@pytest.fixture(autouse=True, scope="module")
def registered():
    from mixzoo.core.plugins import clear_caches, get_plugin_manager, register_plugin, unregister_plugin

    if get_plugin_manager().is_registered(PLUGMOD):
        yield
        return
    name = register_plugin(PLUGMOD, name="PLUGNAME")
    yield
    unregister_plugin(name)
    clear_caches()


def test_provides_is_what_the_hooks_give():
    from mixzoo.core.plugins import plugin_infos

    info = next(i for i in plugin_infos(check=True) if i.name == "PLUGNAME")
    assert "differs from the hooks" not in (info.error or ""), info.error
    assert {label: info.provides[label] for label in PLUGMOD.PROVIDES} == PLUGMOD.PROVIDES
'''

# every kind a scaffolded plugin can hold, in the order its files and README list them
KINDS: dict[str, KindTemplate] = {t.kind: t for t in (MODEL, DATASET, CLAMP, OPTIMIZER, ATTACK, METHOD, COMMAND)}
NAME_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
PREFIX = "mixzoo-plugin-"


def check_name(name: str) -> str:
    """``name`` without a leading ``mixzoo-plugin-``; a one-line error unless it is lower-case letters and digits
    in hyphen-separated words starting with a letter (``acme``, ``my-lab``)."""
    short = name.removeprefix(PREFIX)
    if not NAME_RE.fullmatch(short):
        raise InputError(f"plugin name {name!r}: use lower-case letters and digits in hyphen-separated words, starting"
                         " with a letter (e.g. acme or my-lab)")
    return short


def check_kinds(kinds: Iterable[str] | None) -> list[str]:
    """The kinds asked for, in :data:`KINDS` order (``None``: all of them); a one-line error naming the choices."""
    chosen = list(KINDS) if kinds is None else [k.strip() for k in kinds if k.strip()]
    unknown = [k for k in chosen if k not in KINDS]
    if unknown or not chosen:
        raise InputError(f"unknown kind(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(KINDS)}"
                         " (--kinds model,attack,...)")
    return [k for k in KINDS if k in chosen]


def _provides(templates: list[KindTemplate]) -> str:
    entries = [f'    "{t.label}": {json.dumps(list(t.names))},' for t in templates]
    return "{\n" + "\n".join(entries) + "\n}"


def render(name: str, kinds: Iterable[str] | None = None) -> dict[str, str]:
    """The files of plugin ``name`` holding ``kinds`` (default: every kind of :data:`KINDS`): relative path ->
    text. Nothing is written (:func:`new_plugin` writes them)."""
    name = check_name(name)
    templates = [KINDS[k] for k in check_kinds(kinds)]
    module = "mixzoo_plugin_" + name.replace("-", "_")
    dist = PREFIX + name
    init = INIT + "".join(t.declares for t in templates) + "".join("\n" + t.hook for t in templates)
    tests = "".join(t.test for t in templates)
    imports = "".join(f"\nimport {m}" for m in ("torch", "typer") if f"{m}." in tests)
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README.replace("PLUGKINDS", "\n".join(f"- {t.readme}" for t in templates)),
        f"src/{module}/__init__.py": init.replace("PLUGPROVIDES", _provides(templates)),
        **{f"src/{module}/{t.module}": t.source for t in templates},
        "tests/test_plugin.py": TEST_HEAD.replace("PLUGIMPORTS", imports) + tests,
    }
    version = __version__.split("+")[0]
    return {path: text.replace("PLUGDIST", dist).replace("PLUGMOD", module).replace("PLUGNAME", name)
            .replace("PLUGVERSION", version) for path, text in files.items()}


def new_plugin(name: str, directory: str | Path = ".", *, kinds: Iterable[str] | None = None) -> Path:
    """Write plugin package ``mixzoo-plugin-NAME`` into ``directory`` and return its folder: ``pyproject.toml``
    with the ``mixzoo`` entry point, one module per kind of ``kinds`` (default: all of :data:`KINDS`: a model, a
    dataset, a clamp, a calibration optimizer, an attack, a mixing method and a CLI command, every entry named
    ``NAME-...``), tests that pass with pytest and a README. ``pip install -e FOLDER`` makes every entry usable by
    name. A one-line :class:`~mixzoo.core.errors.InputError` for a bad name or kind or an existing folder; the
    folder appears whole or not at all."""
    files = render(name, kinds)
    target = Path(directory) / (PREFIX + check_name(name))
    if target.exists():
        raise InputError(f"{target} already exists; choose another name or directory, or remove it")
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".new-plugin-", dir=target.parent))
    try:
        for rel, text in files.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        stage.rename(target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return target


__all__ = ["KINDS", "new_plugin", "render"]
