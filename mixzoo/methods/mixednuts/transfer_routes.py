"""The routes of :func:`transfer_params` (Bai et al. 2024a, App. D.5; the module docstring of
:mod:`mixzoo.methods.mixednuts.transfer` says what each does): the black box's clean logits, its attacked logits by
transfer, Square or both, Algorithm 1 on them, and the card."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.attacks.margins import LAYER_NORM_VERSION, ln_signed_margin, selection_key
from mixzoo.attacks.mmaa import MMAAResult
from mixzoo.attacks.square import SquareSettings, square_queries_needed
from mixzoo.core.card import MixCard, provenance
from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibrate import calibrate
from mixzoo.methods.mixednuts.grid import Grid
from mixzoo.methods.mixednuts.transfer_inputs import (
    DEFAULT_BETA,
    DEFAULT_GUESS,
    GUESS_WARNING,
    WEAK_SQUARE_QUERIES,
    TransferSettings,
    _check_classes,
    _check_dataset,
    _check_perturbations,
    _check_settings,
    _check_surrogate,
    _grid_from_card,
    _hash,
    _load_card,
    _name,
    _note_weights,
    _threat_model,
)
from mixzoo.zoo.blackbox import BlackBoxModel, as_black_box, spec_is_black_box
from mixzoo.zoo.models import check_images, check_labels


def _forward(model: nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(chunk) for chunk in images.split(batch_size)])


def _algorithm1(clean: torch.Tensor, attacked: torch.Tensor, labels: torch.Tensor, *, beta: float, clamp: str,
                top_k: int | None, grid: Any, progress: bool = False, max_argmax_change: float | None = 0.005
                ) -> MixCard:
    """:func:`mixzoo.methods.mixednuts.calibrate.calibrate`; a 1 x 1 x 1 grid (given s, p, c) is exempt from the App.
    D.8.2 filter on predictions the transform changes (the share is still recorded in ``data`` and noted when large)."""
    return calibrate(clean_logits=clean, clean_labels=labels, attacked_logits=attacked, attacked_labels=labels,
                     beta=beta, clamp=clamp, top_k=top_k, grid=grid, progress=progress,
                     max_argmax_change=None if grid.size == 1 else max_argmax_change)


def _pick(a: torch.Tensor, b: torch.Tensor, labels: torch.Tensor, top_k: int | None) -> tuple[torch.Tensor,
                                                                                            torch.Tensor]:
    """Per example the logits of the better-attacked point: ``b`` where its selection key (signed LN margin, -2 where
    misclassified, as MMAA selects) is strictly smaller."""
    margin = ln_signed_margin(top_k)
    use_b = selection_key(b, margin(b, labels), labels) < selection_key(a, margin(a, labels), labels)
    return torch.where(use_b.view(-1, 1), b, a), use_b


@dataclass
class _Run:
    """What :func:`transfer_params` has established before attacking: the card, the black box, the threat model and
    the records it fills."""

    card: MixCard | None
    card_path: str | None
    bb: BlackBoxModel
    beta: float
    eps: float | None
    norm: str | None
    clamp: str
    top_k: int | None
    clean: torch.Tensor
    labels: torch.Tensor
    q0: int
    query_log: dict[str, int]
    attack: dict[str, Any]
    notes: list[str]
    data: dict[str, Any]


def _surrogate_adv(surrogate: Any, images: torch.Tensor, run: _Run, st: TransferSettings
                   ) -> tuple[torch.Tensor, dict[str, Any]]:
    """The surrogate's MMAA perturbations: run MMAA on a white-box model, or take given images / an MMAAResult."""
    from mixzoo.attacks import mmaa

    eps, norm, labels, n_classes = float(run.eps), run.norm, run.labels, int(run.clean.shape[1])  # type: ignore[arg-type]
    if surrogate is None:
        raise InputError("method 'transfer' needs a surrogate: a white-box robust model (or its MMAA adversarial"
                         " images); pass surrogate=..., or use method 'square' or 'guess'")
    if isinstance(surrogate, MMAAResult):
        adv, info = surrogate.adv_images, {"source": "given MMAAResult", **surrogate.settings}
    elif isinstance(surrogate, torch.Tensor):
        adv, info = surrogate, {"source": "given adversarial images"}
    elif callable(surrogate) or spec_is_black_box(getattr(surrogate, "spec", None)):
        _check_surrogate(surrogate, lambda: _forward(surrogate, images[:1], 1).shape[-1], run.bb, n_classes)
        res = mmaa(surrogate, images, labels, ApgdSettings(eps=eps, norm=norm, n_iter=st.n_iter, seed=st.seed),
                   top_k=run.top_k, batch_size=st.batch_size, progress=st.progress, index=torch.arange(len(labels)),
                   attack_all=True)  # the lowest surrogate margins transfer best
        adv, info = res.adv_images, {"source": "mmaa on the surrogate", **res.settings,
                                     "surrogate_robust_accuracy": res.robust_accuracy}
    else:
        raise InputError(f"surrogate must be a model, adversarial images or an MMAAResult, got"
                         f" {type(surrogate).__name__}")
    _check_perturbations(adv, images, eps, norm)  # type: ignore[arg-type]
    return adv, info


