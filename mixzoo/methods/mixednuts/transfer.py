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
from pathlib import Path
from typing import Any

from torch import nn

from mixzoo.attacks.apgd import NORMS
from mixzoo.core.cache import Cache
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibration_settings import with_changes
from mixzoo.methods.mixednuts.transfer_inputs import (
    DEFAULT_BETA,  # noqa: F401 - re-exported
    DEFAULT_GUESS,
    GUESS_WARNING,  # noqa: F401 - re-exported
    METHODS,
    WEAK_SQUARE_QUERIES,  # noqa: F401 - re-exported
    BlackBoxSource,
    TransferSettings,
    _check_dataset,
    _check_settings,
    _check_surrogate,
    _note_weights,
    _threat_model,
)
from mixzoo.methods.mixednuts.transfer_routes import transfer_params
from mixzoo.zoo.blackbox import BlackBoxModel

__all__ = ["BlackBoxSource", "DEFAULT_GUESS", "METHODS", "TransferSettings", "transfer_params",
           "transfer_params_by_name"]


def _check_by_name(st: TransferSettings, src: BlackBoxSource) -> None:
    """One-line errors for :func:`transfer_params_by_name`'s settings, before anything loads."""
    from mixzoo.zoo.pairs import check_device

    check_device(src.device)
    _check_settings(st)
    if src.out is not None:
        MixCard.check_path(src.out)
    if src.n_calib <= 0:
        raise InputError(f"--n-calib must be positive, got {src.n_calib}")
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

    st, src = with_changes("transfer_params_by_name", changes,
                           settings if settings is not None else TransferSettings(),
                           source if source is not None else BlackBoxSource())
    _check_by_name(st, src)
    card = MixCard.load(card_path) if card_path is not None else None
    if card is None and st.method != "guess":
        raise InputError(f"method {st.method!r} needs the surrogate's mix card; pass --from CARD")
    bb = load_black_box(rbc_name, query_budget=src.query_budget, device=src.device, allow_unsafe=src.allow_unsafe)
    data = _calibration_images(card, card_path, bb, src)
    surrogate, sur_model = None, None
    if st.method in ("transfer", "both"):
        sur_model = _surrogate_model(card, card_path, bb, src)
        eps, norm = _threat_model(card, bb.spec, st.eps, st.norm)  # the radius transfer_params checks points against
        st = st.changed(eps=eps, norm=norm)
        surrogate = _cached_surrogate_mmaa(sur_model, data, card, eps=eps, norm=norm,  # type: ignore[arg-type]
                                           cache=Cache(src.cache_dir, enabled=src.use_cache), seed=st.seed,
                                           device=src.device, progress=st.progress)
    result = transfer_params(card, bb, data.images.to(src.device), data.labels.to(src.device), st, surrogate=surrogate,
                             data_info={"split": "calibration", "n": len(data.labels),
                                        "fingerprint": data.fingerprint, "source": data.source})
    sur_info = result.provenance.setdefault("surrogate", {})
    if card_path is not None:
        sur_info["card"] = str(card_path)
    if sur_model is not None and not isinstance(surrogate, nn.Module):  # MMAA images came from the cache
        _note_weights(card, sur_model.weight_hash, result.notes)  # type: ignore[arg-type]
        sur_info.update({"name": sur_model.spec.name, "weight_hash": sur_model.weight_hash})
        result.attack["transfer"] = {"source": "mmaa on the surrogate (calibration_data.cached_mmaa)",
                                     **{k: v for k, v in card.attack.items() if k not in ("name", "eps", "norm")}}
    result.provenance["command"] = "mixzoo.methods.mixednuts.transfer.transfer_params_by_name()"
    result.provenance["device"] = src.device
    if src.out is not None:
        result.save(src.out)
    return result


def _calibration_images(card: MixCard | None, card_path: Any, bb: BlackBoxModel, src: BlackBoxSource) -> Any:
    """The calibration images of the card's (or the black box's) dataset, checked against the black box's spec."""
    from mixzoo.zoo.data import load_dataset

    spec = bb.spec
    _check_dataset(card, bb, f"surrogate card {str(card_path)!r}")
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
    _check_surrogate(sur_model, lambda: sur_model.spec.num_classes, bb, None if spec is None else spec.num_classes)
    return sur_model


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
