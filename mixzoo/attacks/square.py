"""Minimum-margin Square attack: a gradient-free minimum-margin attack for black-box RBCs (Bai et al. 2024a, App. D.5).

Square (Andriushchenko et al. 2020) is a random search: from the current point it proposes a square-shaped change
(L-inf: a square of +-2 eps per channel, projected back to the eps-ball; L2: a pair of windows whose mass is
redistributed, with the ``eta`` pattern), queries the model, and keeps the proposal if it lowers the loss. The
square side shrinks with the ``p`` schedule of the reference implementation (``pyautoattack/square.py``,
``p_selection``; rescaled to ``n_queries`` as with ``resc_schedule=True``, so short runs pass through the whole
schedule). App. D.5 turns it into a minimum-margin attack by recording the margin at every query; here the loss
of the random search IS the recorded quantity, so the current point is always the best point visited:

* the judged margin is the signed margin ``p_y - max_{i != y} p_i`` of softmax(LN(logits)) (as in MMAA,
  :func:`mixzoo.attacks.margins.ln_signed_margin`; raw logits with ``layer_norm=False``), and a proposal is kept
  when its :func:`~mixzoo.attacks.margins.selection_key` is lower (misclassified points beat correct ones; ties,
  e.g. a saturated margin of 1.0 in float32, go to the lower logit margin ``z_y - max_{i != y} z_i``);
* the returned point of EVERY example is the visited point of smallest signed margin, the clean image included,
  and the returned ``margins`` are the margins at the returned points (so never above the clean margin);
* an example stops being queried once a visited point is misclassified (Algorithm 1 only uses the attacked points
  that stay correct, so further queries would be wasted); the others get all ``n_queries`` proposals;
* only forward passes are made, under ``torch.no_grad`` (works through :class:`mixzoo.zoo.blackbox.BlackBoxModel`).

Queries per example: 1 (clean) + 1 (Square's initial point) + up to ``n_queries - 1`` proposals, i.e. at most
``n_queries + 1`` (:func:`square_queries_needed`). Randomness, given the examples' indices (``index``, what the
bench passes): every example draws its own initial stripes or tiles, windows, signs and eta
patterns from ``(seed, index, iteration)`` (:class:`_ExampleDraws`, :mod:`mixzoo.core.rng`), so its run does not
depend on the batch it is in. Without indices: a :class:`torch.Generator` seeded with ``seed + first index of the
batch``; positions are shared by the examples of an iteration (as in the reference), signs are drawn for the whole
batch every iteration, so one example's stream does not depend on which others are still being attacked.
Deviations from the reference, all deliberate: the square's position ranges over all
``h - s + 1`` offsets (the reference never picks the last one), L2 initial tiles that overhang the border are
cropped (the reference needs ``h >= 10``), and nothing is restarted. One more, not chosen but kept so that published
runs reproduce: proposal ``it`` (1 to ``n_queries - 1``, the initial point being query 0) takes the schedule's value
at ``it``, where the reference's first proposal takes it at 0. With the default 5,000 queries both give ``p_init``
(``int(1 / 5000 * 10000) = 2 <= 10``) and every later boundary moves by one query; with fewer than 1,000 queries the
first square is already smaller than ``p_init`` (n_queries = 10: ``p_init / 16``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.apgd import check_attack_settings, settings_from
from mixzoo.attacks.margins import ln_signed_margin, selection_key, signed_margin
from mixzoo.attacks.mmaa import MMAAResult
from mixzoo.attacks.result import nan_error
from mixzoo.core import rng
from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.models import check_images, check_labels

SQUARE_CODE_VERSION = "min-margin-square-1"


def square_queries_needed(n_examples: int, n_queries: int) -> int:
    """Worst-case model queries (examples forwarded) of :func:`min_margin_square`: ``n * (n_queries + 1)``."""
    return int(n_examples) * (int(n_queries) + 1)


def p_selection(p_init: float, it: int, n_queries: int) -> float:
    """Fraction of pixels a square covers at iteration ``it`` (reference schedule, rescaled to ``n_queries``)."""
    it = int(it / n_queries * 10000)
    for bound, div in ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16), (2000, 32), (4000, 64), (6000, 128),
                       (8000, 256)):
        if it <= bound:
            return p_init / div
    return p_init / 512


# ---------------------------------------------------------------------------------------------- L2 pattern
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


# -------------------------------------------------------------------------------------------------- helpers
def _signs(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=gen).float().mul_(2).sub_(1)


def _l2(t: torch.Tensor) -> torch.Tensor:
    return t.flatten(1).norm(dim=1).view(-1, *([1] * (t.ndim - 1)))


def _logit_margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    z = logits.double()
    zy = z.gather(1, labels[:, None]).squeeze(1)
    return zy - z.scatter(1, labels[:, None], float("-inf")).max(dim=1).values


def _linf_init(x: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """Vertical stripes of +-eps (reference L-inf initialisation)."""
    n, c, _, w = x.shape
    return (x + eps * _signs((n, c, 1, w), gen).to(x)).clamp(0.0, 1.0)


def _l2_init(x: torch.Tensor, eps: float, gen: torch.Generator | None,
             draws: _ExampleDraws | None = None) -> torch.Tensor:
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
    return (x + delta / (_l2(delta) + 1e-12) * eps).clamp(0.0, 1.0)


def _linf_step(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, vh: int, vw: int,
               sign: torch.Tensor) -> torch.Tensor:
    new = x_best.clone()
    new[:, :, vh:vh + s, vw:vw + s] += 2.0 * eps * sign
    return torch.minimum(torch.maximum(new, x - eps), x + eps).clamp(0.0, 1.0)


def _l2_step(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, win1: tuple[int, int],
             win2: tuple[int, int], pattern: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """The reference L2 proposal: move the mass of window 2 into window 1 along a new eta pattern."""
    c = x.shape[1]
    (vh, vw), (vh2, vw2) = win1, win2
    delta = x_best - x
    w1 = (slice(None), slice(None), slice(vh, vh + s), slice(vw, vw + s))
    w2 = (slice(None), slice(None), slice(vh2, vh2 + s), slice(vw2, vw2 + s))
    norm_w1 = delta[w1].pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()
    mask = torch.zeros_like(x[:1])
    mask[w1] = 1.0
    mask[w2] = 1.0
    norm_windows = (delta * mask).pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()
    norm_image = _l2(delta)
    new = pattern.view(1, 1, s, s) * sign + delta[w1] / (1e-12 + norm_w1)
    budget = ((eps ** 2 - norm_image ** 2).clamp_min(0.0) / c + norm_windows ** 2).sqrt()
    new = new / (1e-12 + new.pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()) * budget
    delta = delta.clone()
    delta[w2] = 0.0
    delta[w1] = new
    return (x + delta / (_l2(delta) + 1e-12) * eps).clamp(0.0, 1.0)


# ------------------------------------------------------------------------------ per-example windows
def _rows(v: torch.Tensor, s: int) -> torch.Tensor:
    """``[n, s]`` pixel offsets ``v[i] .. v[i] + s - 1`` of each example's window along one axis."""
    return v[:, None] + torch.arange(s, device=v.device)


