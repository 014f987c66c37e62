"""The plan of ``mixzoo certify`` (:class:`~mixzoo.core.plan.Plan`): forward passes of the RBC (Monte Carlo samples
for a randomized-smoothing RBC) and its Lipschitz bound, of the ABC, and the estimated radii's PGD, each timed on a few
real calls; the last phase counts the writing of the result and its figures
(:func:`~mixzoo.core.plan.drawing_seconds`)."""

from __future__ import annotations

import time
from typing import Any

import torch

from mixzoo.core.errors import InputError
from mixzoo.core.plan import Plan, drawing_seconds, per_image, probe_images
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.pairs import card_model, check_device, resolve_model


def _forward_seconds(model: Any, images: torch.Tensor) -> float:
    """Seconds per image of one forward pass, timed on ``images`` after one warm-up call."""
    with torch.no_grad():
        model(images[:1])
        t0 = time.perf_counter()
        model(images)
    return (time.perf_counter() - t0) / len(images)


def _bound_seconds(model: Any, spec: Any, input_size: tuple[int, int, int], norm: str) -> float:
    """Seconds of the RBC's Lipschitz bound as the run computes it (:func:`~mixzoo.certify.lipschitz.lipschitz_bound`,
    l2 for a declared constant), computed once."""
    from mixzoo.certify.lipschitz import lipschitz_bound

    t0 = time.perf_counter()
    lipschitz_bound(model, input_size, "l2" if getattr(spec, "lipschitz", None) else norm.lower())
    return time.perf_counter() - t0


def _estimate_seconds(model: Any, data: Any, s: RunSettings, steps: int) -> float:
    """Seconds of App. C.3's PGD at one radius on all the images (:func:`~mixzoo.certify.lipschitz.
    estimate_local_lipschitz`: one run per class, in the run's chunks of the batch size over the classes), timed on
    a few images (:func:`~mixzoo.core.plan.per_image`)."""
    from mixzoo.certify.lipschitz import estimate_local_lipschitz

    images, n = data.images[:probe_images(len(data))].to(s.device), len(data)
    with torch.no_grad():
        classes = model(images[:1]).shape[1]
    norm = (s.norm or "l2").lower()

    def run(k: int) -> None:
        gen = torch.Generator(device=images.device).manual_seed(0)
        estimate_local_lipschitz(model, images[:k], 0.05, norm, steps, generator=gen)

    return per_image(run, n, len(images), batch=max(1, s.batch_size // classes)) * n


def plan_certify(card: Any = None, settings: RunSettings | None = None, *, smoothing: Any = None,
                 estimate_eps: list[float] | None = None, estimate_steps: int = 20, dataset: str | None = None,
                 split: str = "evaluation", command: str = "mixzoo certify", **changes: Any) -> Plan:
    """What :func:`~mixzoo.certify.run.certify` will run with these arguments, phase by phase."""
    from mixzoo.certify.run import SmoothingSettings

    s = settings_of(settings, changes, n=500, batch_size=1000)
    sm = smoothing if smoothing is not None else SmoothingSettings()
    rbc, abc = s.rbc, s.abc
    check_device(s.device)
    if (s.norm or "l2").lower() not in ("l2", "linf"):
        raise InputError(f"unknown norm {s.norm!r}; certify takes l2 or linf")
    if not isinstance(s.n, int) or s.n < 1:
        raise InputError(f"n must be a positive number of images, got {s.n!r}")
    if card is not None:
        from mixzoo.core.card import MixCard

        card = card if isinstance(card, MixCard) else MixCard.load(card)
        card.mixing_method.certified_mixture(card)  # a card without a constant alpha is refused now, as certify does
        rbc = card_model(card, "rbc", rbc, device=s.device, allow_unsafe=s.allow_unsafe)
        abc = card_model(card, "abc", abc, device=s.device, allow_unsafe=s.allow_unsafe)
    if rbc is None:
        raise InputError("certify needs a card or --rbc NAME (and --abc NAME with --alpha for a mixture)")
    rbc_m = resolve_model(rbc, s.device, s.allow_unsafe)
    spec = getattr(rbc_m, "spec", None)
    name = dataset or getattr(spec, "dataset", None) or (card.dataset if card is not None else None)
    if not name:
        raise InputError("the RBC has no registry entry naming its dataset; pass --dataset NAME")
    data = load_dataset(name, split, n=s.n, root=s.data_dir)
    n = len(data)
    sample = data.images[:min(n, 64)].to(s.device)
    per = _forward_seconds(rbc_m, sample)
    sigma = sm.sigma if sm.sigma is not None else getattr(spec, "smoothing_sigma", None)
    plan = Plan(command)
    if abc is not None:
        abc_m = resolve_model(abc, s.device, s.allow_unsafe)
        plan.add("ABC", f"one forward pass on {n} images", _forward_seconds(abc_m, sample) * n)
    if sigma is not None:
        draws = sm.samples + sm.selection_samples
        plan.add("randomized smoothing", f"{draws:,} noisy copies (sigma {sigma:g}) of each of {n} images through the "
                                         "RBC", per * n * draws)
    else:
        plan.add("RBC", f"one forward pass on {n} images and the Lipschitz bound",
                 per * n + _bound_seconds(rbc_m, spec, tuple(data.input_size), s.norm or "l2"))
    estimated = bool(estimate_eps) and sigma is None
    if estimated:
        plan.add("estimated radii", f"PGD ({estimate_steps} steps) per class at {len(estimate_eps)} radii on {n} "
                                    "images", _estimate_seconds(rbc_m, data, s, estimate_steps) * len(estimate_eps))
    figures = 1 + estimated
    plan.phases[-1].what += f", then certify.json, certify.md and {figures} figure{'s' * (figures > 1)}"
    plan.phases[-1].seconds = (plan.phases[-1].seconds or 0.0) + drawing_seconds(figures)
    return plan


__all__ = ["plan_certify"]
