"""Minimum-margin AutoAttack, MMAA (Bai et al. 2024a, App. B.1): APGD-CE and APGD-T on the layer-normed RBC h^LN that
keep, per example, the visited perturbation of smallest margin, the record being shared across the two components.

Differences from AutoAttack's APGD-CE + APGD-T, all deliberate:

* by default, as AutoAttack, each run attacks only the examples no visited point has flipped yet
  (``attack_all=False``); ``attack_all=True`` attacks every example in every run, so the margins of flipped
  examples are driven as low as the attack can. The still-correct ones get the very same points and margins either
  way (AutoAttack's random stream: with the same seed and ``batch_size`` at least the number of images MMAA visits
  every point AutoAttack's APGD-CE + APGD-T visit), and Algorithm 1 uses only those: the default costs what
  AutoAttack's APGD-CE + APGD-T cost, ``attack_all=True`` cost 9.6x that on a non-robust Fashion-MNIST model
  (``benchmarks/mmaa_speed.md``);
* the returned point is the one of smallest *signed* margin ``p_y - max_{i != y} p_i`` of softmax(LN(logits)) over all
  visited points, the clean image included; a misclassified point always beats a correct one
  (:mod:`mixzoo.attacks.margins`), so ``misclassified`` is exactly "some visited point flips the prediction";
* targets for APGD-T exclude the true class (:func:`mixzoo.attacks.apgd.target_classes`), which matters only for
  examples that are already misclassified.

The margins come from logits the attack computes anyway: no forward or backward pass is added for tracking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings, apgd_ce, apgd_t, effective_n_targets, pair
from mixzoo.attacks.arguments import check_attack_settings, check_batches, settings_from
from mixzoo.attacks.margins import MarginRecord, ln_signed_margin, signed_margin
from mixzoo.attacks.margins import layer_norm as ln_logits
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.models import check_images, check_labels

MMAA_CODE_VERSION = "mmaa-1"


@dataclass
class MMAAResult:
    """MMAA output for ALL examples (not only the flipped ones).

    ``logits`` are the model's raw logits at ``adv_images``; ``margins`` the signed probability margin of the
    layer-normed logits there (Def. 2.1 on correct predictions, negative on misclassified ones, 0 on an argmax tie
    with the label, misclassified when torch's argmax picks the other class); ``misclassified`` is
    ``logits.argmax(1) != labels``.
    """

    adv_images: torch.Tensor
    logits: torch.Tensor
    margins: torch.Tensor
    misclassified: torch.Tensor
    clean_logits: torch.Tensor
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def robust_accuracy(self) -> float:
        """Fraction of examples no visited point flips."""
        return float((~self.misclassified).float().mean()) if len(self.misclassified) else float("nan")


class _LayerNormed(nn.Module):
    """x -> (raw logits, LN(raw logits)): the raw ones are recorded, the attack loss sees h^LN."""

    def __init__(self, model: nn.Module, top_k: int | None):
        super().__init__()
        self.model, self.top_k = model, top_k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(x)
        return logits, ln_logits(logits, self.top_k)


def mmaa(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: ApgdSettings | None = None, *,
         eps: float | None = None, norm: str = ApgdSettings.norm, n_iter: int = ApgdSettings.n_iter,
         n_target_classes: int = ApgdSettings.n_target_classes, n_restarts: int = ApgdSettings.n_restarts,
         seed: int = ApgdSettings.seed, batch_size: int = 500, layer_norm: bool = True, top_k: int | None = None,
         progress: bool = True, attack_all: bool = False, index: torch.Tensor | None = None) -> MMAAResult:
    """Minimum-margin AutoAttack of ``model`` (images in [0, 1] -> logits) on h^LN (App. B.1).

    Runs APGD-CE (``n_restarts`` runs of ``n_iter`` iterations at ``eps`` in ``norm``) then APGD-T
    (``n_target_classes`` targets x ``n_restarts``) on every example, in batches of ``batch_size``; each batch's
    components use random streams seeded with ``seed`` as AutoAttack does. The APGD options are keywords
    (``mmaa(model, x, y, eps=8/255)``) or ``settings`` (:class:`~mixzoo.attacks.apgd.ApgdSettings`, its ``rho``
    too; its loss, on_iter and early_stop are MMAA's own).
    ``layer_norm=False`` attacks and measures the raw logits instead; ``top_k`` restricts the LN statistics to the
    largest logits (App. D.7). ``attack_all``: attack every example in every run, not only those no visited point
    has flipped yet (the module docstring says how this and the rest differ from AutoAttack). ``index`` (each
    image's index in its whole data set) draws every random start per example from ``(seed, index)``
    (:mod:`mixzoo.core.rng`), so the result per example does not depend on ``batch_size`` or on how the images are
    split across processes; without it, each batch uses AutoAttack's generators."""
    check_images(images)
    cfg = settings_from(ApgdSettings, settings, locals())
    eps, norm, n_iter, n_restarts, seed = cfg.eps, cfg.norm, cfg.n_iter, cfg.n_restarts, cfg.seed
    check_attack_settings(eps, norm, n_iter, n_restarts, cfg.n_target_classes)
    n = images.shape[0]
    check_batches(n, batch_size, index)
    forward = _LayerNormed(model, top_k) if layer_norm else model
    margin_fn = ln_signed_margin(top_k) if layer_norm else signed_margin
    with torch.no_grad():
        n_classes = pair(forward(images[:1]))[0].shape[1]
    check_labels(labels, n, n_classes)
    labels = labels.to(images.device)
    n_targets = effective_n_targets(n_classes, cfg.n_target_classes)
    runs_per_batch = n_restarts * (1 + n_targets)

    parts = []
    with progress_bar(progress) as bar:
        task = bar.add_task(f"MMAA {norm} eps={eps:.4g}", total=math.ceil(n / batch_size) * runs_per_batch * n_iter)
        for batch, start in enumerate(range(0, n, batch_size)):
            x, y = images[start:start + batch_size], labels[start:start + batch_size]
            with torch.no_grad():
                clean, _ = pair(forward(x))
            record = MarginRecord.start(x, clean, y, margin_fn)
            size = x.shape[0]

            def advance(k: int, size: int = size) -> None:
                bar.advance(task, k / size)

            run = replace(cfg, on_iter=advance, n_target_classes=n_targets, early_stop=False)  # every margin
            common = dict(record=record, attack_all=attack_all, margin_fn=margin_fn,
                          index=None if index is None else index[start:start + batch_size])
            apgd_ce(forward, x, y, run, **common)
            if n_targets > 0:
                apgd_t(forward, x, y, run, **common)
            record.check_finite()
            parts.append((record.x, record.logits, record.margin, clean.detach()))
            bar.update(task, completed=(batch + 1) * runs_per_batch * n_iter)
    settings = {"attack": "mmaa", "eps": float(eps), "norm": norm, "n_iter": n_iter,
                "n_target_classes": n_targets, "n_restarts": n_restarts, "seed": seed, "batch_size": batch_size,
                "layer_norm": layer_norm, "top_k": top_k, "attack_all": attack_all, "code": MMAA_CODE_VERSION,
                "randomness": "batch" if index is None else "per-example",
                "margin": "p_y - max_{i!=y} p_i of softmax(LN(logits)), negative when misclassified"}
    return joined_result(parts, labels, settings)


def joined_result(parts: list[tuple[torch.Tensor, ...]], labels: torch.Tensor,
                  settings: dict[str, Any]) -> MMAAResult:
    """The :class:`MMAAResult` of batches ``parts`` (each: adv images, logits, margins, clean logits) in order."""
    adv, logits, margins, clean = (torch.cat(t) for t in zip(*parts, strict=True))
    return MMAAResult(adv, logits, margins, logits.argmax(dim=1) != labels.to(logits.device), clean, settings)
