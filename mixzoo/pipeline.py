"""The main job as library functions: :func:`mix` (calibrate a pair by name) and the cached data it needs.

``mix`` = RBC clean logits + MMAA on LN(RBC) (both cached, per batch, content-addressed) + Algorithm 1 -> MixCard.
The expensive step runs once per (RBC weights, data subset, attack settings); a new beta, clamp or grid reuses it.
Every ``mixzoo`` CLI command is a thin layer over a function here or in :mod:`mixzoo.bench`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.blackbox import is_black_box
from mixzoo.cache import Cache, batched_cached
from mixzoo.errors import InputError
from mixzoo.machine import machine_summary
from mixzoo.models import BaseClassifier, load_model, weight_hash
from mixzoo.progress import progress_bar

DEFAULT_ABC = "fmnist-std"
DEFAULT_RBC = "fmnist-pgd"
# bump when MMAA's behaviour changes so stale cache entries are not reused; 3: the layer norm MMAA attacks is the
# authors' (unbiased variance + 1e-8, mixzoo.transforms.LAYER_NORM_VERSION "ln-2")
ATTACK_CODE_VERSION = "mmaa-3"


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


@dataclass
class MixResult:
    """What :func:`mix` returns: the card, where it was written, and the Fig. 6 summary."""

    card: Any
    path: Path | None
    summary: dict[str, Any]
    seconds: dict[str, float]
    cache_hits: dict[str, bool]


def model_hash(model: nn.Module) -> str:
    """The weight hash a mix card records for ``model`` (its network's weights; see :func:`model_key`)."""
    return model.weight_hash if isinstance(model, BaseClassifier) else weight_hash(model)


def model_key(model: nn.Module) -> str:
    """What a cached result of ``model`` depends on: its weights and the normalisation applied before them.

    Two :class:`BaseClassifier` s with one network but another mean/std give other logits, so cache keys (logits,
    MMAA, evaluations) use this, not :func:`model_hash`, which identifies the weights alone as cards record them.
    A plain module's state dict already holds any normalisation buffers it has.
    """
    if isinstance(model, BaseClassifier):
        return f"{model.weight_hash}+{weight_hash(model.normalize)}"
    return weight_hash(model)


def model_name(model: nn.Module) -> str:
    return model.spec.name if isinstance(model, BaseClassifier) else type(model).__name__


def resolve_model(model: str | nn.Module, device: str, allow_unsafe: bool = False) -> nn.Module:
    return load_model(model, device=device, allow_unsafe=allow_unsafe) if isinstance(model, str) else model


def check_model_fits(model: nn.Module, data: Any, role: str = "model") -> None:
    """A one-line error when ``model`` cannot classify ``data``: compares the registry's input size and class
    count, or for a plain module, what one image through it gives."""
    name = model_name(model)
    spec = getattr(model, "spec", None)
    if spec is not None:
        size, classes = tuple(spec.input_size), spec.num_classes
    else:
        try:
            with torch.no_grad():
                out = model(data.images[:1].to(model_device(model)))
        except RuntimeError as exc:
            reason = str(exc).splitlines()[0]
            raise InputError(f"{role} {name!r} cannot take {data.name} images of shape {data.input_size} ({reason});"
                             " choose a matching dataset or model") from None
        size, classes = data.input_size, out.shape[-1] if isinstance(out, torch.Tensor) else data.num_classes
    if tuple(data.input_size) != size:
        raise InputError(f"dataset {data.name!r} gives images of shape {tuple(data.input_size)} but {role} {name!r}"
                         f" expects {size}; choose a matching dataset")
    if classes != data.num_classes:
        raise InputError(f"{role} {name!r} has {classes} classes but {data.name!r} has {data.num_classes}; choose a"
                         " matching dataset")


def card_model(card: Any, role: str, given: str | nn.Module | None = None, *, device: str = "cpu",
               allow_unsafe: bool = False) -> nn.Module:
    """The ``role`` ("abc" or "rbc") model a mix card was calibrated for: ``given`` when not None (name or module),
    else loaded by the name the card recorded. A card made by :func:`mixzoo.calibrate` from bare logits records no
    names, and one made for unregistered modules records their class names: both need the model passed in."""
    from mixzoo.errors import UnknownNameError

    name = given if given is not None else (getattr(card, role) or {}).get("name")
    if name is None:
        raise InputError(f"the mix card records no {role.upper()} name; pass {role}=<name or model>")
    try:
        return resolve_model(name, device, allow_unsafe)
    except UnknownNameError as exc:
        if given is not None:
            raise
        raise InputError(f"the mix card's {role.upper()} {name!r} is not a registry name ({exc}); pass"
                         f" {role}=<name or model>, or --{role} on the command line") from None


def card_dataset(card: Any, rbc: nn.Module) -> str:
    """The data set a mix card was calibrated on: the card's record, else the one its RBC's registry entry names."""
    name = card.dataset or getattr(getattr(rbc, "spec", None), "dataset", None)
    if not name:
        raise InputError("the mix card names no dataset and its RBC has no registry entry that does; add"
                         " dataset = \"NAME\" to the card")
    return name


def card_models(card: Any, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None, *,
                device: str = "cpu", allow_unsafe: bool = False) -> tuple[nn.Module, nn.Module]:
    """The ABC and RBC of a mix card (:func:`card_model` for each)."""
    return (card_model(card, "abc", abc, device=device, allow_unsafe=allow_unsafe),
            card_model(card, "rbc", rbc, device=device, allow_unsafe=allow_unsafe))


def load_mixed(card: Any, *, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None,
               device: str = "cpu", gradient: str = "exact", allow_unsafe: bool = False) -> Any:
    """The deployable MixedNUTS classifier of a mix card (a :class:`~mixzoo.card.MixCard` or its file), with its
    ABC and RBC loaded by the names the card recorded (see :func:`card_models`), on ``device``, in eval mode.

    Returns a :class:`~mixzoo.mixing.MixedClassifier`: [0, 1] images in, log-probabilities out (paper Eq. 5).
    Warns when a model's weights differ from those the card was calibrated for.
    """
    from mixzoo.card import MixCard
    from mixzoo.mixing import MixedClassifier

    check_device(device)
    if not isinstance(card, MixCard):
        card = MixCard.load(card)
    abc_m, rbc_m = card_models(card, abc, rbc, device=device, allow_unsafe=allow_unsafe)
    return MixedClassifier.from_card(card, abc_m, rbc_m, gradient=gradient, stacklevel=3).eval()


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device, or a one-line :class:`InputError` naming the fix (bad name, no CUDA here)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"--device {device!r} is not a torch device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: this machine has no usable CUDA device; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise InputError(f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1};"
                         " use --device cuda or one of those")
    return dev


