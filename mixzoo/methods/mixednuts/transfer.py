"""Calibrating MixedNUTS when the robust base classifier is a black box (Bai et al. 2024a, App. D.5).

Algorithm 1 (Sec. 4.3) needs minimum-margin perturbations of the RBC, and MMAA (App. B.1) finds them with the RBC's
gradients. For an RBC that answers queries only (:class:`mixzoo.zoo.blackbox.BlackBoxModel`), App. D.5 offers three
ways out, all in :func:`transfer_params`:

``transfer``
    s, p, c come from the mix card of a *surrogate*: a white-box robust model of the same task, calibrated with
    MMAA (App. D.5: "the optimal s, p, c values are similar across similar models", Table 11). The surrogate's MMAA
    perturbations are transferred to the black box, which is queried there (and at the clean images); per example
    the point of smaller black-box margin is the attacked point. alpha is then recalibrated for the black box by
    Algorithm 1 at the fixed (s, p, c): ``alpha = 1 / (1 + q)``, ``q`` the (1 - beta)-quantile of the attacked
    correct margins of M(s, p, c) (the quantile rule of :mod:`mixzoo.methods.mixednuts.calibrate`, run on a 1 x 1 x 1
    grid).
``square``
    App. D.5's black-box minimum-margin attack: min-margin Square (:mod:`mixzoo.attacks.square`) on the black box
    itself replaces MMAA, and Algorithm 1 runs in full (grid of the given card, else the default grid); no
    surrogate is needed. With a card, the card's (s, p, c) is scored on the same margins too
    (``data["objective_transferred"]``).
``both``
    transfer and Square together: per example the smaller black-box margin wins (a stronger attack than either);
    s, p, c from the surrogate card, alpha recalibrated.
``guess``
    App. D.5's educated guess: s, p, c = :data:`DEFAULT_GUESS` (Bai et al. 2024a, Table 3, CIFAR-10: s = 5, p = 4, c =
    -1.1; 10 classes like the built-in zoo) unless ``guess=(s, p, c)`` is given, and alpha from CLEAN margins only:
    the same quantile rule with the correctly classified clean examples in place of the attacked ones, i.e. a share
    beta of the correct clean examples keeps margin >= (1 - alpha) / alpha. Clean margins are larger than attacked
    ones, so this alpha is smaller than the one an attack would give: robustness is unverified, which is warned
    about and written into ``card.notes``.

In every case the black box's clean logits give the clean-incorrect set of Algorithm 1 and the card's
``objective`` is Algorithm 1's objective on the black box's margins. The returned card records ``method``, the
surrogate (name, weight hash, card path and its s, p, c, alpha), the black box (name, weight hash) and the query
counts. :func:`transfer_params_by_name` is the same by model and dataset names (``mixzoo transfer-params``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.apgd import NORMS, ApgdSettings
from mixzoo.attacks.margins import LAYER_NORM_VERSION, ln_signed_margin, selection_key
from mixzoo.attacks.mmaa import MMAAResult
from mixzoo.attacks.square import SquareSettings
from mixzoo.core.cache import Cache
from mixzoo.core.card import MixCard, provenance
from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibrate import calibrate
from mixzoo.methods.mixednuts.grid import Grid
from mixzoo.zoo.blackbox import BlackBoxModel, as_black_box, spec_is_black_box
from mixzoo.zoo.models import check_images, check_labels

METHODS: tuple[str, ...] = ("transfer", "square", "both", "guess")
DEFAULT_GUESS: dict[str, float] = {"s": 5.0, "p": 4.0, "c": -1.1}  # Bai et al. 2024a, Table 3, CIFAR-10
WEAK_SQUARE_QUERIES = 1000  # below this, min-margin Square is flagged as a weak attack in the card
DEFAULT_BETA = 0.985
GUESS_WARNING = ("robustness is unverified: method 'guess' sets s, p, c by hand and alpha from clean margins only"
                 " (Bai et al. 2024a, App. D.5, educated guess); evaluate the mixed classifier with an attack before"
                 " relying on"
                 " it")


# ---------------------------------------------------------------------------------------------------- helpers
def _forward(model: nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(chunk) for chunk in images.split(batch_size)])


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


def _grid_from_card(card: MixCard | None) -> Any:
    """The card's grid as a :class:`mixzoo.methods.mixednuts.calibrate.Grid` (the default grid if it has fewer than 2
    points)."""
    grid = Grid.from_record(card.params["grid"] if card is not None else None)
    return grid if grid is not None and grid.size >= 2 else Grid()


def _algorithm1(clean: torch.Tensor, attacked: torch.Tensor, labels: torch.Tensor, *, beta: float, clamp: str,
                top_k: int | None, grid: Any, progress: bool = False, max_argmax_change: float | None = 0.005
                ) -> MixCard:
    """:func:`mixzoo.methods.mixednuts.calibrate.calibrate`; a 1 x 1 x 1 grid (given s, p, c) is exempt from the App.
    D.8.2 filter
    on predictions the transform changes (the share is still recorded in ``data`` and noted when large)."""
    fixed = grid.size == 1
    return calibrate(clean_logits=clean, clean_labels=labels, attacked_logits=attacked, attacked_labels=labels,
                     beta=beta, clamp=clamp, top_k=top_k, grid=grid, progress=progress,
                     max_argmax_change=None if fixed else max_argmax_change)


def _keys(logits: torch.Tensor, labels: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Lower is better for the attacker: signed LN margin, -2 where misclassified (as MMAA selects)."""
    margin = ln_signed_margin(top_k)(logits, labels)
    return selection_key(logits, margin, labels)


