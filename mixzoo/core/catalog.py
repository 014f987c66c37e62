"""Published mix cards (hook ``mixzoo_cards``) as entries ``mixzoo list`` and ``mixzoo info`` show beside the
registry's models: role ``mixed``, the card's data set, threat model, base models and method."""

from __future__ import annotations

from typing import Any

ROLE = "mixed"


def card_entry(name: str) -> dict[str, Any]:
    """One published card as a plain dict: name, role ``mixed``, method, dataset, threat model, eps, ABC, RBC,
    the method's one-line summary, notes and the card file. An unknown name is an :class:`UnknownNameError`."""
    from mixzoo.core.card import MixCard
    from mixzoo.core.errors import UnknownNameError
    from mixzoo.core.plugins import published_cards

    cards = published_cards()
    if name not in cards:
        raise UnknownNameError("published card", name, cards)
    card = MixCard.load(name)
    attack = card.attack or {}
    return {"name": name, "role": ROLE, "method": card.method, "dataset": card.dataset,
            "threat_model": attack.get("norm"), "epsilon": attack.get("eps"),
            "abc": (card.abc or {}).get("name"), "rbc": (card.rbc or {}).get("name"), "summary": card.summary(),
            "notes": list(card.notes), "card": str(cards[name])}


def list_cards(dataset: str | None = None) -> list[dict[str, Any]]:
    """Every published card (:func:`card_entry`), optionally of one data set, sorted by name."""
    from mixzoo.core.plugins import published_cards

    entries = [card_entry(name) for name in sorted(published_cards())]
    return [e for e in entries if dataset is None or e["dataset"] == dataset]


__all__ = ["ROLE", "card_entry", "list_cards"]
