"""Issue 25, section 3: the paper's three published MixedNUTS models (``plugins/cards/mixednuts-*.toml``, parameters
from the authors' ``configs/optimal_spca.yaml``) give, loaded by name and built by their method (the
mixed classifier itself), the log-probabilities of the authors' formula to 1e-6 on random base logits.

``authors_log_probs`` is written here in float64 NumPy from the authors' code (``models/output_maps.py``:
``normalize_topk`` with the unbiased variance + 1e-8 over the top ``ln_k`` logits, ``nn.GELU()`` (exact erf form) of
``LN + c``, ``|.|^p sgn(.)``, times s; ``HardMaxMap``: the one-hot argmax of the ABC; ``NonLinMixedClassifier``:
``log((1 - alpha) onehot + alpha softmax(M(h)))``), evaluated stably in log space. mixzoo runs in float64 too.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import erf
from torch import nn

from mixzoo.core.card import MixCard

CARDS = Path(__file__).resolve().parents[3] / "plugins" / "cards"
PUBLISHED = {"mixednuts-cifar10": 10, "mixednuts-cifar100": 100, "mixednuts-imagenet": 1000}
AUTHORS_LN_K = 250  # calc_spca.py / run_robustbench.py default: all logits for CIFAR, the top 250 for ImageNet


class Fixed(nn.Module):
    """A base classifier whose logits are given (row i of ``logits`` for input image i)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[x.flatten(1)[:, 0].long()]


def published_classifier(name: str, g: np.ndarray, h: np.ndarray) -> tuple[nn.Module, torch.Tensor]:
    """The published card loaded by name (``MixCard.load``: the ``mixzoo_cards`` hook) and built by its method,
    around base models that return ``g`` and ``h``; and the images that select every row."""
    card = MixCard.load(name)
    model = card.mixing_method.build(Fixed(torch.from_numpy(g)), Fixed(torch.from_numpy(h)), card)
    return model, torch.arange(len(g), dtype=torch.float64)[:, None]


def authors_log_probs(g: np.ndarray, h: np.ndarray, s: float, p: float, c: float, alpha: float, ln_k: int,
                      ddof: int = 1) -> np.ndarray:
    """The authors' MixedNUTS output, log of Eq. 5 with a hard-max ABC; ``ddof=0`` is mixzoo's old layer norm."""
    h = np.clip(h, -1e15, 1e15)
    ref = h if ln_k >= h.shape[1] else -np.sort(-h, axis=1)[:, :ln_k]
    mean = ref.mean(1, keepdims=True)
    z = (h - mean) / np.sqrt(ref.var(1, ddof=ddof, keepdims=True) + 1e-8)
    x = z + c
    clamped = x * 0.5 * (1.0 + erf(x / np.sqrt(2.0)))
    u = s * (np.abs(clamped) ** p * np.sign(clamped))
    shifted = u - u.max(1, keepdims=True)
    rbc_lp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    onehot_log = np.full_like(g, -np.inf)
    onehot_log[np.arange(len(g)), g.argmax(1)] = 0.0
    return np.logaddexp(np.log1p(-alpha) + onehot_log, np.log(alpha) + rbc_lp)


def random_logits(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """ABC and RBC logits with per-row scales from 0.01 to 100 (LN removes the scale; the hard max does not)."""
    rng = np.random.default_rng(seed)
    scale = np.logspace(-2, 2, n)[:, None]
    g = rng.normal(size=(n, k)) * scale
    h = rng.normal(size=(n, k)) * scale + rng.normal(size=(n, 1)) * 10
    return g, h


def test_the_cards_hold_the_authors_published_parameters():
    """configs/optimal_spca.yaml of github.com/Bai-YT/MixedNUTS (and issue 25), GELU clamp, ABC temperature 0."""
    want = {
        "mixednuts-cifar10": (5.0, 4.0, -1.1, 0.9987500602493457, 0.985, None),
        "mixednuts-cifar100": (0.6115753843212784, 3.571428571428571, -2.142857142857143, 0.9860300534207915, 0.985,
                               None),
        "mixednuts-imagenet": (0.023535468936502525, 2.7142857142857144, -0.2857142857142858, 0.9971266414518896,
                               0.99, 250),
    }
    for name, (s, p, c, alpha, beta, top_k) in want.items():
        card = tomllib.loads((CARDS / f"{name}.toml").read_text(encoding="utf-8"))
        m = card["mixednuts"]
        assert (m["s"], m["p"], m["c"], m["alpha"], m["beta"], m.get("top_k")) == (s, p, c, alpha, beta, top_k)
        assert (m["clamp"], m["temperature"], card["schema_version"], card["method"]) == ("gelu", 0.0, 2, "mixednuts")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_card_matches_the_authors_formula_to_1e_6(name):
    k = PUBLISHED[name]
    g, h = random_logits(300, k, seed=k)
    model, images = published_classifier(name, g, h)
    with torch.no_grad():
        got = model(images).numpy()
    params = MixCard.load(name).params
    want = authors_log_probs(g, h, params["s"], params["p"], params["c"], params["alpha"], AUTHORS_LN_K)
    assert got.dtype == np.float64 and np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # the old layer norm (population variance) is far outside that tolerance, so this test can fail
    old = authors_log_probs(g, h, params["s"], params["p"], params["c"], params["alpha"], AUTHORS_LN_K, ddof=0)
    assert np.abs(old - want).max() > 1e-3