# ---------------------------------------------------------------------------------------------- public API
def transfer_params(
    card: MixCard | str | Path | None,
    rbc: nn.Module,
    calib_images: torch.Tensor,
    calib_labels: torch.Tensor,
    settings: TransferSettings | None = None,
    *,
    surrogate: nn.Module | torch.Tensor | MMAAResult | None = None,
    data_info: dict[str, Any] | None = None,
    **changes: Any,
) -> MixCard:
    """Mix card for a black-box RBC by one of the routes of App. D.5 (see the module docstring).

    ``card`` is the surrogate's mix card (a :class:`MixCard` or its path; only ``guess`` works without one): it
    supplies s, p, c (transfer / both), clamp, top_k, temperature, beta, the ABC and the attack radius. ``rbc`` is
    treated as a black box (wrapped in :class:`~mixzoo.zoo.blackbox.BlackBoxModel` unless it is one; its query budget
    is checked before the first query). ``surrogate`` is the white-box model of the card (MMAA runs on it) or its
    MMAA adversarial images / :class:`~mixzoo.attacks.mmaa.MMAAResult`. ``settings``: :class:`TransferSettings`;
    keywords named after its fields change a copy (``transfer_params(card, bb, x, y, method="square")``).
    ``data_info`` is recorded in the card's data table.
    """
    st = (settings if settings is not None else TransferSettings()).changed(**changes)
    run = _start(card, rbc, calib_images, calib_labels, st, surrogate, data_info)
    attacked = _attacked_logits(run, st, surrogate, calib_images)
    result = _fit(run, st, attacked)
    return _transfer_card(run, st, result, surrogate)


def _start(card: MixCard | str | Path | None, rbc: nn.Module, calib_images: torch.Tensor, calib_labels: torch.Tensor,
           st: TransferSettings, surrogate: Any, data_info: dict[str, Any] | None) -> _Run:
    """:func:`transfer_params`'s checks (settings, card, images, threat model, the whole query bill, refused up
    front if the budget cannot pay it) and the black box's clean logits."""
    method = st.method
    _check_settings(st)
    card, card_path = _load_card(card)
    if card is None and method != "guess":
        raise InputError(f"method {method!r} needs the surrogate's mix card (--from CARD); only 'guess' works"
                         " without one")
    check_images(calib_images, what="calib_images")
    n = int(calib_images.shape[0])
    if n == 0:
        raise InputError("the calibration set is empty; pass at least a few hundred images")
    queries = int(st.queries)
    bb = as_black_box(rbc)
    _check_dataset(card, bb)
    recorded = card.params["beta"] if card is not None else None
    beta = float(st.beta if st.beta is not None else recorded if recorded is not None else DEFAULT_BETA)
    eps, norm = _threat_model(card, bb.spec, st.eps, st.norm)
    if method != "guess" and (eps is None or not eps > 0):
        raise InputError(f"no attack radius: the card records no eps and black-box model {bb.name!r} none either;"
                         " pass --eps (eps= in Python)")
    if card is not None and (card.method != "mixednuts" or card.params["clamp"] == "linear"):
        raise InputError("the surrogate card is a linear-mixture card (method 'linear'); transfer needs a MixedNUTS"
                         " card from `mixzoo mix`")
    clamp, top_k = (card.params["clamp"], card.params["top_k"]) if card is not None else ("gelu", None)

    # the whole query bill, refused up front if the budget cannot pay it
    square = method in ("square", "both")
    needed = n + (n if method in ("transfer", "both") else 0) + (square_queries_needed(n, queries) if square else 0)
    bb.check_budget(needed, f"method {method!r} on {n} images" + (f" x {queries} Square queries" if square else ""))
    q0 = bb.queries

    clean = _forward(bb, calib_images, st.batch_size)
    n_classes = int(clean.shape[1])
    check_labels(calib_labels, n, n_classes, what="calib_labels")
    labels = calib_labels.to(clean.device)
    _check_classes(card, bb, n_classes, surrogate if isinstance(surrogate, nn.Module) else None)
    attack: dict[str, Any] = {"name": f"black-box {method}", "method": method}
    if method != "guess":
        attack.update({"eps": float(eps), "norm": norm})  # type: ignore[arg-type]
    return _Run(card, card_path, bb, beta, eps, norm, clamp, top_k, clean, labels, q0, {"clean": bb.queries - q0},
                attack, [], dict(data_info or {}))


