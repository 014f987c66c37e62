"""``certify``: certified radii of constant-alpha mixtures on an evaluation split (Bai et al. 2024b, Sec. 3, App. A).

Which certificate applies depends on the RBC:

- a Gaussian randomized-smoothing RBC (registry field ``smoothing_sigma``, or ``sigma=`` given): Monte Carlo with
  confidence bounds (:mod:`~mixzoo.certify.smoothing`), then Thm 3.5 with the smoothed model's constant
  sqrt(2 / (pi sigma^2)) and the tighter Thm A.2 (l2 only);
- an RBC whose registry entry declares the Lipschitz constant of its logits (``lipschitz = {constant, norm}``,
  the 1-Lipschitz zoo models): deterministic radii from one forward pass, the logit margin / (sqrt(2) L) alone and
  Lemma 3.2 through the softmax for mixtures (:func:`~mixzoo.certify.radii.logit_lipschitz_radius`); the constant
  is checked against the product of the weights' exact layer norms first;
- any other RBC whose layers are known: Thm 3.5 with the provable bound of :func:`~mixzoo.certify.lipschitz.
  lipschitz_bound` (l2, or l-inf through sqrt(dim)); optionally, and labelled so, the App. C.3 estimate.

The ABC enters only through the mixture's clean prediction: Lemma 3.2 holds whatever it outputs, so its temperature
(0, a hard max, as in Bai et al. 2024b, App. A.2, unless the card says otherwise) does not change any certificate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.certify.lipschitz import estimate_local_lipschitz, lipschitz_bound
from mixzoo.certify.radii import (
    certified_accuracy,
    check_alphas,
    lipschitz_radius,
    logit_lipschitz_radius,
    smoothing_lipschitz_constant,
    smoothing_radius,
)
from mixzoo.certify.report import FILES, CertCurve, CertifyResult
from mixzoo.certify.smoothing import SmoothingSettings, check_options, minimum_samples, smoothed_estimate
from mixzoo.core.cache import check_writable
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.core.machine import run_record
from mixzoo.core.paths import check_output, json_with
from mixzoo.core.progress import next_phase
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.zoo.data import load_dataset, model_options
from mixzoo.zoo.pairs import check_device, check_model_fits, resolve_model

__all__ = ["EstimateSettings", "SmoothingSettings", "abc_probabilities", "certify", "declared_lipschitz",
           "mixture_clean_accuracy"]


def mixture_clean_accuracy(abc_probs: torch.Tensor | None, rbc_probs: torch.Tensor, labels: torch.Tensor,
                           alphas: torch.Tensor) -> torch.Tensor:
    """``(A,)`` accuracy of ``argmax((1 - alpha) p_g + alpha p_h)`` for every alpha (Bai et al. 2024b, Eq. 3.4 at the
    clean images), from the two models' (n, c) probabilities; used to match a mixture's clean accuracy (App. A.2)."""
    a = alphas.to(rbc_probs.device, torch.float64)[:, None, None]  # any device: the probabilities' own
    mix = a * rbc_probs.to(torch.float64)[None]
    if abc_probs is not None:
        mix = mix + (1 - a) * abc_probs.to(torch.float64)[None]
    return (mix.argmax(2) == labels.to(mix.device)[None]).to(torch.float64).mean(1).cpu()


def abc_probabilities(abc: nn.Module, images: torch.Tensor, temperature: float = 0.0,
                      batch_size: int = 1000) -> torch.Tensor:
    """The ABC's (n, c) probabilities at temperature T (0: one-hot of its prediction, the hard max of Bai et al. 2024b,
    App. A.2)."""
    with torch.no_grad():
        logits = torch.cat([abc(images[i:i + batch_size]).float() for i in range(0, len(images), batch_size)])
    if temperature == 0:  # hard max (Bai et al. 2024a, Sec. 3.1, Bai et al. 2024b, App. A.2)
        return nn.functional.one_hot(logits.argmax(1), logits.shape[1]).to(torch.float64)
    return (logits.double() / temperature).softmax(1)


def _grid(radii: list[float] | None, radius: torch.Tensor) -> torch.Tensor:
    if radii is not None:
        grid = torch.tensor(sorted(set(float(r) for r in radii)), dtype=torch.float64)
        if grid.numel() == 0 or bool((grid < 0).any()) or not bool(torch.isfinite(grid).all()):
            raise InputError("radii must be finite numbers >= 0, e.g. --radii 0,0.25,0.5")
        return grid
    finite = radius[torch.isfinite(radius) & (radius > 0)]
    top = float(finite.max()) if finite.numel() else 0.0
    return torch.linspace(0.0, top * 1.02, 26, dtype=torch.float64) if top > 0 else torch.zeros(1, dtype=torch.float64)


def _label(alpha: float, what: str) -> str:
    return f"RBC alone ({what})" if alpha == 1.0 else f"mixture alpha={alpha:g} ({what})"


@dataclass(frozen=True)
class EstimateSettings:
    """The App. C.3 estimate (Bai et al. 2024b): local Lipschitz constants found by PGD with ``steps`` steps within
    each radius of ``eps``; labelled "estimated", never a certificate."""

    eps: tuple[float, ...] = ()
    steps: int = 20


@dataclass(frozen=True)
class _Inputs:
    """What the certificates of one :func:`certify` call are computed on: the RBC (and its registry entry), the
    evaluation data (on the device), the alphas, the ABC's probabilities, the l2/linf norm and the run settings."""

    rbc: nn.Module
    spec: Any
    data: Any
    images: torch.Tensor
    labels: torch.Tensor
    alphas: torch.Tensor
    abc_probs: torch.Tensor | None
    norm: str
    run: RunSettings