def _pick(a: torch.Tensor, b: torch.Tensor, labels: torch.Tensor, top_k: int | None) -> tuple[torch.Tensor,
                                                                                            torch.Tensor]:
    """Per example the logits of the better-attacked point (``b`` where its key is strictly smaller)."""
    use_b = _keys(b, labels, top_k) < _keys(a, labels, top_k)
    return torch.where(use_b.view(-1, 1), b, a), use_b


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


def _check_dataset(card: MixCard | None, bb: BlackBoxModel) -> None:
    """The surrogate card's dataset vs the black box's (from its spec): a one-line error naming both."""
    bb_dataset = getattr(bb.spec, "dataset", None)
    if card is not None and card.dataset and bb_dataset and card.dataset != bb_dataset:
        raise InputError(f"{_label(card)} was calibrated on dataset {card.dataset!r} but black-box model {bb.name!r}"
                         f" is for {bb_dataset!r}; use a card calibrated on {bb_dataset!r}")


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
                         f" {n_classes}"
                         " classes; use a card of a model with the same classes")


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
        names = {f.name for f in fields(self)}
        for key in changes:
            if key not in names:
                raise TypeError(f"transfer_params() got an unexpected keyword argument {key!r}")
        return replace(self, **changes) if changes else self


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
    elif isinstance(surrogate, BlackBoxModel) or spec_is_black_box(getattr(surrogate, "spec", None)):
        raise InputError(f"the surrogate {_name(surrogate)!r} is itself a black box, so MMAA cannot run on it;"
                         " use a white-box surrogate or method 'square'")
    elif callable(surrogate):
        with torch.no_grad():
            k = surrogate(images[:1]).shape[-1]
        if k != n_classes:
            raise InputError(f"surrogate {_name(surrogate)!r} returns {k} classes but the black box returns"
                             f" {n_classes}; use a surrogate of the same task")
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
    MMAA adversarial images / :class:`~mixzoo.attacks.mmaa.MMAAResult`. ``settings`` (:class:`TransferSettings`:
    the route ``method``, the Square budget ``queries`` per image, ``beta``, ``eps``, ``norm``, ``search``, ...);
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
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    card, card_path = _load_card(card)
    if card is None and method != "guess":
        raise InputError(f"method {method!r} needs the surrogate's mix card (--from CARD); only 'guess' works"
                         " without one")
    check_images(calib_images, what="calib_images")
    n = int(calib_images.shape[0])
    if n == 0:
        raise InputError("the calibration set is empty; pass at least a few hundred images")
    if isinstance(st.queries, bool) or int(st.queries) < 1:
        raise InputError(f"queries must be at least 1, got {st.queries}")
    queries = int(st.queries)
    bb = as_black_box(rbc)
    spec = bb.spec
    _check_dataset(card, bb)
    recorded = card.params["beta"] if card is not None else None
    beta = float(st.beta if st.beta is not None else (recorded if recorded is not None
                                                      else DEFAULT_BETA))
    if not 0.0 <= beta <= 1.0:
        raise InputError(f"beta must lie in [0, 1], got {beta}")
    eps, norm = _threat_model(card, spec, st.eps, st.norm)
    if method != "guess" and (eps is None or not eps > 0):
        raise InputError(f"no attack radius: the card records no eps and black-box model {bb.name!r} none either;"
                         " pass --eps (eps= in Python)")
    if card is not None and (card.method != "mixednuts" or card.params["clamp"] == "linear"):
        raise InputError("the surrogate card is a linear-mixture card (method 'linear'); transfer needs a MixedNUTS"
                         " card from `mixzoo mix`")
    clamp = card.params["clamp"] if card is not None else "gelu"
    top_k = card.params["top_k"] if card is not None else None

    # the whole query bill, refused up front if the budget cannot pay it
    needed = n + (n if method in ("transfer", "both") else 0)
    if method in ("square", "both"):
        from mixzoo.attacks.square import square_queries_needed

        needed += square_queries_needed(n, queries)
    bb.check_budget(needed, f"method {method!r} on {n} images" + (f" x {queries} Square queries"
                                                                 if method in ("square", "both") else ""))
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
        from mixzoo.attacks.square import min_margin_square

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
        guess = st.guess
        s, p, c = guess if guess is not None else (DEFAULT_GUESS["s"], DEFAULT_GUESS["p"], DEFAULT_GUESS["c"])
        result = _algorithm1(clean, clean, labels, grid=Grid.point(s, p, c), **common)
        run.notes.append(f"educated guess (App. D.5): s={s:g}, p={p:g}, c={c:g}"
                         + (" (Bai et al. 2024a, Table 3, CIFAR-10)" if guess is None else " (given)")
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
    if card is not None:
        fixed = result if not search else _algorithm1(clean, attacked, labels, grid=point,  # type: ignore[arg-type]
                                                      **common)
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
        actual = _hash(surrogate)
        if card.rbc.get("weight_hash") and actual != card.rbc.get("weight_hash"):
            run.notes.append(f"the surrogate model's weight hash {actual} differs from the card's"
                             f" {card.rbc.get('weight_hash')}; its MMAA points are not those the card saw")
        info["weight_hash"] = actual
    return info


def _transfer_card(run: _Run, st: TransferSettings, result: MixCard, surrogate: Any) -> MixCard:
    """The black box's mix card: Algorithm 1's parameters, the surrogate card's clamp, top_k, temperature and ABC,
    the records of the run."""
    card, data, notes, eps = run.card, run.data, run.notes, run.eps
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
    if card is not None and card.provenance.get("git_commit"):
        prov["surrogate_git_commit"] = card.provenance["git_commit"]
    attack_rec = card.attack if card is not None else {}
    if card is not None and st.method != "guess" and attack_rec.get("eps") not in (None, eps):
        notes.append(f"attack radius {eps:g} differs from the surrogate card's {attack_rec.get('eps'):g}")
    dataset = (card.dataset if card is not None else None) or getattr(run.bb.spec, "dataset", None)
    params = {**{k: result.params[k] for k in ("s", "p", "c", "alpha", "alpha_d", "objective", "grid")},
              "beta": run.beta, "clamp": run.clamp, "top_k": run.top_k,
              "temperature": card.params["temperature"] if card is not None else 0.0, "fit": st.method}
    return MixCard("mixednuts", params, abc=dict(card.abc) if card is not None else {}, rbc=black_box,
                   dataset=dataset, data=data, attack=run.attack, provenance=prov, notes=notes)
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


def _split_changes(settings: TransferSettings | None, source: BlackBoxSource | None, changes: dict[str, Any]
                   ) -> tuple[TransferSettings, BlackBoxSource]:
    """``settings`` and ``source`` with the keywords of ``changes`` named after their fields."""
    st = settings if settings is not None else TransferSettings()
    src = source if source is not None else BlackBoxSource()
    names = {f.name for f in fields(BlackBoxSource)}
    src_changes = {k: v for k, v in changes.items() if k in names}
    st = st.changed(**{k: v for k, v in changes.items() if k not in names})
    return st, replace(src, **src_changes) if src_changes else src


def _check_by_name(st: TransferSettings, src: BlackBoxSource) -> None:
    """One-line errors for :func:`transfer_params_by_name`'s settings, before anything loads."""
    from mixzoo.zoo.pairs import check_device

    check_device(src.device)
    if st.method not in METHODS:
        raise InputError(f"unknown method {st.method!r}; use one of {', '.join(METHODS)}")
    if src.out is not None:
        MixCard.check_path(src.out)
    if src.n_calib <= 0:
        raise InputError(f"--n-calib must be positive, got {src.n_calib}")
    if st.queries < 1:
        raise InputError(f"queries must be at least 1, got {st.queries}")
    if st.beta is not None and not 0.0 <= st.beta <= 1.0:
        raise InputError(f"beta must lie in [0, 1], got {st.beta}")
    eps = st.eps
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, int | float) or not math.isfinite(eps)
                            or eps <= 0):
        raise InputError(f"--eps must be a positive finite number, got {eps!r}")
    if st.norm is not None and st.norm not in NORMS:
        raise InputError(f"unknown --norm {st.norm!r}; use one of {', '.join(NORMS)}")


