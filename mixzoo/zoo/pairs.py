"""An ABC/RBC pair, for any method: models by name or module, checks that they fit the data and each other,
cached logits, the models a card names (:func:`card_models`, :func:`load_mixed`) and a checked pair for fitting
(:func:`prepare_pair`). Cache keys of a model (:func:`model_key`) and card records of it (:func:`model_hash`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mixzoo.core.cache import Cache, batched_cached, content_key
from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.blackbox import is_black_box
from mixzoo.zoo.models import BaseClassifier, load_model, weight_hash
from mixzoo.zoo.specs import check_pair_early, check_pair_specs  # noqa: F401 - check_pair_specs re-exported

DEFAULT_ABC = "fmnist-std"
DEFAULT_RBC = "fmnist-pgd"
DEFAULT_N_CALIB = 1000  # calibration images when --n-calib is not given (capped at the split's size)


def model_hash(model: nn.Module) -> str:
    """The weight hash a mix card records for ``model`` (its network's weights; see :func:`model_key`)."""
    recorded = getattr(model, "weight_hash", None)  # BaseClassifier's, or a plugin object's own
    return recorded if isinstance(recorded, str) else weight_hash(model)


def model_key(model: nn.Module) -> str:
    """What a cached result of ``model`` depends on: its weights and the normalisation before them (one network
    with another mean/std gives other logits), unlike :func:`model_hash`, the weights alone as cards record them. A
    plain module's state dict already holds its normalisation buffers."""
    if isinstance(model, BaseClassifier):
        return f"{model.weight_hash}+{weight_hash(model.normalize)}"
    return weight_hash(model)


def card_key_parts(card: Any, abc: nn.Module, rbc: nn.Module, data: Any) -> dict[str, Any]:
    """What a cached evaluation of a card's classifier depends on: the data, both models' weights (with their
    normalisation) and what the card's method says its classifier depends on
    (:meth:`mixzoo.methods.MixingMethod.key_parts`)."""
    return {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc),
            **card.mixing_method.key_parts(card)}


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
    else loaded by the name the card recorded. A card made by :func:`mixzoo.methods.mixednuts.calibrate` from bare
    logits records no names, and one made for unregistered modules records their class names: both need the model
    passed in."""
    from mixzoo.core.errors import UnknownNameError

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


def weight_mismatches(card: Any, abc: nn.Module | None, rbc: nn.Module | None) -> list[str]:
    """One message per base model whose weight hash differs from the one the mix card recorded (its s, p, c and
    alpha were calibrated for other weights)."""
    messages = []
    for role, model, recorded in (("ABC", abc, card.abc), ("RBC", rbc, card.rbc)):
        expected = (recorded or {}).get("weight_hash")
        if model is not None and expected:
            actual = model_hash(model)
            if actual != expected:
                messages.append(f"{model_label(model, role)} has weight hash {actual} but the mix card was"
                                f" calibrated for {recorded.get('name', '?')!r} with hash {expected}; re-run"
                                " `mixzoo mix` for these weights")
    return messages


def model_label(model: nn.Module | None, role: str) -> str:
    """How messages name a base model: ``ROLE 'registry-name'``, or ``ROLE (ClassName)`` without a spec."""
    spec = getattr(model, "spec", None)
    return f"{role} {spec.name!r}" if spec is not None else f"{role} ({type(model).__name__})"


def load_mixed(card: Any, *, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None,
               device: str = "cpu", gradient: str = "exact", allow_unsafe: bool = False) -> Any:
    """The deployable mixed classifier of a mix card (a :class:`~mixzoo.core.card.MixCard`, its file or a published
    card's name), its ABC and RBC loaded as :func:`card_models` says, on ``device``, in eval mode, built by the
    card's method: [0, 1] images in, log-probabilities out (MixedNUTS: Bai et al. 2024a, Eq. 5). Warns when a
    model's weights differ from those the card was fitted for."""
    import warnings

    from mixzoo.core.card import MixCard

    check_device(device)
    if not isinstance(card, MixCard):
        card = MixCard.load(card)
    abc_m, rbc_m = card_models(card, abc, rbc, device=device, allow_unsafe=allow_unsafe)
    for message in weight_mismatches(card, abc_m, rbc_m):
        warnings.warn(message, stacklevel=2)
    return card.mixing_method.build(abc_m, rbc_m, card, gradient=gradient).eval()


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
    if dev.type not in ("cpu", "cuda", "meta"):  # mps, xpu, ...: usable only where this torch build supports them
        backend = getattr(torch.backends, dev.type, None)
        try:
            usable = bool(backend.is_available()) if hasattr(backend, "is_available") else bool(
                torch.empty(1, device=dev).numel())
        except (RuntimeError, AssertionError, AttributeError):
            usable = False
        if not usable:
            raise InputError(f"--device {device}: this PyTorch build or machine has no {dev.type} support; use"
                             f" --device cpu{' or cuda' if torch.cuda.is_available() else ''}")
    return dev


def model_device(model: nn.Module, default: str | torch.device = "cpu") -> torch.device:
    """Where ``model`` lives (its first parameter or buffer; ``default`` for neither): inputs follow the model, so
    a model loaded elsewhere never meets images on another device."""
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
    with progress_bar(progress) as bar:
        task = bar.add_task(f"{what} ({model_name(model)})", total=n)
        out = batched_cached(cache, "logits", content_key(key_parts), n, batch_size,
                             lambda a, b: {"logits": _logits(model, dataset.images[a:b], device)},
                             {**key_parts, "model_name": model_name(model), "dataset": dataset.name},
                             progress=lambda k: bar.advance(task, k))
    return out["logits"]


def threat_model_of(rbc: nn.Module, eps: float | None, norm: str | None) -> tuple[float, str]:
    """(eps, norm) of an evaluation: the given ones, else what the RBC's registry spec records (norm default
    ``Linf``); a one-line error when no eps is known or it is not a positive finite number."""
    spec = getattr(rbc, "spec", None)
    eps = getattr(spec, "epsilon", None) if eps is None else eps
    norm = (getattr(spec, "threat_model", None) or "Linf") if norm is None else norm
    if eps is None:
        raise InputError(f"the RBC {model_name(rbc)!r} records no epsilon; pass --eps")
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps > 0):
        raise InputError(f"epsilon must be a positive finite number, got {eps}")
    return float(eps), norm


