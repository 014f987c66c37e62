"""Mixing methods written against mixzoo 0.1's documentation: plain objects with the contract's members (no
:class:`~mixzoo.methods.MixingMethod` base class, ``check_options`` returning ``None``), adapted as
:class:`LegacyMethod` when the table of methods is built, with a :class:`DeprecationWarning`."""

from __future__ import annotations

import inspect
from typing import Any

from mixzoo.deprecated import DEPRECATIONS
from mixzoo.methods.base import MixingMethod, check_method

_CONTRACT_ATTRIBUTES = ("name", "title", "paper", "fit_cost", "options", "default", "baseline", "certificate",
                        "not_exportable")
_CONTRACT_METHODS = ("validate", "upgrade_v1", "v1_warning", "summary_line", "key_parts", "gradients", "build",
                     "extra_attacks", "certified_mixture", "fit", "fit_summary", "tradeoff_curve", "figure_data",
                     "figures", "markdown_lines", "match", "card_at", "check_card")


class LegacyMethod(MixingMethod):
    """A mixing method written against mixzoo 0.1's documentation, given every member it lacks from
    :class:`MixingMethod`. Deprecated: mixzoo 0.3 takes only :class:`MixingMethod` instances."""

    def __init__(self, target: Any):
        self.target = target
        for name in _CONTRACT_ATTRIBUTES + _CONTRACT_METHODS:
            if hasattr(target, name):
                setattr(self, name, getattr(target, name))

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The method's own check (for its error messages), then the declared conversion."""
        own = getattr(self.target, "check_options", None)
        if own is not None:
            checked = own(dict(options))
            if isinstance(checked, dict):
                options = checked
        return super().check_options(options)


def adapt_method(value: Any, plugin_name: str) -> Any:
    """``value`` from hook ``mixzoo_mixing_methods``: a :class:`MixingMethod` as it is; an old-style object as a
    :class:`LegacyMethod`, with a :class:`DeprecationWarning` naming the base class to use; and either one's
    ``match`` / ``tradeoff_curve`` that takes 0.1's keyword arguments instead of a request (:func:`takes_kwargs`),
    called with the request's :func:`legacy_kwargs`."""
    if not isinstance(value, MixingMethod) and hasattr(value, "fit") and hasattr(value, "build"):
        DEPRECATIONS["plain-object-method"].warn(
            what=f"mixing method {getattr(value, 'name', '?')!r} of plugin {plugin_name!r} does not subclass"
                 " mixzoo.methods.MixingMethod; adapting such a method")
        value = LegacyMethod(value)
    for member, form in (("match", "match(abc, rbc, images, labels, target, **kw)"),
                         ("tradeoff_curve", "tradeoff_curve(card, abc, rbc, data, **kw)")):
        old = getattr(value, member, None)
        if takes_kwargs(old):
            setattr(value, member, _with_request(old, f"mixing method {value.name!r}: {form}"))
    return value if isinstance(value, LegacyMethod) else check_method(value, plugin_name)


def takes_kwargs(function: Any) -> bool:
    """Whether a method's ``match`` / ``tradeoff_curve`` takes mixzoo 0.1's keyword arguments (``**kw``, no
    parameter named ``request``)."""
    try:
        return function is not None and "request" not in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _with_request(old: Any, what: str) -> Any:
    def call(*args: Any) -> Any:  # (..., request): the request is the last argument
        *head, request = args
        DEPRECATIONS["method-keyword-calls"].warn(what=what)
        return old(*head, **legacy_kwargs(request))

    return call


def legacy_kwargs(request: Any) -> dict[str, Any]:
    """The keyword arguments mixzoo 0.1's ``match(..., **kw)`` (of an
    :class:`~mixzoo.core.request.EvalRequest`) or ``tradeoff_curve(..., **kw)`` (of a
    :class:`~mixzoo.core.request.ReportRequest`) received in place of ``request``."""
    from mixzoo.core.request import ReportRequest

    ev = request.evaluation if isinstance(request, ReportRequest) else request
    r = ev.record
    common = {"attack": r.attack, "eps": r.eps, "norm": r.norm, "seed": r.seed, "batch_size": r.batch_size,
              "attack_options": r.options(), "cache": ev.cache, "progress": ev.progress}
    if not isinstance(request, ReportRequest):
        return {**common, "per_example_seeds": r.per_example_seeds, "key_parts": dict(ev.key_parts)}
    return {**common, "n": request.n, "data_dir": request.data_dir, "device": request.device,
            **({} if request.points is None else {"points": request.points})}