def _attacked_logits(run: _Run, st: TransferSettings, surrogate: Any, calib_images: torch.Tensor
                     ) -> torch.Tensor | None:
    """The black box's logits at the attacked points of the route: the surrogate's MMAA points transferred,
    min-margin Square on the black box, or per example the lower margin of both; ``None`` for ``guess``."""
    method, bb, labels, top_k, queries = st.method, run.bb, run.labels, run.top_k, int(st.queries)
    attacked = None
    if method in ("transfer", "both"):
        adv, info = _surrogate_adv(surrogate, calib_images, run, st)
        q = bb.queries
        transferred = _forward(bb, adv, st.batch_size)
        run.query_log["transfer"] = bb.queries - q
        attacked, used_clean = _pick(transferred, run.clean, labels, top_k)
        run.attack["transfer"] = {k: v for k, v in info.items() if k not in ("margin",)}
        run.data["transfer_flipped"] = int((transferred.argmax(1) != labels).sum())
        run.data["transfer_kept_clean_point"] = int(used_clean.sum())
    if method in ("square", "both"):
        from mixzoo.attacks.square import min_margin_square  # looked up at the call: tests replace it

        q = bb.queries
        res = min_margin_square(bb, calib_images, labels,
                                SquareSettings(eps=float(run.eps), norm=run.norm, n_queries=queries, seed=st.seed),
                                top_k=top_k, batch_size=st.batch_size, progress=st.progress,
                                index=torch.arange(len(labels)))
        run.query_log["square"] = bb.queries - q
        if queries < WEAK_SQUARE_QUERIES:
            run.notes.append(f"min-margin Square ran {queries} queries per image (AutoAttack uses 5000); margins"
                             " this close to clean ones make alpha too small: robustness unverified")
        run.attack["square"] = {k: v for k, v in res.settings.items() if k not in ("margin", "eps", "norm")}
        run.data["square_flipped"] = int(res.misclassified.sum())
        if attacked is None:
            attacked = res.logits
        else:
            attacked, used_square = _pick(attacked, res.logits, labels, top_k)
            run.data["both_square_won"] = int(used_square.sum())
    run.query_log["total"] = bb.queries - run.q0
    run.attack["queries"] = run.query_log
    return attacked


_ROUTES = {"transfer": "the surrogate's MMAA points transferred to the black box",
           "square": "min-margin Square on the black box",
           "both": "per example the lower margin of the transferred MMAA points and min-margin Square"}