RawCurve = tuple[str, float, str, torch.Tensor, torch.Tensor, float]  # label, alpha, bound, radius, correct, clean


def _curves(alpha_t: torch.Tensor, correct: torch.Tensor, clean: torch.Tensor,
            *bounds: tuple[str, str, torch.Tensor]) -> list[RawCurve]:
    """Per alpha of ``alpha_t``, in order, one curve per ``(what, bound, radii)`` of ``bounds``."""
    return [(_label(a, what), a, bound, radii[k], correct, float(clean[k]))
            for k, a in enumerate(alpha_t.tolist()) for what, bound, radii in bounds]


def _pair(card: Any, s: RunSettings, alphas: list[float] | None
          ) -> tuple[Any, nn.Module, nn.Module | None, torch.Tensor, float | None]:
    """The card (loaded), the RBC and ABC (the settings' replacing the card's), the alphas to certify (the card's,
    ``alphas`` and 1, descending) and the card's ABC temperature; one-line errors for a missing model."""
    abc, rbc, device, allow_unsafe = s.abc, s.rbc, s.device, s.allow_unsafe
    wanted = [float(a) for a in (alphas or [])]
    card_temperature = None
    if card is not None:
        from mixzoo.zoo.pairs import card_model

        if not isinstance(card, MixCard):
            card = MixCard.load(card)
        card_alpha, card_temperature = card.mixing_method.certified_mixture(card)
        wanted.append(float(card_alpha))
        rbc = card_model(card, "rbc", rbc, device=device, allow_unsafe=allow_unsafe)
        abc = card_model(card, "abc", abc, device=device, allow_unsafe=allow_unsafe)
    if rbc is None:
        raise InputError("certify needs a card or --rbc NAME (and --abc NAME with --alpha for a mixture)")
    alpha_t = check_alphas(sorted(set(wanted) | {1.0}, reverse=True))
    if abc is None and bool((alpha_t < 1).any()):
        raise InputError("an alpha below 1 mixes in an ABC; pass --abc NAME (or a card)")
    rbc_m = resolve_model(rbc, device, allow_unsafe)
    abc_m = resolve_model(abc, device, allow_unsafe) if abc is not None else None
    return card, rbc_m, abc_m, alpha_t, card_temperature


