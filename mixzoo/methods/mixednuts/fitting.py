"""``mixzoo mix`` for MixedNUTS as a library function: :func:`mix` fits a pair by name (Bai et al. 2024a, Algorithm 1).

``mix`` = RBC clean logits + MMAA on LN(RBC) (both cached: :mod:`.calibration_data`) + Algorithm 1 -> MixCard.
A second call with another beta, clamp or grid takes seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from mixzoo.core.machine import machine_summary
from mixzoo.core.progress import next_phase
from mixzoo.methods.base import FitRequest
from mixzoo.methods.mixednuts.calibration_data import CalibrationData, pair_calibration_data
from mixzoo.zoo.pairs import prepare_pair


@dataclass
class MixResult:
    """What :func:`mix` returns: the card, where it was written, and the Fig. 6 summary."""

    card: Any
    path: Path | None
    summary: dict[str, Any]
    seconds: dict[str, float]
    cache_hits: dict[str, bool]


def margin_summary(data: CalibrationData, card: Any) -> dict[str, Any]:
    """Fig. 6 in numbers: median margins of clean-incorrect and attacked-correct RBC outputs, before (LN) and
    after the transform M(s*, p*, c*)."""
    from mixzoo.methods.mixednuts.transforms import confidence_margin, layer_norm, rbc_transform, transform_of

    clean_wrong = data.clean_logits.argmax(1) != data.labels
    adv_right = data.attacked_logits.argmax(1) == data.labels

    def med(t: torch.Tensor) -> float | None:
        return float(t.median()) if t.numel() else None

    out: dict[str, Any] = {"n_clean_incorrect": int(clean_wrong.sum()), "n_attacked_correct": int(adv_right.sum()),
                           "n": len(data.labels)}
    for stage, fn in (
        ("raw", lambda z: z),
        ("layer_norm", lambda z: layer_norm(z, top_k=card.params["top_k"])),
        ("transformed", lambda z: rbc_transform(z, **transform_of(card.params))),
    ):
        out[stage] = {
            "clean_incorrect_median_margin": med(confidence_margin(fn(data.clean_logits))[clean_wrong]),
            "attacked_correct_median_margin": med(confidence_margin(fn(data.attacked_logits))[adv_right]),
        }
    out["rbc_clean_accuracy"] = float((~clean_wrong).float().mean())
    out["rbc_mmaa_accuracy"] = float(adv_right.float().mean())
    return out


@dataclass(frozen=True)
class MixSettings:
    """MixedNUTS's fit options (``FitRequest.options``; :attr:`.method.MixedNUTS.options` says what each does):
    Algorithm 1's ``beta``, ``clamp``, ``grid``, ``objective``, ``optimizer``, ``top_k``, ``search``, the second
    pass ``refit_alpha`` and MMAA's ``n_iter``, ``n_target_classes``, ``n_restarts``."""

    beta: float = 0.985
    clamp: str = "gelu"
    grid: Any = None
    objective: str = "standard"
    optimizer: str = "grid"
    top_k: int | None = None
    search: str = "mixzoo"
    refit_alpha: bool = False
    n_iter: int = 100
    n_target_classes: int = 9
    n_restarts: int = 1

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> MixSettings:
        """The settings of ``options``; a one-line error for a name MixedNUTS does not take."""
        from mixzoo.core.errors import InputError

        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise InputError(f"mixing method 'mixednuts' takes no option {unknown[0]!r} (its options:"
                             f" {', '.join(sorted(names))}); see `mixzoo plugins`")
        return cls(**options)

    def check(self) -> None:
        """One-line errors for a bad Algorithm 1 setting, before any attack (:func:`.calibrate.check_settings`)."""
        from mixzoo.methods.mixednuts.calibration_settings import check_settings

        check_settings(beta=self.beta, clamp=self.clamp, objective=self.objective, optimizer=self.optimizer,
                       grid=self.grid, top_k=self.top_k, search=self.search)