def _window_mask(vh: torch.Tensor, vw: torch.Tensor, s: int, h: int, w: int) -> torch.Tensor:
    """``[n, 1, h, w]`` boolean mask of each example's ``s x s`` window at ``(vh[i], vw[i])``."""
    hh, ww = torch.arange(h, device=vh.device), torch.arange(w, device=vw.device)
    in_h = (hh >= vh[:, None]) & (hh < vh[:, None] + s)
    in_w = (ww >= vw[:, None]) & (ww < vw[:, None] + s)
    return (in_h[:, :, None] & in_w[:, None, :])[:, None]


def _take(t: torch.Tensor, vh: torch.Tensor, vw: torch.Tensor, s: int) -> torch.Tensor:
    """Each example's ``s x s`` window of ``t`` (``[n, c, h, w]``) as ``[n, c, s, s]``."""
    n = torch.arange(t.shape[0], device=t.device)[:, None, None]
    return t[n, :, _rows(vh, s)[:, :, None], _rows(vw, s)[:, None, :]].permute(0, 3, 1, 2)


def _put(t: torch.Tensor, vh: torch.Tensor, vw: torch.Tensor, s: int, values: torch.Tensor) -> None:
    """Write ``values`` (``[n, c, s, s]``) into each example's window of ``t``, in place."""
    n = torch.arange(t.shape[0], device=t.device)[:, None, None]
    t[n, :, _rows(vh, s)[:, :, None], _rows(vw, s)[:, None, :]] = values.permute(0, 2, 3, 1)