def certify(card: Any = None, settings: RunSettings | None = None, *, alphas: list[float] | None = None,
            radii: list[float] | None = None, dataset: str | None = None, split: str = "evaluation",
            smoothing: SmoothingSettings | None = None, temperature: float | None = None,
            estimate: EstimateSettings | Sequence[float] | None = None, out: str | Path | None = None,
            **changes: Any) -> CertifyResult:
    """Certified accuracy of the RBC alone (alpha = 1) and of each mixture, over a radius grid.

    ``card``: a mix card (file, name or :class:`~mixzoo.core.card.MixCard`) whose method mixes probabilities with a
    constant alpha (others raise a one-line explanation); its alpha is certified, plus any ``alphas`` given.
    Of the :class:`~mixzoo.core.settings.RunSettings` (default: 500 images, 1000 per forward batch, l2; keyword
    arguments named after its fields change them) this uses ``abc`` / ``rbc`` (without a card they name the pair;
    ``abc`` is needed when an alpha < 1 is asked for), ``norm`` (``l2`` or ``linf``), ``n``, ``batch_size``,
    ``seed``, ``device``, ``data_dir``, ``allow_unsafe`` and ``progress``. ``smoothing`` sets the Monte Carlo
    certification of a randomized-smoothing RBC (:class:`SmoothingSettings`; hard votes by default); an RBC whose
    registry entry declares a Lipschitz constant is certified deterministically from it (no Monte Carlo);
    ``estimate`` (:class:`EstimateSettings`, or just its radii) adds App. C.3 estimated curves at those radii
    (labelled "estimated"). ``radii`` defaults to 26 points from 0 to the largest certified radius. ``out`` gets
    certify.json, certify.md, certify.png (and estimated.png).
    """
    est = estimate if isinstance(estimate, EstimateSettings) else EstimateSettings(tuple(map(float, estimate or ())))
    s = settings_of(settings, changes, n=500, batch_size=1000)
    sm = smoothing if smoothing is not None else SmoothingSettings()
    n, device = s.n, s.device
    norm = (s.norm or "l2").lower()
    t0 = time.perf_counter()
    check_device(device)
    if out is not None:  # refused before the (long) Monte Carlo: what could not be written
        check_writable(out, directory=True, what="certify output directory")
        check_output(out, directory=True, files={name: json_with("settings", "certified") if name == "certify.json"
                                                 else None for name in FILES})
    if norm not in ("l2", "linf"):
        raise InputError(f"unknown norm {norm!r}; certify takes l2 or linf")
    if not isinstance(n, int) or n < 1:
        raise InputError(f"n must be a positive number of images, got {n!r}")
    card, rbc_m, abc_m, alpha_t, card_temperature = _pair(card, s, alphas)
    spec = getattr(rbc_m, "spec", None)
    sigma = sm.sigma if sm.sigma is not None else getattr(spec, "smoothing_sigma", None)
    if sigma is not None and norm != "l2":
        raise InputError("randomized smoothing certifies l2 radii (Bai et al. 2024b, Thm A.2); pass --norm l2")
    if temperature is None:
        temperature = card_temperature if card_temperature is not None else 0.0
    name = dataset or getattr(spec, "dataset", None) or (card.dataset if card is not None else None)
    if not name:
        raise InputError("the RBC has no registry entry naming its dataset; pass --dataset NAME")
    data = load_dataset(name, split, n=n, root=s.data_dir, **model_options(rbc_m, abc_m))
    check_model_fits(rbc_m, data, "RBC")
    if abc_m is not None:
        check_model_fits(abc_m, data, "ABC")
    images, labels = data.images.to(device), data.labels.to(device)
    if abc_m is not None:
        next_phase()  # the phases of mixzoo.certify.plan.plan_certify: the ABC, the RBC (or its smoothing), estimates
    abc_probs = abc_probabilities(abc_m, images, temperature, s.batch_size) if abc_m is not None else None
    notes: list[str] = []
    settings: dict[str, Any] = {
        "rbc": getattr(spec, "name", type(rbc_m).__name__), "abc": getattr(getattr(abc_m, "spec", None), "name", None),
        "alphas": alpha_t.tolist(), "norm": norm, "mode": "randomized smoothing" if sigma is not None else "Lipschitz",
        "n": len(data), "dataset": name, "split": split, "abc_temperature": temperature, "seed": s.seed,
        "card": str(getattr(card, "path", "") or "") or None}
    inputs = _Inputs(rbc_m, spec, data, images, labels, alpha_t, abc_probs, norm, s)
    next_phase()
    if sigma is not None:
        curves_raw = _smoothing_curves(inputs, float(sigma), sm, settings, notes)
    else:
        curves_raw, (probs, correct, clean) = _lipschitz_curves(inputs, settings, notes)
        if est.eps:
            notes.append("estimated curves (App. C.3) use local Lipschitz constants found by PGD within each radius;"
                         " an attack can miss the maximum, so they are NOT certificates.")
    grid = _grid(radii, torch.stack([c[3] for c in curves_raw]))
    curves = [_curve(label, a, kind, r, ok, clean_a, grid) for label, a, kind, r, ok, clean_a in curves_raw]
    if sigma is None and est.eps:
        next_phase()
        curves += _estimated(inputs, probs, correct, clean, est)
    settings["seconds"] = time.perf_counter() - t0
    result = CertifyResult(settings, curves, notes, run_record(device), labels.tolist())
    if out is not None:
        result.save(out)
    return result


