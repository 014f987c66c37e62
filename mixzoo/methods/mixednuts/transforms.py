"""Pure tensor functions of MixedNUTS: layer norm (App. D.7), the RBC transform M(s, p, c) (Eq. 4), ABC temperature
scaling with the hard-max limit T = 0 (Sec. 3.1), and the confidence margin (Def. 2.1).

Every function works on the last dimension (classes) and broadcasts over leading ones; none has side effects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mixzoo.attacks.margins import (  # noqa: F401 - LN is also MMAA's (App. B.1)
    LAYER_NORM_VERSION,
    LN_CLIP,
    LN_EPS,
    check_top_k,
    layer_norm,
)
from mixzoo.core.errors import InputError
from mixzoo.methods.shared.temperature import abc_log_probs  # noqa: F401 - also a name of this module

ClampFn = Callable[[torch.Tensor], torch.Tensor]

POW_FLOOR = 1e-30  # |x| is floored here inside |x|^p so that the gradient at x = 0 stays finite for p < 1


def get_clamp(name_or_callable: str | ClampFn) -> ClampFn:
    """A clamp function by name from the ``mixzoo_clamp_functions`` plugin hook, or the callable itself."""
    if callable(name_or_callable):
        return name_or_callable
    from mixzoo.core.plugins import lookup

    return lookup("clamp", name_or_callable)


def signed_power(x: torch.Tensor, p: float | torch.Tensor) -> torch.Tensor:
    """``|x|^p * sgn(x)`` with a finite gradient everywhere, also at x = 0 with p < 1 (gradient 0 there)."""
    return torch.sign(x) * x.abs().clamp_min(POW_FLOOR).pow(p)


def _as_tensor(v: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.to(like.dtype) if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=like.dtype,
                                                                                device=like.device)


def transform_of(params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :func:`rbc_transform` that a MixedNUTS card section records (s, p, c, clamp,
    top_k)."""
    return {"s": params["s"], "p": params["p"], "c": params["c"], "clamp": params["clamp"], "top_k": params["top_k"]}


def rbc_transform(logits: torch.Tensor, s: float | torch.Tensor, p: float | torch.Tensor, c: float | torch.Tensor,
                  clamp: str | ClampFn = "gelu", top_k: int | None = None) -> torch.Tensor:
    """The nonlinear logit transformation M(s, p, c) of Bai et al. 2024a, Eq. 4:
    ``s * |Clamp(LN(h) + c)|^p * sgn(Clamp(LN(h) + c))``.

    ``s``, ``p``, ``c`` are numbers or tensors that broadcast against ``logits`` (e.g. ``s`` of shape
    ``(S, 1, 1)`` with logits ``(N, K)`` gives ``(S, N, K)``). ``s`` and ``p`` must be positive.
    """
    s_t, p_t, c_t = (_as_tensor(v, logits) for v in (s, p, c))
    if (s_t <= 0).any() or (p_t <= 0).any():
        raise InputError(f"s and p must be positive (Bai et al. 2024a, Eq. 4), got s={s}, p={p}")
    h = get_clamp(clamp)(layer_norm(logits, top_k) + c_t)
    return s_t * signed_power(h, p_t)


def confidence_margin(logits: torch.Tensor) -> torch.Tensor:
    """The confidence margin of Def. 2.1 per row: top-1 minus top-2 softmax probability, in [0, 1].

    Computed stably as ``(1 - exp(l2 - l1)) / sum_k exp(l_k - l1)``; rows may contain ``-inf`` (log-probabilities
    of a hard-max ABC). A single class has margin 1.
    """
    if logits.shape[-1] < 2:
        return torch.ones(logits.shape[:-1], dtype=logits.dtype, device=logits.device)
    top = logits.topk(2, dim=-1).values
    l1 = top[..., :1]
    lse = torch.logsumexp(logits - l1, dim=-1)
    return -torch.expm1(top[..., 1] - top[..., 0]) * torch.exp(-lse)
