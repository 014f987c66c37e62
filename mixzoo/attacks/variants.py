"""Gradient variants of one classifier: the protocol attacks use to ask a model for another gradient.

A gradient variant of a classifier f is a module f_v with the same values, f_v(x) = f(x) (up to float rounding),
and another gradient: the gradient of a differentiable surrogate where f's own is masked, e.g. MixedNUTS's
``bypass`` (Bai et al. 2024a, App. B.2.2), f(x) + (a(x) - f(x)).detach() with a the auxiliary mixture of Eq. 8. Mixing
methods build variants by name (:meth:`mixzoo.methods.MixingMethod.build` with ``gradient=NAME``); a built classifier
that implements :class:`GradientVariants` also hands them to an attack that needs one of a model it was given (the
``adaptive`` attack runs FAB-T and AutoAttack's components on ``bypass``). Judging stays on the model the attack
was given: a candidate counts when that model misclassifies it, which, the values being equal, is f's verdict.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import nn


@runtime_checkable
class GradientVariants(Protocol):
    """A classifier that offers gradient variants of itself."""

    def gradient_variant(self, name: str) -> nn.Module | None:
        """The variant ``name`` of this classifier (same values, that gradient), sharing its base models, or
        ``None`` when it has no such variant. ``"exact"`` is the classifier's own gradient."""
        ...


def with_gradient(model: nn.Module, name: str | None) -> nn.Module:
    """``model``'s variant ``name`` where it offers one (:class:`GradientVariants`), else ``model`` itself (a single
    model, or a classifier without that variant, has only its own gradient)."""
    if name is None or not isinstance(model, GradientVariants):
        return model
    variant = model.gradient_variant(name)
    return model if variant is None else variant


def offers(model: nn.Module, name: str) -> bool:
    """Whether ``model`` has a gradient variant ``name`` other than its own gradient."""
    return isinstance(model, GradientVariants) and model.gradient_variant(name) is not None


@runtime_checkable
class PairedOutput(Protocol):
    """A classifier with a differentiable surrogate computed in the same pass (Bai et al. 2024a, App. B.2.1's transfer
    attack: loss and gradient from the surrogate, success judged on the classifier)."""

    def forward_pair(self, x: object) -> tuple[object, object]:
        """(the classifier's output, the surrogate's output) on images ``x``."""
        ...
