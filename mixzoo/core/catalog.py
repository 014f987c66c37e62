"""Published mix cards (hook ``mixzoo_cards``) as entries ``mixzoo list`` and ``mixzoo info`` show beside the
registry's models: role ``mixed``, the card's data set, threat model, base models, method and its scalar
parameters. Read from the card files as text (no torch, no method plugin imported: ``list`` stays fast); the
card is validated when it is used (:meth:`mixzoo.core.card.MixCard.load`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROLE = "mixed"


def card_entry(name: str) -> dict[str, Any]:
    """One published card as a plain dict: name, role ``mixed``, method, dataset, threat model, eps, ABC, RBC,
    the method's scalar parameters, notes and the card file. An unknown name is an :class:`UnknownNameError`;
    an unreadable file an :class:`InputError` naming it."""
    from mixzoo.core.errors import InputError, UnknownNameError
    from mixzoo.core.plugins import table

    cards = table("card")
    if name not in cards:
        raise UnknownNameError("published card", name, cards)
    path = Path(cards[name])
    from mixzoo.core.reading import CARD_BYTES, read_data

    try:
        data = read_data(path, limit=CARD_BYTES, what="mix card")
    except OSError as exc:
        raise InputError(f"published card {name!r} ({path}) cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"published card {name!r} ({path}) is not a table of fields")
    method = data.get("method")

    def section(key: Any) -> dict[str, Any]:
        value = data.get(key) if isinstance(key, str) else None
        return value if isinstance(value, dict) else {}

    attack = section("attack")
    params = {k: v for k, v in section(method).items() if isinstance(v, int | float | str | bool)}
    return {"name": name, "role": ROLE, "method": method, "dataset": data.get("dataset"),
            "threat_model": attack.get("norm"), "epsilon": attack.get("eps"), "abc": section("abc").get("name"),
            "rbc": section("rbc").get("name"), "parameters": params, "notes": data.get("notes") or [],
            "card": str(path)}


def list_cards(dataset: str | None = None) -> list[dict[str, Any]]:
    """Every published card (:func:`card_entry`), optionally of one data set, sorted by name."""
    from mixzoo.core.plugins import table

    entries = [card_entry(name) for name in sorted(table("card"))]
    return [e for e in entries if dataset is None or e["dataset"] == dataset]


__all__ = ["ROLE", "card_entry", "list_cards"]