def _smoothing_curves(inputs: _Inputs, sigma: float, sm: SmoothingSettings, settings: dict[str, Any],
                      notes: list[str]) -> list[RawCurve]:
    """Thm A.2 and Thm 3.5 curves of a randomized-smoothing RBC from its Monte Carlo bounds (Bai et al. 2024b,
    App. A.2); records its settings in ``settings`` and its notes in ``notes``."""
    samples, selection_samples, confidence, kind = sm.samples, sm.selection_samples, sm.confidence, sm.kind
    alpha_t, images, labels, s = inputs.alphas, inputs.images, inputs.labels, inputs.run
    n = len(inputs.data)
    check_options(sigma, samples, confidence, kind)
    smallest = float(alpha_t.min())
    if smallest == 0.5:
        raise InputError("alpha 0.5 certifies nothing with a smoothed RBC (Thm A.2 needs Phi^-1(p/2) >"
                         " Phi^-1(q/2 + 1/2), impossible for p <= 1); pass alphas above 0.5")
    with torch.no_grad():
        classes = int(inputs.rbc(images[:1]).shape[1])
    need = minimum_samples(classes, confidence, kind, smallest)
    if samples < need:
        raise InputError(f"{samples} Monte Carlo samples cannot certify anything at confidence {confidence:g}"
                         f" and alpha {smallest:g} (even a unanimous vote); use --samples {need} or more")
    est = smoothed_estimate(inputs.rbc, images, replace(sm, sigma=sigma), seed=s.seed, batch_size=s.batch_size,
                            progress=s.progress)
    correct = (est.top == labels) & ~est.abstain
    lip = smoothing_lipschitz_constant(sigma)
    bounds2 = torch.stack([est.p_top_lower, est.p_other_upper], 1)
    r_lip = lipschitz_radius(bounds2, lip, alpha_t, top=torch.zeros(n, dtype=torch.long))
    r_rs = smoothing_radius(est.p_top_lower, est.p_other_upper, sigma, alpha_t)
    r_lip[:, est.abstain], r_rs[:, est.abstain] = -math.inf, -math.inf
    clean = mixture_clean_accuracy(inputs.abc_probs, est.mean, labels, alpha_t)
    curves = _curves(alpha_t, correct, clean, ("Thm A.2", "smoothing", r_rs), ("Thm 3.5", "smoothing-lipschitz", r_lip))
    settings.update(sigma=sigma, samples=samples, selection_samples=selection_samples,
                    confidence=confidence, smoothing=kind, lipschitz_constant=lip)
    notes.append(f"randomized smoothing, sigma {sigma:g}, {kind} votes: {samples} Monte Carlo samples per"
                 f" image ({selection_samples} more to choose the class), bounds jointly valid with probability"
                 f" {confidence:g} per image; the RBC abstains on {int(est.abstain.sum())} of {n} images.")
    notes.append(f"the clean column of a smoothed classifier is its Monte Carlo mean prediction (an estimate)."
                 f" Lipschitz constant of each smoothed class probability sqrt(2/(pi sigma^2)) = {lip:.4g}.")
    return curves


