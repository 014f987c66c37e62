"""The data Algorithm 1 consumes, cached: the RBC's clean logits and its minimum-margin AutoAttack (MMAA, Bai et al.
2024a App. B.1) logits and margins on the calibration split (per batch, content-addressed, resumable).

The expensive step runs once per (RBC weights, data subset, attack settings); a new beta, clamp or grid reuses it.
The linear method's margin rule (Bai et al. 2024b, Eq. 3.4 with Algorithm 1's alpha) reads the same data.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from mixzoo.core.cache import Cache, batched_cached
from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.zoo import pairs
from mixzoo.zoo.pairs import model_device, model_key, model_name

# bump when MMAA's behaviour changes so stale cache entries are not reused; 3: the layer norm MMAA attacks is the
# authors' (unbiased variance + 1e-8, LAYER_NORM_VERSION "ln-2"); 4: random starts per example
ATTACK_CODE_VERSION = "mmaa-4"


@dataclass
class CalibrationData:
    """What Algorithm 1 consumes, plus what the reports plot (Fig. 6)."""

    clean_logits: torch.Tensor
    labels: torch.Tensor
    attacked_logits: torch.Tensor
    abc_clean_logits: torch.Tensor | None
    dataset: Any
    attack: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    cache_hits: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class MMAASettings:
    """How MMAA (App. B.1) runs: the threat model (``eps``, ``norm``), APGD's iterations, the target classes, the
    restarts, the seed of its per-example random starts, the layer norm's ``top_k`` and the batch size."""

    eps: float
    norm: str
    n_iter: int = 100
    n_target_classes: int = 9
    n_restarts: int = 1
    seed: int = 0
    top_k: int | None = None
    batch_size: int = 250

    def record(self) -> dict[str, Any]:
        """The attack record a card keeps (``card.attack``)."""
        return {"name": "mmaa", **dataclasses.asdict(self)}

    def apgd(self) -> Any:
        """The :class:`~mixzoo.attacks.apgd.ApgdSettings` of its APGD-CE and APGD-T runs."""
        from mixzoo.attacks.apgd import ApgdSettings

        return ApgdSettings(self.eps, self.norm, self.n_iter, seed=self.seed, n_restarts=self.n_restarts,
                            n_target_classes=self.n_target_classes)


def mmaa_of_card(card: Any) -> MMAASettings:
    """The MMAA settings a card's attack record names (mix's defaults for what it does not record, older cards: the
    counts, ``batch_size`` 250, the layer norm's ``top_k`` of the card's section)."""
    att = card.attack
    return MMAASettings(att["eps"], att["norm"], n_iter=att.get("n_iter", 100),
                        n_target_classes=att.get("n_target_classes", 9), n_restarts=att.get("n_restarts", 1),
                        seed=att.get("seed", 0), top_k=att.get("top_k", card.params["top_k"]),
                        batch_size=att.get("batch_size", 250))


def cached_mmaa(rbc: nn.Module, dataset: Any, mmaa: MMAASettings, *, cache: Cache, device: str = "cpu",
                progress: bool = True, transform: Any = None, only_cached: bool = False
                ) -> dict[str, torch.Tensor] | None:
    """MMAA (App. B.1) with ``mmaa``'s settings on LN(RBC) over ``dataset``, cached per batch; returns the RBC's raw
    ``logits`` at the perturbed images and the ``margins`` the attack minimised.

    ``transform`` (a MixedNUTS card: its section's ``s``, ``p``, ``c``, ``clamp``, ``top_k``) attacks the
    transformed RBC h^M(s, p, c) instead, with margins of its softmax (the App. D.9 check,
    :mod:`mixzoo.methods.mixednuts.approximation`).
    Random starts are drawn per example from ``(seed, image index)`` (:mod:`mixzoo.core.rng`), so the margins do
    not depend on ``batch_size`` or on the number of processes, and an interrupted run resumes with
    identical results. ``only_cached``: the complete cached result, or None without attacking.
    """
    from mixzoo.core.cache import content_key

    settings = {**dataclasses.asdict(mmaa), "attack_all": False, "code": ATTACK_CODE_VERSION,
                "randomness": "per-example"}
    attacked, what = rbc, f"MMAA on LN({model_name(rbc)})"
    if transform is not None:
        from mixzoo.methods.mixednuts.mixing import transformed_rbc

        settings["transform"] = {k: transform.params[k] for k in ("s", "p", "c", "clamp", "top_k")}
        attacked = transformed_rbc(rbc, transform)
        what = f"MMAA on M({model_name(rbc)})"
    key_parts = {"model": model_key(rbc), "data": dataset.fingerprint, "attack": settings}
    key = content_key(key_parts)
    if only_cached:
        return cache.load("mmaa", key)
    compute = _mmaa_batches(rbc, attacked, dataset, mmaa, device, transform)
    with progress_bar(progress) as bar:
        task = bar.add_task(what, total=len(dataset.labels))
        return batched_cached(cache, "mmaa", key, len(dataset.labels), mmaa.batch_size, compute,
                              {**key_parts, "model_name": model_name(rbc), "dataset": dataset.name},
                              progress=lambda k: bar.advance(task, k))


