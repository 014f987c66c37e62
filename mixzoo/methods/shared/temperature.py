"""The ABC's side of every mixture: its log-probabilities at temperature T (Bai et al. 2024a, Sec. 3.1), used by
MixedNUTS, the linear mixture and adaptive smoothing."""

from __future__ import annotations

import torch

from mixzoo.core.errors import InputError


def abc_log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities of the temperature-scaled ABC, ``log_softmax(logits / T)`` (Bai et al. 2024a, Sec. 3.1).

    ``T = 0`` is the hard-max limit: exactly 0 at the (first) argmax and ``-inf`` elsewhere (the log of the one-hot
    vector of Sec. 2.1). It stays attached to the autograd graph with a zero gradient.
    """
    if temperature < 0:
        raise InputError(f"temperature must be >= 0, got {temperature}")
    if temperature > 0:
        return torch.log_softmax(logits / temperature, dim=-1)
    idx = logits.argmax(dim=-1, keepdim=True)
    out = torch.full_like(logits, float("-inf")).scatter_(-1, idx, 0.0)
    if logits.requires_grad:  # keep the graph (zero gradient) so that T = 0 mixtures can be back-propagated
        out = out + 0.0 * torch.nan_to_num(logits)
    return out