def model_device(model: nn.Module, default: str | torch.device = "cpu") -> torch.device:
    """Where ``model`` lives (its first parameter or buffer); ``default`` for a model with neither.

    Inputs follow the model rather than a ``device`` argument, so a model loaded elsewhere (a caller's own module,
    a card's models on CUDA) never meets images on another device.
    """
    tensor = next(iter(model.parameters()), None)
    if tensor is None:
        tensor = next(iter(model.buffers()), None)
    return tensor.device if tensor is not None else torch.device(default)


@torch.no_grad()
def _logits(model: nn.Module, images: torch.Tensor, device: str) -> torch.Tensor:
    out = model(images.to(model_device(model, device))).float().cpu()
    if torch.isnan(out).any():
        raise InputError(f"model {model_name(model)!r} returned NaN logits for "
                         f"{int(torch.isnan(out).any(1).sum())} images; check its weights and input range")
    return out


def cached_logits(model: nn.Module, dataset: Any, *, cache: Cache, batch_size: int = 500, device: str = "cpu",
                  progress: bool = True, what: str = "logits") -> torch.Tensor:
    """The model's logits on every image of ``dataset`` (cached by weight hash and data fingerprint)."""
    n = len(dataset.labels)
    key_parts = {"model": model_key(model), "data": dataset.fingerprint, "kind": "logits"}
    from mixzoo.cache import content_key

    key = content_key(key_parts)
    with progress_bar(progress) as bar:
        task = bar.add_task(f"{what} ({model_name(model)})", total=n)
        out = batched_cached(cache, "logits", key, n, batch_size,
                             lambda a, b: {"logits": _logits(model, dataset.images[a:b], device)},
                             {**key_parts, "model_name": model_name(model), "dataset": dataset.name},
                             progress=lambda k: bar.advance(task, k))
    return out["logits"]


