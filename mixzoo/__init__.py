"""mixzoo: mixed classifiers (MixedNUTS and its family) for any accurate/robust model pair, by name.

Layout (data flows downwards in this list; nothing imports upwards, ``tests/test_layout.py`` checks it):
``core`` (errors, hooks, plugin manager, registry, cache, card), ``zoo`` (models, data, pairs), ``attacks``,
``training``, ``methods`` (the interface and one module or folder per method), ``certify`` (certified radii of
constant-alpha mixtures), ``evaluation`` (bench, report, verify, sanity, statistics), ``cli``. The module names of
earlier releases (``mixzoo.pipeline``, ``mixzoo.bench``, ...) still import: :mod:`mixzoo._aliases` maps them to
their new places.
"""

from __future__ import annotations

from mixzoo import _aliases
from mixzoo.core import __version__
from mixzoo.core.card import MixCard  # noqa: E402
from mixzoo.core.errors import InputError, MixzooError, UnknownNameError  # noqa: E402
from mixzoo.core.plugins import get_plugin_manager, hookimpl  # noqa: E402
from mixzoo.core.registry import ModelSpec, get_spec, list_models  # noqa: E402
from mixzoo.methods.mixednuts.calibrate import calibrate  # noqa: E402
from mixzoo.methods.mixednuts.mixing import MixedClassifier  # noqa: E402
from mixzoo.zoo.models import BaseClassifier, load_model  # noqa: E402
from mixzoo.zoo.pairs import load_mixed  # noqa: E402

# last: the old module names; ``mixzoo.calibrate`` stays the function (Algorithm 1), while ``from mixzoo.calibrate
# import Grid`` still finds the module
_aliases.install()


def __getattr__(name: str):  # `import mixzoo; mixzoo.bench.bench(...)` without importing every module up front
    target = _aliases.OLD_MODULES.get(name)
    if target is not None or name in ("attacks", "core", "zoo", "methods", "certify", "evaluation"):
        import importlib

        return importlib.import_module(f"mixzoo.{name}")
    raise AttributeError(f"module 'mixzoo' has no attribute {name!r}")


__all__ = [
    "BaseClassifier", "InputError", "MixCard", "MixedClassifier", "MixzooError", "ModelSpec", "UnknownNameError",
    "__version__", "calibrate", "get_plugin_manager", "get_spec", "hookimpl", "list_models", "load_mixed", "load_model",
]
