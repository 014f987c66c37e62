"""The K-nearest-neighbour direction oracle of Bai et al. (local smoothing) Sec. 3: ``h_i(x) = 2 * (share of the K
nearest training images, in l2, labelled i) - 1``, in [-1, 1].

Neighbours are found over the whole train split with chunked ``torch.cdist`` and ``topk`` (memory bounded by the
chunk, never a loop over query images). The oracle is piecewise constant in x, so its gradient is zero almost
everywhere; :meth:`KNNOracle.soft` is a differentiable surrogate (a softmax over each class's mean distance to its K
nearest train images) that an adversary uses to attack the oracle itself (alpha_t -> infinity, Bai et al. (local
smoothing), Sec. 4.2).
"""

from __future__ import annotations

import torch
from torch import nn

from mixzoo.core.errors import InputError

DEFAULT_CHUNK = 8192  # train images per distance block: 8192 x B floats at a time
SOFT_MAX_K = 20  # neighbours per class in the soft surrogate: (B, c, 20, d) gathered images


class KNNOracle(nn.Module):
    """``h(x)`` of Bai et al. (local smoothing), Sec. 3 over ``images`` (N, C, H, W in [0, 1]) with ``labels`` (N,),
    ``k`` neighbours.

    Distances are l2 on the [0, 1] pixels (Bai et al. (local smoothing) footnote 2 standardises per channel: on
    one-channel images that is a scaling, which leaves the neighbours unchanged).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, k: int, num_classes: int,
                 chunk: int = DEFAULT_CHUNK):
        super().__init__()
        if not 1 <= k <= len(labels):
            raise InputError(f"K must lie in [1, {len(labels)}] (the train images), got {k}")
        # not part of state_dict: the card identifies the images by dataset, split, count and fingerprint
        self.register_buffer("train_images", images.flatten(1).float(), persistent=False)
        self.register_buffer("train_labels", labels.long(), persistent=False)
        self.k, self.num_classes, self.chunk = int(k), int(num_classes), int(chunk)

    def neighbours(self, x: torch.Tensor, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(distances, indices)`` of the ``k`` nearest train images of each query, nearest first: (B, k) each."""
        return self._nearest(x, self.k if k is None else min(int(k), self.train_images.shape[0]), per_class=False)

    def _nearest(self, x: torch.Tensor, k: int, per_class: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest train images (of each class: ``per_class``, (B, c, k)), in memory chunks over the train
        split."""
        q = x.detach().flatten(1).to(self.train_images.dtype)
        shape = (q.shape[0], self.num_classes, 0) if per_class else (q.shape[0], 0)
        best_d, best_i = q.new_empty(shape), torch.empty(shape, dtype=torch.long, device=q.device)
        for start in range(0, self.train_images.shape[0], self.chunk):
            d = torch.cdist(q, self.train_images[start:start + self.chunk], compute_mode="use_mm_for_euclid_dist")
            if per_class:
                own = nn.functional.one_hot(self.train_labels[start:start + self.chunk], self.num_classes).T.bool()
                d = torch.where(own.unsqueeze(0), d.unsqueeze(1), torch.inf)  # (B, c, chunk)
            d, i = d.topk(min(k, d.shape[-1]), dim=-1, largest=False)
            best_d, pos = torch.cat([best_d, d], -1).topk(min(k, best_d.shape[-1] + d.shape[-1]), dim=-1, largest=False)
            best_i = torch.cat([best_i, i + start], -1).gather(-1, pos)
        return best_d, best_i

    def votes(self, x: torch.Tensor) -> torch.Tensor:
        """Share of the K nearest train images labelled ``i``, (B, c)."""
        _, idx = self.neighbours(x)
        onehot = nn.functional.one_hot(self.train_labels[idx], self.num_classes).to(x.dtype)
        return onehot.mean(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``h(x) = 2 * votes - 1`` (Bai et al. (local smoothing), Sec. 3), no gradient."""
        return 2.0 * self.votes(x) - 1.0

    def class_neighbours(self, x: torch.Tensor, m: int) -> torch.Tensor:
        """Indices of the ``m`` nearest train images of every class, (B, c, m) (a class with fewer than ``m`` images
        repeats its farthest)."""
        return self._nearest(x, m, per_class=True)[1]

    def soft(self, x: torch.Tensor) -> torch.Tensor:
        """A differentiable stand-in for ``h(x)`` that an adversary attacks: ``2 softmax_i(-D_i / tau) - 1`` with
        ``D_i`` the mean squared distance to class i's K nearest train images (at most :data:`SOFT_MAX_K`, which
        bounds memory) and ``tau`` the spread of ``D`` over classes (held fixed). Unlike the vote it has a gradient
        everywhere, toward every other class."""
        idx = self.class_neighbours(x, min(self.k, SOFT_MAX_K))  # (B, c, K)
        near = self.train_images[idx].to(x.dtype)  # (B, c, K, d)
        d2 = (x.flatten(1)[:, None, None, :] - near).pow(2).sum(-1).mean(-1)  # (B, c)
        ref = d2.detach()
        tau = (ref.mean(1, keepdim=True) - ref.min(1, keepdim=True).values).clamp_min(1e-12)
        return 2.0 * torch.softmax(-d2 / tau, dim=1) - 1.0