def mix(request: FitRequest) -> MixResult:
    """Calibrate MixedNUTS for the ABC/RBC pair of ``request`` (Bai et al. 2024a, Algorithm 1) and write the mix
    card to ``request.out`` when given; ``request.options`` are :class:`MixSettings`' fields.

    With no model names, the built-in Fashion-MNIST pair is used. The RBC's clean logits and its MMAA margins are
    cached, so calling again with another ``beta``, ``clamp`` or ``grid`` takes seconds. ``refit_alpha`` adds a
    second pass that re-chooses alpha on MMAA points of the transformed RBC (:func:`.approximation.refit_alpha`).
    ``search="authors"`` runs Algorithm 1 exactly as the authors' code does (see :mod:`.calibrate`).
    """
    return _mix(request, MixSettings.from_options(dict(request.options)))


def _mix(request: FitRequest, opts: MixSettings) -> MixResult:
    """:func:`mix`: the pair, the calibration data, Algorithm 1 (and the App. D.9 second pass), the card."""
    from mixzoo.zoo.data import shortfall_note

    opts.check()
    t0 = time.perf_counter()
    pair = prepare_pair(request, top_k=opts.top_k)
    t1 = time.perf_counter()
    next_phase()  # the phases of the method's plan_fit: calibration data, then Algorithm 1
    cdata = pair_calibration_data(pair, abc=opts.objective == "relaxed", n_iter=opts.n_iter,
                                  n_target_classes=opts.n_target_classes, n_restarts=opts.n_restarts, top_k=opts.top_k)
    t2 = time.perf_counter()
    next_phase()
    card = _algorithm_1(pair, cdata, request, opts)
    # the machine of this run; when MMAA came from the cache, the attack itself may have run elsewhere
    card.provenance.update({"seed": request.seed, "command": request.command or "mixzoo.mix()",
                            "device": request.device, "machine": machine_summary(request.device),
                            "mmaa_from_cache": bool(cdata.cache_hits.get("mmaa"))})
    if (note := shortfall_note(pair.data, request.n_calib, "--n-calib")) is not None:
        card.notes.append(note)
    t3 = time.perf_counter()
    path = None
    if request.out is not None:
        path = Path(request.out)
        card.save(path)
    summary = margin_summary(cdata, card)
    seconds = {"load": t1 - t0, **cdata.seconds, "calibration_data": t2 - t1, "search": t3 - t2,
               "total": time.perf_counter() - t0}
    return MixResult(card, path, summary, seconds, cdata.cache_hits)


def _algorithm_1(pair: Any, cdata: CalibrationData, request: FitRequest, opts: MixSettings) -> Any:
    """The card of Algorithm 1 on ``cdata`` (:func:`.calibrate.calibrate`), with the second pass when asked."""
    from mixzoo.methods.mixednuts.calibrate import calibrate
    from mixzoo.zoo.pairs import DEFAULT_N_CALIB

    abc_correct = None
    if opts.objective == "relaxed":
        abc_correct = cdata.abc_clean_logits.argmax(1) == cdata.labels
    card = calibrate(
        clean_logits=cdata.clean_logits, clean_labels=cdata.labels, attacked_logits=cdata.attacked_logits,
        attacked_labels=cdata.labels, beta=opts.beta, clamp=opts.clamp, top_k=opts.top_k, grid=opts.grid,
        objective=opts.objective, abc_clean_correct=abc_correct, optimizer=opts.optimizer, progress=request.progress,
        search=opts.search, abc=pair.info("abc"), rbc=pair.info("rbc"), dataset=pair.dataset,
        data_info=pair.data_info(), attack_info=cdata.attack,
        # the split gave fewer images than asked for (or than the default): more cannot be had
        more_images=len(pair.data) >= (DEFAULT_N_CALIB if request.n_calib is None else request.n_calib),
    )
    if opts.refit_alpha:
        from mixzoo.methods.mixednuts.approximation import refit_alpha as second_pass

        card = second_pass(card, pair.rbc, cdata, cache=pair.cache, device=request.device,
                           progress=request.progress, abc_clean_correct=abc_correct)
    return card
