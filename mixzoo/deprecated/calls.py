"""Call forms of public functions and classes that changed shape, kept working until their removal release."""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any

from mixzoo.deprecated import DEPRECATIONS

# MixedClassifier's parameters before MixingParams, in their order
OLD_MIXED_PARAMETERS = ("s", "p", "c", "alpha", "clamp", "temperature", "top_k", "gradient", "r_d", "alpha_d",
                        "transform", "allow_any_alpha")


def _old_mixed_call(first: Any, positional: tuple[Any, ...], keywords: dict[str, Any]) -> dict[str, Any]:
    """``MixedClassifier(abc, rbc, s, p, ..., alpha=...)``'s mixing arguments by name (TypeError as Python's)."""
    values = ((first,) if first is not None else ()) + positional
    if len(values) > len(OLD_MIXED_PARAMETERS):
        raise TypeError(f"MixedClassifier() takes at most {len(OLD_MIXED_PARAMETERS) + 2} positional arguments")
    given = dict(zip(OLD_MIXED_PARAMETERS, values, strict=False))
    for key, value in keywords.items():
        if key not in OLD_MIXED_PARAMETERS:
            raise TypeError(f"MixedClassifier() got an unexpected keyword argument {key!r}")
        if key in given:
            raise TypeError(f"MixedClassifier() got multiple values for argument {key!r}")
        given[key] = value
    return given


def attach_mixed_classifier(mixing: types.ModuleType) -> None:
    """``MixedClassifier(abc, rbc, s=..., alpha=..., ...)`` and its positional form: the mixing parameters become a
    :class:`~mixzoo.methods.mixednuts.mixing.MixingParams`, with a :class:`DeprecationWarning`."""
    cls, entry = mixing.MixedClassifier, DEPRECATIONS["mixed-classifier-keywords"]
    library = cls.__init__

    @functools.wraps(library)
    def __init__(self: Any, abc: Any, rbc: Any, params: Any = None, *positional: Any, **keywords: Any) -> None:
        if isinstance(params, mixing.MixingParams) and not positional and not set(keywords) - {"gradient",
                                                                                               "allow_any_alpha"}:
            return library(self, abc, rbc, params, **keywords)
        if isinstance(params, mixing.MixingParams):
            raise TypeError("MixedClassifier(abc, rbc, params, *, gradient, allow_any_alpha): give the mixing"
                            " parameters in params alone")
        given = _old_mixed_call(params, positional, keywords)
        entry.warn()
        flags = {k: given.pop(k) for k in ("gradient", "allow_any_alpha") if k in given}
        return library(self, abc, rbc, mixing.MixingParams(**given), **flags)

    cls.__init__ = __init__


# the keywords of mix's keyword form that are the FitRequest's fields (the rest are MixSettings')
MIX_REQUEST_KEYWORDS = ("dataset", "n_calib", "eps", "norm", "seed", "batch_size", "out", "data_dir", "cache_dir",
                        "use_cache", "device", "allow_unsafe", "progress", "command")


def attach_mix(fitting: types.ModuleType) -> None:
    """``mix(abc, rbc, KEY=VALUE, ...)`` (and ``mix(abc=..., rbc=...)``): the request's fields and the options as
    keywords, made into a :class:`~mixzoo.methods.FitRequest`, with a :class:`DeprecationWarning`."""
    library, entry = fitting.mix, DEPRECATIONS["mix-keywords"]
    settings = {f.name for f in dataclasses.fields(fitting.MixSettings)}

    @functools.wraps(library)
    def mix(request: Any = None, rbc: Any = None, **keywords: Any) -> Any:
        if isinstance(request, fitting.FitRequest):
            if rbc is not None or keywords:
                raise TypeError("mix(request) takes the FitRequest alone; put the models and settings in it")
            return library(request)
        entry.warn()
        abc, rbc = keywords.pop("abc", request), keywords.pop("rbc", rbc)
        for key in keywords:
            if key not in settings and key not in MIX_REQUEST_KEYWORDS:
                raise TypeError(f"mix() got an unexpected keyword argument {key!r}")
        return library(fitting.FitRequest(abc, rbc, options={k: v for k, v in keywords.items() if k in settings},
                                          **{k: v for k, v in keywords.items() if k in MIX_REQUEST_KEYWORDS}))

    fitting.mix = mix


def attach_certify(run: types.ModuleType) -> None:
    """``certify(..., estimate_eps=..., estimate_steps=...)``: the former keywords of ``estimate``, with a
    :class:`DeprecationWarning`."""
    library, entry = run.certify, DEPRECATIONS["certify-estimate-keywords"]

    @functools.wraps(library)
    def certify(*args: Any, **keywords: Any) -> Any:
        old = {key: keywords.pop(key) for key in ("estimate_eps", "estimate_steps") if key in keywords}
        if old:
            entry.warn()
            est = keywords.get("estimate")
            if not isinstance(est, run.EstimateSettings):
                est = run.EstimateSettings(tuple(map(float, est or ())))
            eps = tuple(map(float, old.get("estimate_eps") or est.eps))
            keywords["estimate"] = run.EstimateSettings(eps, int(old.get("estimate_steps", est.steps)))
        return library(*args, **keywords)

    run.certify = certify


# the run record's fields among the keyword arguments ``match(..., **kw)`` received before it took a request
LEGACY_RECORD_FIELDS = ("attack", "eps", "norm", "seed", "batch_size", "attack_options", "per_example_seeds",
                        "precision")


def request_of_kwargs(kwargs: dict[str, Any], what: str) -> Any:
    """The :class:`~mixzoo.core.request.EvalRequest` of an old-style call (``what``, e.g. ``Linear.match``) with
    :func:`~mixzoo.attacks.runner.evaluate`'s former keyword arguments."""
    from mixzoo.core.errors import InputError
    from mixzoo.core.record import RunRecord
    from mixzoo.core.request import EvalRequest

    own = {f.name for f in dataclasses.fields(EvalRequest)} - {"record"}
    unknown = sorted(set(kwargs) - own - set(LEGACY_RECORD_FIELDS))
    if unknown:
        raise InputError(f"{what} takes no argument {unknown[0]!r}; pass a mixzoo.core.request.EvalRequest")
    record = RunRecord(**{k: v for k, v in kwargs.items() if k in LEGACY_RECORD_FIELDS and v is not None})
    return EvalRequest(record, **{k: v for k, v in kwargs.items() if k in own})


def attach_linear(linear: types.ModuleType) -> None:
    """``Linear.match(abc, rbc, images, labels, target, attack=..., eps=..., ...)``: the request made from the
    keyword arguments, with a :class:`DeprecationWarning`."""
    from mixzoo.core.errors import InputError

    cls, entry = linear.Linear, DEPRECATIONS["match-keywords"]
    library = cls.match

    @functools.wraps(library)
    def match(self: Any, abc: Any, rbc: Any, images: Any, labels: Any, target: float, request: Any = None,
              **legacy: Any) -> Any:
        if request is None:
            entry.warn()
            request = request_of_kwargs(legacy, "Linear.match")
        elif legacy:
            raise InputError(f"Linear.match takes a request or keyword arguments, not both (got {sorted(legacy)[0]!r})")
        return library(self, abc, rbc, images, labels, target, request)

    cls.match = match
