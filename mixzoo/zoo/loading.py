"""Loading published models for model plugins: safe checkpoints, checksums, Hugging Face hub files, timm hub models
and RobustBench checkpoints.

A plugin that implements ``mixzoo_load_model`` or ``mixzoo_resolve_model_name`` for published weights imports
these helpers (``from mixzoo.zoo import loading``) rather than copying them; the built-in ``bit``, ``convnextv2``,
``swin`` and ``wideresnet`` plugins do. The public names below are the contract (names starting with ``_`` are
not); each raises a :class:`~mixzoo.core.errors.MixzooError` subclass with a one-line message naming the fix, never a
bare library exception:

* safe checkpoints: :func:`load_checkpoint` reads safetensors, or ``torch.load(weights_only=True)``; a checkpoint
  that needs arbitrary unpickling is refused (:class:`UnsafeCheckpointError`) unless the user passed
  ``allow_unsafe`` (``--allow-unsafe``); :func:`needs_unpickling` says which ones would be;
  :func:`state_dict_from` unwraps ``state_dict`` / ``model`` / ``net`` wrappers and ``module.`` prefixes;
  :func:`load_state_dict_strict` loads with a strict key match and names the missing and unexpected keys;
* checksums: :func:`sha256_file`, :func:`verify_sha256` (:class:`ChecksumError`) where a registry entry has
  ``sha256``;
* Hugging Face hub files: :func:`hub_download` reads the local cache first and asks the hub only on a miss and only
  after one quick reachability check (:func:`hub_reachable`); offline (:func:`offline`: ``HF_HUB_OFFLINE=1`` or
  ``MIXZOO_OFFLINE=1``) or unreachable, it raises :class:`~mixzoo.core.errors.MissingFileError` naming the cache path
  (:func:`hf_cache_location`); :func:`parse_hf_hub` splits ``hf-hub:ORG/NAME[@REV]`` (:data:`HF_PREFIX`) and
  :func:`hub_weights` finds a repository's weight file (:data:`WEIGHT_FILES`, safest first);
* timm hub models: :func:`timm_hub_spec` builds a :class:`~mixzoo.core.registry.ModelSpec` whose input size,
  mean/std and classes come from the hub ``config.json``; :func:`load_timm_hub` loads the weights through the safe
  loader and then timm's own pretrained-weight adaptation;
* RobustBench: :func:`robustbench_spec` and :func:`load_robustbench` (a :class:`~mixzoo.zoo.models.BaseClassifier`);
  checkpoints live in ``$MIXZOO_ROBUSTBENCH_DIR/{dataset}/{threat_model}/{name}.pt`` (default
  ``~/.cache/mixzoo/robustbench``, :func:`robustbench_dir`); the networks normalize internally, so their specs carry
  mean 0 / std 1 and the wrapper says so (:class:`NormalizationInside`);
* :class:`InputResize`: a first layer that resizes the input to the resolution a network was fine-tuned at.

timm, huggingface_hub and robustbench are imported inside the functions that use them (through
:mod:`mixzoo.core.compat`); torch is imported with this module, so a plugin imports it inside its hooks and listing
models never pays for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError, MissingFileError, MixzooError, RegistryError
from mixzoo.core.registry import ModelSpec
from mixzoo.zoo import specs as _specs
from mixzoo.zoo.files import (  # noqa: F401 - re-exported: part of this module's contract
    hub_cached_file,
    hub_repo_folder,
    robustbench_checkpoints,
    robustbench_dir,
    robustbench_zoo,
)
from mixzoo.zoo.models import BaseClassifier
from mixzoo.zoo.specs import (  # noqa: F401 - re-exported: part of this module's contract
    DEFAULT_EPSILON,
    HF_PREFIX,
    HUB_DATASETS,
    ROBUSTBENCH_DATASETS,
    ROBUSTBENCH_THREATS,
    hub_dataset,
    parse_hf_hub,
    parse_robustbench_name,
    robustbench_entry,
    robustbench_reported,
    robustbench_spec,
)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm pushes to the hub, safest first
HUB_PROBE_TIMEOUT = 3.0  # seconds
HUB_PROBE_TTL = 60.0  # seconds a reachability answer is reused
_HUB_PROBES: dict[str, tuple[float, bool]] = {}
ROBUSTBENCH_DIR_ENV = "MIXZOO_ROBUSTBENCH_DIR"
ROBUSTBENCH_DEFAULT_DIR = "~/.cache/mixzoo/robustbench"


class UnsafeCheckpointError(MixzooError):
    """A checkpoint that only loads by unpickling arbitrary objects, refused without ``allow_unsafe``."""


class ChecksumError(MixzooError):
    """A file whose sha256 differs from the registry's."""


