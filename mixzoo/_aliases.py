"""The module names of releases before the package layout (``mixzoo.pipeline``, ``mixzoo.bench``, ...), mapped to
their new places so that scripts and notebooks written against them keep importing: ``from mixzoo.bench import
bench`` gives the very module ``mixzoo.evaluation.bench`` (one object, so monkeypatching either name patches both).
New code imports the new names."""

from __future__ import annotations

import importlib
import sys

OLD_MODULES = {
    "errors": "mixzoo.core.errors", "hookspecs": "mixzoo.core.hookspecs", "plugins": "mixzoo.core.plugins",
    "registry": "mixzoo.core.registry", "compat": "mixzoo.core.compat", "cache": "mixzoo.core.cache",
    "card": "mixzoo.core.card", "machine": "mixzoo.core.machine", "progress": "mixzoo.core.progress",
    "models": "mixzoo.zoo.models", "data": "mixzoo.zoo.data", "blackbox": "mixzoo.zoo.blackbox",
    "train": "mixzoo.training.train", "pipeline": "mixzoo.methods.mixednuts.fitting",
    "transforms": "mixzoo.methods.mixednuts.transforms", "mixing": "mixzoo.methods.mixednuts.mixing",
    "calibrate": "mixzoo.methods.mixednuts.calibrate", "approximation": "mixzoo.methods.mixednuts.approximation",
    "transfer": "mixzoo.methods.mixednuts.transfer", "bench": "mixzoo.evaluation.bench",
    "report": "mixzoo.evaluation.report", "verify": "mixzoo.evaluation.verify", "sanity": "mixzoo.evaluation.sanity",
    "stats": "mixzoo.evaluation.stats",
}


def install() -> None:
    """Bind each old name in ``sys.modules`` to its module (importing them all costs about 0.3 s on top of torch;
    a lazy import hook would rebind ``mixzoo.calibrate``, the function, to the module of that name)."""
    for old, new in OLD_MODULES.items():
        sys.modules.setdefault(f"mixzoo.{old}", importlib.import_module(new))
