"""The one place where third-party packaging quirks are handled.

* PyPI's ``pyautoattack`` installs the AutoAttack code as module ``pyautoattack``, while robustbench 1.1.1 does
  ``import autoattack`` and ``from autoattack.state import EvaluationState``. :func:`import_autoattack` aliases the
  module (and its submodules) under the name ``autoattack`` before anything imports robustbench, and lets its
  ``AutoAttack`` accept the reference implementation's call that robustbench's ``benchmark()`` makes.
* robustbench imports ``pkg_resources``, which ships only with ``setuptools<81`` (pinned in pyproject) and warns
  on import that it is deprecated: silenced for that import, as it is the pin's own subject.
* robustbench pins timm 1.0.9, which imports ``repo_type_and_id_from_hf_id`` from huggingface_hub; hub 1.x/2.x
  dropped it and timm then fails every ``hf-hub:`` name with a misleading message. We pin ``huggingface_hub<1.0``
  and, should a newer hub be installed anyway, provide the name before timm is imported.
* timm 1.0.9 decorates a class with ``torch.jit.interface`` at import time, which torch >= 2.10 answers with a
  FutureWarning printed above every command that loads a hub model; it says nothing a mixzoo user can act on, so
  it is silenced for that import only.

Import robustbench, timm and autoattack only through these functions.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType

from mixzoo.core.errors import MixzooError

_AUTOATTACK_SUBMODULES = ("autoattack", "autopgd_base", "fab_pt", "square", "state", "checks", "other_utils",
                          "fab_base", "fab_projections")


def import_autoattack() -> ModuleType:
    """Return the AutoAttack package, importable as ``autoattack`` afterwards whichever name it was installed as."""
    if "autoattack" in sys.modules and hasattr(sys.modules["autoattack"], "AutoAttack"):
        return sys.modules["autoattack"]
    try:
        mod = importlib.import_module("pyautoattack")
    except ImportError:
        try:
            mod = importlib.import_module("autoattack")
        except ImportError as exc:
            raise MixzooError("AutoAttack is not installed; run `pip install pyautoattack`") from exc
        return mod
    if not getattr(mod.AutoAttack, "_mixzoo_compatible", False):
        mod.AutoAttack = _reference_api(mod.AutoAttack)
    sys.modules["autoattack"] = mod
    for sub in _AUTOATTACK_SUBMODULES:
        try:
            sys.modules[f"autoattack.{sub}"] = importlib.import_module(f"pyautoattack.{sub}")
        except ImportError:
            continue  # optional pieces (e.g. TF helpers) may be absent
    return mod


def _reference_api(base: type) -> type:
    """``pyautoattack.AutoAttack`` that also accepts the reference (fra31/auto-attack) call robustbench makes.

    robustbench's ``benchmark()`` calls ``AutoAttack(model, norm=, eps=, version=, device=, log_path=)`` and
    ``run_standard_evaluation(x, y, bs=, state_path=)`` and expects the adversarial images back; pyautoattack has
    no ``log_path``/``verbose``/``attacks_to_run`` arguments, takes ``batch_size`` and returns ``(x_adv, y_adv)``.
    A call with ``bs=`` is a reference-style call and gets the reference return value.
    """

    class AutoAttack(base):  # type: ignore[misc, valid-type]
        _mixzoo_compatible = True

        def __init__(self, model, *args, log_path=None, verbose=None, attacks_to_run=None, **kwargs):
            for name, value in zip(("norm", "eps", "version", "seed"), args, strict=False):
                kwargs[name] = value  # the reference signature is (model, norm, eps, version, seed, ...)
            if attacks_to_run:
                kwargs["attacks"] = list(attacks_to_run)
            super().__init__(model, **kwargs)
            if verbose is not None:
                self.verbose = verbose

        def run_standard_evaluation(self, x_orig, y_orig, *args, bs=None, return_labels=False, **kwargs):
            if bs is None:
                return super().run_standard_evaluation(x_orig, y_orig, *args, **kwargs)
            x_adv, y_adv = super().run_standard_evaluation(x_orig, y_orig, batch_size=bs, **kwargs)
            return (x_adv, y_adv) if return_labels else x_adv

    AutoAttack.__qualname__ = AutoAttack.__name__ = base.__name__
    AutoAttack.__module__ = base.__module__
    AutoAttack.__doc__ = base.__doc__
    return AutoAttack


def _patch_hf_hub() -> None:
    import huggingface_hub

    if not hasattr(huggingface_hub, "repo_type_and_id_from_hf_id"):
        try:
            from huggingface_hub.hf_api import repo_type_and_id_from_hf_id
        except ImportError:  # pragma: no cover - only with huggingface_hub >= 1.0

            def repo_type_and_id_from_hf_id(hf_id: str, hub_url: str | None = None):  # type: ignore[misc]
                parts = hf_id.split("/")
                return None, (parts[-2] if len(parts) > 1 else None), parts[-1]

        huggingface_hub.repo_type_and_id_from_hf_id = repo_type_and_id_from_hf_id


def import_timm() -> ModuleType:
    """Import timm with its hub integration working (see module docstring)."""
    _patch_hf_hub()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.interface` is deprecated", category=FutureWarning)
        return importlib.import_module("timm")


def import_robustbench() -> ModuleType:
    """Import robustbench with AutoAttack aliased and pkg_resources available."""
    import_autoattack()
    import_timm()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"pkg_resources is deprecated", category=UserWarning)
            return importlib.import_module("robustbench")
    except ModuleNotFoundError as exc:
        if exc.name == "pkg_resources":
            raise MixzooError("robustbench needs pkg_resources: run `pip install 'setuptools<81'`") from exc
        raise MixzooError(f"robustbench could not be imported ({exc}); run `pip install robustbench==1.1.1`") from exc