class HubEntryNotFoundError(MissingFileError):
    """The hub answered that the repository has no such file (not a network problem)."""


# ------------------------------------------------------------------------------------------- offline, checksums
def offline() -> bool:
    """True when downloads are off: ``HF_HUB_OFFLINE=1`` (as huggingface_hub read it) or ``MIXZOO_OFFLINE=1``."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("MIXZOO_OFFLINE", "") not in ("", "0")


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike[str], expected: str | None, entry: str) -> None:
    """Raise :class:`ChecksumError` unless ``path`` hashes to ``expected`` (no-op when ``expected`` is None)."""
    if expected is None:
        return
    actual = sha256_file(path)
    if actual.lower() != expected.lower():
        raise ChecksumError(
            f"{path} has sha256 {actual[:16]}..., but registry entry {entry!r} expects {expected[:16]}...;"
            " delete the file to fetch it again, or correct sha256 in the registry"
        )


# ----------------------------------------------------------------------------------------------- safe loading
_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")


def load_checkpoint(path: str | os.PathLike[str], allow_unsafe: bool = False, mmap: bool = False) -> Any:
    """Load a checkpoint safely: safetensors, else ``torch.load(weights_only=True)``.

    A pickle that needs arbitrary classes raises :class:`UnsafeCheckpointError` naming the class, unless
    ``allow_unsafe`` (then it is loaded with ``weights_only=False``). ``mmap`` maps tensor storages instead of
    reading them (zip-format checkpoints), which makes a safety check of a large file cheap.
    """
    path = Path(path)
    if path.suffix == ".safetensors":
        from mixzoo.core.paths import read_safetensors

        return read_safetensors(path)
    try:
        return _torch_load(path, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        if not allow_unsafe:
            raise _unsafe_error(path, str(exc)) from None
    try:
        return _torch_load(path, weights_only=False, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise MixzooError(f"{path} is not a readable PyTorch checkpoint ({exc}); delete it and fetch it"
                          " again") from None


def _unsafe_error(path: Path, reason: str) -> UnsafeCheckpointError:
    """The one-line refusal, naming the offending class when torch's weights-only unpickler reported one."""
    found = _GLOBAL_RE.search(reason)
    if found:
        return UnsafeCheckpointError(
            f"checkpoint {path} holds an object of class {found.group(1)} and loading it would run arbitrary"
            " code; re-save it as a state dict or safetensors, or pass allow_unsafe=True (CLI: --allow-unsafe)"
            " if you trust its source"
        )
    lines = [ln.strip() for ln in reason.split("WeightsUnpickler error:")[-1].splitlines() if ln.strip()]
    return UnsafeCheckpointError(
        f"checkpoint {path} is not plain weights ({lines[0] if lines else 'weights-only load failed'}); it is"
        " corrupt (delete it and fetch it again) or a pickle that loads only with allow_unsafe=True"
        " (CLI: --allow-unsafe), which runs arbitrary code: use it only if you trust the source"
    )


def _torch_load(path: Path, weights_only: bool, mmap: bool) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=mmap)
    except pickle.UnpicklingError:
        raise
    except RuntimeError as exc:
        if mmap and "mmap" in str(exc):  # legacy (non-zip) format cannot be mapped: read it instead
            return _torch_load(path, weights_only, mmap=False)
        raise MixzooError(f"{path} is not a readable PyTorch checkpoint ({str(exc).splitlines()[0]});"
                          " delete it and fetch it again") from None