def cached_mmaa(rbc: nn.Module, dataset: Any, *, eps: float, norm: str, cache: Cache, n_iter: int = 100,
                n_target_classes: int = 9, n_restarts: int = 1, seed: int = 0, top_k: int | None = None,
                batch_size: int = 250, device: str = "cpu", progress: bool = True,
                transform: Any = None) -> dict[str, torch.Tensor]:
    """MMAA (App. B.1) on LN(RBC) over ``dataset``, cached per batch; returns the RBC's raw ``logits`` at the
    perturbed images and the ``margins`` the attack minimised.

    ``transform`` (a card, or anything with ``s``, ``p``, ``c``, ``clamp``, ``top_k``) attacks the transformed RBC
    h^M(s, p, c) instead, with margins of its softmax (the App. D.9 check, :mod:`mixzoo.approximation`).
    Each batch uses seed ``seed + batch index`` so an interrupted run resumes with identical results.
    """
    from mixzoo.attacks import mmaa
    from mixzoo.cache import content_key

    settings = {"eps": eps, "norm": norm, "n_iter": n_iter, "n_target_classes": n_target_classes,
                "n_restarts": n_restarts, "seed": seed, "top_k": top_k, "batch_size": batch_size,
                "attack_all": False, "code": ATTACK_CODE_VERSION}
    attacked, what = rbc, f"MMAA on LN({model_name(rbc)})"
    if transform is not None:
        from mixzoo.approximation import transformed_rbc

        settings["transform"] = {k: getattr(transform, k) for k in ("s", "p", "c", "clamp", "top_k")}
        attacked = transformed_rbc(rbc, transform)
        what = f"MMAA on M({model_name(rbc)})"
    key_parts = {"model": model_key(rbc), "data": dataset.fingerprint, "attack": settings}
    key = content_key(key_parts)
    n = len(dataset.labels)
    store_images = dataset.images[0].numel() <= 3 * 64 * 64

    # attack_all=False: once a point is misclassified its margin is irrelevant to Algorithm 1 (it is not in the
    # attacked-correct set), so later components skip it as AutoAttack does; still-correct points get every
    # component and the same minimum-margin perturbation (benchmarks/mmaa_speed.md: half the passes).
    def compute(a: int, b: int) -> dict[str, torch.Tensor]:
        where = model_device(rbc, device)
        res = mmaa(attacked, dataset.images[a:b].to(where), dataset.labels[a:b].to(where), eps=eps, norm=norm,
                   n_iter=n_iter, n_target_classes=n_target_classes, n_restarts=n_restarts,
                   seed=seed + a // batch_size, top_k=top_k, batch_size=batch_size, progress=False,
                   attack_all=False, layer_norm=transform is None)
        logits = res.logits
        if transform is not None:  # the record holds h^M's log-probabilities; Algorithm 1 takes raw logits
            with torch.no_grad():
                logits = rbc(res.adv_images)
        out = {"logits": logits.float().cpu(), "margins": res.margins.float().cpu()}
        if store_images:
            out["adv_images"] = res.adv_images.cpu()
        return out

    with progress_bar(progress) as bar:
        task = bar.add_task(what, total=n)
        return batched_cached(cache, "mmaa", key, n, batch_size, compute,
                              {**key_parts, "model_name": model_name(rbc), "dataset": dataset.name},
                              progress=lambda k: bar.advance(task, k))


def _default_attack_setting(rbc: nn.Module, eps: float | None, norm: str | None) -> tuple[float, str]:
    spec = getattr(rbc, "spec", None)
    if eps is None:
        eps = getattr(spec, "epsilon", None)
    if norm is None:
        norm = getattr(spec, "threat_model", None) or "Linf"
    if eps is None:
        raise InputError(f"the RBC {model_name(rbc)!r} records no epsilon; pass --eps")
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps > 0):
        raise InputError(f"epsilon must be a positive finite number, got {eps}")
    return float(eps), norm


