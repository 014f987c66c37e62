"""A card's worst case: its classifier under the shared attack, then under each extra attack its method declares on
the examples still robust, merged example by example (:func:`evaluate_card`); every evaluation of a card reports
it (the bench's rows, the matched baseline's target, sanity's sweep)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from mixzoo.attacks import runner
from mixzoo.attacks.result import Outcome
from mixzoo.attacks.runner import BF16_COUNTS
from mixzoo.core.budget import Budget, component_options
from mixzoo.core.cache import content_key
from mixzoo.core.request import EvalRequest


def worst_case(ev: Outcome | Mapping[str, Any], extra: Outcome | Mapping[str, Any], subset: torch.Tensor,
               name: str) -> Outcome:
    """Merge an extra attack run on the still-robust examples ``subset`` into evaluation ``ev`` example by
    example: robust only if both attacks failed; the extra attack's breaks are a component named ``name``
    (``extra``: its outcome, read by name: ``robust_correct``, ``seconds``, ``warnings``, ``components``,
    ``cached``, ``adversarial``)."""
    ev = Outcome.of(ev)
    robust = list(ev.robust_correct)
    broken = 0
    for i, ok in zip(subset.tolist(), extra["robust_correct"], strict=True):
        if robust[i] and not ok:
            robust[i], broken = False, broken + 1
    stat = {"name": name, "newly_broken": broken, "seconds": extra["seconds"]}
    parts = extra.get("components") or []
    if parts and all("found_bf16" in c for c in parts):  # a bf16 run's two counts
        stat.update({k: sum(c.get(k, 0) for c in parts) for k in BF16_COUNTS})
    adversarial = ev.adversarial
    if adversarial is not None:
        pts = extra["adversarial"]
        index = subset[pts["index"]] if len(pts["index"]) else pts["index"]
        adversarial = {"index": torch.cat([adversarial["index"], index]).long(),
                       "images": torch.cat([adversarial["images"], pts["images"]])}
    return replace(ev, robust_correct=robust, seconds=ev.seconds + extra["seconds"],
                   components=[*ev.components, stat],
                   warnings=[*ev.warnings, *(f"{name}: {w}" for w in extra["warnings"])],
                   cached=bool(ev.cached) and bool(extra.get("cached")), adversarial=adversarial)


def declared_attacks(card: Any, budget: str | Budget = "standard", overrides: dict[str, Any] | None = None
                     ) -> list[tuple[Any, dict[str, Any]]]:
    """The extra attacks ``card``'s method declares, each with the options it runs with under ``budget``
    (:func:`~mixzoo.core.budget.component_options`: the declared options, their counts capped by the budget,
    then set by ``overrides``, the user's ``-O``)."""
    return [(extra, component_options(budget, extra.attack, extra.options, overrides))
            for extra in card.mixing_method.extra_attacks(card)]


def evaluate_card(card: Any, abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                  request: EvalRequest, *, extra_attacks: bool | None = None, budget: str | Budget | None = None,
                  overrides: dict[str, Any] | None = None) -> Outcome:
    """A card's classifier under the shared attack (``request``: :func:`~mixzoo.attacks.runner.evaluate`'s
    request, its ``key_parts`` the cache key of the shared run, :func:`card_key_parts`), then under each extra attack
    its method declares (:meth:`~mixzoo.methods.MixingMethod.extra_attacks`) on the examples still robust, merged per
    example: the card's worst case, which every evaluation of a card reports (bench rows, the matched baseline's
    target, sanity's sweep). Each extra's request is the shared one with the extra's attack, options and seed
    (:func:`extra_request`); its options are those :func:`declared_attacks` gives it under the record's budget and
    ``-O`` counts. ``extra_attacks``, ``budget``, ``overrides``: in place of the record's ``extra_attacks``,
    ``budget``, ``count_overrides``."""
    record = request.record
    extra_attacks = record.extra_attacks if extra_attacks is None else extra_attacks
    budget, overrides = budget or record.budget, record.counts() if overrides is None else overrides
    method = card.mixing_method
    ev = Outcome.of(runner.evaluate(method.build(abc, rbc, card), images, labels, request))
    if not extra_attacks:
        return ev
    for extra, extra_options in declared_attacks(card, budget, overrides):
        subset = torch.tensor([i for i, ok in enumerate(ev.robust_correct) if ok], dtype=torch.long)
        if not len(subset):
            break
        sub_request = extra_request(request, extra, extra_options, subset)
        sub = runner.evaluate(method.build(abc, rbc, card, gradient=extra.gradient), images[subset], labels[subset],
                              sub_request)
        ev = worst_case(ev, sub, subset, extra.name)
    return ev


def extra_request(request: EvalRequest, extra: Any, options: dict[str, Any], subset: torch.Tensor) -> EvalRequest:
    """The request of declared attack ``extra`` (with ``options``) on the examples ``subset`` still robust under the
    shared attack's ``request`` (:func:`evaluate_card`): the extra's attack, options and seed, the subset's own
    indices (in the data set, when the images are a subset of it), its cache key adding its name, gradient and
    subset."""
    index = subset if request.example_index is None else request.example_index[subset]
    return request.replace(
        attack=extra.attack, attack_options=options, seed=request.record.seed + extra.seed_offset,
        example_index=index, label=f"{request.label}: {extra.name}",
        key_parts={**request.key_parts, "extra": extra.name, "gradient": extra.gradient,
                   "subset": content_key({"rows": subset.tolist()})})


__all__ = ["declared_attacks", "evaluate_card", "extra_request", "worst_case"]