def transfer_params_by_name(
    card_path: str | Path | None,
    rbc_name: str,
    settings: TransferSettings | None = None,
    source: BlackBoxSource | None = None,
    **changes: Any,
) -> MixCard:
    """:func:`transfer_params` by names (``mixzoo transfer-params``): loads the surrogate card, the black-box RBC
    ``rbc_name`` (always wrapped as a black box, with ``source.query_budget``), ``source.n_calib`` calibration
    images of ``source.dataset`` (default: the card's, else the model's) and, for ``transfer``/``both``, the
    surrogate named in the card (its MMAA comes from the cache when ``mixzoo mix`` already ran it on the same
    images); writes the card to ``source.out`` atomically. ``eps`` / ``norm`` default to the card's attack record,
    then to the black box's spec (:func:`_threat_model`); the surrogate's MMAA and the checks of
    :func:`transfer_params` use the same radius. Keywords named after the fields of :class:`TransferSettings` or
    :class:`BlackBoxSource` change a copy of them (``transfer_params_by_name(card, name, method="square")``)."""
    from mixzoo.zoo.blackbox import load_black_box

    st, src = _split_changes(settings, source, changes)
    _check_by_name(st, src)
    card = MixCard.load(card_path) if card_path is not None else None
    if card is None and st.method != "guess":
        raise InputError(f"method {st.method!r} needs the surrogate's mix card; pass --from CARD")
    cache = Cache(src.cache_dir, enabled=src.use_cache) if st.method in ("transfer", "both") else None
    bb = load_black_box(rbc_name, query_budget=src.query_budget, device=src.device, allow_unsafe=src.allow_unsafe)
    data = _calibration_images(card, card_path, bb, src)
    surrogate, sur_model = None, None
    if st.method in ("transfer", "both"):
        sur_model = _surrogate_model(card, card_path, bb, src)
        eps, norm = _threat_model(card, bb.spec, st.eps, st.norm)  # the radius transfer_params checks points against
        st = st.changed(eps=eps, norm=norm)
        surrogate = _cached_surrogate_mmaa(sur_model, data, card, eps=eps, norm=norm,  # type: ignore[arg-type]
                                           cache=cache, seed=st.seed,
                                           device=src.device, progress=st.progress)
    result = transfer_params(card, bb, data.images.to(src.device), data.labels.to(src.device), st,
                             surrogate=surrogate,
                             data_info={"split": "calibration", "n": len(data.labels),
                                        "fingerprint": data.fingerprint, "source": data.source})
    sur_info = result.provenance.setdefault("surrogate", {})
    if card_path is not None:
        sur_info["card"] = str(card_path)
    if sur_model is not None and not isinstance(surrogate, nn.Module):  # MMAA images came from the cache
        _record_cached_surrogate(result, card, sur_model, sur_info)  # type: ignore[arg-type]
    result.provenance["command"] = "mixzoo.methods.mixednuts.transfer.transfer_params_by_name()"
    result.provenance["device"] = src.device
    if src.out is not None:
        result.save(src.out)
    return result


