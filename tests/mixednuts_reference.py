"""Hand-written references for MixedNUTS's formulas, shared by the tests that check the library against them:
the layer norm LN (000 Sec. 4.2, App. D.7, the authors' ``normalize_topk``), the signed probability margin (Def. 2.1),
the transform M(s, p, c) (Eq. 4), the confidence margin and the alpha Algorithm 1 picks for a beta."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F  # noqa: N812


def ln(z: torch.Tensor, top_k: int | None = None) -> torch.Tensor:
    """LN (Sec. 4.2, App. D.7): standardise each row by the mean and sqrt(unbiased variance + 1e-8) of its top_k
    logits (the authors' normalize_topk)."""
    ref = z if top_k is None or top_k >= z.shape[1] else z.topk(top_k, dim=1).values
    mean = ref.mean(1, keepdim=True)
    return (z - mean) / (((ref - mean) ** 2).sum(1, keepdim=True) / (ref.shape[1] - 1) + 1e-8).sqrt()


def signed(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Def. 2.1, signed: softmax probability of y minus the largest other one."""
    prob = z.softmax(1)
    rows = torch.arange(len(y))
    others = prob.clone()
    others[rows, y] = -1.0
    return prob[rows, y] - others.max(1).values


def transform(z: torch.Tensor, s: float, p: float, c: float, clamp: str = "gelu", top_k: int | None = None,
              dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Eq. 4: s * |Clamp(LN(h) + c)|^p * sgn(Clamp(LN(h) + c)); GELU exact, softplus = log(1 + e^x)."""
    h = ln(z.to(dtype), top_k) + c
    h = F.gelu(h) if clamp == "gelu" else torch.log1p(torch.exp(h))
    return s * h.abs() ** p * h.sign()


def conf(m: torch.Tensor) -> torch.Tensor:
    """Confidence margin (Algorithm 1): top softmax probability minus the second."""
    top = m.softmax(1).topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


def alpha(attacked: torch.Tensor, y: torch.Tensor, s: float, p: float, c: float, beta: float, clamp: str = "gelu",
           top_k: int | None = None) -> float:
    """Algorithm 1 line 15 at a fixed (s, p, c): q = sorted attacked-correct margins at floor((1 - beta) n)."""
    right = attacked.argmax(1) == y
    m = conf(transform(attacked[right], s, p, c, clamp, top_k)).sort().values
    return 1.0 / (1.0 + float(m[min(int(math.floor((1 - beta) * len(m) + 1e-9)), len(m) - 1)]))