def needs_unpickling(path: str | os.PathLike[str]) -> bool:
    """Whether a checkpoint only loads with ``weights_only=False`` (storages memory-mapped, so this is cheap)."""
    try:
        load_checkpoint(path, allow_unsafe=False, mmap=True)
    except UnsafeCheckpointError:
        return True
    return False


_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "net")


def state_dict_from(obj: Any, source: str) -> dict[str, torch.Tensor]:
    """The tensor dict inside a checkpoint: unwraps ``{'state_dict': ...}`` / ``{'model': ...}``, takes the
    ``state_dict()`` of a pickled :class:`torch.nn.Module` (a checkpoint loaded with ``allow_unsafe``) and strips a
    ``module.`` prefix (DataParallel) carried by every key."""
    if isinstance(obj, nn.Module):  # a pickled module (loaded with allow_unsafe): its weights
        obj = obj.state_dict()
    for key in _WRAPPER_KEYS:
        if isinstance(obj, Mapping) and isinstance(obj.get(key), nn.Module):
            obj = obj[key].state_dict()
            break
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise MixzooError(f"{source} holds no state dict of tensors (got {type(obj).__name__}); save"
                          " model.state_dict() instead")
    sd = dict(obj)
    if all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    return sd


def load_state_dict_strict(network: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """``load_state_dict(strict=True)`` with a one-line error listing the first mismatching keys."""
    own = network.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [k for k in own if k in state_dict and tuple(own[k].shape) != tuple(state_dict[k].shape)]
    if missing or unexpected or shapes:
        parts = [f"{label} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                 for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes))
                 if keys]
        raise MixzooError(f"{source} does not fit the architecture ({'; '.join(parts)}); check arch and"
                          " num_classes in the registry entry")
    network.load_state_dict(state_dict, strict=True)


# ----------------------------------------------------------------------------------------- Hugging Face hub
def hf_cache_location(repo_id: str, filename: str, revision: str | None = None) -> str:
    """Where huggingface_hub looks for a file: ``{HF_HUB_CACHE}/models--ORG--NAME/snapshots/REV/FILE``."""
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    ref = revision or "main"
    return f"{folder}/snapshots/<commit>/{filename} (with {folder}/refs/{ref} holding <commit>)"


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether the hub endpoint (``HF_ENDPOINT``) answers one quick HEAD request at all (any status counts).

    huggingface_hub retries an unreachable hub five times with back-off (about 25 s of log noise), so a cache
    miss asks this first; the answer is remembered for :data:`HUB_PROBE_TTL` seconds.
    """
    import time

    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    endpoint, now = constants.ENDPOINT, time.monotonic()
    known = _HUB_PROBES.get(endpoint)
    if known is not None and now - known[0] < HUB_PROBE_TTL:
        return known[1]
    try:
        get_session().head(endpoint, timeout=timeout)
        ok = True
    except Exception:  # noqa: BLE001 - DNS, proxy, TLS or timeout failures all mean: unreachable
        ok = False
    _HUB_PROBES[endpoint] = (now, ok)
    return ok


def hub_download(repo_id: str, filename: str, revision: str | None = None) -> Path:
    """``huggingface_hub.hf_hub_download`` (cached, with its own progress bar) with mixzoo's errors.

    The local cache is consulted first; only a file not there is fetched, and only if downloads are on
    (not ``HF_HUB_OFFLINE=1`` / ``MIXZOO_OFFLINE=1``) and the hub answers :func:`hub_reachable`. A file neither
    cached nor downloadable raises :class:`~mixzoo.core.errors.MissingFileError` saying where to place it; a file the
    hub says does not exist raises :class:`HubEntryNotFoundError`.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{filename!r} of Hugging Face repo {repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    cached, present = hub_cached_file(repo_id, filename, revision)
    if present:
        return cached
    try:
        try:
            return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=True))
        except LocalEntryNotFoundError:
            if offline() or not hub_reachable():
                raise
        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except LocalEntryNotFoundError:
        if offline():
            why, hint = "downloads are off (HF_HUB_OFFLINE/MIXZOO_OFFLINE)", ""
        else:
            why = f"the hub ({constants.ENDPOINT}) is unreachable"
            hint = "; set MIXZOO_OFFLINE=1 to skip the network check"
        raise MissingFileError(
            f"{where} is not in the local cache and {why}; fetch it where there is network"
            f" (`huggingface-cli download {repo_id} {filename}`) and copy the Hugging Face cache (HF_HOME), or"
            f" place it at {hf_cache_location(repo_id, filename, revision)}{hint}"
        ) from None
    except GatedRepoError:
        raise MissingFileError(f"{where} is gated; accept its terms on huggingface.co and log in with"
                               " `huggingface-cli login`") from None
    except RepositoryNotFoundError:
        raise MissingFileError(f"Hugging Face repo {repo_id!r} does not exist (or is private); fix repo in"
                               " the registry entry") from None
    except RevisionNotFoundError:
        raise MissingFileError(f"{where}: revision not found; fix the revision in the registry entry") from None
    except EntryNotFoundError:
        raise HubEntryNotFoundError(f"{where} does not exist on the hub; fix filename in the registry"
                                    " entry") from None
    except HFValidationError as exc:
        raise InputError(f"{repo_id!r} is not a valid Hugging Face repo id ({exc})") from None


