"""RobustBench models (source kind ``robustbench``): checkpoints in ``$MIXZOO_ROBUSTBENCH_DIR/{dataset}/{threat_model}/
{name}.pt`` (:func:`~mixzoo.zoo.files.robustbench_dir`), checked before RobustBench builds the network with its
per-model key fixes (:func:`load_robustbench`). robustbench is imported inside the functions
(:mod:`mixzoo.core.compat`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import MissingFileError, MixzooError, RegistryError
from mixzoo.core.registry import ModelSpec
from mixzoo.zoo.checkpoints import (
    WRAPPER_KEYS,
    load_checkpoint,
    load_state_dict_strict,
    needs_unpickling,
    state_dict_from,
    verify_sha256,
)
from mixzoo.zoo.files import ROBUSTBENCH_DIR_ENV, offline, robustbench_checkpoints, robustbench_dir
from mixzoo.zoo.input_layers import NormalizationInside
from mixzoo.zoo.models import BaseClassifier
from mixzoo.zoo.specs import ROBUSTBENCH_DATASETS, ROBUSTBENCH_THREATS, robustbench_entry


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

    Order of checks: the entry exists (an ImageNet one at 224x224); its constructor does not need CUDA (probed on
    the meta device, so it is cheap); checkpoints are present (else, offline, :class:`MissingFileError` naming the
    path; online, RobustBench downloads them); each is loadable without unpickling (else
    :class:`UnsafeCheckpointError` unless ``allow_unsafe``); ``sha256`` matches. RobustBench then builds the network
    and loads the weights with its per-model key fixes. Returns a :class:`BaseClassifier` whose normalization step
    is :class:`NormalizationInside`.
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
    if dataset == "imagenet" and tuple(spec.input_size) != (3, 224, 224):
        raise RegistryError(f"registry entry {spec.name!r}: RobustBench ImageNet models take 224x224 input; set"
                            " input_size = [3, 224, 224]")
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
                isinstance(pickled.get(k), nn.Module) for k in WRAPPER_KEYS)):
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