def _linf_step_each(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, vh: torch.Tensor, vw: torch.Tensor,
                    sign: torch.Tensor) -> torch.Tensor:
    """:func:`_linf_step` with a window per example (``vh``, ``vw``: ``[n]``); equal to it when all are equal."""
    mask = _window_mask(vh, vw, s, x.shape[2], x.shape[3]).to(x.dtype)
    new = x_best + 2.0 * eps * sign * mask
    return torch.minimum(torch.maximum(new, x - eps), x + eps).clamp(0.0, 1.0)


def _l2_step_each(x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, win1: tuple[torch.Tensor, torch.Tensor],
                  win2: tuple[torch.Tensor, torch.Tensor], pattern: torch.Tensor,
                  sign: torch.Tensor) -> torch.Tensor:
    """:func:`_l2_step` with two windows and an eta pattern (``[n, 1, s, s]``) per example."""
    c, h, w = x.shape[1:]
    delta = x_best - x
    d1 = _take(delta, *win1, s)
    norm_w1 = d1.pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()
    in2 = _window_mask(*win2, s, h, w)
    both = (_window_mask(*win1, s, h, w) | in2).to(x.dtype)
    norm_windows = (delta * both).pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()
    norm_image = _l2(delta)
    new = pattern * sign + d1 / (1e-12 + norm_w1)
    budget = ((eps ** 2 - norm_image ** 2).clamp_min(0.0) / c + norm_windows ** 2).sqrt()
    new = new / (1e-12 + new.pow(2).sum(dim=(-2, -1), keepdim=True).sqrt()) * budget
    delta = delta.masked_fill(in2, 0.0)
    _put(delta, *win1, s, new)
    return (x + delta / (_l2(delta) + 1e-12) * eps).clamp(0.0, 1.0)


class _ExampleDraws:
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


# ---------------------------------------------------------------------------------------------------- attack
@dataclass(frozen=True)
class SquareSettings:
    """The Square attack's settings (Andriushchenko et al. 2020): radius ``eps`` in ``norm``, ``n_queries`` forward
    queries per example, the initial fraction ``p_init`` of pixels a square changes (halved on the schedule of
    :func:`p_selection`), the ``seed`` of its random draws, and the ``loss`` searched: ``probability``, the signed
    margin of the softmax probabilities (MixedNUTS App. D.5), or ``logit``, ``z_y - max_{i != y} z_i`` (AutoAttack's
    Square)."""

    eps: float
    norm: str = "Linf"
    n_queries: int = 5000
    p_init: float = 0.8
    seed: int = 0
    loss: str = "probability"


