"""The attacks a method declares for an honest evaluation of its classifier, besides the shared attack
(:meth:`mixzoo.methods.base.MixingMethod.extra_attacks`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mixzoo.core.card import MixCard


@dataclass(frozen=True)
class ExtraAttack:
    """An attack that an honest evaluation of a method needs besides the shared attack.

    ``attack`` names an attack plugin (``mixzoo bench --attack`` names), run with ``options`` on the module
    ``build(abc, rbc, card, gradient=gradient)``; ``name`` is how reports label its breaks; ``why`` cites the
    paper's reason in one line. It runs on the examples the shared attack (and the extras before it) left robust,
    and its breaks are merged example by example into the worst case. ``seed_offset`` is added to the run's seed:
    random draws are functions of (seed, example index) (:mod:`mixzoo.core.rng`), so an extra attack that repeats a
    component of the shared attack on the same output (Square) must draw at another seed, or it replays the shared
    run example by example and cannot break anything new.
    """

    name: str
    attack: str
    options: dict[str, Any] = field(default_factory=dict)
    gradient: str = "exact"
    why: str = ""
    seed_offset: int = 0


def card_values(card: MixCard, keys: tuple[str, ...]) -> dict[str, Any]:
    """The card section's values of ``keys`` (``None`` where absent), for :meth:`MixingMethod.key_parts
    <mixzoo.methods.base.MixingMethod.key_parts>`."""
    return {k: card.params.get(k) for k in keys}


def weight_hashes(card: MixCard) -> list[str]:
    """The sha256 of a card's weight files, for cache keys: the contents, not the file names, so that a copy saved
    under another name (:meth:`MixCard.save_as`, a published card) finds the evaluations cached for the original."""
    return sorted(card.weights.values())


def square_extra(n_queries: int, why: str = "gradient-free: breaks what masked gradients hide (App. B.2.1)"
                 ) -> ExtraAttack:
    """The gradient-free check every gradient-based method declares: a second Square run (at the run's seed + 1)
    with ``n_queries`` on the model's output, through the ``adaptive`` attack, whose Square draws its windows per
    example (AutoAttack's own Square draws per batch, so its outcomes would depend on the batch size). At the
    run's own seed it would replay the shared attack's Square exactly."""
    return ExtraAttack("square", "adaptive", {"components": ["square"], "n_queries": int(n_queries)}, why=why,
                       seed_offset=1)
