"""Black-box robust base classifiers: logits only, no gradients, counted queries (Bai et al. 2024a, App. D.5).

Algorithm 1 needs the RBC's minimum-margin perturbations, which MMAA finds with the RBC's gradients; a model behind
an API gives only its outputs. :class:`BlackBoxModel` makes any model behave like one, so that every black-box route
of App. D.5 (:mod:`mixzoo.methods.mixednuts.transfer`) can be checked honestly: forward passes run under
``torch.no_grad`` and the output is tied to the input's graph by :class:`_NoGradient`, whose backward raises
:class:`NoGradientError` (an attack that differentiates through the model fails loudly, never gets zeros); queries
(examples forwarded) are counted against an optional budget (:class:`QueryBudgetExceeded`); every output must be
a 2-D ``[N, num_classes]`` float tensor without NaN or ``+inf`` (:class:`BlackBoxOutputError`; ``-inf`` is allowed:
log-probabilities of a hard-max model). The wrapped model is no sub-module, so the wrapper's ``parameters()`` and
``state_dict()`` are empty; ``weight_hash`` is passed through where the wrapped model has one.

A registry entry marks a black box with ``source.black_box = true`` (:func:`spec_is_black_box`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import MixzooError

GRADIENT_HINT = "use `mixzoo transfer-params --method transfer|square|guess` (Bai et al. 2024a, App. D.5)"


class NoGradientError(MixzooError):
    """Something tried to back-propagate through a black-box model."""


class QueryBudgetExceeded(MixzooError):
    """A black-box model was asked for more examples than its query budget allows."""


class BlackBoxOutputError(MixzooError):
    """A black-box model returned something that is not a valid ``[N, num_classes]`` logit tensor."""


class _NoGradient(torch.autograd.Function):
    """Identity on the (already computed) output that ties it to the input's graph; backward refuses."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out: torch.Tensor, name: str) -> torch.Tensor:  # noqa: ARG004
        ctx.model_name = name
        return out.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:  # noqa: ARG004
        raise NoGradientError(f"black-box model {ctx.model_name!r} has no gradients; {GRADIENT_HINT}")


def _inner_name(model: Any) -> str:
    spec = getattr(model, "spec", None)
    if spec is not None and getattr(spec, "name", None):
        return str(spec.name)
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else type(model).__name__