def min_margin_square(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                      settings: SquareSettings | None = None, *, eps: float | None = None,
                      norm: str = SquareSettings.norm, n_queries: int = SquareSettings.n_queries,
                      p_init: float = SquareSettings.p_init, seed: int = SquareSettings.seed,
                      loss: str = SquareSettings.loss, layer_norm: bool = True, top_k: int | None = None,
                      batch_size: int = 500, progress: bool = True, index: torch.Tensor | None = None) -> MMAAResult:
    """Minimum-margin Square attack of ``model`` (images in [0, 1] -> logits) using forward queries only, its options
    given as keywords (``min_margin_square(model, x, y, eps=8/255, n_queries=1000)``) or as ``settings``
    (:class:`SquareSettings`).

    Returns, for every example, the visited point of smallest signed margin of softmax(LN(logits)) (raw logits
    with ``layer_norm=False``; ``top_k`` as in :func:`mixzoo.methods.mixednuts.transforms.layer_norm`), the raw logits
    there and
    that margin, in the same :class:`~mixzoo.attacks.mmaa.MMAAResult` as :func:`mixzoo.attacks.mmaa` so it can
    replace MMAA in Algorithm 1 (App. D.5). ``settings["queries"]`` counts the examples forwarded. A
    :class:`~mixzoo.zoo.blackbox.BlackBoxModel` with too small a budget is refused before the first query.
    See the module docstring for the search and its schedule.

    ``index`` (each example's index in its whole data set) draws every random number per example from
    ``(seed, index)`` (:mod:`mixzoo.core.rng`), so an example's run does not depend on the batch it is in;
    without it each batch has a generator seeded ``seed + first index of the batch``. With ``loss="logit"``
    the returned ``margins`` are logit margins.
    """
    check_images(images)
    cfg = settings_from(SquareSettings, settings, locals())
    eps, norm, n_queries, p_init, seed, loss = cfg.eps, cfg.norm, cfg.n_queries, cfg.p_init, cfg.seed, cfg.loss
    check_attack_settings(eps, norm)
    if isinstance(n_queries, bool) or int(n_queries) < 1:
        raise InputError(f"n_queries must be at least 1, got {n_queries}")
    if not 0.0 < p_init <= 1.0:
        raise InputError(f"p_init must lie in (0, 1], got {p_init}")
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, got {batch_size}")
    n = images.shape[0]
    if n == 0:
        raise InputError("no images to attack; pass at least one example")
    n_queries = int(n_queries)
    check_budget = getattr(model, "check_budget", None)
    if callable(check_budget):
        check_budget(square_queries_needed(n, n_queries), f"min-margin Square on {n} images x {n_queries} queries")
    if loss not in ("probability", "logit"):
        raise InputError(f"loss must be 'probability' or 'logit', got {loss!r}")
    if index is not None and len(index) != n:
        raise InputError(f"index has {len(index)} entries for {n} images; pass one index per image")
    margin_fn = _logit_margin if loss == "logit" else ln_signed_margin(top_k) if layer_norm else signed_margin

    search = _Search(eps, norm, n_queries, p_init, margin_fn)
    adv, logits_out, margins, clean_out = [], [], [], []
    total_queries = 0
    with progress_bar(progress) as bar:
        task = bar.add_task(f"min-margin Square {norm} eps={eps:.4g}", total=math.ceil(n / batch_size) * n_queries)
        for start in range(0, n, batch_size):
            x, y = images[start:start + batch_size], labels[start:start + batch_size]
            res = _attack_batch(model, x, y, search, seed=seed + start if index is None else seed,
                                on_iter=lambda k: bar.advance(task, k),
                                index=None if index is None else index[start:start + batch_size])
            adv.append(res[0])
            logits_out.append(res[1])
            margins.append(res[2])
            clean_out.append(res[3])
            total_queries += res[4]
    logits_all = torch.cat(logits_out)
    labels = labels.to(logits_all.device)
    settings: dict[str, Any] = {
        "attack": "min-margin-square", "eps": float(eps), "norm": norm, "n_queries": n_queries, "p_init": p_init,
        "seed": seed, "batch_size": batch_size, "layer_norm": layer_norm, "top_k": top_k,
        "code": SQUARE_CODE_VERSION, "queries": total_queries, "queries_per_example": total_queries / n,
        "randomness": "batch" if index is None else "per-example", "loss": loss,
        "margin": "z_y - max_{i!=y} z_i of the logits" if loss == "logit"
        else "p_y - max_{i!=y} p_i of softmax(LN(logits)), negative when misclassified" if layer_norm
        else "p_y - max_{i!=y} p_i of softmax(logits), negative when misclassified",
    }
    return MMAAResult(torch.cat(adv), logits_all, torch.cat(margins), logits_all.argmax(dim=1) != labels,
                      torch.cat(clean_out), settings)


