"""The inputs of a black-box calibration (Bai et al. 2024a, App. D.5; :mod:`mixzoo.methods.mixednuts.transfer`): its
settings, where the by-name form gets its data, and the checks of the surrogate card, the black box and the
surrogate's perturbations against each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibration_settings import with_changes
from mixzoo.methods.mixednuts.grid import Grid
from mixzoo.zoo.blackbox import BlackBoxModel, spec_is_black_box
from mixzoo.zoo.models import check_images

METHODS: tuple[str, ...] = ("transfer", "square", "both", "guess")
DEFAULT_GUESS: dict[str, float] = {"s": 5.0, "p": 4.0, "c": -1.1}  # Bai et al. 2024a, Table 3, CIFAR-10
WEAK_SQUARE_QUERIES = 1000  # below this, min-margin Square is flagged as a weak attack in the card
DEFAULT_BETA = 0.985
GUESS_WARNING = ("robustness is unverified: method 'guess' sets s, p, c by hand and alpha from clean margins only"
                 " (Bai et al. 2024a, App. D.5, educated guess); evaluate the mixed classifier with an attack before"
                 " relying on it")


def _name(model: Any) -> str | None:
    spec = getattr(model, "spec", None)
    if spec is not None:
        return spec.name
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else (type(model).__name__ if model is not None else None)


def _hash(model: Any) -> str | None:
    h = getattr(model, "weight_hash", None)
    if isinstance(h, str):
        return h
    if isinstance(model, nn.Module) and not isinstance(model, BlackBoxModel):
        from mixzoo.zoo.models import weight_hash

        return weight_hash(model)
    return None


def _note_weights(card: MixCard, actual: str | None, notes: list[str]) -> None:
    """A note in ``notes`` when the surrogate's weight hash ``actual`` is not the one its card recorded."""
    recorded = card.rbc.get("weight_hash")
    if recorded and actual != recorded:
        notes.append(f"the surrogate model's weight hash {actual} differs from the card's {recorded}; its MMAA"
                     " points are not those the card saw")


def _grid_from_card(card: MixCard | None) -> Any:
    """The card's grid as a :class:`mixzoo.methods.mixednuts.calibrate.Grid` (the default grid if it has fewer than 2
    points)."""
    grid = Grid.from_record(card.params["grid"] if card is not None else None)
    return grid if grid is not None and grid.size >= 2 else Grid()


def _threat_model(card: MixCard | None, spec: Any, eps: float | None = None,
                  norm: str | None = None) -> tuple[float | None, str]:
    """The attack radius and norm: the given ones, else the surrogate card's attack record, else the black box's
    spec (its threat model is the one being calibrated for)."""
    record = card.attack if card is not None else {}
    eps = eps if eps is not None else record.get("eps", getattr(spec, "epsilon", None))
    return eps, norm or record.get("norm") or getattr(spec, "threat_model", None) or "Linf"


def _load_card(card: MixCard | str | Path | None) -> tuple[MixCard | None, str | None]:
    if card is None or isinstance(card, MixCard):
        return card, None
    if isinstance(card, str | Path):
        return MixCard.load(card), str(card)
    raise InputError(f"card must be a MixCard or the path of a card file, got {type(card).__name__}")


def _label(card: MixCard | None) -> str:
    return f"surrogate card{'' if card is None else ' for ' + repr(card.rbc.get('name', '?'))}"


def _check_dataset(card: MixCard | None, bb: BlackBoxModel, label: str | None = None) -> None:
    """The surrogate card's dataset vs the black box's (from its spec): a one-line error naming both (the card as
    ``label``, default :func:`_label`)."""
    bb_dataset = getattr(bb.spec, "dataset", None)
    if card is not None and card.dataset and bb_dataset and card.dataset != bb_dataset:
        raise InputError(f"{label or _label(card)} was calibrated on dataset {card.dataset!r} but black-box model"
                         f" {bb.name!r} is for {bb_dataset!r}; use a card calibrated on {bb_dataset!r}")


def _check_classes(card: MixCard | None, bb: BlackBoxModel, n_classes: int, surrogate: Any) -> None:
    """Class count of the surrogate (and the card's top_k) vs the black box's logits."""
    label = _label(card)
    sur_spec = getattr(surrogate, "spec", None)
    sur_classes = getattr(sur_spec, "num_classes", None)
    if sur_classes is not None and sur_classes != n_classes:
        raise InputError(f"{label} comes from a {sur_classes}-class model but black-box model {bb.name!r} returns"
                         f" {n_classes} classes; use a surrogate of the same task")
    if card is not None and card.params["top_k"] is not None and card.params["top_k"] > n_classes:
        raise InputError(f"{label} uses top_k = {card.params['top_k']} but black-box model {bb.name!r} returns"
                         f" {n_classes} classes; use a card of a model with the same classes")


