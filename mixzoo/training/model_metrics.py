"""What the registry records about a zoo model and what choosing an RBC needs (:func:`evaluate_model`), the margins
being top-1 minus top-2 probability of softmax(LN(logits)) (Bai et al. 2024a, Sec. 3.1 and App. D.7)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks.margins import layer_norm
from mixzoo.attacks.pgd import pgd
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.data import ImageDataset


def _ln_margin(logits: torch.Tensor) -> torch.Tensor:
    """Top-1 minus top-2 probability of softmax(LN(logits)) (Bai et al. 2024a, Sec. 3.1, App. D.7; LN of
    :func:`mixzoo.attacks.margins.layer_norm`)."""
    top2 = F.softmax(layer_norm(logits), dim=1).topk(2, dim=1).values
    return top2[:, 0] - top2[:, 1]


def model_logits(model: nn.Module, data: ImageDataset, eps: float | None = 0.1, steps: int = 20,
                 batch_size: int = 500, seed: int = 0, progress: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Clean logits and (``eps`` given) logits of PGD-``steps`` L-inf examples, on the CPU. Eval mode."""
    model.eval()
    device = next(iter(model.parameters()), torch.empty(0)).device
    gen = torch.Generator(device=device).manual_seed(seed)
    clean, adv = [], []
    with progress_bar(progress) as bar:
        task = bar.add_task(f"evaluate ({'clean' if eps is None else f'PGD-{steps}'})", total=len(data))
        for start in range(0, len(data), batch_size):
            x = data.images[start:start + batch_size].to(device)
            y = data.labels[start:start + batch_size].to(device)
            with torch.no_grad():
                clean.append(model(x).cpu())
            if eps is not None:
                x_adv = pgd(model, x, y, eps=eps, steps=steps, generator=gen)
                with torch.no_grad():
                    adv.append(model(x_adv).cpu())
            bar.advance(task, len(y))
    return torch.cat(clean), (torch.cat(adv) if eps is not None else None)


def margin_metrics(labels: torch.Tensor, clean_logits: torch.Tensor, adv_logits: torch.Tensor | None = None,
                   betas: tuple[float, ...] = (0.985, 0.95)) -> dict[str, float]:
    """Accuracies and the margin statistics that select an RBC, from logits (see :func:`evaluate_model`)."""
    correct, margin = clean_logits.argmax(1) == labels, _ln_margin(clean_logits)
    out: dict[str, float] = {"n": float(len(labels)), "clean": correct.float().mean().item()}
    mistakes = margin[~correct]
    out["clean_mistake_margin_median"] = mistakes.median().item() if mistakes.numel() else float("nan")
    if adv_logits is not None:
        a_correct = adv_logits.argmax(1) == labels
        out["pgd"] = a_correct.float().mean().item()
        kept = _ln_margin(adv_logits)[a_correct]
        for beta in betas:
            key = f"{1 - beta:.3g}"
            q = torch.quantile(kept, 1 - beta).item() if kept.numel() else float("nan")
            out[f"attacked_correct_margin_q{key}"] = q
            out[f"fixable_mistakes_q{key}"] = (mistakes < q).float().mean().item() if mistakes.numel() else 0.0
    return out


def evaluate_model(model: nn.Module, data: ImageDataset, eps: float | None = 0.1, steps: int = 20,
                   batch_size: int = 500, seed: int = 0, betas: tuple[float, ...] = (0.985, 0.95),
                   progress: bool = False) -> dict[str, float]:
    """Clean and PGD-``steps`` accuracy (L-inf ``eps``) plus the margin statistics that select an RBC.

    Returns ``clean``, ``pgd`` (accuracies in [0, 1]), ``clean_mistake_margin_median``, for each beta
    ``attacked_correct_margin_q{1-beta}`` (the (1 - beta)-quantile of margins of PGD-attacked examples still
    classified correctly, Bai et al. 2024a, Sec. 4.3), and ``fixable_mistakes_q{1-beta}``: the share of clean mistakes
    whose margin is below that quantile, i.e. the mistakes an ABC could overrule without hurting robustness at
    level beta with the identity transform. ``model`` takes [0, 1] images; it is put in eval mode.
    """
    clean, adv = model_logits(model, data, eps, steps, batch_size, seed, progress)
    return margin_metrics(data.labels, clean, adv, betas)