def _mmaa_batches(rbc: nn.Module, attacked: nn.Module, dataset: Any, mmaa: MMAASettings, device: str,
                  transform: Any) -> Any:
    """``compute(a, b)``: MMAA on images ``a:b`` of ``dataset`` (:func:`cached_mmaa`'s batches)."""
    from mixzoo.attacks import mmaa as run_mmaa

    store_images = dataset.images[0].numel() <= 3 * 64 * 64

    # attack_all=False: once a point is misclassified its margin is irrelevant to Algorithm 1 (it is not in the
    # attacked-correct set), so later components skip it as AutoAttack does; still-correct points get every
    # component and the same minimum-margin perturbation (benchmarks/mmaa_speed.md: half the passes).
    def compute(a: int, b: int) -> dict[str, torch.Tensor]:
        where = model_device(rbc, device)
        res = run_mmaa(attacked, dataset.images[a:b].to(where), dataset.labels[a:b].to(where), mmaa.apgd(),
                       top_k=mmaa.top_k, batch_size=mmaa.batch_size, progress=False, attack_all=False,
                       layer_norm=transform is None, index=torch.arange(a, b))
        logits = res.logits
        if transform is not None:  # the record holds h^M's log-probabilities; Algorithm 1 takes raw logits
            with torch.no_grad():
                logits = rbc(res.adv_images)
        out = {"logits": logits.float().cpu(), "margins": res.margins.float().cpu()}
        if store_images:
            out["adv_images"] = res.adv_images.cpu()
        return out

    return compute


MIN_FIGURE_CALIBRATION = 100  # calibration images the figures attack at least, when the card's MMAA is not cached


def calibration_data(abc: nn.Module | None, rbc: nn.Module, dataset: Any, mmaa: MMAASettings, *, cache: Cache,
                     device: str = "cpu", progress: bool = True, at_most: int | None = None) -> CalibrationData:
    """RBC clean logits, MMAA (with ``mmaa``'s settings) attacked logits (and ABC clean logits) on the calibration
    images, all cached. ``at_most``: when MMAA on the whole ``dataset`` is not cached, its first ``at_most`` images
    only (the bench's figures: their calibration work then grows with the bench's images, not with the card's),
    and never fewer than :data:`MIN_FIGURE_CALIBRATION` (Algorithm 1 needs some of the RBC's mistakes to calibrate
    on)."""
    if at_most is not None:
        at_most = max(at_most, MIN_FIGURE_CALIBRATION)
    if at_most is not None and at_most < len(dataset.labels):
        whole = cached_mmaa(rbc, dataset, mmaa, cache=cache, device=device, progress=False, only_cached=True)
        dataset = dataset if whole is not None else dataset.subset(max(1, at_most))
    if len(dataset.labels) == 0:
        raise InputError("the calibration set is empty; use --n-calib > 0")
    t0 = time.perf_counter()
    n_hits = len(cache.hits)
    clean = pairs.cached_logits(rbc, dataset, cache=cache, device=device, progress=progress, what="RBC clean logits")
    t1 = time.perf_counter()
    hits = {"rbc_logits": len(cache.hits) > n_hits}
    n_hits = len(cache.hits)
    mm = cached_mmaa(rbc, dataset, mmaa, cache=cache, device=device, progress=progress)
    t2 = time.perf_counter()
    hits["mmaa"] = len(cache.hits) > n_hits
    abc_logits = None
    if abc is not None:
        abc_logits = pairs.cached_logits(abc, dataset, cache=cache, device=device, progress=progress,
                                         what="ABC clean logits")
    t3 = time.perf_counter()
    return CalibrationData(clean, dataset.labels, mm["logits"], abc_logits, dataset, mmaa.record(),
                           seconds={"rbc_logits": t1 - t0, "mmaa": t2 - t1, "abc_logits": t3 - t2},
                           cache_hits=hits)


def pair_calibration_data(pair: Any, *, abc: bool = False, n_iter: int = 100, n_target_classes: int = 9,
                          n_restarts: int = 1, top_k: int | None = None) -> CalibrationData:
    """:func:`calibration_data` of a checked pair (:func:`mixzoo.zoo.pairs.prepare_pair`): the RBC's clean logits
    and MMAA on the calibration split, and the ABC's clean logits when ``abc``."""
    mmaa = MMAASettings(pair.eps, pair.norm, n_iter=n_iter, n_target_classes=n_target_classes,
                        n_restarts=n_restarts, seed=pair.seed, top_k=top_k, batch_size=pair.batch_size)
    return calibration_data(pair.abc if abc else None, pair.rbc, pair.data, mmaa, cache=pair.cache,
                            device=pair.device, progress=pair.progress)
