"""The Square attack's points (Andriushchenko et al. 2020, ``pyautoattack/square.py``): the initial point, the
L-inf square and the L2 window pair with its ``eta`` pattern, drawn from a batch's generator (the reference's
draws) or per example (:class:`ExampleDraws`). :mod:`mixzoo.attacks.square` runs the search over them."""

from __future__ import annotations

import functools
import math

import torch

from mixzoo.core import rng


@functools.cache
def _eta_rectangles(x: int, y: int) -> torch.Tensor:
    """Concentric rectangles with weights 1/(k+1)^2, unit L2 norm (reference ``eta_rectangles``)."""
    delta = torch.zeros(x, y)
    if x == 0 or y == 0:
        return delta
    c0, c1 = x // 2, y // 2
    for k in range(max(x // 2 + 1, y // 2 + 1)):
        delta[max(c0, 0):min(c0 + 2 * k + 1, x), max(c1, 0):min(c1 + 2 * k + 1, y)] += 1.0 / (k + 1) ** 2
        c0, c1 = c0 - 1, c1 - 1
    return delta / delta.pow(2).sum().sqrt()


@functools.cache
def _eta_base(s: int) -> torch.Tensor:
    """The L2 square pattern of side ``s``: upper half positive, lower half negative, unit L2 norm."""
    delta = torch.zeros(s, s)
    delta[: s // 2] = _eta_rectangles(s // 2, s)
    delta[s // 2:] = -_eta_rectangles(s - s // 2, s)
    return delta / delta.pow(2).sum().sqrt()


def _eta(s: int, gen: torch.Generator) -> torch.Tensor:
    """:func:`_eta_base`, transposed with probability 1/2 (reference ``eta``)."""
    base = _eta_base(s)
    return base.t().contiguous() if float(torch.rand(1, generator=gen)) > 0.5 else base


def _signs(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=gen).float().mul_(2).sub_(1)


def _l2(t: torch.Tensor) -> torch.Tensor:
    return t.flatten(1).norm(dim=1).view(-1, *([1] * (t.ndim - 1)))


def _on_sphere(x: torch.Tensor, delta: torch.Tensor, eps: float) -> torch.Tensor:
    """``x + delta`` with ``delta`` rescaled to L2 norm eps, clipped to [0, 1]."""
    return (x + delta / (_l2(delta) + 1e-12) * eps).clamp(0.0, 1.0)


def _in_box(new: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """``new`` projected onto the L-inf eps-ball around ``x``, clipped to [0, 1]."""
    return torch.minimum(torch.maximum(new, x - eps), x + eps).clamp(0.0, 1.0)


def _linf_init(x: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """Vertical stripes of +-eps (reference L-inf initialisation)."""
    n, c, _, w = x.shape
    return (x + eps * _signs((n, c, 1, w), gen).to(x)).clamp(0.0, 1.0)


def _l2_init(x: torch.Tensor, eps: float, gen: torch.Generator | None,
             draws: ExampleDraws | None = None) -> torch.Tensor:
    """Tiles of the eta pattern with random signs, scaled to L2 norm eps (reference L2 initialisation); with
    ``draws``, each example has its own patterns and signs."""
    n, c, h, w = x.shape
    every = torch.arange(n, device=x.device)
    s = max(h // 5, 1)
    start = (h - s * 5) // 2 if h >= 5 else 0
    delta = torch.zeros_like(x)
    for vh in range(start, start + (h // s) * s, s):
        for vw in range(start, start + (w // s) * s, s):
            if vh >= h or vw >= w:
                continue
            if draws is None:
                assert gen is not None
                pattern = _eta(s, gen).to(x)
                sign = _signs((n, c, 1, 1), gen).to(x)
            else:
                pattern = draws.patterns(f"init-eta/{vh}/{vw}", every, s).to(x)
                sign = draws.signs(f"init-sign/{vh}/{vw}", every, (c, 1, 1)).to(x)
            hh, ww = min(s, h - vh), min(s, w - vw)
            delta[:, :, vh:vh + hh, vw:vw + ww] += pattern[..., :hh, :ww] * sign
    return _on_sphere(x, delta, eps)


def initial_point(x: torch.Tensor, eps: float, norm: str, gen: torch.Generator,
                  draws: ExampleDraws | None) -> torch.Tensor:
    """Square's initial point: L-inf stripes or L2 tiles, from ``gen`` or (given) per example from ``draws``."""
    if draws is not None and norm == "Linf":
        n, c, _, w = x.shape
        return (x + eps * draws.signs("init", torch.arange(n, device=x.device), (c, 1, w)).to(x)).clamp(0.0, 1.0)
    return _linf_init(x, eps, gen) if norm == "Linf" else _l2_init(x, eps, gen, draws)


def _window_content(delta: torch.Tensor, d1: torch.Tensor, both: torch.Tensor, signed_pattern: torch.Tensor,
                    eps: float) -> torch.Tensor:
    """The reference L2 proposal's new window 1: the pattern plus window 1's normalised perturbation ``d1``,
    rescaled to the mass the two windows (mask ``both``) hold plus the eps-ball's unused budget per channel."""
    norm_w1 = d1.pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()
    norm_windows = (delta * both).pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()
    norm_image = _l2(delta)
    new = signed_pattern + d1 / (1e-12 + norm_w1)
    budget = ((eps ** 2 - norm_image ** 2).clamp_min(0.0) / delta.shape[1] + norm_windows ** 2).sqrt()
    return new / (1e-12 + new.pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()) * budget


def _linf_step(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, vh: int, vw: int,
               sign: torch.Tensor) -> torch.Tensor:
    new = x_best.clone()
    new[:, :, vh:vh + s, vw:vw + s] += 2.0 * eps * sign
    return _in_box(new, x, eps)


def _l2_step(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, win1: tuple[int, int],
             win2: tuple[int, int], pattern: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """The reference L2 proposal: move the mass of window 2 into window 1 along a new eta pattern."""
    (vh, vw), (vh2, vw2) = win1, win2
    delta = x_best - x
    w1 = (slice(None), slice(None), slice(vh, vh + s), slice(vw, vw + s))
    w2 = (slice(None), slice(None), slice(vh2, vh2 + s), slice(vw2, vw2 + s))
    mask = torch.zeros_like(x[:1])
    mask[w1] = 1.0
    mask[w2] = 1.0
    new = _window_content(delta, delta[w1], mask, pattern.view(1, 1, s, s) * sign, eps)
    delta = delta.clone()
    delta[w2] = 0.0
    delta[w1] = new
    return _on_sphere(x, delta, eps)


def _rows(v: torch.Tensor, s: int) -> torch.Tensor:
    """``[n, s]`` pixel offsets ``v[i] .. v[i] + s - 1`` of each example's window along one axis."""
    return v[:, None] + torch.arange(s, device=v.device)


def _window_mask(vh: torch.Tensor, vw: torch.Tensor, s: int, h: int, w: int) -> torch.Tensor:
    """``[n, 1, h, w]`` boolean mask of each example's ``s x s`` window at ``(vh[i], vw[i])``."""
    hh, ww = torch.arange(h, device=vh.device), torch.arange(w, device=vw.device)
    in_h = (hh >= vh[:, None]) & (hh < vh[:, None] + s)
    in_w = (ww >= vw[:, None]) & (ww < vw[:, None] + s)
    return (in_h[:, :, None] & in_w[:, None, :])[:, None]


def _window_index(t: torch.Tensor, vh: torch.Tensor, vw: torch.Tensor, s: int) -> tuple[torch.Tensor, ...]:
    """The advanced index of each example's ``s x s`` window of ``t`` (``[n, c, h, w]``), channels last."""
    n = torch.arange(t.shape[0], device=t.device)[:, None, None]
    return n, slice(None), _rows(vh, s)[:, :, None], _rows(vw, s)[:, None, :]


def _linf_step_each(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, vh: torch.Tensor, vw: torch.Tensor,
                    sign: torch.Tensor) -> torch.Tensor:
    """:func:`_linf_step` with a window per example (``vh``, ``vw``: ``[n]``); equal to it when all are equal."""
    mask = _window_mask(vh, vw, s, x.shape[2], x.shape[3]).to(x.dtype)
    return _in_box(x_best + 2.0 * eps * sign * mask, x, eps)


def _l2_step_each(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, win1: tuple[torch.Tensor, torch.Tensor],
                  win2: tuple[torch.Tensor, torch.Tensor], pattern: torch.Tensor,
                  sign: torch.Tensor) -> torch.Tensor:
    """:func:`_l2_step` with two windows and an eta pattern (``[n, 1, s, s]``) per example."""
    h, w = x.shape[2:]
    delta = x_best - x
    at1 = _window_index(delta, *win1, s)
    in2 = _window_mask(*win2, s, h, w)
    both = (_window_mask(*win1, s, h, w) | in2).to(x.dtype)
    new = _window_content(delta, delta[at1].permute(0, 3, 1, 2), both, pattern * sign, eps)
    delta = delta.masked_fill(in2, 0.0)
    delta[at1] = new.permute(0, 2, 3, 1)
    return _on_sphere(x, delta, eps)


class ExampleDraws:
    """Square's random draws as functions of (seed, draw, example index) (:mod:`mixzoo.core.rng`): an example's
    windows, signs and patterns do not depend on the batch it is in, nor on which others are still attacked.

    The proposals' draws are hashed for :attr:`BLOCK` iterations at once (one :func:`mixzoo.core.rng.bits` call
    per block instead of several per iteration, which dominated the cost on small models); iteration ``it`` reads
    its row ``it % BLOCK`` of block ``it // BLOCK``: the same numbers whatever the batch."""

    BLOCK = 128

    def __init__(self, seed: int, index: torch.Tensor, device: torch.device):
        self.seed, self.index = int(seed), index.to(device=device, dtype=torch.int64)
        self._block: tuple[int, int] | None = None
        self._bits = torch.empty(0, dtype=torch.int64)

    def step(self, rows: torch.Tensor, it: int, slots: int) -> torch.Tensor:
        """32 random bits ``[len(rows), slots]`` for proposal ``it`` of the examples ``rows``."""
        if self._block != (it // self.BLOCK, slots):
            self._block = (it // self.BLOCK, slots)
            self._bits = rng.bits(self.seed, f"square-step/{it // self.BLOCK}", self.index, (self.BLOCK, slots))
        return self._bits[rows, it % self.BLOCK]

    def signs(self, name: str, rows: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return rng.bernoulli_sign(self.seed, f"square-{name}", self.index[rows], shape)

    def patterns(self, name: str, rows: torch.Tensor, s: int) -> torch.Tensor:
        """:func:`_eta` per example: ``[n, 1, s, s]``, transposed for about half of them."""
        base = _eta_base(s)
        flip = rng.uniform(self.seed, f"square-{name}", self.index[rows], ()) > 0.5
        base = base.to(flip.device)
        return torch.where(flip.view(-1, 1, 1, 1), base.t(), base)


def _side(p: float, norm: str, c: int, h: int, w: int) -> int:
    """The square's side for fraction ``p`` (reference: ``sqrt(p * n_features / c)``, at least 1; for L2 at least 3
    and odd), at most the image's."""
    n_features = c * h * w
    s = int(round(math.sqrt(p * n_features / c)))
    if norm == "Linf":
        return min(max(s, 1), h, w)
    s = max(s, 3)
    return min(s + 1 if s % 2 == 0 else s, h, w)


def proposal_each(draws: ExampleDraws, active: torch.Tensor, it: int, x: torch.Tensor, x_best: torch.Tensor,
                  eps: float, norm: str, p: float) -> torch.Tensor:
    """Proposal ``it`` for the ``active`` examples, windows, signs and patterns drawn per example."""
    _, c, h, w = x.shape
    raw = draws.step(active, it, c + 5)  # c signs, then vh, vw, vh2, vw2 and the eta flip
    s = _side(p, norm, c, h, w)

    def offset(j: int, lim: int) -> torch.Tensor:  # multiply-shift to [0, lim - s] (rng.randint's rule)
        return (raw[:, c + j] * (lim - s + 1)) >> 32

    sign = ((raw[:, :c] >> 31) * 2 - 1).to(x).view(-1, c, 1, 1)
    if norm == "Linf":
        return _linf_step_each(x, x_best, eps, s, offset(0, h), offset(1, w), sign)
    base = _eta_base(s).to(x)
    pattern = torch.where((raw[:, c + 4] >> 31).bool().view(-1, 1, 1, 1), base.t(), base)
    return _l2_step_each(x, x_best, eps, s, (offset(0, h), offset(1, w)), (offset(2, h), offset(3, w)), pattern,
                         sign)


def proposal_batch(gen: torch.Generator, active: torch.Tensor, n: int, xa: torch.Tensor, ba: torch.Tensor,
                   eps: float, norm: str, p: float) -> torch.Tensor:
    """A proposal for the active rows ``xa`` (best points ``ba``) of an ``n``-row batch, drawn from the batch's
    generator ``gen`` (AutoAttack's Square: one window per step, signs for every row of the batch)."""
    _, c, h, w = xa.shape
    sign = _signs((n, c, 1, 1), gen)[active.cpu()].to(xa)
    s = _side(p, norm, c, h, w)
    if norm == "Linf":
        vh, vw = (int(v) for v in torch.randint(0, h - s + 1, (1,), generator=gen).tolist()
                  + torch.randint(0, w - s + 1, (1,), generator=gen).tolist())
        return _linf_step(xa, ba, eps, s, vh, vw, sign)
    pos = [int(torch.randint(0, lim - s + 1, (1,), generator=gen)) for lim in (h, w, h, w)]
    return _l2_step(xa, ba, eps, s, (pos[0], pos[1]), (pos[2], pos[3]), _eta(s, gen).to(xa), sign)
