"""The mixed classifier: MixedNUTS (Bai et al. 2024a, Eq. 5), its baselines (Eq. 1) and its gradient modes (App. B.2).

``mix_log_probs`` is the one place the mixing formula lives; :class:`MixedClassifier` wraps it around two base
classifiers. Everything is computed in log space, ``logaddexp(log(1 - alpha) + log g~, log(alpha) + log h~)``, so
a hard-max ABC (T = 0, log-probabilities -inf off the argmax) and alpha in {0, 1} give exact values and finite
gradients.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.transforms import (
    ClampFn,
    check_top_k,
    get_clamp,
    rbc_transform,
    transform_of,
)
from mixzoo.methods.shared.temperature import abc_log_probs
from mixzoo.zoo.pairs import model_label, weight_mismatches  # noqa: F401 - weight_mismatches: importable from here too


def _check_alpha(alpha: float, allow_any_alpha: bool = True, what: str = "alpha") -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0.0 <= alpha <= 1.0:
        raise InputError(f"{what} must be a number in [0, 1], got {alpha!r}")
    if not allow_any_alpha and alpha < 0.5:
        raise InputError(f"{what} = {alpha} is below 1/2, where a mixture has no non-trivial robustness (paper"
                         " footnote 1); pass allow_any_alpha=True to use it anyway")
    return float(alpha)


def rbc_log_probs(rbc_logits: torch.Tensor, *, s: float, p: float, c: float, clamp: str | ClampFn = "gelu",
                  top_k: int | None = None, transform: bool = True) -> torch.Tensor:
    """``log_softmax(M(s, p, c)(h))`` (Eq. 4), or ``log_softmax(h)`` with ``transform=False``."""
    z = rbc_transform(rbc_logits, s, p, c, clamp=clamp, top_k=top_k) if transform else rbc_logits
    return torch.log_softmax(z, dim=-1)


def mix_log_probs(abc_logits: torch.Tensor | None, rbc_logits: torch.Tensor | None, *, s: float, p: float,
                  c: float, alpha: float, clamp: str | ClampFn = "gelu", temperature: float = 0.0,
                  top_k: int | None = None, transform: bool = True) -> torch.Tensor:
    """Log-probabilities of the mixture ``(1 - alpha) * softmax(g / T) + alpha * softmax(M(s, p, c)(h))``.

    With ``transform=True`` this is MixedNUTS (Eq. 5; T = 0 is the hard-max ABC of Sec. 3.1). With
    ``transform=False`` the RBC enters with its raw logits (no LN, clamp, power or scale: ``s``, ``p``, ``c`` are
    ignored), the linear mixture of Bai et al. (Eq. 1, use ``temperature=1``). Computed in log space: never NaN,
    exactly ``-inf`` only where the mixed probability is 0, finite gradients for alpha in [0, 1] including 0 and 1.
    ``abc_logits`` may be ``None`` when alpha is 1, ``rbc_logits`` when alpha is 0.
    """
    alpha = _check_alpha(alpha)
    if alpha < 1 and abc_logits is None:
        raise InputError(f"alpha = {alpha} mixes in the ABC, but abc_logits is None")
    if alpha > 0 and rbc_logits is None:
        raise InputError(f"alpha = {alpha} mixes in the RBC, but rbc_logits is None")
    if abc_logits is not None and rbc_logits is not None and abc_logits.shape != rbc_logits.shape:
        raise InputError(f"ABC logits {tuple(abc_logits.shape)} and RBC logits {tuple(rbc_logits.shape)} differ in"
                         " shape; the models must classify the same classes")
    if alpha == 1.0:
        return rbc_log_probs(rbc_logits, s=s, p=p, c=c, clamp=clamp, top_k=top_k, transform=transform)
    abc_lp = abc_log_probs(abc_logits, temperature)
    if alpha == 0.0:
        return abc_lp
    rbc_lp = rbc_log_probs(rbc_logits, s=s, p=p, c=c, clamp=clamp, top_k=top_k, transform=transform)
    return torch.logaddexp(math.log1p(-alpha) + abc_lp, math.log(alpha) + rbc_lp)


def auxiliary_log_probs(abc_logits: torch.Tensor | None, rbc_logits: torch.Tensor | None, *, s: float, p: float,
                        c: float, alpha_d: float, r_d: float = 0.9, clamp: str | ClampFn = "gelu",
                        top_k: int | None = None, transform: bool = True) -> torch.Tensor:
    """The differentiable auxiliary mixture of App. B.2.1, Eq. 8, in log space:
    ``log((1 - a_d) softmax(g) + a_d r_d softmax(h) + a_d (1 - r_d) softmax(M(s, p, c)(h)))`` with raw ABC logits.

    A missing ABC (RBC-only model) forces ``a_d = 1``, a missing RBC ``a_d = 0``.
    """
    alpha_d = 1.0 if abc_logits is None else 0.0 if rbc_logits is None else alpha_d
    terms = []
    if alpha_d < 1:
        terms.append(math.log1p(-alpha_d) + torch.log_softmax(abc_logits, dim=-1))
    if alpha_d > 0 and r_d > 0:
        terms.append(math.log(alpha_d * r_d) + torch.log_softmax(rbc_logits, dim=-1))
    if alpha_d > 0 and r_d < 1:
        terms.append(math.log(alpha_d * (1 - r_d))
                     + rbc_log_probs(rbc_logits, s=s, p=p, c=c, clamp=clamp, top_k=top_k, transform=transform))
    return terms[0] if len(terms) == 1 else torch.logsumexp(torch.stack(terms), dim=0)


def _is_number(v: Any) -> bool:
    """A real number; ``True``/``False`` are ints to Python but never a meant parameter value."""
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class MixingParams:
    """MixedNUTS's parameters (Bai et al. 2024a): ``s``, ``p``, ``c`` of the RBC's logit transform M(s, p, c)
    (Eq. 4) with its ``clamp`` and layer-norm statistics over the ``top_k`` logits (App. D.7; ``None``: all),
    ``alpha`` the RBC's weight in the mixture (Eq. 5; required), ``temperature`` T of the ABC's softmax (0: hard
    max, Sec. 3.1), ``r_d`` and ``alpha_d`` (default: ``alpha``) of the auxiliary mixture whose gradient the
    ``bypass`` mode follows (Eq. 8). ``transform=False`` leaves the RBC's logits raw: with ``temperature=1`` that is
    the linear mixture (Eq. 1). Bad values are refused where the parameters are made (one line each)."""

    alpha: float | None = None
    s: float = 1.0
    p: float = 1.0
    c: float = 0.0
    clamp: str | ClampFn = "gelu"
    temperature: float = 0.0
    top_k: int | None = None
    r_d: float = 0.9
    alpha_d: float | None = None
    transform: bool = True

    def __post_init__(self) -> None:
        if self.alpha is None:
            raise InputError("MixedClassifier needs alpha (the RBC's mixing weight, in [1/2, 1]); see MixCard")
        _check_alpha(self.alpha)
        for name, v in (("s", self.s), ("p", self.p)):
            if not (_is_number(v) and math.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a positive number (Bai et al. 2024a, Eq. 4), got {v!r}")
        if not (_is_number(self.c) and math.isfinite(self.c)):
            raise InputError(f"c must be a finite number, got {self.c!r}")
        if not (_is_number(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise InputError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        check_top_k(self.top_k)
        if not (isinstance(self.r_d, int | float) and 0.0 <= self.r_d <= 1.0):
            raise InputError(f"r_d must lie in [0, 1] (Eq. 8), got {self.r_d!r}")
        if self.alpha_d is not None:
            _check_alpha(self.alpha_d, what="alpha_d")
        get_clamp(self.clamp)  # unknown names fail now, not in the first forward pass


class MixedClassifier(nn.Module):
    """MixedNUTS (Eq. 5) around an accurate (``abc``) and a robust (``rbc``) base classifier, with the parameters
    ``params`` (:class:`MixingParams`).

    Takes images in [0, 1] and returns log-probabilities (valid logits), so it drops into AutoAttack or
    RobustBench's ``benchmark()``. ``gradient="exact"`` back-propagates through the formula (the T = 0 ABC
    contributes no gradient); ``gradient="bypass"`` (App. B.2.2) returns the MixedNUTS values with the gradient of
    the auxiliary mixture of Eq. 8 (:meth:`auxiliary`). ``allow_any_alpha`` admits alpha below 1/2 (Bai et al.
    2024a, footnote 1). The parameters are also attributes (``self.s``, ``self.alpha``, ...).
    """

    def __init__(self, abc: nn.Module | None, rbc: nn.Module | None, params: MixingParams, *,
                 gradient: str = "exact", allow_any_alpha: bool = False):
        super().__init__()
        if not isinstance(params, MixingParams):
            raise TypeError(f"MixedClassifier(abc, rbc, params, *, gradient, allow_any_alpha): params must be a"
                            f" MixingParams, got {type(params).__name__}")
        self.params = params
        self.alpha = _check_alpha(params.alpha, allow_any_alpha)
        if abc is None and self.alpha < 1:
            raise InputError(f"abc is None but alpha = {self.alpha} < 1 gives the ABC weight; pass an ABC or alpha=1")
        if rbc is None and self.alpha > 0:
            raise InputError(f"rbc is None but alpha = {self.alpha} > 0 gives the RBC weight; pass an RBC or alpha=0")
        if gradient not in ("exact", "bypass"):
            raise InputError(f"gradient must be 'exact' or 'bypass' (App. B.2.2), got {gradient!r}")
        self.abc, self.rbc = abc, rbc
        self.s, self.p, self.c = float(params.s), float(params.p), float(params.c)
        self.clamp, self.temperature, self.top_k = params.clamp, float(params.temperature), params.top_k
        self.gradient, self.r_d, self.transform = gradient, float(params.r_d), bool(params.transform)
        self.alpha_d = self.alpha if params.alpha_d is None else _check_alpha(params.alpha_d, what="alpha_d")

    # -------------------------------------------------------------------------------------- constructors
    @classmethod
    def rbc_only(cls, rbc: nn.Module) -> MixedClassifier:
        """The RBC alone (log-softmax of its raw logits)."""
        return cls(None, rbc, MixingParams(alpha=1.0, temperature=1.0, transform=False))

    @classmethod
    def abc_only(cls, abc: nn.Module) -> MixedClassifier:
        """The ABC alone (log-softmax of its raw logits, T = 1, so attacks get its gradient)."""
        return cls(abc, None, MixingParams(alpha=0.0, temperature=1.0, transform=False), allow_any_alpha=True)

    @classmethod
    def linear(cls, abc: nn.Module, rbc: nn.Module, alpha: float, allow_any_alpha: bool = False,
               gradient: str = "exact") -> MixedClassifier:
        """The linear mixture of Bai et al. (Eq. 1): constant alpha, no LN/clamp/power, ABC at T = 1."""
        return cls(abc, rbc, MixingParams(alpha=alpha, temperature=1.0, transform=False),
                   allow_any_alpha=allow_any_alpha, gradient=gradient)

    @classmethod
    def from_card(cls, card: Any, abc: nn.Module | None, rbc: nn.Module | None,
                  gradient: str = "exact", *, warn: bool = True, stacklevel: int = 2) -> MixedClassifier:
        """Build the classifier a :class:`~mixzoo.core.card.MixCard` (or card file) describes, through the card's mixing
        method (:meth:`mixzoo.methods.MixingMethod.build`; any method's module, not only this class).

        Warns when a model's weight hash differs from the one the card recorded (the parameters were calibrated
        for other weights); ``warn=False`` for callers that ran :func:`weight_mismatches` themselves, and
        ``stacklevel`` for wrappers, so the warning points at the user's line.
        """
        from mixzoo.core.card import MixCard

        if isinstance(card, str | Path):
            card = MixCard.load(card)
        for message in weight_mismatches(card, abc, rbc) if warn else ():
            warnings.warn(message, stacklevel=stacklevel)
        return card.mixing_method.build(abc, rbc, card, gradient=gradient)

    def gradient_variant(self, name: str) -> MixedClassifier | None:
        """This classifier with gradient ``name`` (``exact`` or ``bypass``), sharing its base models
        (:class:`mixzoo.attacks.variants.GradientVariants`); ``None`` for another name."""
        if name not in ("exact", "bypass"):
            return None
        if name == self.gradient:
            return self
        other = copy.copy(self)
        other._modules = dict(self._modules)  # the same base models, its own table of them
        other.gradient = name
        return other

    # ------------------------------------------------------------------------------------------- forward
    def _run(self, model: nn.Module | None, role: str, x: torch.Tensor) -> torch.Tensor | None:
        if model is None:
            return None
        out = model(x)
        if not torch.compiler.is_exporting() and not torch.isfinite(out).all():  # no data-dependent check in a graph
            bad = int((~torch.isfinite(out)).flatten(1).any(1).sum())
            raise InputError(f"the {model_label(model, role)} returned NaN or infinite logits for {bad} of"
                             f" {len(out)} images; check its weights and that images lie in [0, 1]")
        return out

    def base_logits(self, x: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(ABC logits, RBC logits) on images ``x``, each model run once (``None`` for a missing model)."""
        bypass = self.gradient == "bypass"
        g = self._run(self.abc, "ABC", x) if self.alpha < 1 or bypass else None
        h = self._run(self.rbc, "RBC", x) if self.alpha > 0 or bypass else None
        return g, h

    def _auxiliary(self, g: torch.Tensor | None, h: torch.Tensor | None) -> torch.Tensor:
        return auxiliary_log_probs(g, h, s=self.s, p=self.p, c=self.c, alpha_d=self.alpha_d, r_d=self.r_d,
                                   clamp=self.clamp, top_k=self.top_k, transform=self.transform)

    def _output(self, g: torch.Tensor | None, h: torch.Tensor | None) -> torch.Tensor:
        mixed = mix_log_probs(g, h, s=self.s, p=self.p, c=self.c, alpha=self.alpha, clamp=self.clamp,
                              temperature=self.temperature, top_k=self.top_k, transform=self.transform)
        if self.gradient == "bypass":
            aux = self._auxiliary(g, h)
            return aux + (mixed - aux).detach()  # values of MixedNUTS, gradient of Eq. 8 (App. B.2.2)
        return mixed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the mixture for images ``x`` in [0, 1]."""
        return self._output(*self.base_logits(x))

    def auxiliary(self, x: torch.Tensor) -> torch.Tensor:
        """The auxiliary differentiable mixture of Eq. 8 (raw ABC logits, ``r_d`` of the raw RBC)."""
        g = self._run(self.abc, "ABC", x)
        return self._auxiliary(g, self._run(self.rbc, "RBC", x))

    def forward_pair(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(``forward(x)``, ``auxiliary(x)``) with each base model run once (transfer-based attack, App. B.2.1)."""
        g = self._run(self.abc, "ABC", x)
        h = self._run(self.rbc, "RBC", x)
        return self._output(g, h), self._auxiliary(g, h)

    def extra_repr(self) -> str:
        clamp = self.clamp if isinstance(self.clamp, str) else getattr(self.clamp, "__name__", "custom")
        return (f"s={self.s:.4g}, p={self.p:.4g}, c={self.c:.4g}, alpha={self.alpha:.4g}, clamp={clamp},"
                f" temperature={self.temperature:g}, top_k={self.top_k}, transform={self.transform},"
                f" gradient={self.gradient}, alpha_d={self.alpha_d:.4g}, r_d={self.r_d:g}")


def transformed_rbc(rbc: nn.Module, card: Any) -> nn.Module:
    """h^M(s*, p*, c*) of a card as a model: [0, 1] images -> log-softmax of the transformed RBC logits (Eq. 4), i.e.
    the mixed classifier at alpha = 1, whose softmax margins are those Algorithm 1 thresholds."""
    return MixedClassifier(None, rbc, MixingParams(alpha=1.0, **transform_of(card.params)))
