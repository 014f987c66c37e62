"""Loading what a card's evaluation needs, once per command: the card, its ABC and RBC, its mixed classifier, the
threat model and the evaluation images (:class:`CardEvaluation`), the run record of benching it
(:func:`run_record_of`), the batch size, and the one-line errors every card evaluation shares."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from mixzoo.attacks.memory import auto_batch_size, parse_batch_size
from mixzoo.attacks.precision import check_precision_device
from mixzoo.core import distributed
from mixzoo.core.budget import counts_of
from mixzoo.core.cache import check_writable
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.core.record import RunRecord, sha256_of
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.zoo.pairs import (
    card_dataset,
    card_key_parts,
    card_models,
    check_device,
    check_model_fits,
    model_key,
    threat_model_of,
    weight_mismatches,
)


def model_key_parts(model: nn.Module, data: Any) -> dict[str, Any]:
    """Cache key of the ABC's or the RBC's evaluation row."""
    return {"data": data.fingerprint, "model": model_key(model)}


def check_run_settings(settings: RunSettings, out: str | Path | None = None) -> None:
    """One-line errors for settings every card evaluation shares, before anything is loaded or attacked."""
    from mixzoo.core.plugins import lookup

    if settings.n <= 0:
        raise InputError(f"--n must be positive, got {settings.n}")
    parse_batch_size(settings.batch_size)  # a positive number or "auto"
    check_precision_device(settings.precision, check_device(settings.device))
    # an unknown name or option fails now, not after calibrating and attacking three models
    attack_cls = lookup("attack", settings.attack)
    check_options = getattr(attack_cls, "check_options", None)  # a plugin's attack need not subclass Attack
    if settings.attack_options and check_options is not None:
        check_options(dict(settings.attack_options))
    if out is not None:  # last: the probe writes (and removes) a file, which a refused command should not do
        check_writable(out, directory=True, what="--out directory")


@dataclass
class CardEvaluation:
    """A mix card ready to evaluate: its models, its mixed classifier, the attack radius and the evaluation
    images."""

    card: Any
    abc: nn.Module
    rbc: nn.Module
    mixed: nn.Module
    data: Any
    eps: float
    norm: str
    notes: list[str]  # weight-hash mismatches against the card (also issued as warnings)


def load_card(card: Any) -> Any:
    """A :class:`~mixzoo.core.card.MixCard` from a card, a card file or a published card's name."""
    return card if isinstance(card, MixCard) else MixCard.load(card)


def card_evaluation(card: Any, settings: RunSettings | None = None, **changes: Any) -> CardEvaluation:
    """Load what evaluating ``card`` needs: the ABC and RBC (:func:`~mixzoo.zoo.pairs.card_models`; the settings'
    ``abc`` / ``rbc`` replace the card's), the card's mixed classifier (its method's ``build``), eps and norm (the
    settings', else the card's attack, else the RBC's threat model) and the first ``n`` evaluation images, refusing
    models that cannot classify them."""
    from mixzoo.zoo.data import load_dataset, model_options

    s = settings_of(settings, changes)
    card = load_card(card)
    abc_m, rbc_m = card_models(card, s.abc, s.rbc, device=s.device, allow_unsafe=s.allow_unsafe)
    notes = weight_mismatches(card, abc_m, rbc_m)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    mixed = card.mixing_method.build(abc_m, rbc_m, card)
    attack = card.attack or {}
    eps, norm = threat_model_of(rbc_m, attack.get("eps") if s.eps is None else s.eps,
                                        attack.get("norm") if s.norm is None else s.norm)
    data = load_dataset(card_dataset(card, rbc_m), "evaluation", n=s.n, root=s.data_dir,
                        **model_options(rbc_m, abc_m))
    top_k = card.params.get("top_k")
    if top_k is not None and top_k > data.num_classes:
        raise InputError(f"the card's top_k ({top_k}) exceeds the {data.num_classes} classes of {data.name!r};"
                         " it was calibrated for another task")
    check_model_fits(abc_m, data, "ABC")
    check_model_fits(rbc_m, data, "RBC")
    return CardEvaluation(card, abc_m, rbc_m, mixed, data, eps, norm, notes)


def run_record_of(settings: RunSettings, cards: list[Any], ce: CardEvaluation,
                  given: dict[str, Any] | None = None) -> RunRecord:
    """The :class:`~mixzoo.core.record.RunRecord` of benching ``cards`` with ``settings`` (eps and norm as
    resolved, the models and images ``ce`` loaded; ``given``: the user's ``-O``, whose counts the record keeps as
    those set on every component)."""
    return RunRecord.from_settings(
        settings, card=sha256_of([c.to_dict() for c in cards]), abc=model_key(ce.abc), rbc=model_key(ce.rbc),
        dataset=ce.data.name, examples=ce.data.fingerprint, eps=float(ce.eps), norm=ce.norm,
        count_overrides=counts_of(given))


def same_pair(cards: list[Any]) -> None:
    """Cards benched together must mix the same ABC and RBC (names and weights) on the same dataset."""
    first = cards[0]
    for other in cards[1:]:
        for role in ("abc", "rbc"):
            a, b = getattr(first, role), getattr(other, role)
            if (a.get("name"), a.get("weight_hash")) != (b.get("name"), b.get("weight_hash")):
                raise InputError(f"the cards mix different {role.upper()}s ({a.get('name')!r} and {b.get('name')!r}"
                                 f" or other weights); bench cards of one pair together, or pass --{role}")
        if first.dataset != other.dataset:
            raise InputError(f"the cards are for different datasets ({first.dataset!r}, {other.dataset!r}); bench"
                             " cards of one pair together")


def resolved_batch_size(batch_size: int | str, abc: nn.Module, rbc: nn.Module, data: Any, device: str) -> int:
    """``--batch-size`` as a number of images: ``"auto"`` from one attack step's memory of both networks at once (as
    the mixture holds them), the same on every torchrun rank (the smallest), so the shards are the same."""
    if parse_batch_size(batch_size) != "auto":
        return int(batch_size)
    x = data.images[:2].to(device)
    size = auto_batch_size(lambda v: abc(v) + rbc(v), x, data.labels[:2].to(device), n=len(data.labels))
    return min(distributed.gather(size))


def evaluated_name(card: Any, role: str, model: nn.Module) -> str:
    """The name a row is labelled with: the model actually evaluated (``--abc`` / ``--rbc`` replace the card's;
    :func:`card_evaluation` notes when its weights are not the ones the card was fitted for)."""
    name = getattr(model, "name", None)
    return name if isinstance(name, str) and name else (getattr(card, role) or {}).get("name") or role.upper()


__all__ = ["CardEvaluation", "card_evaluation", "card_key_parts", "check_run_settings", "evaluated_name",
           "load_card", "model_key_parts", "resolved_batch_size", "run_record_of", "same_pair"]
