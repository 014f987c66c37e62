"""A MixedNUTS card from flat fields, for tests that vary one field at a time."""

from __future__ import annotations

from typing import Any

from mixzoo.core.card import MixCard

SECTION = ("s", "p", "c", "alpha", "beta", "clamp", "top_k", "temperature", "alpha_d", "objective", "grid")


def nuts_card(**fields: Any) -> MixCard:
    """``MixCard("mixednuts", section, **tables)``: the keys of MixedNUTS's section (``method`` is its ``fit``) go
    into the section, every other key is a field of the card; ``method="linear"`` makes the linear method's card
    (alpha, beta, temperature; fitted by Algorithm 1's margin rule)."""
    fields = dict(fields)
    section = {k: fields.pop(k) for k in SECTION if k in fields}
    fit = fields.pop("method", None)
    if fit == "linear":  # the linear method's section: Algorithm 1's alpha on the raw RBC logits
        kept = {k: section[k] for k in ("alpha", "beta", "temperature") if k in section}
        return MixCard("linear", {**kept, "fit": "linear"}, **fields)
    if fit is not None:
        section["fit"] = fit
    return MixCard("mixednuts", section, **fields)
