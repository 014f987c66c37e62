"""Training the built-in zoo: standard, PGD adversarial training and TRADES, deterministic on a CPU.

No pretrained weights can be downloaded offline, so mixzoo trains its own small accurate / robust pairs on
Fashion-MNIST and scikit-learn digits. Everything is seeded: ``torch.manual_seed`` for the initialisation, a
seeded generator for the data order, augmentation and attack starts, and deterministic algorithms where torch
has them, so the same recipe on the same machine writes the same bytes.

What a step trains on (PGD, Madry et al. 2018; TRADES, Zhang et al. 2019, whose larger margins on robust examples
are what the RBC of a mixed classifier needs, Bai et al. 2024a, App. D.6; MART, HAT, adversarial weight
perturbation) is :mod:`mixzoo.training.objectives`; what the registry records about the result
(:func:`evaluate_model`) is :mod:`mixzoo.training.model_metrics`; the recipes are :mod:`mixzoo.training.recipes`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.training.model_metrics import evaluate_model, margin_metrics, model_logits
from mixzoo.training.objectives import (
    _lr_factor,
    _objective,
    _weight_average,
    augment_batch,
    shift_weights,
    weight_perturbation,
)
from mixzoo.training.recipes import RECIPES, Recipe, get_recipe
from mixzoo.training.weights import _state_sha256, default_weights_dir, save_weights
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import Normalize


def build_network(recipe: Recipe) -> nn.Module:
    """The bare network (no normalization) of a recipe, from the architectures plugins provide (hook
    ``mixzoo_architectures``; the built-in zoo's are in ``plugins/zoo_arch.py``)."""
    from mixzoo.core.plugins import lookup

    return lookup("architecture", recipe.arch)(**dict(recipe.arch_kwargs))


@dataclass
class TrainResult:
    """What :func:`train_model` produced: the weights file, its sha256, timings and measured accuracies."""

    recipe: Recipe
    path: Path | None
    sha256: str
    seconds: float
    metrics: dict[str, float]
    metrics_eval500: dict[str, float]
    state_dict: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)
    logits: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)

    def summary(self) -> str:
        m = self.metrics
        robust = f", PGD-20 {100 * m['pgd']:.2f}%" if "pgd" in m else ""
        return (f"{self.recipe.name}: clean {100 * m.get('clean', float('nan')):.2f}%{robust}"
                f" on {int(m.get('n', 0))} evaluation images; trained in {self.seconds:.0f} s; sha256 {self.sha256}")

    __str__ = summary


def shipped_sha256(path: Path) -> str | None:
    """The sha256 a registry zoo entry pins for the weights file ``path`` (a shipped file), or None."""
    from mixzoo.core.registry import list_models

    target = path.resolve()
    for spec in list_models():
        file = spec.source.get("file")
        if spec.source.get("kind") != "zoo" or not spec.sha256 or not isinstance(file, str):
            continue
        where = Path(file).expanduser()
        if (where if where.is_absolute() else default_weights_dir() / where).resolve() == target:
            return spec.sha256
    return None


def train_model(name_or_recipe: str | Recipe, out_dir: str | Path | None = None, *, save: bool = True,
                evaluate: bool = True, eval_n: int | None = None, data_root: str | None = None,
                progress: bool = True, deterministic: bool = True, device: str = "cpu",
                seed: int | None = None) -> TrainResult:
    """Train a zoo model from its recipe on the CPU and (``save``) write ``OUT_DIR/NAME.safetensors`` and
    ``NAME.sha256`` atomically; ``out_dir`` defaults to ``plugins/weights``.

    With ``evaluate`` the clean and PGD-20 accuracy (robust recipes) and the RBC margin statistics of
    :func:`evaluate_model` are measured on the first ``eval_n`` evaluation images (all if ``None``) and on the
    first 500 (what the tests re-check). The training split never includes calibration images. ``device``
    other than ``"cpu"`` is for exploring recipes quickly; the shipped weights are trained on the CPU.
    ``seed`` overrides the recipe's seed (the weights then differ from the shipped ones).

    Shipped, sha256-pinned weights are never replaced by different bytes through the default ``out_dir``: a
    changed recipe or seed is refused before training, and a result whose sha256 differs from the registry's
    (another machine or torch) is kept under ``~/.cache/mixzoo/trained/`` instead and raises :class:`InputError`.
    An explicit ``out_dir`` (also ``plugins/weights``) is written as asked.
    """
    recipe = get_recipe(name_or_recipe)
    if seed is not None and seed != recipe.seed:
        recipe = recipe.replace(seed=seed)
    pinned = _check_destination(recipe, out_dir, save)
    train = load_dataset(recipe.dataset, "train", n=recipe.train_n, root=data_root)
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    try:
        model, seconds = _fit(recipe, train, device, progress)
    finally:
        torch.use_deterministic_algorithms(prev_det)
    network = model[1]
    if hasattr(network, "export_vanilla"):  # a re-parametrised network ships its plain form (checked equal there)
        network = network.export_vanilla(train.images[:256].cpu()).to(device)
        model = nn.Sequential(model[0], network).eval()
    state = {k: v.detach().cpu().contiguous().clone() for k, v in network.state_dict().items()}
    metrics, metrics500, logits = _evaluate_trained(model, recipe, eval_n, data_root, progress) if evaluate \
        else ({}, {}, {})
    path, sha = None, _state_sha256(state, recipe)
    if pinned is not None and sha != pinned:
        from mixzoo.core.paths import cache_folder

        kept, _ = save_weights(state, cache_folder() / "trained" / sha[:12], recipe)
        raise InputError(f"trained {recipe.name} has sha256 {sha[:12]}..., not the {pinned[:12]}... the registry pins"
                         f" for the shipped {default_weights_dir() / recipe.file} (this machine, device or torch does"
                         f" not reproduce it bit for bit), so that file was left alone and the new weights were saved"
                         f" to {kept}; pass --out DIR (out_dir) to write such weights where you choose")
    if save:
        path, sha = save_weights(state, Path(out_dir) if out_dir is not None else default_weights_dir(), recipe)
    return TrainResult(recipe, path, sha, seconds, metrics, metrics500, state, logits)


