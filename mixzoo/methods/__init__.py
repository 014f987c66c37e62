"""Mixing methods: the interface (:mod:`mixzoo.methods.base`), the built-in methods (``mixednuts``, ``linear``;
registered through entry points by :mod:`mixzoo_plugins.methods` like any third party's) and :func:`fit`, which
fits any of them by name (``mixzoo mix --method NAME``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from torch import nn

from mixzoo.core import distributed
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import (
    ExtraAttack,
    FitRequest,
    FitResult,
    MixingMethod,
    baseline_method,
    default_method,
)


def get_method(name: str) -> MixingMethod:
    """A mixing method by name (close names suggested when unknown)."""
    from mixzoo.core.plugins import lookup

    return lookup("method", name)


def _checked(method: str | None, options: dict[str, Any] | None, out: str | Path | None
             ) -> tuple[MixingMethod, dict[str, Any]]:
    """The method named (default: the plugin method marked default) and its checked options; ``out`` checked as a
    card path when given."""
    chosen = get_method(method if method is not None else default_method())
    checked = chosen.check_options(dict(options or {}))
    if out is not None:
        from mixzoo.core.card import MixCard

        MixCard.check_path(out)
    return chosen, checked


def fit(method: str | None = None, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None, *,
        options: dict[str, Any] | None = None, out: str | Path | None = None, **request: Any) -> FitResult:
    """Fit mixing method ``method`` (default: the plugin method marked default, MixedNUTS) for an ABC/RBC pair
    and write its card to ``out``. ``options`` are the method's own (see ``mixzoo plugins`` or the method's
    ``options``), converted to their declared types; ``request`` takes the :class:`FitRequest` fields (dataset,
    n_calib, eps, norm, seed, command, ...)."""
    chosen, options = _checked(method, options, out)
    t0 = time.perf_counter()
    if request.get("device") == "auto":
        from mixzoo.core.machine import resolve_device

        request = {**request, "device": resolve_device("auto")}
    # under torchrun every rank fits (the cached batched steps, MMAA among them, share their batches out); only rank
    # 0 writes the card and shows progress
    w = distributed.init(str(request.get("device", "cpu")))
    if w.size > 1:
        request = {**request, "device": distributed.rank_device(str(request.get("device", "cpu"))),
                   "progress": bool(request.get("progress", True)) and w.main}
        out = out if w.main else None
    result = chosen.fit(FitRequest(abc, rbc, options=options, out=out, **request))
    result.seconds.setdefault("total", time.perf_counter() - t0)
    return result


def plan_fit(method: str | None = None, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None, *,
             options: dict[str, Any] | None = None, out: str | Path | None = None, command: str = "mixzoo mix",
             **request: Any) -> Any:
    """What :func:`fit` will run with these arguments (a :class:`~mixzoo.core.plan.Plan`, from the method's
    :meth:`~MixingMethod.plan_fit`), checking them as :func:`fit` does; nothing is written."""
    from mixzoo.core.plan import Plan

    chosen, options = _checked(method, options, out)
    request = {k: v for k, v in request.items() if k != "command"}
    plan = Plan(command)
    for name, what, seconds in chosen.plan_fit(FitRequest(abc, rbc, options=options, **request)):
        plan.add(name, what, seconds)
    return plan


__all__ = ["ExtraAttack", "FitRequest", "FitResult", "MixingMethod", "OptionSpec", "baseline_method", "default_method",
           "fit", "get_method", "plan_fit"]
