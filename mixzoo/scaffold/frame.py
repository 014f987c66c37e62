'''The files of a scaffolded plugin besides its kind modules: ``pyproject.toml``, the README, the package's
``__init__`` (the hooks, ``PROVIDES``) and the head of its tests. Placeholders as in :mod:`mixzoo.scaffold.kinds`,
plus ``PLUGDIST`` (the distribution name), ``PLUGKINDS`` (the README's list) and ``PLUGVERSION`` (mixzoo's).
'''

from __future__ import annotations

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