def _check_surrogate(surrogate: Any, classes: Callable[[], int], bb: BlackBoxModel, n_classes: int | None) -> None:
    """Refuse a black-box surrogate (MMAA needs its gradients), then one whose class count ``classes()`` is not
    ``n_classes``, that of black box ``bb`` (None: unknown)."""
    if isinstance(surrogate, BlackBoxModel) or spec_is_black_box(getattr(surrogate, "spec", None)):
        raise InputError(f"the surrogate {_name(surrogate)!r} is itself a black box, so MMAA cannot run on it;"
                         " use a white-box surrogate or method 'square'")
    k = classes()
    if n_classes is not None and k != n_classes:
        raise InputError(f"surrogate {_name(surrogate)!r} has {k} classes but black-box model {bb.name!r} has"
                         f" {n_classes}; use a surrogate of the same task")


@dataclass(frozen=True)
class TransferSettings:
    """The settings of :func:`transfer_params`: the route ``method`` (:data:`METHODS`), the Square budget
    ``queries`` per image, ``beta`` / ``eps`` / ``norm`` (default: the card's, then the black box's spec), ``seed``,
    ``progress``, ``search`` (Algorithm 1's full grid instead of the card's s, p, c; default: only for ``square``),
    ``guess`` (s, p, c of method ``guess``), MMAA's ``n_iter`` on the surrogate, ``batch_size`` and
    ``max_argmax_change`` (as in :func:`mixzoo.methods.mixednuts.calibrate.calibrate`)."""

    method: str = "transfer"
    queries: int = 5000
    beta: float | None = None
    eps: float | None = None
    norm: str | None = None
    seed: int = 0
    progress: bool = True
    search: bool | None = None
    guess: tuple[float, float, float] | None = None
    n_iter: int = 100
    batch_size: int = 250
    max_argmax_change: float | None = 0.005

    def changed(self, **changes: Any) -> TransferSettings:
        """A copy with ``changes`` (keywords named after the fields)."""
        return with_changes("transfer_params", changes, self)[0] if changes else self


def _check_settings(st: TransferSettings) -> None:
    """One-line errors for an unknown ``method``, fewer than one Square query and a given ``beta`` outside [0, 1]."""
    if st.method not in METHODS:
        raise InputError(f"unknown method {st.method!r}; use one of {', '.join(METHODS)}")
    if isinstance(st.queries, bool) or int(st.queries) < 1:
        raise InputError(f"queries must be at least 1, got {st.queries}")
    if st.beta is not None and not 0.0 <= st.beta <= 1.0:
        raise InputError(f"beta must lie in [0, 1], got {st.beta}")


def _check_perturbations(adv: Any, images: torch.Tensor, eps: float, norm: str) -> None:
    """The surrogate's adversarial images are images of the calibration set's shape within ``eps`` in ``norm``."""
    if not isinstance(adv, torch.Tensor) or adv.shape != images.shape:
        shape = tuple(adv.shape) if isinstance(adv, torch.Tensor) else type(adv).__name__
        raise InputError(f"the surrogate's adversarial images have shape {shape} but the calibration images"
                         f" {tuple(images.shape)}; they must be perturbations of the same images")
    check_images(adv, what="the surrogate's adversarial images")
    delta = (adv - images).flatten(1)
    size = delta.abs().max(dim=1).values if norm == "Linf" else delta.norm(dim=1)
    if float(size.max()) > eps * (1 + 1e-4) + 1e-6:
        raise InputError(f"the surrogate's adversarial images are up to {float(size.max()):.4g} away from the"
                         f" calibration images in {norm}, beyond eps = {eps:.4g}; pass matching eps and norm")


@dataclass(frozen=True)
class BlackBoxSource:
    """Where :func:`transfer_params_by_name` gets its inputs: ``n_calib`` calibration images of ``dataset`` (default:
    the card's, else the model's) under ``data_dir``, the black box's ``query_budget``, the MMAA cache
    (``cache_dir``, ``use_cache``), ``device``, ``allow_unsafe`` (pickled checkpoints) and the card file ``out``."""

    dataset: str | None = None
    n_calib: int = 1000
    out: str | Path | None = None
    query_budget: int | None = None
    data_dir: str | None = None
    cache_dir: str | Path | None = None
    use_cache: bool = True
    device: str = "cpu"
    allow_unsafe: bool = False
