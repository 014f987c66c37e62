"""``mixzoo mix`` for MixedNUTS as a library function: :func:`mix` fits a pair by name (Bai et al. 2024a, Algorithm 1).

``mix`` = RBC clean logits + MMAA on LN(RBC) (both cached: :mod:`.calibration_data`) + Algorithm 1 -> MixCard.
A second call with another beta, clamp or grid takes seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.machine import machine_summary
from mixzoo.core.progress import next_phase
from mixzoo.methods.mixednuts.calibration_data import (  # noqa: F401 - also the names of the old mixzoo.pipeline
    ATTACK_CODE_VERSION,
    CalibrationData,
    cached_mmaa,
    calibration_data,
    pair_calibration_data,
)
from mixzoo.zoo.pairs import (  # noqa: F401 - the old mixzoo.pipeline's names, for scripts that import them there
    DEFAULT_ABC,
    DEFAULT_RBC,
    cached_logits,
    card_dataset,
    card_model,
    card_models,
    check_device,
    check_model_fits,
    load_mixed,
    model_device,
    model_hash,
    model_key,
    model_name,
    prepare_pair,
    resolve_model,
    threat_model_of,
)


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


def mix(
    abc: str | nn.Module | None = None,
    rbc: str | nn.Module | None = None,
    *,
    dataset: str | None = None,
    beta: float = 0.985,
    clamp: str = "gelu",
    n_calib: int | None = None,
    grid: Any = None,
    objective: str = "standard",
    optimizer: str = "grid",
    top_k: int | None = None,
    search: str = "mixzoo",
    refit_alpha: bool = False,
    eps: float | None = None,
    norm: str | None = None,
    n_iter: int = 100,
    n_target_classes: int = 9,
    n_restarts: int = 1,
    seed: int = 0,
    batch_size: int = 250,
    out: str | Path | None = None,
    data_dir: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    device: str = "cpu",
    allow_unsafe: bool = False,
    progress: bool = True,
    command: str | None = None,
) -> MixResult:
    """Calibrate MixedNUTS for an ABC/RBC pair by name (Bai et al. 2024a, Algorithm 1) and write the mix card.

    With no names, the built-in Fashion-MNIST pair is used. The RBC's clean logits and its MMAA margins are cached,
    so calling again with another ``beta``, ``clamp`` or ``grid`` takes seconds. ``refit_alpha`` adds a second
    pass that re-chooses alpha on MMAA points of the transformed RBC (:func:`.approximation.refit_alpha`).
    ``search="authors"`` runs Algorithm 1 exactly as the authors' code does (see :mod:`.calibrate`).
    """
    from mixzoo.methods.base import FitRequest
    from mixzoo.methods.mixednuts.calibrate import calibrate, check_settings
    from mixzoo.zoo.data import shortfall_note
    from mixzoo.zoo.pairs import DEFAULT_N_CALIB

    check_settings(beta=beta, clamp=clamp, objective=objective, optimizer=optimizer, grid=grid, top_k=top_k,
                   search=search)
    t0 = time.perf_counter()
    pair = prepare_pair(FitRequest(abc, rbc, dataset=dataset, n_calib=n_calib, eps=eps, norm=norm, seed=seed,
                                   batch_size=batch_size, out=out, data_dir=data_dir, cache_dir=cache_dir,
                                   use_cache=use_cache, device=device, allow_unsafe=allow_unsafe,
                                   progress=progress), top_k=top_k)
    rbc_m, data, cache, dataset = pair.rbc, pair.data, pair.cache, pair.dataset
    t1 = time.perf_counter()
    next_phase()  # the phases of the method's plan_fit: calibration data, then Algorithm 1
    cdata = pair_calibration_data(pair, abc=objective == "relaxed", n_iter=n_iter, n_target_classes=n_target_classes,
                                  n_restarts=n_restarts, top_k=top_k)
    t2 = time.perf_counter()
    abc_correct = None
    if objective == "relaxed":
        abc_correct = cdata.abc_clean_logits.argmax(1) == cdata.labels
    next_phase()
    card = calibrate(
        clean_logits=cdata.clean_logits, clean_labels=cdata.labels, attacked_logits=cdata.attacked_logits,
        attacked_labels=cdata.labels, beta=beta, clamp=clamp, top_k=top_k, grid=grid, objective=objective,
        abc_clean_correct=abc_correct, optimizer=optimizer, progress=progress, search=search,
        abc=pair.info("abc"), rbc=pair.info("rbc"), dataset=dataset, data_info=pair.data_info(),
        attack_info=cdata.attack,
        # the split gave fewer images than asked for (or than the default): more cannot be had
        more_images=len(data) >= (DEFAULT_N_CALIB if n_calib is None else n_calib),
    )
    if refit_alpha:
        from mixzoo.methods.mixednuts.approximation import refit_alpha as second_pass

        card = second_pass(card, rbc_m, cdata, cache=cache, device=device, progress=progress,
                           abc_clean_correct=abc_correct)
    # the machine of this run; when MMAA came from the cache, the attack itself may have run elsewhere
    card.provenance.update({"seed": seed, "command": command or "mixzoo.mix()", "device": device,
                            "machine": machine_summary(device), "mmaa_from_cache": bool(cdata.cache_hits.get("mmaa"))})
    if (note := shortfall_note(data, n_calib, "--n-calib")) is not None:
        card.notes.append(note)
    t3 = time.perf_counter()
    path = None
    if out is not None:
        path = Path(out)
        card.save(path)
    summary = margin_summary(cdata, card)
    seconds = {"load": t1 - t0, **cdata.seconds, "calibration_data": t2 - t1, "search": t3 - t2,
               "total": time.perf_counter() - t0}
    return MixResult(card, path, summary, seconds, cdata.cache_hits)
