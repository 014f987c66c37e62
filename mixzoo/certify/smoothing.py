"""Gaussian randomized smoothing of an RBC (Bai et al. 2024b, App. A, Assumption A.1; Cohen et al. 2019), by Monte
Carlo.

The smoothed RBC is ``h(x) = E_xi[h_bar(x + xi)]``, xi ~ N(0, sigma^2 I), with ``h_bar`` the base network's
probabilities (``kind="soft"``, Bai et al. 2024b, A.1) or its one-hot prediction (``kind="hard"``, Cohen et al.'s
votes). As in Cohen et al.'s CERTIFY, ``n0`` samples choose the top class y and ``n`` fresh samples bound the
probabilities: a lower bound for y and upper bounds for the other classes, which all hold together with probability at
least ``confidence`` (union bound: half the error budget for y, the other half split over the c - 1 other classes).
Soft votes are bounded by Hoeffding's inequality, hard votes by Clopper-Pearson intervals. Where the lower bound
for y does not exceed the others' upper bound, the RBC abstains: no certificate.

Every example draws its noise from its own generator, seeded by (seed, example index, stage), so the numbers do
not depend on the batch size or on which examples are certified together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar

__all__ = ["SmoothedEstimate", "check_options", "confidence_bounds", "minimum_samples", "monte_carlo_means",
           "smoothed_estimate", "smoothed_estimates"]

KINDS = ("soft", "hard")


@dataclass(frozen=True)
class SmoothingSettings:
    """Monte Carlo certification of a randomized-smoothing RBC (Bai et al. 2024b, App. A.2, Cohen et al.): noise
    ``sigma`` (default: the RBC's registry ``smoothing_sigma``), ``samples`` per image plus ``selection_samples`` that
    choose the class, bounds jointly valid with probability ``confidence`` per image, ``kind`` ``soft`` (average
    probabilities, Bai et al. 2024b, App. A) or ``hard`` (votes)."""

    sigma: float | None = None
    samples: int = 10_000
    selection_samples: int = 100
    confidence: float = 0.999
    kind: str = "hard"

    def __post_init__(self) -> None:  # bad settings are refused where they are made, before any plan or work
        check_options(1.0 if self.sigma is None else self.sigma, self.samples, self.confidence, self.kind)


@dataclass
class SmoothedEstimate:
    """Per example: ``top`` (the class y chosen on the selection samples), ``mean`` ((n, c) Monte Carlo mean of
    the estimation samples), ``p_top_lower``, ``p_other_upper`` (the bounds) and ``abstain``."""

    top: torch.Tensor
    mean: torch.Tensor
    p_top_lower: torch.Tensor
    p_other_upper: torch.Tensor
    abstain: torch.Tensor
    sigma: float
    samples: int
    selection_samples: int
    confidence: float
    kind: str


def check_options(sigma: float, samples: int, confidence: float, kind: str) -> None:
    """One-line errors for a bad sigma, sample count, confidence level or smoothing kind, before any work."""
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise InputError(f"sigma must be a positive number (the smoothing noise std), got {sigma!r}")
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise InputError(f"confidence must be in (0, 1), e.g. 0.999, got {confidence!r}")
    if kind not in KINDS:
        raise InputError(f"unknown smoothing kind {kind!r}; use soft (average probabilities, Bai et al. 2024b, App. A)"
                         " or hard (votes, Cohen et al.)")
    if not isinstance(samples, int) or samples < 1:
        raise InputError(f"the number of Monte Carlo samples must be a positive integer, got {samples!r}")


def _example_generator(seed: int, index: int, stage: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + index) * 4 + stage)


NOISE_BLOCK = 100
"""Noise is drawn in blocks of this many samples per example, whatever the batch size (same draws for any batch)."""


def monte_carlo_means(model: nn.Module, images: torch.Tensor, sigma: float, samples: int, *,
                      kinds: tuple[str, ...] = KINDS, seed: int = 0, stage: int = 0, first_index: int = 0,
                      batch_size: int = 1000, progress: bool = True, what: str = "Monte Carlo"
                      ) -> dict[str, torch.Tensor]:
    """``{kind: (n, c) mean}`` over ``samples`` noisy copies of each image of the base network's probabilities
    (soft) or one-hot predictions (hard), every kind from the same forward passes on the same noise (a paired
    comparison of soft and hard smoothing at the cost of one). Example ``first_index + j`` draws its noise from its
    own generator in blocks of :data:`NOISE_BLOCK`; the blocks of consecutive examples are packed into batches of
    about ``batch_size`` noisy images, so the draws do not depend on the batch size (the sums only up to the
    forward's float rounding). Stage ``stage`` is 0 for the selection draws, 1 for the estimation ones; the
    progress bar is labelled ``what``."""
    for kind in kinds:
        check_options(sigma, samples, 0.5, kind)
    n, device = images.shape[0], images.device
    sums: dict[str, torch.Tensor] = {}
    xs: list[torch.Tensor] = []
    owners: list[torch.Tensor] = []

    def flush() -> None:
        out = model(torch.cat(xs)).float()
        index = torch.cat(owners)
        for kind in kinds:
            votes = out.softmax(1) if kind == "soft" else nn.functional.one_hot(out.argmax(1), out.shape[1])
            if kind not in sums:
                sums[kind] = torch.zeros(n, out.shape[1], dtype=torch.float64, device=device)
            sums[kind].index_add_(0, index, votes.to(torch.float64))
        xs.clear()
        owners.clear()

    with progress_bar(progress) as bar, torch.no_grad():
        task = bar.add_task(f"{what} (sigma {sigma:g}, {samples} samples/image)", total=n)
        rows = 0
        for j in range(n):  # only the noise streams are per example; the forward runs on packed batches
            gen = _example_generator(seed, first_index + j, stage, device)
            for done in range(0, samples, NOISE_BLOCK):
                m = min(NOISE_BLOCK, samples - done)
                noise = torch.randn((m, *images.shape[1:]), generator=gen, device=device)
                xs.append(images[j] + sigma * noise)
                owners.append(torch.full((m,), j, dtype=torch.long, device=device))
                rows += m
                if rows >= batch_size:
                    flush()
                    rows = 0
            bar.advance(task)
        if xs:
            flush()
    return {kind: total / samples for kind, total in sums.items()}


def confidence_bounds(mean: torch.Tensor, top: torch.Tensor, samples: int, confidence: float,
                      kind: str = "soft") -> tuple[torch.Tensor, torch.Tensor]:
    """Lower bound of the top class's probability and upper bound of the largest other one, jointly valid with
    probability ``confidence`` (see the module docstring). ``mean``: (n, c) means of ``samples`` draws."""
    n, c = mean.shape
    delta = 1.0 - confidence
    d_top, d_other = delta / 2, delta / (2 * (c - 1))
    p_top = mean.gather(1, top[:, None]).squeeze(1)
    others = mean.scatter(1, top[:, None], -1.0)  # the top class out of the max
    if kind == "soft":
        lower = p_top - math.sqrt(math.log(1 / d_top) / (2 * samples))
        upper_each = mean + math.sqrt(math.log(1 / d_other) / (2 * samples))
    else:
        from scipy.stats import beta

        counts = (mean * samples).round().cpu().numpy()
        k = counts[torch.arange(n).numpy(), top.cpu().numpy()]
        lo = beta.ppf(d_top, k, samples - k + 1)
        lower = torch.as_tensor(lo, dtype=torch.float64).nan_to_num(0.0)  # k = 0: nan -> 0
        hi = beta.ppf(1 - d_other, counts + 1, samples - counts)
        upper_each = torch.as_tensor(hi, dtype=torch.float64).nan_to_num(1.0)  # k = samples: nan -> 1
    upper_each = upper_each.to(mean.device).masked_fill(others < 0, -1.0)
    lower = torch.as_tensor(lower, dtype=torch.float64, device=mean.device).clamp(0.0, 1.0)
    upper = torch.minimum(upper_each.amax(1).clamp(0.0, 1.0), 1.0 - lower)  # probabilities sum to 1
    return lower, upper


def minimum_samples(classes: int, confidence: float, kind: str = "soft", alpha: float = 1.0) -> int:
    """The fewest estimation samples with which even a unanimous vote certifies anything at ``alpha`` (lower bound
    of the top class above ``(upper bound of the others + 1 - alpha) / alpha``), by doubling then bisection."""

    def certifies(m: int) -> bool:
        mean = torch.zeros(1, classes, dtype=torch.float64)
        mean[0, 0] = 1.0
        lo, hi = confidence_bounds(mean, torch.zeros(1, dtype=torch.long), m, confidence, kind)
        return bool(alpha * lo[0] > alpha * hi[0] + 1 - alpha)

    if alpha <= 0.5:
        return math.inf  # type: ignore[return-value]
    hi = 1
    while not certifies(hi):
        hi *= 2
        if hi > 1 << 40:
            return math.inf  # type: ignore[return-value]
    lo = hi // 2
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if certifies(mid) else (mid, hi)
    return hi


def smoothed_estimate(model: nn.Module, images: torch.Tensor, settings: SmoothingSettings, *, seed: int = 0,
                      first_index: int = 0, batch_size: int = 1000, progress: bool = True) -> SmoothedEstimate:
    """Cohen et al.'s CERTIFY estimate for ``settings.kind``: each example's top class chosen on
    ``settings.selection_samples`` noise draws of std ``settings.sigma``, then bounded on ``settings.samples`` fresh
    draws at ``settings.confidence`` (:func:`smoothed_estimates` with one kind)."""
    return smoothed_estimates(model, images, settings, kinds=(settings.kind,), seed=seed, first_index=first_index,
                              batch_size=batch_size, progress=progress)[settings.kind]


def smoothed_estimates(model: nn.Module, images: torch.Tensor, settings: SmoothingSettings, *,
                       kinds: tuple[str, ...] = KINDS, seed: int = 0, first_index: int = 0, batch_size: int = 1000,
                       progress: bool = True) -> dict[str, SmoothedEstimate]:
    """:func:`smoothed_estimate` for several kinds on the same noise draws, one forward pass per draw:
    ``{kind: estimate}``; each kind chooses its class on its own selection means and bounds it its own way.
    ``settings.kind`` is not read (``kinds`` are); ``settings.sigma`` must be given. The draws of example ``i`` come
    from ``(seed, first_index + i)``, so an example's estimate depends neither on ``batch_size`` nor on the other
    images."""
    if settings.sigma is None:
        raise InputError("smoothed_estimate needs the noise sigma: SmoothingSettings(sigma=...)")
    sigma, samples, selection_samples = float(settings.sigma), settings.samples, settings.selection_samples
    confidence = settings.confidence
    for kind in kinds:
        check_options(sigma, samples, confidence, kind)
    if not isinstance(selection_samples, int) or selection_samples < 1:
        raise InputError(f"selection samples (n0) must be a positive integer, got {selection_samples!r}")
    kinds = tuple(kinds)
    select = monte_carlo_means(model, images, sigma, selection_samples, kinds=kinds, seed=seed, stage=0,
                               first_index=first_index, batch_size=batch_size, progress=progress,
                               what="select top class")
    means = monte_carlo_means(model, images, sigma, samples, kinds=kinds, seed=seed, stage=1, first_index=first_index,
                              batch_size=batch_size, progress=progress, what="estimate")
    out = {}
    for kind in kinds:
        top = select[kind].argmax(1)
        lower, upper = confidence_bounds(means[kind], top, samples, confidence, kind)
        out[kind] = SmoothedEstimate(top, means[kind], lower, upper, lower <= upper, float(sigma), samples,
                                     selection_samples, confidence, kind)
    return out