@torch.no_grad()
def _refuse_nan(logits: torch.Tensor, where: str) -> None:
    """A NaN key compares False with every other key, so the example would silently stay "robust": refuse it."""
    if torch.isnan(logits).any():
        raise nan_error(int(torch.isnan(logits).any(1).sum()), where)


NAN_CHECK_EVERY = 64  # proposals between two checks for NaN outputs (each check is one host synchronisation)


def _refuse_nan_seen(nan_seen: torch.Tensor, where: str) -> None:
    """:func:`_refuse_nan` for NaN flags gathered on the device over several proposals (one host sync)."""
    if nan_seen.any():
        raise nan_error(int(nan_seen.sum()), where)


def _linf_side(p: float, n_features: int, c: int, h: int, w: int) -> int:
    """The L-inf square's side for fraction ``p`` (reference: ``sqrt(p * n_features / c)``, at least 1)."""
    return min(max(int(round(math.sqrt(p * n_features / c))), 1), h, w)


def _l2_side(p: float, n_features: int, c: int, h: int, w: int) -> int:
    """The L2 windows' side for fraction ``p`` (reference: at least 3 and odd)."""
    s = max(int(round(math.sqrt(p * n_features / c))), 3)
    return min(s + 1 if s % 2 == 0 else s, h, w)


def _proposal_each(draws: _ExampleDraws, active: torch.Tensor, it: int, x: torch.Tensor, x_best: torch.Tensor,
                   eps: float, norm: str, p: float) -> torch.Tensor:
    """Proposal ``it`` for the ``active`` examples, windows, signs and patterns drawn per example."""
    _, c, h, w = x.shape
    raw = draws.step(active, it, c + 5)  # c signs, then vh, vw, vh2, vw2 and the eta flip

    def offset(j: int, lim: int) -> torch.Tensor:  # multiply-shift to [0, lim - s] (rng.randint's rule)
        return (raw[:, c + j] * (lim - s + 1)) >> 32

    sign = ((raw[:, :c] >> 31) * 2 - 1).to(x).view(-1, c, 1, 1)
    if norm == "Linf":
        s = _linf_side(p, c * h * w, c, h, w)
        return _linf_step_each(x, x_best, eps, s, offset(0, h), offset(1, w), sign)
    s = _l2_side(p, c * h * w, c, h, w)
    base = _eta_base(s).to(x)
    pattern = torch.where((raw[:, c + 4] >> 31).bool().view(-1, 1, 1, 1), base.t(), base)
    return _l2_step_each(x, x_best, eps, s, (offset(0, h), offset(1, w)), (offset(2, h), offset(3, w)), pattern,
                         sign)


@dataclass(frozen=True)
class _Search:
    """The settings of one Square search that every batch shares (:func:`_attack_batch`)."""

    eps: float
    norm: str
    n_queries: int
    p_init: float
    margin_fn: Any


def _proposal_batch(gen: torch.Generator, active: torch.Tensor, n: int, xa: torch.Tensor, ba: torch.Tensor,
                    eps: float, norm: str, p: float) -> torch.Tensor:
    """A proposal for the active rows ``xa`` (best points ``ba``) of an ``n``-row batch, drawn from the batch's
    generator ``gen`` (AutoAttack's Square: one window per step, signs for every row of the batch)."""
    _, c, h, w = xa.shape
    n_features = c * h * w
    sign = _signs((n, c, 1, 1), gen)[active.cpu()].to(xa)
    if norm == "Linf":
        s = _linf_side(p, n_features, c, h, w)
        vh, vw = (int(v) for v in torch.randint(0, h - s + 1, (1,), generator=gen).tolist()
                  + torch.randint(0, w - s + 1, (1,), generator=gen).tolist())
        return _linf_step(xa, ba, eps, s, vh, vw, sign)
    s = _l2_side(p, n_features, c, h, w)
    pos = [int(torch.randint(0, lim - s + 1, (1,), generator=gen)) for lim in (h, w, h, w)]
    return _l2_step(xa, ba, eps, s, (pos[0], pos[1]), (pos[2], pos[3]), _eta(s, gen).to(xa), sign)


