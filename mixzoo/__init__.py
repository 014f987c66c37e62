"""mixzoo: mixed classifiers (MixedNUTS and its family) for any accurate/robust model pair, by name.

Layout (data flows downwards in this list; ``tests/test_layout.py`` checks it from the imports): ``core`` (errors,
hooks, plugin manager, registry, cache, card), ``zoo`` (models, data, pairs, loading published weights),
``attacks``, ``training``, ``methods`` (the interface and one module or folder per method), ``certify`` (certified
radii of constant-alpha mixtures), ``evaluation`` (bench, report, verify, sanity, statistics), ``cli``.

The public names below are imported on first use (PEP 562), so ``import mixzoo`` loads neither torch nor a mixing
method until one of them is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mixzoo import deprecated
from mixzoo.core import __version__

deprecated.install()  # the deprecated names and call forms, answered from mixzoo.deprecated (the one place)

# public name -> the module that defines it
_PUBLIC = {
    "BaseClassifier": "mixzoo.zoo.models", "InputError": "mixzoo.core.errors", "MixCard": "mixzoo.core.card",
    "MixedClassifier": "mixzoo.methods.mixednuts.mixing", "MixingParams": "mixzoo.methods.mixednuts.mixing",
    "MixzooError": "mixzoo.core.errors", "ModelSpec": "mixzoo.core.registry", "UnknownNameError": "mixzoo.core.errors",
    "calibrate": "mixzoo.methods.mixednuts.calibrate", "get_plugin_manager": "mixzoo.core.plugins",
    "get_spec": "mixzoo.core.registry", "hookimpl": "mixzoo.core.plugins", "list_models": "mixzoo.core.registry",
    "load_mixed": "mixzoo.zoo.pairs", "load_model": "mixzoo.zoo.models",
}
_SUBPACKAGES = ("attacks", "certify", "core", "evaluation", "methods", "training", "zoo")

if TYPE_CHECKING:
    from mixzoo.core.card import MixCard
    from mixzoo.core.errors import InputError, MixzooError, UnknownNameError
    from mixzoo.core.plugins import get_plugin_manager, hookimpl
    from mixzoo.core.registry import ModelSpec, get_spec, list_models
    from mixzoo.methods.mixednuts.calibrate import calibrate
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams
    from mixzoo.zoo.models import BaseClassifier, load_model
    from mixzoo.zoo.pairs import load_mixed


def __getattr__(name: str) -> Any:
    """``mixzoo.MixCard``, ``mixzoo.load_mixed(...)``, ``mixzoo.evaluation.bench``: imported when first asked for
    and then kept as an ordinary attribute."""
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"mixzoo.{name}")
    else:
        raise AttributeError(f"module 'mixzoo' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_SUBPACKAGES})


__all__ = [
    "BaseClassifier", "InputError", "MixCard", "MixedClassifier", "MixingParams", "MixzooError", "ModelSpec",
    "UnknownNameError", "__version__", "calibrate", "get_plugin_manager", "get_spec", "hookimpl", "list_models",
    "load_mixed", "load_model",
]
