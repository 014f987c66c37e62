"""Confidence margins and the per-example minimum-margin record shared by attack components (paper Def. 2.1,
Def. 2.2, App. B.1).

The record holds, per example, the best point an attack has visited so far, where "best" means: any misclassified
point beats every correctly classified one, and among points of the same kind the smaller *signed* margin wins.
The signed margin is ``p_y - max_{i != y} p_i`` (probabilities from the softmax of the judged logits, ``y`` the true
label). On a correctly classified point it equals the confidence margin of Def. 2.1; on a misclassified point it is
negative. Selecting on ``margin - 2 * misclassified`` makes the order lexicographic (margins lie in [-1, 1]), so ties
of the argmax (margin 0 either way) are resolved in the attacker's favour too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mixzoo.core.errors import InputError

MarginFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LN_EPS = 1e-8  # added to the variance before the square root, as in the authors' ``normalize_topk``
LN_CLIP = 1e15  # logits are clipped to [-LN_CLIP, LN_CLIP] first, as in the authors' ``normalize_topk``
LAYER_NORM_VERSION = "ln-2"  # 1: population variance, floor 1e-12; 2: unbiased variance + 1e-8 (the authors')


def check_top_k(top_k: object) -> None:
    """Raise :class:`InputError` unless ``top_k`` is None or an integer >= 2 (App. D.7; a variance needs two)."""
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 2):
        raise InputError(f"top_k must be an integer >= 2 (App. D.7: LN over the top-k logits), got {top_k!r}")


def layer_norm(logits: torch.Tensor, top_k: int | None = None) -> torch.Tensor:
    """Standardise each row of ``logits``: ``(h - mean) / sqrt(var + 1e-8)`` (Bai et al. 2024a, Sec. 4.2, LN; App. D.7).

    This is exactly the authors' ``normalize_topk`` (``models/output_maps.py`` of github.com/Bai-YT/MixedNUTS):
    logits are clipped to [-1e15, 1e15], ``var`` is the *unbiased* (Bessel-corrected, divide by k - 1) variance and
    1e-8 is added before the square root. With ``top_k``, the mean and variance are those of the ``top_k`` largest
    logits of the row (App. D.7: ImageNet uses the top 250 of 1000; ``top_k`` >= the number of classes means all),
    but the map is applied to all logits. The map is affine with a positive slope per row, so it never changes the
    predicted class. Constant rows map to zeros.
    """
    n_classes = logits.shape[-1]
    if top_k is not None and top_k < 2:
        raise InputError(f"top_k must be at least 2 (a variance needs two logits), got {top_k}")
    logits = logits.clamp(-LN_CLIP, LN_CLIP)
    ref = logits if top_k is None or top_k >= n_classes else logits.topk(top_k, dim=-1).values
    mean = ref.mean(dim=-1, keepdim=True)
    var = ref.var(dim=-1, unbiased=True, keepdim=True)
    return (logits - mean) / (var + LN_EPS).sqrt()


def signed_margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``softmax(logits)[y] - max_{i != y} softmax(logits)[i]`` per example (Def. 2.1 for correct predictions)."""
    probs = logits.float().softmax(dim=1)
    true = probs.gather(1, labels[:, None]).squeeze(1)
    others = probs.scatter(1, labels[:, None], float("-inf"))
    return true - others.max(dim=1).values


def ln_signed_margin(top_k: int | None = None) -> MarginFn:
    """The margin MMAA tracks: :func:`signed_margin` of the layer-normed logits, h^LN (App. B.1), with LN from
    :func:`layer_norm`."""

    def fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return signed_margin(layer_norm(logits.float(), top_k), labels)

    return fn


def selection_key(logits: torch.Tensor, margin: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Lower is better for the attacker: the signed margin, shifted by -2 where the argmax is not the label."""
    return margin - 2.0 * (logits.argmax(dim=1) != labels).to(margin.dtype)


@dataclass
class MarginRecord:
    """Per example: the point with the lowest :func:`selection_key` seen so far, its judged logits and margin.

    ``nan`` flags examples for which the judged output was NaN at some visited point; ``zero_grad`` flags examples
    whose loss gradient was exactly zero at an attack's starting point (a gradient-masking symptom).
    """

    x: torch.Tensor
    logits: torch.Tensor
    margin: torch.Tensor
    key: torch.Tensor
    labels: torch.Tensor
    margin_fn: MarginFn = field(default=signed_margin, repr=False)
    nan: torch.Tensor | None = None
    zero_grad: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = self.key.shape[0]
        if self.nan is None:
            self.nan = torch.zeros(n, dtype=torch.bool, device=self.key.device)
        if self.zero_grad is None:
            self.zero_grad = torch.zeros(n, dtype=torch.bool, device=self.key.device)

    @classmethod
    def start(cls, x: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor,
              margin_fn: MarginFn = signed_margin) -> MarginRecord:
        """A record whose only visited point is ``x`` (the clean images) with judged ``logits``."""
        logits = logits.detach()
        nan = torch.isnan(logits).any(dim=1)
        if nan.any():
            raise InputError(f"model returned NaN logits for {int(nan.sum())} examples; fix the model (or its inputs)"
                             " before attacking it, NaN outputs cannot be counted as robust")
        margin = margin_fn(logits, labels)
        return cls(x.detach().clone(), logits.clone(), margin, selection_key(logits, margin, labels), labels,
                   margin_fn)

    @property
    def misclassified(self) -> torch.Tensor:
        """Examples for which some visited point is misclassified."""
        return self.key < -1.0

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> None:
        """Offer new points (one per example, all examples of the record); keep those with a lower key."""
        logits = logits.detach()
        self.nan |= torch.isnan(logits).any(dim=1)
        margin = self.margin_fn(logits, self.labels)
        key = selection_key(logits, margin, self.labels)
        better = key < self.key  # False where NaN
        # torch.where, not ``if better.any()`` and boolean indexing: no host synchronisation per attack step
        self.x = torch.where(better.view(-1, *([1] * (x.dim() - 1))), x.detach(), self.x)
        self.logits = torch.where(better[:, None], logits.to(self.logits.dtype), self.logits)
        self.margin = torch.where(better, margin, self.margin)
        self.key = torch.where(better, key, self.key)

    def subset(self, index: torch.Tensor) -> MarginRecord:
        """A copy restricted to ``index`` (merge it back with :meth:`merge`)."""
        rows = {name: getattr(self, name)[index].clone() for name in _ROWS}
        return MarginRecord(**rows, labels=self.labels[index], margin_fn=self.margin_fn)

    def merge(self, index: torch.Tensor, part: MarginRecord) -> None:
        """Write a :meth:`subset` back (it only ever improved, so it replaces the rows)."""
        for name in _ROWS:
            getattr(self, name)[index] = getattr(part, name)

    def check_finite(self) -> None:
        """Raise :class:`InputError` if the model produced NaN at any visited point (never count NaN as robust)."""
        if self.nan.any():
            raise InputError(f"model returned NaN logits for {int(self.nan.sum())} examples during the attack;"
                             " fix the model's numerics, NaN outputs cannot be counted as robust")


_ROWS = ("x", "logits", "margin", "key", "nan", "zero_grad")  # MarginRecord's per-example fields