def calibration_data(abc: nn.Module | None, rbc: nn.Module, dataset: Any, *, eps: float, norm: str,
                     cache: Cache, n_iter: int = 100, n_target_classes: int = 9, n_restarts: int = 1,
                     seed: int = 0, top_k: int | None = None, batch_size: int = 250, device: str = "cpu",
                     progress: bool = True) -> CalibrationData:
    """RBC clean logits, MMAA attacked logits (and ABC clean logits) on the calibration images, all cached."""
    if len(dataset.labels) == 0:
        raise InputError("the calibration set is empty; use --n-calib > 0")
    t0 = time.perf_counter()
    n_hits = len(cache.hits)
    clean = cached_logits(rbc, dataset, cache=cache, device=device, progress=progress, what="RBC clean logits")
    t1 = time.perf_counter()
    hits = {"rbc_logits": len(cache.hits) > n_hits}
    n_hits = len(cache.hits)
    mm = cached_mmaa(rbc, dataset, eps=eps, norm=norm, cache=cache, n_iter=n_iter,
                     n_target_classes=n_target_classes, n_restarts=n_restarts, seed=seed, top_k=top_k,
                     batch_size=batch_size, device=device, progress=progress)
    t2 = time.perf_counter()
    hits["mmaa"] = len(cache.hits) > n_hits
    abc_logits = None
    if abc is not None:
        abc_logits = cached_logits(abc, dataset, cache=cache, device=device, progress=progress,
                                   what="ABC clean logits")
    t3 = time.perf_counter()
    attack = {"name": "mmaa", "eps": eps, "norm": norm, "n_iter": n_iter, "n_target_classes": n_target_classes,
              "n_restarts": n_restarts, "seed": seed, "top_k": top_k, "batch_size": batch_size}
    return CalibrationData(clean, dataset.labels, mm["logits"], abc_logits, dataset, attack,
                           seconds={"rbc_logits": t1 - t0, "mmaa": t2 - t1, "abc_logits": t3 - t2},
                           cache_hits=hits)