def _calibration_images(card: MixCard | None, card_path: Any, bb: BlackBoxModel, src: BlackBoxSource) -> Any:
    """The calibration images of the card's (or the black box's) dataset, checked against the black box's spec."""
    from mixzoo.zoo.data import load_dataset

    spec = bb.spec
    if card is not None and card.dataset and spec is not None and card.dataset != spec.dataset:
        raise InputError(f"surrogate card {str(card_path)!r} was calibrated on dataset {card.dataset!r} but black-box"
                         f" model {bb.name!r} is for {spec.dataset!r}; use a card calibrated on {spec.dataset!r}")
    dataset = src.dataset or (card.dataset if card is not None else None) or getattr(spec, "dataset", None)
    if dataset is None:
        raise InputError("cannot tell which dataset to calibrate on; pass --dataset")
    data = load_dataset(dataset, "calibration", n=src.n_calib, root=src.data_dir)
    if spec is not None and tuple(data.images.shape[1:]) != tuple(spec.input_size):
        raise InputError(f"dataset {dataset!r} gives images of shape {tuple(data.images.shape[1:])} but"
                         f" {bb.name!r} expects {tuple(spec.input_size)}; choose a matching dataset")
    return data


def _surrogate_model(card: MixCard, card_path: Any, bb: BlackBoxModel, src: BlackBoxSource) -> Any:
    """The white-box surrogate the card names (its RBC), checked against the black box's task."""
    from mixzoo.zoo.models import load_model

    spec = bb.spec
    sur_name = card.rbc.get("name")
    if not sur_name:
        raise InputError(f"card {str(card_path)!r} does not name its RBC (field rbc.name), so there is no"
                         " surrogate to attack; use --method square or guess")
    sur_model = load_model(sur_name, device=src.device, allow_unsafe=src.allow_unsafe)
    if spec_is_black_box(sur_model.spec):
        raise InputError(f"the surrogate {sur_name!r} is itself marked black-box, so MMAA cannot run on it;"
                         " use --method square")
    if spec is not None and sur_model.spec.num_classes != spec.num_classes:
        raise InputError(f"surrogate {sur_name!r} has {sur_model.spec.num_classes} classes but black-box model"
                         f" {bb.name!r} has {spec.num_classes}; use a surrogate of the same task")
    return sur_model