def hub_weights(repo_id: str, revision: str | None = None) -> Path:
    """The weight file of a timm hub repo: ``model.safetensors`` if the repo (or cache) has it, else
    ``pytorch_model.bin``."""
    try:
        return hub_download(repo_id, WEIGHT_FILES[0], revision)
    except HubEntryNotFoundError:
        return hub_download(repo_id, WEIGHT_FILES[1], revision)
    except MissingFileError:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo_id, WEIGHT_FILES[1], revision=revision)
        if isinstance(cached, str):
            return Path(cached)
        raise


def timm_hub_config(repo_id: str, revision: str | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """:func:`mixzoo.zoo.specs.timm_hub_config`, fetching ``config.json`` through :func:`hub_download` when it is
    not cached."""
    return _specs.timm_hub_config(repo_id, revision, fetch=hub_download)


def timm_hub_spec(name: str, plugin: str) -> ModelSpec:
    """:func:`mixzoo.zoo.specs.timm_hub_spec`, fetching ``config.json`` through :func:`hub_download` when it is not
    cached."""
    return _specs.timm_hub_spec(name, plugin, fetch=hub_download)


# ----------------------------------------------------------------------------------------------------- timm
def timm_repo(model: str) -> tuple[str, str | None]:
    """The hub repo of a timm source: ``hf-hub:ORG/NAME[@REV]``, or a timm name with a pretrained tag whose
    pretrained config points at the hub (``convnextv2_large.fcmae_ft_in22k_in1k`` -> ``timm/...``)."""
    if model.startswith(HF_PREFIX):
        return parse_hf_hub(model)
    from mixzoo.core.compat import import_timm

    import_timm()
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(model, allow_unregistered=False) if "." in model else None
    if cfg is None or not cfg.hf_hub_id:
        raise RegistryError(f"timm model {model!r} has no Hugging Face hub weights; use hf-hub:ORG/NAME or a"
                            " timm name with a pretrained tag (e.g. convnextv2_large.fcmae_ft_in22k_in1k)")
    return parse_hf_hub(cfg.hf_hub_id)


def load_timm_hub(spec: ModelSpec, allow_unsafe: bool = False) -> nn.Module:
    """The timm network of a ``{kind="timm", model=...}`` spec, weights from the hub (or its cache).

    The weight file is checked against ``spec.sha256``, loaded by :func:`load_checkpoint` and handed to timm's
    pretrained-weight loader (``pretrained_cfg['state_dict']``), which applies the architecture's checkpoint
    filter exactly as for a hub download. The spec's mean/std must match the hub config's (the wrapper applies
    the spec's). Returns the bare network taking normalized input.
    """
    from mixzoo.core.compat import import_timm

    timm = import_timm()
    repo, revision = timm_repo(str(spec.source.get("model", "")))
    arch, cfg, model_args = timm_hub_config(repo, revision)
    _check_normalization(spec, cfg)
    weights = hub_weights(repo, revision)
    verify_sha256(weights, spec.sha256, spec.name)
    state_dict = state_dict_from(load_checkpoint(weights, allow_unsafe), str(weights))
    cfg.update(source="", state_dict=state_dict)  # timm: a state dict in the cfg has top priority
    try:
        return timm.create_model(arch, pretrained=True, pretrained_cfg=cfg, **model_args)
    except RuntimeError as exc:
        raise MixzooError(f"timm could not build {arch} from {weights}: {str(exc).splitlines()[0]}") from None


def _check_normalization(spec: ModelSpec, cfg: Mapping[str, Any]) -> None:
    for key in ("mean", "std"):
        want, have = cfg.get(key), getattr(spec, key)
        if want is None:
            continue
        want = [float(v) for v in want]
        have_full = list(have) * len(want) if len(have) == 1 else list(have)
        if len(have_full) != len(want) or any(abs(a - b) > 1e-6 for a, b in zip(have_full, want, strict=True)):
            raise RegistryError(f"registry entry {spec.name!r}: {key} {list(have)} differs from the model's"
                                f" config.json {want}; set {key} = {want}")


# ---------------------------------------------------------------------------------------------- RobustBench
class NormalizationInside(nn.Module):
    """Stands where :class:`mixzoo.zoo.models.Normalize` would: the network normalizes its [0, 1] input itself."""

    def __init__(self, who: str):
        super().__init__()
        self.who = who

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def extra_repr(self) -> str:
        return f"identity: {self.who} normalizes [0, 1] input inside the network"


class InputResize(nn.Module):
    """Bilinear resize of the (normalized) input to the resolution the network was fine-tuned at."""

    def __init__(self, size: int):
        super().__init__()
        self.size = int(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode=bilinear"


def robustbench_files(dataset: str, threat: str, name: str, entry: Mapping[str, Any]) -> list[Path]:
    """Checkpoint paths RobustBench reads: ``{dir}/{dataset}/{threat}/{name}.pt``, or ``{name}.pt_m{i}.pt`` for
    each member of an ensemble."""
    ids = entry.get("gdrive_id")
    return robustbench_checkpoints(dataset, threat, name, len(ids) if isinstance(ids, list) else 1)


@contextlib.contextmanager
def _torch_load_mode(unpickling: bool) -> Iterator[None]:
    """Make RobustBench's own ``torch.load`` (which passes no ``weights_only``) weights-only, or let it unpickle
    when the user allowed it, via torch's environment switches; restored afterwards."""
    keys = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.pop(keys[not unpickling], None)  # torch refuses both at once
    os.environ[keys[unpickling]] = "1"
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return not torch.cuda.is_available() and ("cuda" in text or "nvidia" in text)


def load_robustbench(spec: ModelSpec, allow_unsafe: bool = False) -> BaseClassifier:
    """A RobustBench model for a ``{kind="robustbench", name, dataset, threat_model}`` spec, wrapped.

    Order of checks: the entry exists; its constructor does not need CUDA (probed on the meta device, so it is
    cheap); checkpoints are present (else, offline, :class:`MissingFileError` naming the path; online,
    RobustBench downloads them); each is loadable without unpickling (else :class:`UnsafeCheckpointError`
    unless ``allow_unsafe``); ``sha256`` matches. RobustBench then builds the network and loads the weights with
    its per-model key fixes. Returns a :class:`BaseClassifier` whose normalization step is
    :class:`NormalizationInside`.
    """
    src = spec.source
    try:
        name, dataset, threat = str(src["name"]), str(src["dataset"]), str(src["threat_model"])
    except KeyError as exc:
        raise RegistryError(f"registry entry {spec.name!r}: source needs name, dataset and threat_model"
                            f" (missing {exc.args[0]!r})") from None
    if dataset not in ROBUSTBENCH_DATASETS or threat not in ROBUSTBENCH_THREATS:
        raise RegistryError(f"registry entry {spec.name!r}: source dataset/threat_model must be one of"
                            f" {sorted(ROBUSTBENCH_DATASETS)} / {ROBUSTBENCH_THREATS}, got {dataset!r}/{threat!r}")
    if any(v != 0.0 for v in spec.mean) or any(v != 1.0 for v in spec.std):
        raise RegistryError(f"registry entry {spec.name!r}: RobustBench networks normalize internally; set"
                            " mean = [0.0] and std = [1.0]")
    entry = robustbench_entry(dataset, threat, name)
    if not torch.cuda.is_available():
        try:
            with torch.device("meta"):
                entry["model"]()
        except Exception as exc:  # noqa: BLE001 - only CUDA needs are reported here; the real build re-raises
            if _cuda_error(exc):
                raise MixzooError(f"RobustBench model {dataset}/{threat}/{name} needs a CUDA GPU just to be"
                                  " constructed (its code calls .cuda()); load it on a machine with a GPU") from None
    files = robustbench_files(dataset, threat, name, entry)
    missing = [f for f in files if not f.is_file()]
    if missing and offline():
        raise MissingFileError(f"RobustBench checkpoint {missing[0]} is missing and downloads are off"
                               f" (HF_HUB_OFFLINE/MIXZOO_OFFLINE); place it there (directory set by"
                               f" ${ROBUSTBENCH_DIR_ENV})")
    if spec.sha256 is not None and len(files) != 1:
        raise RegistryError(f"registry entry {spec.name!r}: sha256 is supported for single-file models only")
    for f in files:
        if f.is_file():
            verify_sha256(f, spec.sha256, spec.name)
    unsafe = _check_files(files, allow_unsafe)
    network = _robustbench_build(name, dataset, threat, files, unsafe, allow_unsafe)
    if missing:  # freshly downloaded: check what arrived
        for f in files:
            verify_sha256(f, spec.sha256, spec.name)
    model = BaseClassifier(network, spec)
    model.normalize = NormalizationInside(f"RobustBench {name}")
    return model


def _robustbench_build(name: str, dataset: str, threat: str, files: list[Path], unsafe: bool,
                       allow_unsafe: bool) -> nn.Module:
    """``robustbench.load_model`` with its failures translated into one-line mixzoo errors."""
    from mixzoo.core.compat import import_robustbench

    rb = import_robustbench()
    if unsafe and len(files) == 1 and files[0].is_file():
        pickled = load_checkpoint(files[0], allow_unsafe=True)
        if isinstance(pickled, nn.Module) or (isinstance(pickled, Mapping) and any(
                isinstance(pickled.get(k), nn.Module) for k in _WRAPPER_KEYS)):
            # a pickled module, which RobustBench's loader cannot read (it calls .keys()): its weights go into
            # the entry's own architecture
            network = robustbench_entry(dataset, threat, name)["model"]()
            load_state_dict_strict(network, state_dict_from(pickled, str(files[0])), str(files[0]))
            return network.eval()
    try:
        with _torch_load_mode(unpickling=unsafe):
            return rb.load_model(name, model_dir=str(robustbench_dir()), dataset=dataset, threat_model=threat)
    except MixzooError:
        raise
    except pickle.UnpicklingError:  # a file downloaded just now needs unpickling
        if not _check_files(files, allow_unsafe):
            raise
        with _torch_load_mode(unpickling=True):
            return rb.load_model(name, model_dir=str(robustbench_dir()), dataset=dataset, threat_model=threat)
    except Exception as exc:  # noqa: BLE001 - robustbench raises anything; translate to one line
        if _cuda_error(exc):
            raise MixzooError(f"RobustBench model {dataset}/{threat}/{name} needs a CUDA GPU; load it on a"
                              " machine with a GPU") from None
        still = [f for f in files if not f.is_file()]
        if still:
            raise MissingFileError(f"could not download RobustBench checkpoint {still[0]} ({type(exc).__name__});"
                                   " download it where there is network and place it there") from None
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise MixzooError(f"RobustBench could not load {dataset}/{threat}/{name}: {type(exc).__name__}:"
                          f" {first}") from None


def _check_files(files: list[Path], allow_unsafe: bool) -> bool:
    """Raise UnsafeCheckpointError for a present file that needs unpickling unless allowed; True if any does."""
    unsafe = False
    for f in files:
        if f.is_file() and needs_unpickling(f):
            if not allow_unsafe:
                load_checkpoint(f, allow_unsafe=False, mmap=True)  # raises the one-line error naming the class
            unsafe = True
    return unsafe