def margin_summary(data: CalibrationData, card: Any) -> dict[str, Any]:
    """Fig. 6 in numbers: median margins of clean-incorrect and attacked-correct RBC outputs, before (LN) and
    after the transform M(s*, p*, c*)."""
    from mixzoo.transforms import confidence_margin, layer_norm, rbc_transform

    clean_wrong = data.clean_logits.argmax(1) != data.labels
    adv_right = data.attacked_logits.argmax(1) == data.labels

    def med(t: torch.Tensor) -> float | None:
        return float(t.median()) if t.numel() else None

    out: dict[str, Any] = {"n_clean_incorrect": int(clean_wrong.sum()), "n_attacked_correct": int(adv_right.sum()),
                           "n": len(data.labels)}
    for stage, fn in (
        ("raw", lambda z: z),
        ("layer_norm", lambda z: layer_norm(z, top_k=card.top_k)),
        ("transformed", lambda z: rbc_transform(z, card.s, card.p, card.c, clamp=card.clamp, top_k=card.top_k)),
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
    n_calib: int = 1000,
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
    """Calibrate MixedNUTS for an ABC/RBC pair by name (paper Algorithm 1) and write the mix card.

    With no names, the built-in Fashion-MNIST pair is used. The RBC's clean logits and its MMAA margins are cached,
    so calling again with another ``beta``, ``clamp`` or ``grid`` takes seconds. ``refit_alpha`` adds a second
    pass that re-chooses alpha on MMAA points of the transformed RBC (:func:`mixzoo.approximation.refit_alpha`).
    ``search="authors"`` runs Algorithm 1 exactly as the authors' code does (see :mod:`mixzoo.calibrate`).
    """
    from mixzoo.calibrate import calibrate, check_settings
    from mixzoo.data import load_dataset, shortfall_note

    check_settings(beta=beta, clamp=clamp, objective=objective, optimizer=optimizer, grid=grid, top_k=top_k,
                   search=search)
    if n_calib <= 0:
        raise InputError(f"--n-calib must be positive, got {n_calib}")
    check_device(device)
    if batch_size <= 0:
        raise InputError(f"--batch-size must be positive, got {batch_size}")
    if out is not None:
        from mixzoo.card import MixCard

        MixCard.check_path(out)
    t0 = time.perf_counter()
    abc_m = resolve_model(abc if abc is not None else DEFAULT_ABC, device, allow_unsafe)
    rbc_m = resolve_model(rbc if rbc is not None else DEFAULT_RBC, device, allow_unsafe)
    abc_spec, rbc_spec = getattr(abc_m, "spec", None), getattr(rbc_m, "spec", None)
    if is_black_box(rbc_m):
        name = rbc_spec.name if rbc_spec is not None else getattr(rbc_m, "name", "the RBC")
        raise InputError(f"RBC {name!r} is a black box (no gradients for MMAA); calibrate it from a white-box"
                         f" surrogate with `mixzoo transfer-params --from CARD --rbc {name}` (App. D.5)")
    if rbc_spec is not None and rbc_spec.role == "accurate":
        swap = (f"; did you mean --abc {rbc_spec.name} --rbc {abc_spec.name}?"
                if abc_spec is not None and abc_spec.role == "robust" else "; pass a robust model as --rbc")
        raise InputError(f"RBC {rbc_spec.name!r} is an accurate (standard) model, not a robust one{swap}")
    if abc_spec is not None and rbc_spec is not None:
        if abc_spec.num_classes != rbc_spec.num_classes:
            raise InputError(f"ABC {abc_spec.name!r} has {abc_spec.num_classes} classes but RBC {rbc_spec.name!r}"
                             f" has {rbc_spec.num_classes}; pick models of the same task")
        if tuple(abc_spec.input_size) != tuple(rbc_spec.input_size):
            raise InputError(f"ABC {abc_spec.name!r} takes images of shape {tuple(abc_spec.input_size)} but RBC"
                             f" {rbc_spec.name!r} takes {tuple(rbc_spec.input_size)}; pick models of the same input")
        if abc_spec.dataset != rbc_spec.dataset and dataset is None:
            raise InputError(f"ABC {abc_spec.name!r} is for {abc_spec.dataset!r} but RBC {rbc_spec.name!r} is for"
                             f" {rbc_spec.dataset!r}; pass --dataset to choose the calibration data")
    known_spec = rbc_spec if rbc_spec is not None else abc_spec  # a plain-module RBC: the registered ABC tells
    dataset = dataset or (known_spec.dataset if known_spec is not None else None)
    if dataset is None:
        raise InputError("cannot tell which dataset to calibrate on; pass --dataset")
    eps, norm = _default_attack_setting(rbc_m, eps, norm)
    data = load_dataset(dataset, "calibration", n=n_calib, root=data_dir)
    check_model_fits(rbc_m, data, "RBC")
    check_model_fits(abc_m, data, "ABC")
    if top_k is not None and top_k > data.num_classes:  # fail now, not after the attack
        raise InputError(f"top_k must lie in [2, {data.num_classes}] (number of classes), got {top_k}")
    cache = Cache(cache_dir, enabled=use_cache)
    t1 = time.perf_counter()
    cdata = calibration_data(abc_m if objective == "relaxed" else None, rbc_m, data, eps=eps, norm=norm,
                             cache=cache, n_iter=n_iter, n_target_classes=n_target_classes,
                             n_restarts=n_restarts, seed=seed, top_k=top_k, batch_size=batch_size, device=device,
                             progress=progress)
    t2 = time.perf_counter()
    abc_correct = None
    if objective == "relaxed":
        abc_correct = cdata.abc_clean_logits.argmax(1) == cdata.labels
    card = calibrate(
        clean_logits=cdata.clean_logits, clean_labels=cdata.labels, attacked_logits=cdata.attacked_logits,
        attacked_labels=cdata.labels, beta=beta, clamp=clamp, top_k=top_k, grid=grid, objective=objective,
        abc_clean_correct=abc_correct, optimizer=optimizer, progress=progress, search=search,
        abc={"name": model_name(abc_m), "weight_hash": model_hash(abc_m)},
        rbc={"name": model_name(rbc_m), "weight_hash": model_hash(rbc_m)},
        dataset=dataset,
        data_info={"split": "calibration", "n": len(data.labels), "fingerprint": data.fingerprint,
                   "source": getattr(data, "source", "")},
        attack_info=cdata.attack,
    )
    if refit_alpha:
        from mixzoo.approximation import refit_alpha as second_pass

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