def _record_cached_surrogate(result: MixCard, card: MixCard, sur_model: Any, sur_info: dict[str, Any]) -> None:
    """The card's record of a surrogate whose MMAA images came from the cache."""
    recorded = card.rbc.get("weight_hash")
    if recorded and sur_model.weight_hash != recorded:
        result.notes.append(f"the surrogate model's weight hash {sur_model.weight_hash} differs from the"
                            f" card's {recorded}; its MMAA points are not those the card saw")
    sur_info.update({"name": sur_model.spec.name, "weight_hash": sur_model.weight_hash})
    result.attack["transfer"] = {"source": "mmaa on the surrogate (calibration_data.cached_mmaa)",
                                 **{k: v for k, v in card.attack.items() if k not in ("name", "eps", "norm")}}


def _cached_surrogate_mmaa(model: nn.Module, data: Any, card: MixCard, *, eps: float | None, norm: str, cache: Any,
                           seed: int, device: str, progress: bool) -> Any:
    """The surrogate's MMAA adversarial images at ``eps``/``norm`` (:func:`_threat_model`) through the pipeline's
    cache (same settings as the card's run, so a surrogate calibrated by ``mixzoo mix`` on these images is not
    attacked again); the model itself when there is no radius or the cache does not keep images (large inputs), so
    that :func:`transfer_params` runs MMAA or names what is missing."""
    from mixzoo.methods.mixednuts.calibration_data import MMAASettings, cached_mmaa

    a = card.attack
    if eps is None:
        return model
    res = cached_mmaa(model, data, MMAASettings(
        float(eps), norm, n_iter=int(a.get("n_iter", 100)), n_target_classes=int(a.get("n_target_classes", 9)),
        n_restarts=int(a.get("n_restarts", 1)), seed=int(a.get("seed", seed)), top_k=card.params["top_k"],
        batch_size=int(a.get("batch_size", 250))), cache=cache, device=device, progress=progress)
    if "adv_images" not in res:
        return model
    return res["adv_images"].to(device)


__all__ = ["BlackBoxSource", "DEFAULT_GUESS", "METHODS", "TransferSettings", "transfer_params",
           "transfer_params_by_name"]
