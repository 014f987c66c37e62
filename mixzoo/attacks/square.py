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
bench passes): every example draws its own initial stripes or tiles, windows, signs and eta patterns from ``(seed,
index, iteration)`` (:class:`~mixzoo.attacks.square_proposals.ExampleDraws`), so its run does not depend on the
batch it is in. Without indices: a :class:`torch.Generator` seeded with ``seed + first index of the batch``;
positions are shared by the examples of an iteration (as in the reference), signs are drawn for the whole batch
every iteration, so one example's stream does not depend on which others are still being attacked.

Deviations from the reference, all deliberate: the square's position ranges over all ``h - s + 1`` offsets (the
reference never picks the last one), L2 initial tiles that overhang the border are cropped (the reference needs
``h >= 10``), and nothing is restarted. One more, not chosen but kept so that published runs reproduce: proposal
``it`` (1 to ``n_queries - 1``, the initial point being query 0) takes the schedule's value at ``it``, where the
reference's first proposal takes it at 0. With the default 5,000 queries both give ``p_init`` (``int(1 / 5000 *
10000) = 2 <= 10``) and every later boundary moves by one query; with fewer than 1,000 queries the first square is
already smaller than ``p_init`` (n_queries = 10: ``p_init / 16``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.arguments import check_attack_settings, check_batches, settings_from
from mixzoo.attacks.margins import MarginFn, ln_signed_margin, selection_key, signed_margin
from mixzoo.attacks.mmaa import MMAAResult, joined_result
from mixzoo.attacks.square_proposals import ExampleDraws, initial_point, proposal_batch, proposal_each
from mixzoo.core.errors import InputError, NaNLogitsError
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


def _logit_margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    z = logits.double()
    zy = z.gather(1, labels[:, None]).squeeze(1)
    return zy - z.scatter(1, labels[:, None], float("-inf")).max(dim=1).values


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
    with ``layer_norm=False``; ``top_k`` as in :func:`mixzoo.methods.mixednuts.transforms.layer_norm`; logit
    margins with ``loss="logit"``), the raw logits there and that margin, in the same
    :class:`~mixzoo.attacks.mmaa.MMAAResult` as :func:`mixzoo.attacks.mmaa` so it can replace MMAA in Algorithm 1
    (App. D.5); ``settings["queries"]`` counts the examples forwarded. A :class:`~mixzoo.zoo.blackbox.BlackBoxModel`
    with too small a budget is refused before the first query. ``index``: each example's index in its whole data
    set, for per-example randomness. The module docstring describes the search, its schedule and its randomness.
    """
    check_images(images)
    cfg = settings_from(SquareSettings, settings, locals())
    eps, norm, n_queries, p_init, seed, loss = cfg.eps, cfg.norm, cfg.n_queries, cfg.p_init, cfg.seed, cfg.loss
    check_attack_settings(eps, norm)
    if isinstance(n_queries, bool) or int(n_queries) < 1:
        raise InputError(f"n_queries must be at least 1, got {n_queries}")
    if not 0.0 < p_init <= 1.0:
        raise InputError(f"p_init must lie in (0, 1], got {p_init}")
    n = images.shape[0]
    check_batches(n, batch_size, index)
    n_queries = int(n_queries)
    cfg = replace(cfg, n_queries=n_queries)
    check_budget = getattr(model, "check_budget", None)
    if callable(check_budget):
        check_budget(square_queries_needed(n, n_queries), f"min-margin Square on {n} images x {n_queries} queries")
    if loss not in ("probability", "logit"):
        raise InputError(f"loss must be 'probability' or 'logit', got {loss!r}")
    margin_fn = _logit_margin if loss == "logit" else ln_signed_margin(top_k) if layer_norm else signed_margin

    parts, total_queries = [], 0
    with progress_bar(progress) as bar:
        task = bar.add_task(f"min-margin Square {norm} eps={eps:.4g}", total=math.ceil(n / batch_size) * n_queries)
        for start in range(0, n, batch_size):
            x, y = images[start:start + batch_size], labels[start:start + batch_size]
            res = _attack_batch(model, x, y, cfg, margin_fn, seed=seed + start if index is None else seed,
                                on_iter=lambda k: bar.advance(task, k),
                                index=None if index is None else index[start:start + batch_size])
            parts.append(res[:4])
            total_queries += res[4]
    settings: dict[str, Any] = {
        "attack": "min-margin-square", "eps": float(eps), "norm": norm, "n_queries": n_queries, "p_init": p_init,
        "seed": seed, "batch_size": batch_size, "layer_norm": layer_norm, "top_k": top_k,
        "code": SQUARE_CODE_VERSION, "queries": total_queries, "queries_per_example": total_queries / n,
        "randomness": "batch" if index is None else "per-example", "loss": loss,
        "margin": "z_y - max_{i!=y} z_i of the logits" if loss == "logit"
        else "p_y - max_{i!=y} p_i of softmax(LN(logits)), negative when misclassified" if layer_norm
        else "p_y - max_{i!=y} p_i of softmax(logits), negative when misclassified",
    }
    return joined_result(parts, labels, settings)


NAN_CHECK_EVERY = 64  # proposals between two checks for NaN outputs (each check is one host synchronisation)


def _refuse_nan(nan_rows: torch.Tensor, where: str) -> None:
    """A NaN key compares False with every other key, so the example would silently stay "robust": refuse the
    examples flagged in ``nan_rows`` (one host synchronisation)."""
    if nan_rows.any():
        raise NaNLogitsError(int(nan_rows.sum()), where)


def _attack_batch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: SquareSettings, margin_fn: MarginFn, *,
                  seed: int, on_iter: Any, index: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """One batch (``cfg``'s seed is ``seed``'s): returns (adv images, raw logits, margins, clean logits, queries
    made). With ``index`` (the examples' indices in the whole data set) every random draw is per example."""
    eps, norm, n_queries, p_init = cfg.eps, cfg.norm, cfg.n_queries, cfg.p_init
    gen = torch.Generator().manual_seed(int(seed))
    draws = None if index is None else ExampleDraws(seed, index, x.device)
    n = x.shape[0]

    clean = model(x)
    check_labels(y, n, clean.shape[1])
    y = y.to(clean.device)
    _refuse_nan(torch.isnan(clean).any(dim=1), "on the clean images")
    clean_margin = margin_fn(clean, y)
    clean_key = selection_key(clean, clean_margin, y)
    queries = n

    x_best = initial_point(x, eps, norm, gen, draws)
    best = model(x_best)
    queries += n
    _refuse_nan(torch.isnan(best).any(dim=1), "at the Square attack's initial point")
    margin_best = margin_fn(best, y)
    key_best = selection_key(best, margin_best, y)
    lm_best = _logit_margin(best, y)
    best = best.clone()
    on_iter(1)

    done = 1
    # NaN at a proposal, per example, checked every NAN_CHECK_EVERY proposals and at the end (a NaN key never wins)
    nan_seen = torch.zeros(n, dtype=torch.bool, device=clean.device)
    for it in range(1, n_queries):
        active = torch.nonzero((key_best >= -1.0) & (clean_key >= -1.0)).squeeze(1)  # not yet misclassified
        if active.numel() == 0:
            break
        p = p_selection(p_init, it, n_queries)
        xa, ba = x[active], x_best[active]
        if draws is not None:
            cand = proposal_each(draws, active, it, xa, ba, eps, norm, p)
        else:
            cand = proposal_batch(gen, active, n, xa, ba, eps, norm, p)
        out = model(cand)
        queries += int(active.numel())
        nan_seen[active] |= torch.isnan(out).any(dim=1)
        if it % NAN_CHECK_EVERY == 0:
            _refuse_nan(nan_seen, "during the Square attack")
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
    _refuse_nan(nan_seen, "during the Square attack")
    on_iter(n_queries - done)

    use_clean = clean_key < key_best  # the clean image is a visited point too
    adv = torch.where(use_clean.view(-1, 1, 1, 1), x, x_best)
    logits = torch.where(use_clean.view(-1, 1), clean.to(best.dtype), best)
    margin = torch.where(use_clean, clean_margin.to(margin_best.dtype), margin_best)
    return adv, logits.detach(), margin, clean.detach(), queries
