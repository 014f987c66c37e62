"""mixzoo: training-free mixed classifiers (MixedNUTS) for any accurate/robust model pair, by name."""

from __future__ import annotations

__version__ = "0.1.0"

# NB: the next line rebinds the attribute ``mixzoo.calibrate`` to the function (Algorithm 1); the module stays
# importable with ``from mixzoo.calibrate import Grid``.
from mixzoo.calibrate import calibrate
from mixzoo.card import MixCard
from mixzoo.errors import InputError, MixzooError, UnknownNameError
from mixzoo.mixing import MixedClassifier
from mixzoo.models import BaseClassifier, load_model
from mixzoo.pipeline import load_mixed
from mixzoo.plugins import get_plugin_manager, hookimpl
from mixzoo.registry import ModelSpec, get_spec, list_models

_SUBMODULES = ("approximation", "attacks", "bench", "blackbox", "cache", "data", "machine", "report", "sanity", "stats",
               "train", "transfer", "transforms", "verify")


def __getattr__(name: str):  # `import mixzoo; mixzoo.bench.bench(...)` without importing every module up front
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"mixzoo.{name}")
    raise AttributeError(f"module 'mixzoo' has no attribute {name!r}")


__all__ = [
    "BaseClassifier", "InputError", "MixCard", "MixedClassifier", "MixzooError", "ModelSpec", "UnknownNameError",
    "__version__", "calibrate", "get_plugin_manager", "get_spec", "hookimpl", "list_models", "load_mixed", "load_model",
]