def _lipschitz_curves(inputs: _Inputs, settings: dict[str, Any], notes: list[str]
                      ) -> tuple[list[RawCurve], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Curves of a Lipschitz RBC from one forward pass: its declared constant (checked against the weights) or the
    provable bound of its layers (Thm 3.5); records them in ``settings`` and ``notes``. Also returns the RBC's
    probabilities, which images it gets right and the mixtures' clean accuracy (for the App. C.3 estimate)."""
    rbc_m, spec, data, labels, alpha_t, norm = (inputs.rbc, inputs.spec, inputs.data, inputs.labels, inputs.alphas,
                                                inputs.norm)
    images, batch_size = inputs.images, inputs.run.batch_size
    with torch.no_grad():
        logits = torch.cat([rbc_m(images[i:i + batch_size]).float() for i in range(0, len(data), batch_size)])
    probs = logits.double().softmax(1)
    correct = probs.argmax(1) == labels
    clean = mixture_clean_accuracy(inputs.abc_probs, probs, labels, alpha_t)
    declared = dict(getattr(spec, "lipschitz", None) or {})
    if declared:
        constant, checked = declared_lipschitz(rbc_m, spec, tuple(data.input_size))
        radius = logit_lipschitz_radius(logits, constant, alpha_t)
        if norm == "linf":
            radius = radius / math.sqrt(math.prod(data.input_size))
        curves = _curves(alpha_t, correct, clean, ("Lipschitz logits", "lipschitz-logits", radius))
        settings.update(lipschitz={"declared": declared, "constant": constant, "layer_norm_product": checked,
                                   "kind": "declared by the architecture, checked against the weights"})
        notes.append(f"the registry declares Lip_l2(logits) <= {constant:g} for {settings['rbc']}; the product"
                     f" of its exact layer norms is {checked:.6g} (checked <= the declared constant). Radii:"
                     " logit margin / (sqrt(2) L) alone, Lemma 3.2 through the softmax for mixtures"
                     f"{'; l-inf radii are l2 radii / sqrt(dim)' if norm == 'linf' else ''}.")
    else:
        bound = lipschitz_bound(rbc_m, tuple(data.input_size), norm)
        radius = lipschitz_radius(probs, bound.probs, alpha_t)
        curves = _curves(alpha_t, correct, clean, ("Thm 3.5, provable bound", "lipschitz", radius))
        settings.update(lipschitz=bound.to_dict())
        notes += _loose_bound_notes(bound, probs, correct, spec, norm)
    return curves, (probs, correct, clean)


def declared_lipschitz(model: nn.Module, spec: Any, input_size: tuple[int, int, int],
                       rtol: float = 1e-3) -> tuple[float, float]:
    """The l2 Lipschitz constant of ``model``'s logits that its registry entry declares (``lipschitz.constant``,
    for [0, 1] images to logits), and the product of its exact layer norms (:func:`lipschitz_bound`), which must
    not exceed it by more than ``rtol``: weights that do not keep the declared constant raise :class:`InputError`
    instead of certifying radii they do not have. Returns ``(constant used, layer-norm product)``: the larger of the
    two, so float round-off in the exported weights never shrinks the bound."""
    declared = dict(getattr(spec, "lipschitz", None) or {})
    if declared.get("norm") != "l2" or not isinstance(declared.get("constant"), int | float):
        raise InputError(f"registry entry {getattr(spec, 'name', '?')!r}: lipschitz must be {{constant = L,"
                         " norm = \"l2\"}}")
    constant = float(declared["constant"])
    product = lipschitz_bound(model, input_size, "l2").logits_l2
    if product > constant * (1 + rtol):
        raise InputError(f"{getattr(spec, 'name', 'the RBC')}: its weights have a layer-norm product of"
                         f" {product:.6g}, above the declared Lipschitz constant {constant:g}; re-export the network"
                         " or fix the registry's lipschitz.constant")
    # the architecture's orthogonalisation is iterative: within rtol, the exact product is the sound constant
    return max(constant, product), product


def _curve(label: str, alpha: float, kind: str, radius: torch.Tensor, correct: torch.Tensor, clean: float,
           grid: torch.Tensor) -> CertCurve:
    acc = certified_accuracy(radius[None], correct, grid)[0]
    per = [float(r) if math.isfinite(r) and r >= 0 and ok else None
           for r, ok in zip(radius.tolist(), correct.tolist(), strict=True)]
    return CertCurve(label, alpha, kind, acc.tolist(), clean, per, grid.tolist())


def _loose_bound_notes(bound: Any, probs: torch.Tensor, correct: torch.Tensor, spec: Any, norm: str) -> list[str]:
    """Say with numbers how far a provable bound is from certifying the RBC's own threat model."""
    top2 = probs.topk(2, dim=1).values
    gap = (top2[:, 0] - top2[:, 1])[correct]
    notes = [f"provable bound: Lip_{norm}(softmax(h)_i) <= {bound.probs:.4g} (logits l2 {bound.logits_l2:.4g} ="
             f" product of {len(bound.layers)} layer norms, x sqrt(2)/4"
             f"{', x sqrt(dim) for l-inf' if norm == 'linf' else ''})."]
    eps = getattr(spec, "epsilon", None)
    threat = getattr(spec, "threat_model", None)
    if gap.numel() and eps and threat and threat.lower() == norm:
        median_gap = float(gap.median())
        need = median_gap / (2 * eps)
        notes.append(f"at the RBC's own radius {eps:g} ({threat}) the median correct image (top-2 probability gap"
                     f" {median_gap:.3f}) would need Lip <= {need:.3g}, {bound.probs / need:.3g}x smaller than"
                     " this bound: a product of layer norms is far too loose to certify it there.")
    return notes


def _estimated(inputs: _Inputs, probs: torch.Tensor, correct: torch.Tensor, clean: torch.Tensor,
               estimate: EstimateSettings) -> list[CertCurve]:
    """App. C.3: at each eps, "robust within eps" when Eq. 3.5 with the local constants gives r >= eps."""
    rbc, images, alphas, norm, steps = inputs.rbc, inputs.images, inputs.alphas, inputs.norm, estimate.steps
    batch_size, seed = inputs.run.batch_size, inputs.run.seed
    eps_t = torch.tensor(sorted(float(e) for e in estimate.eps), dtype=torch.float64)
    if bool((eps_t <= 0).any()):
        raise InputError("estimate radii must be positive, e.g. --estimate 0.05,0.1")
    chunk = max(1, batch_size // probs.shape[1])
    hit = torch.zeros(len(alphas), len(images), len(eps_t), dtype=torch.bool)
    for k, eps in enumerate(eps_t.tolist()):
        gen = torch.Generator(device=images.device).manual_seed(seed * 7919 + k)
        local = torch.cat([estimate_local_lipschitz(rbc, images[i:i + chunk], eps, norm, steps,
                                                    top=probs[i:i + chunk].argmax(1), generator=gen)
                           for i in range(0, len(images), chunk)]).double()
        r = lipschitz_radius(probs, local.cpu(), alphas)
        hit[:, :, k] = r >= eps
    at_zero = lipschitz_radius(probs, 1.0, alphas) >= 0  # Lemma 3.2's margin at the clean image itself
    hit = torch.cat([at_zero[:, :, None], hit], 2) & correct[None, :, None]
    acc = hit.double().mean(1)  # (A, 1 + len(eps))
    grid = [0.0] + eps_t.tolist()
    return [CertCurve(_label(a, "estimated, App. C.3"), a, "estimated", acc[k].tolist(), float(clean[k]), [], grid)
            for k, a in enumerate(alphas.tolist())]