def _check_destination(recipe: Recipe, out_dir: str | Path | None, save: bool) -> str | None:
    """Refuse before the (long) training what could not be written: an unwritable or foreign ``out_dir``, or a
    changed recipe or seed that would replace the shipped, sha256-pinned weights. Returns the pinned sha256 the
    result must have (``None`` when nothing shipped is in the way)."""
    if not save:
        return None
    from mixzoo.core.cache import check_writable
    from mixzoo.core.paths import check_output, holding, is_safetensors

    check_writable(out_dir or default_weights_dir(), directory=True, what="weights directory")
    check_output(out_dir or default_weights_dir(), option="--out-dir", directory=True,
                 files={recipe.file: is_safetensors, f"{recipe.name}.sha256": holding(recipe.file.encode())})
    if out_dir is not None:
        return None
    shipped_path = default_weights_dir() / recipe.file
    pinned = shipped_sha256(shipped_path)
    shipped = RECIPES.get(recipe.name)
    changes = [] if pinned is None else ["recipe"] if shipped is None else [
        f.name for f in dataclasses.fields(Recipe) if getattr(recipe, f.name) != getattr(shipped, f.name)]
    if changes:  # the fields in which recipe differs from the built-in one of its name
        what = f"seed {recipe.seed}" if changes == ["seed"] else f"changed {', '.join(changes)}"
        raise InputError(f"{recipe.name} with {what} would not reproduce the shipped weights {shipped_path},"
                         " which the registry pins by sha256; pass --out DIR (out_dir) to write them elsewhere")
    return pinned


def _fit(recipe: Recipe, train: Any, device: str, progress: bool) -> tuple[nn.Module, float]:
    """The recipe's training run, seeded from ``recipe.seed`` (model init, data order and augmentation, attack
    starts): the trained model (its weight average when the recipe keeps one) in eval mode, and the seconds."""
    torch.manual_seed(recipe.seed)
    gen = torch.Generator().manual_seed(recipe.seed)  # data order and augmentation
    attack_gen = torch.Generator(device=device).manual_seed(recipe.seed + 1)  # attack starts
    network = build_network(recipe)
    if hasattr(network, "training_form"):  # trained re-parametrised, shipped plain (see export_vanilla)
        network = network.training_form()
    model = nn.Sequential(Normalize(recipe.mean, recipe.std), network).to(device)
    images, labels = train.images.to(device), train.labels.to(device)
    if recipe.optimizer == "adam":
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=0.9, nesterov=True,
                              weight_decay=recipe.weight_decay)
    averaged = _weight_average(model, recipe.ema)
    helper = None
    if recipe.method == "hat":
        from mixzoo.zoo.models import load_model

        helper = load_model(recipe.helper, device=device)
    n = len(train)
    per_epoch = math.ceil(n / recipe.batch_size)
    total = max(1, round(recipe.epochs * per_epoch))
    t0 = time.perf_counter()
    with progress_bar(progress) as bar:
        task = bar.add_task(f"train {recipe.name}", total=total)
        order = torch.empty(0, dtype=torch.long)
        for step in range(total):
            if step % per_epoch == 0:
                order = torch.randperm(n, generator=gen)
            i = step % per_epoch
            idx = order[i * recipe.batch_size:(i + 1) * recipe.batch_size].to(device)
            x, y = images[idx], labels[idx]
            if recipe.augment:
                x = augment_batch(x, recipe.crop_padding, gen)
            ramp = min(1.0, (step + 1) / (recipe.eps_warmup * total)) if recipe.eps_warmup > 0 else 1.0
            for group in opt.param_groups:
                group["lr"] = recipe.lr * _lr_factor(step, total, recipe.warmup)
            model.train()
            train_eps = recipe.eps if recipe.train_eps is None else recipe.train_eps
            objective = _objective(model, recipe, x, y, train_eps * ramp, attack_gen, helper)
            # AWP: the gradient at the worst nearby weights, applied to the unperturbed ones
            shift = weight_perturbation(model, objective(), recipe.awp) if recipe.awp > 0 else {}
            shift_weights(model, shift, 1.0)
            loss = objective()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            shift_weights(model, shift, -1.0)
            opt.step()
            if averaged is not None:
                averaged.update_parameters(model)
            bar.advance(task)
    seconds = time.perf_counter() - t0
    model = averaged.module if averaged is not None else model
    return model.eval(), seconds


