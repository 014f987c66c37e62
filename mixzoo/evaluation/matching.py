"""The matched baseline: the baseline method's parameter (linear: the constant alpha of Bai et al. 2024b, Eq. 3.4)
whose robust accuracy matches a card's worst case as closely as its grid allows (Bai et al. 2024a, Fig. 5 / Fig. 8
comparison). ``mixzoo bench`` and ``mixzoo sanity`` share it, and so share its cached evaluations."""

from __future__ import annotations

from typing import Any

from mixzoo.core.budget import Budget
from mixzoo.core.errors import InputError
from mixzoo.core.request import EvalRequest
from mixzoo.evaluation.loading import CardEvaluation
from mixzoo.evaluation.worst_case import evaluate_card
from mixzoo.methods.base import baseline_method
from mixzoo.zoo.pairs import card_key_parts, model_key


def matched_linear_alpha(ce: CardEvaluation, request: EvalRequest, *, match_n: int, extra_attacks: bool | None = None,
                         budget: str | Budget | None = None, overrides: dict[str, Any] | None = None
                         ) -> tuple[float, list[dict], float]:
    """The matched baseline's alpha for a card: the card's worst-case robust accuracy on the first ``match_n``
    evaluation images under the attack of ``request`` (:class:`~mixzoo.core.request.EvalRequest`: its record names
    the matching attack, its options, eps, norm, seed, batch size and per-example seeds, and what decides the extra
    attacks of :func:`evaluate_card`, which also takes ``extra_attacks``, ``budget`` and ``overrides``), then the
    baseline method's ``match`` against it (for linear: bisection over its alpha grid). Returns the alpha, every
    alpha tried and the target. ``mixzoo bench`` and ``mixzoo sanity`` share it, and so share its cached
    evaluations."""
    base = baseline_method()
    if base is None:
        raise InputError("no installed mixing method is marked as the bench's baseline; pass baseline=False")
    images, labels = ce.data.images[:match_n], ce.data.labels[:match_n]
    card_request = request.replace(key_parts={**card_key_parts(ce.card, ce.abc, ce.rbc, ce.data), "match_n": match_n},
                                   label=f"{ce.card.mixing_method.title or ce.card.method} (matching attack)")
    ev = evaluate_card(ce.card, ce.abc, ce.rbc, images, labels, card_request, extra_attacks=extra_attacks,
                       budget=budget, overrides=overrides)
    target = sum(ev.robust_correct) / ev.n
    key = {"data": ce.data.fingerprint, "abc": model_key(ce.abc), "rbc": model_key(ce.rbc), "match_n": match_n}
    match_request = request.replace(key_parts=key)
    alpha, tried = base.match(ce.abc, ce.rbc, images, labels, target, match_request)
    return alpha, tried, target


__all__ = ["matched_linear_alpha"]