class BlackBoxModel(nn.Module):
    """``model`` seen as a black box: images in, logits out, nothing else (Bai et al. 2024a, App. D.5).
    ``query_budget`` caps the examples forwarded in total (``None``: unlimited), counted in ``queries`` (``calls``:
    forward calls); ``num_classes`` (default: the wrapped model's) is checked on every output."""

    def __init__(self, model: Any, query_budget: int | None = None, *, name: str | None = None,
                 num_classes: int | None = None):
        super().__init__()
        if isinstance(model, BlackBoxModel):
            model = model.model
        if not callable(model):
            raise MixzooError(f"a black-box model must be callable (images -> logits), got {type(model).__name__}")
        if query_budget is not None and (isinstance(query_budget, bool) or int(query_budget) < 0):
            raise MixzooError(f"query_budget must be a non-negative integer or None, got {query_budget!r}")
        object.__setattr__(self, "_model", model)  # not a sub-module: no parameters, no state dict
        self.query_budget = None if query_budget is None else int(query_budget)
        self.queries = 0
        self.calls = 0
        self._name = name or _inner_name(model)
        spec = getattr(model, "spec", None)
        self.num_classes = num_classes if num_classes is not None else getattr(spec, "num_classes", None)
        self.eval()

    # ------------------------------------------------------------------------------------------ identity
    @property
    def model(self) -> Any:
        """The wrapped model (for provenance; attacks must not use it)."""
        return self._model

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> Any:
        """The wrapped model's registry spec, if it has one (dataset, classes, epsilon)."""
        return getattr(self._model, "spec", None)

    @property
    def weight_hash(self) -> str | None:
        """The wrapped model's weight hash (``None`` if it cannot be known, e.g. a remote API)."""
        h = getattr(self._model, "weight_hash", None)
        if isinstance(h, str):
            return h
        if isinstance(self._model, nn.Module):
            from mixzoo.zoo.models import weight_hash

            return weight_hash(self._model)
        return None

    @property
    def remaining(self) -> int | None:
        """Queries left under the budget (``None``: unlimited)."""
        return None if self.query_budget is None else max(0, self.query_budget - self.queries)

    def reset_queries(self) -> None:
        """Set the query and call counters back to zero (the budget applies from here)."""
        self.queries = 0
        self.calls = 0

    def check_budget(self, needed: int, what: str = "this attack") -> None:
        """Raise :class:`QueryBudgetExceeded` now if ``needed`` more queries would not fit in the budget."""
        if self.query_budget is not None and self.queries + needed > self.query_budget:
            raise QueryBudgetExceeded(
                f"black-box model {self.name!r}: {what} needs up to {needed} queries but only {self.remaining} of"
                f" the budget of {self.query_budget} are left; raise the budget or use fewer images or queries")

    # ------------------------------------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the wrapped model on ``x``; counts ``len(x)`` queries; not differentiable."""
        n = int(x.shape[0])
        if self.query_budget is not None and self.queries + n > self.query_budget:
            raise QueryBudgetExceeded(
                f"black-box model {self.name!r}: query budget of {self.query_budget} exhausted ({self.queries} used,"
                f" {n} more requested); raise the budget or use fewer images or queries")
        with torch.no_grad():
            out = self._model(x.detach())
        self.queries += n
        self.calls += 1
        out = self._check_output(out, n)
        if torch.is_grad_enabled() and x.requires_grad:
            return _NoGradient.apply(x, out, self.name)
        return out

    def _check_output(self, out: Any, n: int) -> torch.Tensor:
        if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
            out = out[0]
        if not isinstance(out, torch.Tensor):
            raise BlackBoxOutputError(f"black-box model {self.name!r} returned {type(out).__name__}, not a logit"
                                      " tensor; it must map images to [N, num_classes] logits")
        k = self.num_classes
        if out.ndim != 2 or out.shape[0] != n or (k is not None and out.shape[1] != k) or out.shape[1] < 2:
            want = f"[{n}, {k if k is not None else 'num_classes'}]"
            raise BlackBoxOutputError(f"black-box model {self.name!r} returned logits of shape {tuple(out.shape)}"
                                      f" for {n} images, expected {want}; check the model's output layer")
        if not out.is_floating_point():
            raise BlackBoxOutputError(f"black-box model {self.name!r} returned {out.dtype} outputs; logits must"
                                      " be floating point")
        bad = torch.isnan(out) | (out == float("inf"))
        if bad.any():
            raise BlackBoxOutputError(f"black-box model {self.name!r} returned NaN or +inf logits for"
                                      f" {int(bad.any(1).sum())} of {n} images; fix the model before"
                                      " calibrating with it")
        return out

    def extra_repr(self) -> str:
        budget = "unlimited" if self.query_budget is None else str(self.query_budget)
        return f"name={self.name!r}, queries={self.queries}, budget={budget}"


def as_black_box(model: Any, query_budget: int | None = None) -> BlackBoxModel:
    """Treat ``model`` as a black box (a :class:`BlackBoxModel` keeps its counters unless a budget is given)."""
    if isinstance(model, BlackBoxModel) and query_budget is None:
        return model
    return BlackBoxModel(model, query_budget)


def spec_is_black_box(spec: Any) -> bool:
    """Whether a registry entry is marked ``source.black_box = true``."""
    source = getattr(spec, "source", None) or {}
    return bool(source.get("black_box", False))


def is_black_box(model: Any) -> bool:
    """Whether ``model`` is a :class:`BlackBoxModel` or its spec marks it as one."""
    return isinstance(model, BlackBoxModel) or spec_is_black_box(getattr(model, "spec", None))


def load_black_box(name: str, query_budget: int | None = None, device: str = "cpu",
                   allow_unsafe: bool = False) -> BlackBoxModel:
    """Load a model by registry name and wrap it as a black box (whatever its spec says)."""
    from mixzoo.zoo.models import load_model

    return BlackBoxModel(load_model(name, device=device, allow_unsafe=allow_unsafe), query_budget)

