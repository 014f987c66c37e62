"""The adaptively smoothed classifier (Bai et al. 2024b, Eq. 3.4 with alpha = alpha_theta(x), Sec. 4.1-4.3).

``log((1 - a(x)) softmax(g(x) / T) + a(x) softmax(h(x)))`` with ``a(x) = alpha_min + (alpha_max - alpha_min)
sigmoid(gamma(x))``: the evaluation-time range (alpha_min, alpha_max) of App. D.1 (training uses (0, 1)). Computed
in log space from ``log_sigmoid`` (:func:`log_alphas`), so a hard-max ABC (T = 0, as MixedNUTS) and saturated
alphas give exact values and finite gradients.

Gradient variants (``gradient``), for the attacks an adversary who knows the method runs (:mod:`.attacks`):

* ``exact``: end-to-end, through the mixing network;
* ``gray``: Bai et al. 2024b, Sec. 4.2 setting A: the mixing network's input features are detached, so alpha is a
  constant in the backward pass (the network's gradient bypassed);
* ``transfer-abc`` / ``transfer-rbc``: the mixture's values with the gradient of one base model's log-softmax
  (transfer from each base model, Bai et al. 2024b, Sec. 5.1.1 STD / ROB attacks, judged on the mixture).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.shared.network import MixingNetwork
from mixzoo.methods.shared.taps import Taps, model_taps, run_tapped
from mixzoo.methods.shared.temperature import abc_log_probs

GRADIENTS = ("exact", "gray", "transfer-abc", "transfer-rbc")


def check_bounds(alpha_min: float, alpha_max: float, what: str = "alpha bounds") -> tuple[float, float]:
    """``0 <= alpha_min < alpha_max <= 1`` (App. D.1's evaluation-time range)."""
    for v in (alpha_min, alpha_max):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InputError(f"{what} must be numbers, got ({alpha_min!r}, {alpha_max!r})")
    if not 0.0 <= alpha_min < alpha_max <= 1.0:
        raise InputError(f"{what} must satisfy 0 <= alpha_min < alpha_max <= 1, got ({alpha_min}, {alpha_max})")
    return float(alpha_min), float(alpha_max)


def log_alphas(gamma: torch.Tensor, alpha_min: float = 0.0, alpha_max: float = 1.0) -> tuple[torch.Tensor,
                                                                                               torch.Tensor]:
    """``(log(1 - a), log(a))`` for ``a = alpha_min + (alpha_max - alpha_min) sigmoid(gamma)``, stably:
    ``log(a) = logaddexp(log alpha_min, log(alpha_max - alpha_min) + log_sigmoid(gamma))`` and likewise
    ``log(1 - a)`` with ``1 - alpha_max`` and ``log_sigmoid(-gamma)``."""
    span = math.log(alpha_max - alpha_min)
    lo = torch.full_like(gamma, math.log(alpha_min) if alpha_min > 0 else -math.inf)
    hi = torch.full_like(gamma, math.log1p(-alpha_max) if alpha_max < 1 else -math.inf)
    log_a = torch.logaddexp(lo, span + F.logsigmoid(gamma))
    log_1ma = torch.logaddexp(hi, span + F.logsigmoid(-gamma))
    return log_1ma, log_a


def adaptive_log_probs(abc_logits: torch.Tensor, rbc_logits: torch.Tensor, gamma: torch.Tensor, *,
                       temperature: float = 1.0, alpha_min: float = 0.0, alpha_max: float = 1.0) -> torch.Tensor:
    """``log((1 - a) softmax(g / T) + a softmax(h))`` per example (Bai et al. 2024b, Eq. 3.4, a = a(x) from
    ``gamma``)."""
    if abc_logits.shape != rbc_logits.shape:
        raise InputError(f"ABC logits {tuple(abc_logits.shape)} and RBC logits {tuple(rbc_logits.shape)} differ in"
                         " shape; the models must classify the same classes")
    log_1ma, log_a = log_alphas(gamma, alpha_min, alpha_max)
    return torch.logaddexp(log_1ma[:, None] + abc_log_probs(abc_logits, temperature),
                           log_a[:, None] + torch.log_softmax(rbc_logits, dim=-1))


class AdaptiveClassifier(nn.Module):
    """h^{alpha_theta} (Bai et al. 2024b, Sec. 5.2): frozen ``abc`` and ``rbc``, a mixing network ``net`` reading their
    taps.

    [0, 1] images in, log-probabilities out. ``bounded``: apply (alpha_min, alpha_max) (evaluation); training
    reads the full (0, 1) range (App. D.1). ``gradient``: see the module docstring.
    """

    def __init__(self, abc: nn.Module, rbc: nn.Module, net: MixingNetwork, *, temperature: float = 0.0,
                 alpha_min: float = 0.0, alpha_max: float = 1.0, gradient: str = "exact", bounded: bool = True,
                 taps: tuple[Taps, Taps] | None = None):
        super().__init__()
        if gradient not in GRADIENTS:
            raise InputError(f"gradient must be one of {', '.join(GRADIENTS)}, got {gradient!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature >= 0:
            raise InputError(f"temperature must be a number >= 0, got {temperature!r}")
        self.abc, self.rbc, self.net = abc, rbc, net
        self.taps = taps or (model_taps(abc, "ABC"), model_taps(rbc, "RBC"))
        self.temperature = float(temperature)
        self.alpha_min, self.alpha_max = check_bounds(alpha_min, alpha_max)
        self.gradient, self.bounded = gradient, bounded

    def bounds(self) -> tuple[float, float]:
        return (self.alpha_min, self.alpha_max) if self.bounded else (0.0, 1.0)

    def parts(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ABC logits, RBC logits, gamma) with each base model run once."""
        g, fg = run_tapped(self.abc, self.taps[0], x)
        h, fh = run_tapped(self.rbc, self.taps[1], x)
        early, middle = (fg["early"], fh["early"]), (fg["middle"], fh["middle"])
        if self.gradient == "gray":
            early, middle = tuple(t.detach() for t in early), tuple(t.detach() for t in middle)
        return g, h, self.net(early, middle)

    def alpha(self, x: torch.Tensor) -> torch.Tensor:
        """a(x) within the classifier's bounds, shape ``[n]``."""
        return torch.exp(log_alphas(self.parts(x)[2], *self.bounds())[1])

    def forward_alpha(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probabilities, log a(x)): what the alpha-lowering attacks (setting D) differentiate."""
        g, h, gamma = self.parts(x)
        lo, hi = self.bounds()
        out = adaptive_log_probs(g, h, gamma, temperature=self.temperature, alpha_min=lo, alpha_max=hi)
        if self.gradient.startswith("transfer-"):
            base = g if self.gradient == "transfer-abc" else h
            aux = torch.log_softmax(base, dim=-1)
            out = aux + (out - aux).detach()  # the mixture's values, one base model's gradient
        return out, log_alphas(gamma, lo, hi)[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the mixture for images ``x`` in [0, 1]."""
        return self.forward_alpha(x)[0]

    def extra_repr(self) -> str:
        return (f"temperature={self.temperature:g}, alpha in ({self.alpha_min:g}, {self.alpha_max:g}),"
                f" bounded={self.bounded}, gradient={self.gradient}")