def _fit(run: _Run, st: TransferSettings, attacked: torch.Tensor | None) -> MixCard:
    """Algorithm 1 on the black box's margins: at the card's (s, p, c) (alpha recalibrated), on the whole grid
    (``search``), or, for ``guess``, at the guessed (s, p, c) on clean margins."""
    card, clean, labels, method = run.card, run.clean, run.labels, st.method
    common = {"beta": run.beta, "clamp": run.clamp, "top_k": run.top_k}
    search = (method == "square") if st.search is None else bool(st.search)
    if method == "guess":
        s, p, c = st.guess if st.guess is not None else (DEFAULT_GUESS["s"], DEFAULT_GUESS["p"], DEFAULT_GUESS["c"])
        result = _algorithm1(clean, clean, labels, grid=Grid.point(s, p, c), **common)
        run.notes.append(f"educated guess (App. D.5): s={s:g}, p={p:g}, c={c:g}"
                         + (" (Bai et al. 2024a, Table 3, CIFAR-10)" if st.guess is None else " (given)")
                         + "; alpha chosen so that a share beta of correctly classified clean examples keeps margin"
                         " >= (1 - alpha) / alpha (clean margins only, no attack)")
        run.notes.append(GUESS_WARNING)
        warnings.warn(GUESS_WARNING, UserWarning, stacklevel=3)  # the caller of transfer_params
        run.data["alpha_from"] = "clean correct margins"
        return result
    point = Grid.point(card.params["s"], card.params["p"], card.params["c"])  # type: ignore[union-attr]
    grid = _grid_from_card(card) if search else point
    result = _algorithm1(clean, attacked, labels, grid=grid, progress=st.progress and search,  # type: ignore[arg-type]
                         max_argmax_change=st.max_argmax_change, **common)
    fixed = result if not search else _algorithm1(clean, attacked, labels, grid=point, **common)  # type: ignore[arg-type]
    run.data["objective_transferred"] = fixed.params["objective"]
    run.data["alpha_transferred"] = fixed.params["alpha"]
    if search:
        run.notes.append(f"s, p, c and alpha by Algorithm 1 on black-box margins from {_ROUTES[method]} (App. D.5)")
    else:
        run.notes.append(f"s, p, c transferred from the surrogate card (App. D.5); alpha recalibrated on black-box"
                         f" margins from {_ROUTES[method]}")
    return result


def _surrogate_record(run: _Run, surrogate: Any) -> dict[str, Any]:
    """The provenance's record of the surrogate (its card's RBC, or the model given); a note when the model's
    weights are not those the card saw."""
    card = run.card
    if card is None:
        return {}
    info = {"name": card.rbc.get("name"), "weight_hash": card.rbc.get("weight_hash"), "card": run.card_path,
            "method": card.params["fit"], **{k: card.params[k] for k in ("s", "p", "c", "alpha", "objective")},
            "dataset": card.dataset}
    if isinstance(surrogate, nn.Module):
        info["name"] = _name(surrogate) or info["name"]
        info["weight_hash"] = _hash(surrogate)
        _note_weights(card, info["weight_hash"], run.notes)
    return info


def _transfer_card(run: _Run, st: TransferSettings, result: MixCard, surrogate: Any) -> MixCard:
    """The black box's mix card: Algorithm 1's parameters, the surrogate card's clamp, top_k, temperature and ABC,
    the records of the run."""
    card, data, notes = run.card, run.data, run.notes
    if card is not None:
        data["surrogate_objective"] = card.params["objective"]
    data.update({k: v for k, v in result.data.items() if k not in data})
    notes.extend(n_ for n_ in result.notes if n_ not in notes)
    surrogate_info = _surrogate_record(run, surrogate)
    black_box = {"name": run.bb.name, "weight_hash": run.bb.weight_hash, "black_box": True}
    prov = provenance(layer_norm=LAYER_NORM_VERSION, seed=st.seed,
                      surrogate={k: v for k, v in surrogate_info.items() if v is not None},
                      black_box={**black_box, "queries": run.query_log["total"]},
                      command="mixzoo.methods.mixednuts.transfer.transfer_params()")
    if card is not None:
        if card.provenance.get("git_commit"):
            prov["surrogate_git_commit"] = card.provenance["git_commit"]
        if st.method != "guess" and card.attack.get("eps") not in (None, run.eps):
            notes.append(f"attack radius {run.eps:g} differs from the surrogate card's {card.attack['eps']:g}")
    dataset = (card.dataset if card is not None else None) or getattr(run.bb.spec, "dataset", None)
    params = {**{k: result.params[k] for k in ("s", "p", "c", "alpha", "alpha_d", "objective", "grid")},
              "beta": run.beta, "clamp": run.clamp, "top_k": run.top_k,
              "temperature": card.params["temperature"] if card is not None else 0.0, "fit": st.method}
    return MixCard("mixednuts", params, abc=dict(card.abc) if card is not None else {}, rbc=black_box,
                   dataset=dataset, data=data, attack=run.attack, provenance=prov, notes=notes)