@dataclass
class Pair:
    """An ABC/RBC pair checked for fitting a mixing method: both models, the calibration split, the threat model
    and the cache (:func:`prepare_pair`)."""

    abc: nn.Module
    rbc: nn.Module
    dataset: str
    data: Any
    eps: float
    norm: str
    cache: Cache
    device: str
    seed: int = 0
    batch_size: int = 250
    progress: bool = True

    def info(self, role: str) -> dict[str, Any]:
        """The ``[abc]`` / ``[rbc]`` table of a card: name and weight hash."""
        model = self.abc if role == "abc" else self.rbc
        return {"name": model_name(model), "weight_hash": model_hash(model)}

    def data_info(self) -> dict[str, Any]:
        """The ``[data]`` table of a card."""
        return {"split": "calibration", "n": len(self.data.labels), "fingerprint": self.data.fingerprint,
                "source": getattr(self.data, "source", "")}


def prepare_pair(request: Any, *, top_k: int | None = None) -> Pair:
    """Load and check an ABC/RBC pair for fitting (a :class:`mixzoo.methods.FitRequest`): names or modules
    (default: the built-in Fashion-MNIST pair), roles, classes, input sizes, a white-box RBC, the calibration
    split and the threat model (given, else the RBC's); one-line errors before any attack."""
    from mixzoo.zoo.data import load_dataset, model_options

    if request.n_calib is not None and request.n_calib <= 0:
        raise InputError(f"--n-calib must be positive, got {request.n_calib}")
    device = request.device
    check_device(device)
    batch_size = 250 if request.batch_size is None else request.batch_size
    if batch_size <= 0:
        raise InputError(f"--batch-size must be positive, got {batch_size}")
    if request.out is not None:
        from mixzoo.core.card import MixCard

        MixCard.check_path(request.out)
    reqs = (DEFAULT_ABC if request.abc is None else request.abc, DEFAULT_RBC if request.rbc is None else request.rbc)
    # the pair is checked on its specs (registry entries, hub config.json files) before any weights load
    check_pair_early(*(m if isinstance(m, str) else getattr(m, "spec", None) for m in reqs), request.dataset,
                     request.data_dir)
    abc_m, rbc_m = (resolve_model(m, device, request.allow_unsafe) for m in reqs)
    abc_spec, rbc_spec = getattr(abc_m, "spec", None), getattr(rbc_m, "spec", None)
    if is_black_box(rbc_m):
        name = rbc_spec.name if rbc_spec is not None else getattr(rbc_m, "name", "the RBC")
        raise InputError(f"RBC {name!r} is a black box (no gradients for MMAA); calibrate it from a white-box"
                         f" surrogate with `mixzoo transfer-params --from CARD --rbc {name}` (App. D.5)")
    known_spec = rbc_spec if rbc_spec is not None else abc_spec  # a plain-module RBC: the registered ABC tells
    dataset = request.dataset or (known_spec.dataset if known_spec is not None else None)
    if dataset is None:
        raise InputError("cannot tell which dataset to calibrate on; pass --dataset")
    eps, norm = threat_model_of(rbc_m, request.eps, request.norm)
    # not given: DEFAULT_N_CALIB images, or every image of a smaller split (silently: nothing was asked for)
    n_calib = DEFAULT_N_CALIB if request.n_calib is None else request.n_calib
    data = load_dataset(dataset, "calibration", n=n_calib, root=request.data_dir, **model_options(rbc_m, abc_m))
    check_model_fits(rbc_m, data, "RBC")
    check_model_fits(abc_m, data, "ABC")
    if top_k is not None and top_k > data.num_classes:  # fail now, not after the attack
        raise InputError(f"top_k must lie in [2, {data.num_classes}] (number of classes), got {top_k}")
    cache = Cache(request.cache_dir, enabled=request.use_cache)
    # an ABC that returns NaN must not get a card (one-line error naming it, before any attack); cached, so a
    # method that needs these logits reuses them
    cached_logits(abc_m, data, cache=cache, device=device, progress=request.progress, what="ABC clean logits")
    return Pair(abc_m, rbc_m, dataset, data, eps, norm, cache, device,
                seed=request.seed, batch_size=batch_size, progress=request.progress)