def _evaluate_trained(model: nn.Module, recipe: Recipe, eval_n: int | None, data_root: str | None,
                      progress: bool) -> tuple[dict[str, float], dict[str, float], dict[str, torch.Tensor]]:
    """Clean and PGD-20 accuracy (robust recipes) with the RBC margin statistics on the first ``eval_n`` evaluation
    images, the same on the first 500, and the logits they came from."""
    evaluation = load_dataset(recipe.dataset, "evaluation", n=eval_n, root=data_root)
    eps = recipe.eps if recipe.robust else None
    clean_logits, adv_logits = model_logits(model, evaluation, eps=eps, progress=progress)
    metrics = margin_metrics(evaluation.labels, clean_logits, adv_logits)
    logits = {"clean": clean_logits, "labels": evaluation.labels}
    if adv_logits is not None:
        logits["pgd"] = adv_logits
    if eps:
        metrics["eps"] = eps
    return metrics, evaluate_model(model, evaluation.subset(500), eps=None), logits


def registry_entry(result: TrainResult, command: str, date: str, machine: str = "2-core CPU",
                   file: str | None = None) -> str:
    """The ``[models.NAME]`` TOML table for a trained zoo model (paste into the zoo section of mixzoo/registry.toml).

    ``reported`` holds fractions: ``clean`` / ``pgd20`` on the whole evaluation split, ``clean_eval500`` on its
    first 500 images (what ``tests/zoo/test_zoo.py`` re-measures). ``file`` overrides ``source.file`` (default: the
    recipe's file name, relative to ``plugins/weights``)."""
    r, m = result.recipe, result.metrics
    arch_kwargs = dict(r.arch_kwargs)
    if r.certified:  # the loss temperature scales the shipped logits (calibrated probabilities, constant tau)
        arch_kwargs["logit_scale"] = r.loss_tau
    kwargs = ", ".join(f"{k} = {json.dumps(list(v) if isinstance(v, tuple) else v)}" for k, v in arch_kwargs.items())
    lines = [
        f"[models.{r.name}]",
        f'role = "{"robust" if r.robust or r.noise_sigma > 0 else "accurate"}"',
        f'dataset = "{r.dataset}"',
        "num_classes = 10",
        f"input_size = [1, {r.arch_kwargs.get('input_hw', 28)}, {r.arch_kwargs.get('input_hw', 28)}]",
        f"mean = {list(r.mean)}",
        f"std = {list(r.std)}",
        f'source = {{ kind = "zoo", arch = "{r.arch}", file = "{file or r.file}", kwargs = {{ {kwargs} }} }}',
        f'sha256 = "{result.sha256}"',
    ]
    if r.robust and not r.certified:
        lines += ['threat_model = "Linf"', f"epsilon = {r.eps}"]
    elif r.certified:  # certified in L2 by its Lipschitz constant (epsilon: the radius the margin offset aims at)
        constant = float(getattr(build_network(r.replace(arch_kwargs=arch_kwargs)), "lipschitz_constant", 1.0))
        lines += ['threat_model = "L2"', f"epsilon = {round(r.margin_offset / math.sqrt(2), 4)}",
                  f'lipschitz = {{ constant = {constant}, norm = "l2" }}']
    elif r.noise_sigma > 0:  # robust once smoothed: certified in L2 (epsilon: nominal, the training noise std)
        lines += ['threat_model = "L2"', f"epsilon = {r.noise_sigma}", f"smoothing_sigma = {r.noise_sigma}"]
    rep = [f"clean = {m['clean']:.4f}"]
    if "pgd" in m:
        rep.append(f"pgd20 = {m['pgd']:.4f}")
    rep += [f"clean_eval500 = {result.metrics_eval500['clean']:.4f}", f"n = {int(m['n'])}",
            f'source = "measured by `{command}` on {date}, {machine}"']
    lines.append(f"reported = {{ {', '.join(rep)} }}")
    lines.append(f'description = "{r.description}"')
    return "\n".join(lines) + "\n"