def _attack_batch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, search: _Search, *, seed: int, on_iter: Any,
                  index: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """One batch: returns (adv images, raw logits, margins, clean logits, queries made). With ``index`` (the
    examples' indices in the whole data set) every random draw is per example (:class:`_ExampleDraws`)."""
    eps, norm, n_queries, p_init, margin_fn = search.eps, search.norm, search.n_queries, search.p_init, \
        search.margin_fn
    gen = torch.Generator().manual_seed(int(seed))
    draws = None if index is None else _ExampleDraws(seed, index, x.device)
    n, c, h, w = x.shape

    clean = model(x)
    check_labels(y, n, clean.shape[1])
    y = y.to(clean.device)
    _refuse_nan(clean, "on the clean images")
    clean_margin = margin_fn(clean, y)
    clean_key = selection_key(clean, clean_margin, y)
    queries = n

    if draws is not None and norm == "Linf":
        x_best = (x + eps * draws.signs("init", torch.arange(n, device=x.device), (c, 1, w)).to(x)).clamp(0.0, 1.0)
    else:
        x_best = _linf_init(x, eps, gen) if norm == "Linf" else _l2_init(x, eps, gen, draws)
    best = model(x_best)
    queries += n
    _refuse_nan(best, "at the Square attack's initial point")
    margin_best = margin_fn(best, y)
    key_best = selection_key(best, margin_best, y)
    lm_best = _logit_margin(best, y)
    best = best.clone()
    on_iter(1)

    done = 1
    # NaN at a proposal, per example, kept on the device and checked every NAN_CHECK_EVERY proposals and at the end:
    # one host synchronisation per check instead of one per proposal (a NaN key never wins, so the few proposals
    # made before the check change nothing; the error is the same)
    nan_seen = torch.zeros(n, dtype=torch.bool, device=clean.device)
    for it in range(1, n_queries):
        active = torch.nonzero((key_best >= -1.0) & (clean_key >= -1.0)).squeeze(1)  # not yet misclassified
        if active.numel() == 0:
            break
        p = p_selection(p_init, it, n_queries)
        xa, ba = x[active], x_best[active]
        if draws is not None:
            cand = _proposal_each(draws, active, it, xa, ba, eps, norm, p)
        else:
            cand = _proposal_batch(gen, active, n, xa, ba, eps, norm, p)
        out = model(cand)
        queries += int(active.numel())
        nan_seen[active] |= torch.isnan(out).any(dim=1)
        if it % NAN_CHECK_EVERY == 0:
            _refuse_nan_seen(nan_seen, "during the Square attack")
        ya = y[active]
        m = margin_fn(out, ya)
        k = selection_key(out, m, ya)
        lm = m if margin_fn is _logit_margin else _logit_margin(out, ya)  # the logit loss is the tie-break
        kb, lmb = key_best[active], lm_best[active]
        better = (k < kb) | ((k == kb) & (lm < lmb))
        # written back with torch.where on the active rows (the same values as writing only the improved rows),
        # not by boolean indexing: no host synchronisation
        x_best[active] = torch.where(better.view(-1, 1, 1, 1), cand, ba)
        best[active] = torch.where(better[:, None], out.to(best.dtype), best[active])
        margin_best[active] = torch.where(better, m.to(margin_best.dtype), margin_best[active])
        key_best[active] = torch.where(better, k.to(key_best.dtype), kb)
        lm_best[active] = torch.where(better, lm, lmb)
        on_iter(1)
        done += 1
    _refuse_nan_seen(nan_seen, "during the Square attack")
    on_iter(n_queries - done)

    use_clean = clean_key < key_best  # the clean image is a visited point too
    adv = torch.where(use_clean.view(-1, 1, 1, 1), x, x_best)
    logits = torch.where(use_clean.view(-1, 1), clean.to(best.dtype), best)
    margin = torch.where(use_clean, clean_margin.to(margin_best.dtype), margin_best)
    return adv, logits.detach(), margin, clean.detach(), queries


__all__ = ["SquareSettings", "min_margin_square", "p_selection", "square_queries_needed"]
