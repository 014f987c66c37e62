"""Algorithm 1 lines 1-3 (Bai et al. 2024a, Sec. 4.3): the inputs checked, layer-normed, and the clean mistakes and
attacked-correct examples selected."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch

from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibration_settings import CalibrationSettings, check_settings
from mixzoo.methods.mixednuts.transforms import layer_norm


def _check_logits(x: Any, what: str) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise InputError(f"{what} must be a 2-D float tensor (examples x classes), got {shape}")
    if x.shape[1] < 2:
        raise InputError(f"{what} has {x.shape[1]} class; a classifier needs at least 2")
    if x.numel() and not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).any(1).sum())
        raise InputError(f"{what} has NaN or infinite values in {bad} rows; check the model that produced them")


def _check_labels(y: Any, n: int, k: int, what: str) -> None:
    if not isinstance(y, torch.Tensor) or y.ndim != 1 or y.is_floating_point() or y.dtype == torch.bool:
        raise InputError(f"{what} must be a 1-D integer tensor")
    if len(y) != n:
        raise InputError(f"{what} has {len(y)} entries for {n} examples; they must match")
    if n and (int(y.min()) < 0 or int(y.max()) >= k):
        raise InputError(f"{what} must lie in [0, {k}), got range [{int(y.min())}, {int(y.max())}]")


def _selection_hash(*masks: torch.Tensor) -> str:
    h = hashlib.sha256()
    for m in masks:
        h.update(m.to(torch.uint8).cpu().numpy().tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


@dataclass
class _Selection:
    """Algorithm 1's data: the layer-normed logits, the clean mistakes and the attacked-correct examples."""

    clean_logits: torch.Tensor
    attacked_logits: torch.Tensor
    clean_ln: torch.Tensor
    attacked_ln: torch.Tensor
    clean_wrong: torch.Tensor
    attacked_right: torch.Tensor

    @classmethod
    def of(cls, clean_logits: torch.Tensor, clean_labels: torch.Tensor, attacked_logits: torch.Tensor,
           attacked_labels: torch.Tensor, cs: CalibrationSettings) -> _Selection:
        """The inputs checked (one-line errors), then selected as Algorithm 1 lines 1-3 do."""
        _check_logits(clean_logits, "clean_logits")
        _check_logits(attacked_logits, "attacked_logits")
        n_c, k = clean_logits.shape
        n_a = attacked_logits.shape[0]
        if attacked_logits.shape[1] != k:
            raise InputError(f"clean_logits have {k} classes but attacked_logits have {attacked_logits.shape[1]};"
                             " they must come from the same RBC")
        _check_labels(clean_labels, n_c, k, "clean_labels")
        _check_labels(attacked_labels, n_a, k, "attacked_labels")
        if n_c == 0 or n_a == 0:
            raise InputError("the calibration set is empty; pass logits of at least a few hundred images")
        check_settings(beta=cs.beta, clamp=cs.clamp, objective=cs.objective, optimizer=cs.optimizer, grid=cs.grid,
                       top_k=cs.top_k, search=cs.search)
        top_k = cs.top_k
        if top_k is not None and (top_k < 2 or top_k > k):
            raise InputError(f"top_k must lie in [2, {k}] (number of classes), got {top_k}")
        clean_ln = layer_norm(clean_logits.detach().to(torch.float64), top_k)
        attacked_ln = layer_norm(attacked_logits.detach().to(torch.float64), top_k)
        clean_wrong = clean_ln.argmax(1) != clean_labels.to(clean_ln.device)
        attacked_right = attacked_ln.argmax(1) == attacked_labels.to(attacked_ln.device)
        if int(clean_wrong.sum()) == 0:
            raise InputError(f"the RBC makes no mistakes on the {n_c} calibration images; use more images")
        if int(attacked_right.sum()) == 0:
            raise InputError(f"the RBC is wrong on all {n_a} attacked images, so there is no robustness to keep;"
                             " check the attack radius (eps) and the RBC")
        return cls(clean_logits, attacked_logits, clean_ln, attacked_ln, clean_wrong, attacked_right)

    def relaxed_weights(self, objective: str, abc_clean_correct: Any) -> torch.Tensor | None:
        """App. D.8.3: the clean mistakes the ABC gets right (``objective="relaxed"``), else ``None``."""
        if objective != "relaxed":
            return None
        n_c = len(self.clean_logits)
        if abc_clean_correct is None:
            raise InputError("objective='relaxed' (App. D.8.3) needs abc_clean_correct, one bool per clean image")
        abc_clean_correct = torch.as_tensor(abc_clean_correct)
        if abc_clean_correct.shape != (n_c,):
            raise InputError(f"abc_clean_correct has shape {tuple(abc_clean_correct.shape)} for {n_c} clean"
                             " images; it must be one bool per image")
        weights = abc_clean_correct.to(torch.bool).to(self.clean_wrong.device)[self.clean_wrong]
        if not weights.any():
            raise InputError("the ABC is wrong on every clean image the RBC gets wrong, so the relaxed objective"
                             " is undefined; use objective='standard' or more images")
        return weights

    def record(self, cs: CalibrationSettings, weights: torch.Tensor | None) -> dict[str, Any]:
        """The card's data table: the counts of Algorithm 1's sets and the hash of the selection."""
        data: dict[str, Any] = {
            "n_clean": len(self.clean_logits), "n_clean_incorrect": int(self.clean_wrong.sum()),
            "n_attacked": len(self.attacked_logits), "n_attacked_correct": int(self.attacked_right.sum()),
            "objective_kind": cs.objective, "selection_hash": _selection_hash(self.clean_wrong, self.attacked_right),
        }
        if weights is not None:
            data["n_clean_incorrect_abc_correct"] = int(weights.sum())
        return data
