"""The locally biased smoothed classifiers of Bai et al. (local smoothing) and their attack-time gradient variants.

* :func:`smooth`, the formula: ``(g_i + alpha R_i h_i) / (1 + alpha R_i)`` (Bai et al. (local smoothing), Eq. 2
  with ``R_i = ||grad g_i||_*`` and the K-NN oracle; Bai et al. (local smoothing), Eq. 5 / Bai et al. 2024b, Eq. 3.3
  with a robust network ``h`` and ``R_i`` one of :data:`R_OPTIONS`). alpha = 0 gives g, alpha -> infinity gives h
  (Bai et al. (local smoothing), Sec. 3, 4).
* :class:`LocalSmoothingClassifier` (robust-network oracle) and :class:`KNNSmoothingClassifier` (K-NN oracle)
  wrap it around base models: [0, 1] images in, log-probabilities out.

From smoothed scores to log-probabilities. On logits (Bai et al. (local smoothing)'s choice for both methods) the
smoothed scores are logits: the output is their ``log_softmax``. On probabilities (Bai et al. 2024b, Sec. 3, option 2)
``g_i``, ``h_i`` are the softmax outputs and the smoothed scores positive weights that need not sum to 1 (``R_i``
differs by class): the output is ``log(z_i / sum_j z_j)`` (Bai et al. 2024b's "inverse softmax is the logarithm",
normalised). Both are monotone per example, so the predicted class is the paper's ``argmax_i`` of the smoothed scores.

Gradient variants (``gradient=``, what an adversary who knows the method differentiates; Bai et al. (local smoothing),
Sec. 4.2, Eq. 6): ``"exact"`` the classifier itself, with the input gradients inside R_i kept differentiable (double
backprop); ``"fixed-R"`` the same values with R_i(x) held constant (no second-order path: Bai et al. (local smoothing)
notes R_i(x) "provides an additional gradient path", which can also mislead an attack); ``"alpha_t=A"`` the values of
the classifier with the gradient of the smoothed classifier at the attack-time ``A`` (``0``: g, ``inf``: the oracle h;
for the K-NN oracle its soft surrogate :meth:`~.knn.KNNOracle.soft`); ``"rbc"`` (K-NN smoothing only) the gradient of
the robust network of the pair, a transfer source for the non-differentiable oracle. The variants return the true
classifier's values (straight-through: ``values.detach() + s - s.detach()``), so an attack's success is judged on
the classifier itself.

The adaptive variant (Bai et al. (local smoothing), Eq. 7-9) plugs in through ``log_alpha``: a module ``beta_theta``
mapping the images to (B,) log-strengths; the classifier then uses ``alpha(x) = exp(clip(beta_theta(x), -14, 14))`` per
example (Bai et al. (local smoothing), Sec. 6.3 crops the policy output to [-14, 14]) and the gradient of ``"exact"``
flows through the policy; ``"policy-fixed"`` holds both R_i(x) and alpha(x) constant in the backward pass (the policy's
gradient bypassed, Bai et al. (local smoothing), Sec. 5.1's "without the gradient through the policy").
:meth:`LocalSmoothingClassifier.forward_alpha` also returns ``log alpha(x)``, what the attacks aimed at the policy
itself differentiate.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.local_smoothing.gradients import class_gradients, dual_norm, selected_gradient
from mixzoo.methods.local_smoothing.knn import KNNOracle

R_OPTIONS = ("one", "grad_g", "grad_max", "ratio")  # Bai et al. 2024b, App. B.1's four R_i(x)
SPACES = ("logits", "probabilities")  # Bai et al. 2024b, Sec. 3
GRADIENTS = ("exact", "fixed-R")  # plus "alpha_t=A", "policy-fixed" (with a policy) and, for K-NN smoothing, "rbc"
LOG_ALPHA_CLIP = 14.0  # Bai et al. (local smoothing), Sec. 6.3


def smooth(g: torch.Tensor, h: torch.Tensor, r: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """``(g + alpha R h) / (1 + alpha R)`` elementwise (Bai et al. (local smoothing), Eq. 2, 5; Bai et al. 2024b, Eq.
    3.3); ``alpha = inf`` gives ``h``.

    ``alpha`` is a number or a (B, 1) tensor (a per-example strength, Bai et al. (local smoothing), Eq. 7, or a
    per-example attack-time alpha_t, any of them ``inf``); ``r`` is (B, c) or (B, 1).
    """
    if isinstance(alpha, float | int) and math.isinf(alpha):
        return h + 0.0 * (g + r)  # the limit, keeping every input in the graph
    if isinstance(alpha, torch.Tensor) and bool(torch.isinf(alpha).any()):
        inf = torch.isinf(alpha)
        w = torch.where(inf, 0.0, alpha) * r  # finite in both branches: no NaN reaches the backward pass
        return torch.where(inf, h + 0.0 * (g + r), (g + w * h) / (1.0 + w))
    w = alpha * r
    return (g + w * h) / (1.0 + w)


def to_log_probs(z: torch.Tensor, space: str) -> torch.Tensor:
    """Smoothed scores -> log-probabilities with the same argmax (see the module docstring)."""
    if space == "logits":
        return torch.log_softmax(z, dim=-1)
    logz = torch.log(z.clamp_min(torch.finfo(z.dtype).tiny))
    return logz - torch.logsumexp(logz, dim=-1, keepdim=True)


def parse_gradient(gradient: str, allowed: tuple[str, ...]) -> tuple[str, float | None]:
    """``(mode, alpha_t)`` of a gradient name: ``"exact"``, ``"fixed-R"``, ``"rbc"`` or ``"alpha_t=A"``."""
    if gradient.startswith("alpha_t="):
        try:
            a = float(gradient.removeprefix("alpha_t="))
        except ValueError:
            a = -1.0
        if not a >= 0:
            raise InputError(f"gradient {gradient!r}: alpha_t must be a number >= 0 or inf, e.g. alpha_t=0")
        return "alpha_t", a
    if gradient not in allowed:
        raise InputError(f"unknown gradient {gradient!r}; use one of {', '.join(allowed)} or alpha_t=A")
    return gradient, None


def _straight_through(values: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    return values.detach() + (surrogate - surrogate.detach())


def _wants_grad(x: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and x.requires_grad


class LocalSmoothingClassifier(nn.Module):
    """Bai et al. (local smoothing), Eq. 5 / Bai et al. 2024b, Eq. 3.3 with ABC ``g`` and RBC ``h``: [0, 1] images ->
    log-probabilities.

    ``r``: ``"one"`` (R_i = 1), ``"grad_g"`` (||grad g_i||_*), ``"grad_max"`` (||grad max_j g_j||_*, one gradient
    for all classes) or ``"ratio"`` (||grad g_i||_* / (||grad h_i||_* + eps_c)), on ``space`` (logits or
    probabilities; gradients are those of the functions mixed). ``accelerated`` (Bai et al. (local smoothing), App.
    A.1, Eq. 10) replaces the per-class gradients by the predicted class's: ``grad_g`` -> ||grad g_k1||_*, ``ratio`` ->
    ||grad g_k1||_* / (||grad h_k2||_* + eps_c), k1, k2 the argmax of g and h: two backward passes, no Jacobian.
    """

    def __init__(self, abc: nn.Module, rbc: nn.Module, *, alpha: float, r: str = "one", space: str = "logits",
                 norm: str = "Linf", eps_c: float = 1e-6, accelerated: bool = False, gradient: str = "exact",
                 log_alpha: nn.Module | None = None):
        super().__init__()
        if r not in R_OPTIONS:
            raise InputError(f"R_i must be one of {', '.join(R_OPTIONS)}, got {r!r}")
        if space not in SPACES:
            raise InputError(f"space must be one of {', '.join(SPACES)}, got {space!r}")
        if not alpha >= 0:
            raise InputError(f"alpha must be >= 0, got {alpha!r}")
        self.abc, self.rbc, self.log_alpha = abc, rbc, log_alpha
        self.alpha, self.r, self.space, self.norm = float(alpha), r, space, norm
        self.eps_c, self.accelerated = float(eps_c), bool(accelerated)
        self.mode, self.alpha_t = parse_gradient(gradient, GRADIENTS if log_alpha is None
                                                 else (*GRADIENTS, "policy-fixed"))
        self.smoothing_gradient = gradient  # not "gradient": the shared attacks switch a "gradient" attribute

    def _fn(self, model: nn.Module):
        return model if self.space == "logits" else (lambda x: torch.softmax(model(x), dim=-1))

    def parts(self, x: torch.Tensor, create_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(g(x), h(x), R(x))`` in the classifier's space; R is (B, c), or (B, 1) when one value serves all
        classes. ``create_graph`` keeps R differentiable in x."""
        fg, fh = self._fn(self.abc), self._fn(self.rbc)
        g, h, r = self._parts(fg, fh, x, create_graph)
        if _wants_grad(x) and not create_graph and self.r != "one":  # values attached to x; R(x) held constant
            g, h = fg(x), fh(x)
        return g, h, r

    def _parts(self, fg, fh, x: torch.Tensor, create_graph: bool) -> tuple[torch.Tensor, ...]:
        if self.r == "one":
            g, h = fg(x), fh(x)
            return g, h, torch.ones_like(g[:, :1])
        if self.r == "grad_max" or (self.accelerated and self.r == "grad_g"):
            g, grad = selected_gradient(fg, x, create_graph=create_graph)
            return g, fh(x), dual_norm(grad, self.norm).unsqueeze(1)
        if self.accelerated:  # ratio, Bai et al. (local smoothing), Eq. 10
            g, grad_g = selected_gradient(fg, x, create_graph=create_graph)
            h, grad_h = selected_gradient(fh, x, create_graph=create_graph)
            r = dual_norm(grad_g, self.norm) / (dual_norm(grad_h, self.norm) + self.eps_c)
            return g, h, r.unsqueeze(1)
        g, jac_g = class_gradients(fg, x, create_graph=create_graph)
        r = dual_norm(jac_g, self.norm).T  # (B, c)
        if self.r == "grad_g":
            return g, fh(x), r
        h, jac_h = class_gradients(fh, x, create_graph=create_graph)
        return g, h, r / (dual_norm(jac_h, self.norm).T + self.eps_c)

    def log_strength(self, x: torch.Tensor) -> torch.Tensor | None:
        """``beta_theta(x)`` cropped to [-14, 14], shape (B,), when a policy is plugged in (Bai et al. (local
        smoothing), Eq. 7), else None."""
        if self.log_alpha is None:
            return None
        beta = self.log_alpha(x).reshape(-1).clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP)
        return beta.detach() if self.mode == "policy-fixed" else beta

    def forward_alpha(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probabilities, log alpha per example, (B,)); a constant alpha gives ``log alpha`` for every row."""
        grad = _wants_grad(x)
        exact = self.mode == "exact" and grad
        g, h, r = self.parts(x, create_graph=exact)
        if not exact:  # values only, or a surrogate's gradient below: R(x) enters as a constant
            r = r.detach()
            if not grad:
                g, h = g.detach(), h.detach()
        beta = self.log_strength(x)
        alpha = self.alpha if beta is None else torch.exp(beta).unsqueeze(1)
        if beta is None:
            beta = torch.full((len(x),), math.log(self.alpha) if self.alpha > 0 else -math.inf, dtype=g.dtype,
                              device=g.device)
        out = to_log_probs(smooth(g, h, r, alpha), self.space)
        if not grad or self.mode != "alpha_t":
            return out, beta
        return _straight_through(out, to_log_probs(smooth(g, h, r, self.alpha_t), self.space)), beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_alpha(x)[0]


class KNNSmoothingClassifier(nn.Module):
    """Bai et al. (local smoothing), Eq. 2: ``(g_i + alpha h_i ||grad g_i||_*) / (1 + alpha ||grad g_i||_*)`` with
    ``g`` the ABC's logits and ``h`` the K-NN oracle; [0, 1] images -> log-probabilities (``log_softmax`` of the
    smoothed scores).

    ``rbc`` (optional) is the pair's robust network, used only by the ``"rbc"`` transfer gradient.
    """

    def __init__(self, abc: nn.Module, oracle: KNNOracle, *, alpha: float, norm: str = "Linf",
                 gradient: str = "exact", rbc: nn.Module | None = None):
        super().__init__()
        if not alpha >= 0:
            raise InputError(f"alpha must be >= 0, got {alpha!r}")
        self.abc, self.oracle, self.rbc = abc, oracle, rbc
        self.alpha, self.norm = float(alpha), norm
        self.mode, self.alpha_t = parse_gradient(gradient, (*GRADIENTS, "rbc"))
        if self.mode == "rbc" and rbc is None:
            raise InputError("gradient 'rbc' needs the pair's RBC; pass rbc=")
        self.smoothing_gradient = gradient

    def parts(self, x: torch.Tensor, create_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(g(x), h(x), ||grad g_i(x)||_*)``, each (B, c)."""
        g, jac = class_gradients(self.abc, x, create_graph=create_graph)
        if _wants_grad(x) and not create_graph:  # values attached to x; R(x) held constant
            g = self.abc(x)
        return g, self.oracle(x).to(g.dtype), dual_norm(jac, self.norm).T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grad = _wants_grad(x)
        exact = self.mode == "exact" and grad
        g, h, r = self.parts(x, create_graph=exact)
        if not exact:
            r = r.detach()
            if not grad:
                g = g.detach()
        out = torch.log_softmax(smooth(g, h, r, self.alpha), dim=-1)
        if not grad or self.mode in ("exact", "fixed-R"):
            return out
        if self.mode == "rbc":
            return _straight_through(out, torch.log_softmax(self.rbc(x), dim=-1))
        soft = self.oracle.soft(x)  # the alpha_t path: the oracle's differentiable surrogate
        return _straight_through(out, torch.log_softmax(smooth(g, soft, r, self.alpha_t), dim=-1))
