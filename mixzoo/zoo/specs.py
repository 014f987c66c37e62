"""Specs of published models from their names alone (RobustBench ``dataset/threat/Name``, Hugging Face
``hf-hub:ORG/NAME`` timm models), with no torch, timm or robustbench import and no weights read, so resolving a
name (``mixzoo info``, the pair check before loading) takes well under a second. A hub ``config.json`` not in the
local cache is read through the ``fetch`` given (:mod:`mixzoo.zoo.timm_hub` passes ``hub_download``; without one,
:class:`NotCachedError`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError, MissingFileError, MixzooError, UnknownNameError
from mixzoo.core.model_spec import ModelSpec
from mixzoo.core.reading import read_data
from mixzoo.zoo.files import check_files_offline, hub_cached_file, robustbench_package, robustbench_zoo

HF_PREFIX = "hf-hub:"


class NotCachedError(MissingFileError):
    """A hub ``config.json`` not in the local cache, where no ``fetch`` was given to download it."""


# RobustBench datasets: classes and the resolution its leaderboard evaluates at.
ROBUSTBENCH_DATASETS: dict[str, tuple[int, tuple[int, int, int]]] = {
    "cifar10": (10, (3, 32, 32)), "cifar100": (100, (3, 32, 32)), "imagenet": (1000, (3, 224, 224)),
}
ROBUSTBENCH_THREATS = ("Linf", "L2", "corruptions")
# RobustBench's standard radii (leaderboard settings): Linf 8/255 on CIFAR, 4/255 on ImageNet; L2 0.5.
DEFAULT_EPSILON: dict[tuple[str, str], float] = {
    ("cifar10", "Linf"): 8 / 255, ("cifar100", "Linf"): 8 / 255, ("imagenet", "Linf"): 4 / 255,
    ("cifar10", "L2"): 0.5, ("cifar100", "L2"): 0.5, ("imagenet", "L2"): 0.5,
}


def parse_hf_hub(name: str) -> tuple[str, str | None]:
    """``hf-hub:ORG/NAME[@REV]`` -> (``ORG/NAME``, ``REV`` or None)."""
    body = name[len(HF_PREFIX):] if name.startswith(HF_PREFIX) else name
    repo, _, revision = body.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise InputError(f"{name!r} is not of the form hf-hub:ORG/NAME[@REVISION]")
    return repo, revision or None


def parse_robustbench_name(name: str) -> tuple[str, str, str] | None:
    """``dataset/threat/Name`` (e.g. ``cifar10/Linf/Ding2020MMA``) -> its parts; None for other names."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] in ROBUSTBENCH_DATASETS and parts[1] in ROBUSTBENCH_THREATS and parts[2]:
        return parts[0], parts[1], parts[2]
    return None


def robustbench_spec(name: str, plugin: str) -> ModelSpec | None:
    """A robust spec for a RobustBench ``dataset/threat/Name`` (checked against the zoo's source,
    :func:`mixzoo.zoo.files.robustbench_zoo`), eps from RobustBench's defaults; None for another name."""
    parsed = parse_robustbench_name(name)
    if parsed is None:
        return None
    dataset, threat, model = parsed
    known = robustbench_zoo(dataset).get(threat)
    if known is None:  # the zoo's source could not be read: ask RobustBench itself (an import of seconds)
        robustbench_entry(dataset, threat, model)  # unknown names fail here, with suggestions
    elif model not in known:
        raise UnknownNameError(f"RobustBench {dataset}/{threat} model", model, known)
    classes, size = ROBUSTBENCH_DATASETS[dataset]
    source = {"kind": "robustbench", "name": model, "dataset": dataset, "threat_model": threat}
    reported, citation, alias = robustbench_reported(source)
    return ModelSpec(
        name=name, role="robust", dataset=dataset, num_classes=classes, input_size=size, source=source,
        threat_model=threat, epsilon=DEFAULT_EPSILON.get((dataset, threat)), reported=reported,
        citation=citation or f"RobustBench model {model}", plugin=plugin,
        description="RobustBench model zoo entry; mean 0 / std 1 because the network normalizes internally"
                    + (f"; the same model as registry entry {alias!r}" if alias else ""),
    )


def robustbench_reported(source: Mapping[str, Any]) -> tuple[dict[str, Any], str, str | None]:
    """(reported accuracies, citation, registry name) of a RobustBench model: those of a registry entry with the
    same source, else RobustBench's ``model_info/{dataset}/{threat}/{name}.json`` where a RobustBench checkout
    ships it (``clean_acc`` / ``autoattack_acc`` in percent), else nothing."""
    from mixzoo.core.registry import get_registry

    for spec in get_registry().specs():
        if spec.source.get("kind") == "robustbench" and all(spec.source.get(k) == source[k] for k in source):
            return dict(spec.reported), spec.citation, spec.name
    package = robustbench_package()
    if package is not None:
        rel = Path("model_info") / str(source["dataset"]) / str(source["threat_model"]) / f"{source['name']}.json"
        for info_file in (package / rel, package.parent / rel):
            try:
                info = read_data(info_file, "json", what="RobustBench model_info file")
                reported = {k: float(info[f]) / 100 for k, f in (("clean", "clean_acc"),
                                                                  ("autoattack", "autoattack_acc")) if info.get(f)}
            except (OSError, ValueError, TypeError):  # InputError is a ValueError: a damaged file is skipped
                continue
            reported["source"] = f"RobustBench {rel}"
            citation = f"{info.get('name', '')}, {info.get('venue', '')}".strip(", ")
            return reported, citation, None
    return {}, "", None


def timm_hub_config(repo_id: str, revision: str | None = None,
                    fetch: Callable[[str, str, str | None], Path] | None = None
                    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(architecture, pretrained_cfg, model_args) from a hub ``config.json``, as
    ``timm.models._hub.load_model_config_from_hf`` reads it, but from the cache or ``fetch``, so offline errors say
    where the file belongs and nothing in timm touches the network."""
    cached, present = hub_cached_file(repo_id, "config.json", revision)
    if not present:
        if fetch is None:
            raise NotCachedError(f"config.json of Hugging Face repo {repo_id!r} is not in the local cache ({cached})"
                                 "; downloads are off (HF_HUB_OFFLINE/MIXZOO_OFFLINE): fetch it where the hub"
                                 " is reachable (`mixzoo fetch-list NAME` lists the files) or copy it there")
        cached = fetch(repo_id, "config.json", revision)
    hf_config = read_data(cached, "json", what="hub config.json")
    if "pretrained_cfg" not in hf_config:  # old form: the pretrained cfg is the whole file
        pretrained_cfg = dict(hf_config)
        hf_config = {"architecture": pretrained_cfg.pop("architecture", None)}
        if "labels" in pretrained_cfg:
            pretrained_cfg["label_names"] = pretrained_cfg.pop("labels")
    else:
        pretrained_cfg = dict(hf_config["pretrained_cfg"])
    arch = hf_config.get("architecture") or pretrained_cfg.get("architecture")
    if not arch:
        raise MixzooError(f"config.json of {repo_id!r} names no timm architecture; is it a timm model repo?")
    if "num_classes" in hf_config:
        pretrained_cfg["num_classes"] = hf_config["num_classes"]
    for key in ("label_names", "label_descriptions", "dataset"):
        if key in hf_config:
            pretrained_cfg[key] = hf_config[key]
    pretrained_cfg["hf_hub_id"] = f"{repo_id}@{revision}" if revision else repo_id
    return arch, pretrained_cfg, dict(hf_config.get("model_args", {}))


# datasets a hub model is taken to be for when its config.json names none: (classes, side) -> dataset
HUB_DATASETS: dict[tuple[int, int], str] = {(10, 32): "cifar10", (100, 32): "cifar100"}


def hub_dataset(cfg: Mapping[str, Any], num_classes: int, size: tuple[int, ...]) -> str:
    """The dataset of a hub model: the one its ``config.json`` names (``dataset``, in the file or its
    ``pretrained_cfg``), else ``imagenet`` for 1,000 classes, else the one :data:`HUB_DATASETS` gives for its
    classes and input side (10 or 100 classes at 32 px: CIFAR), else ``unknown``."""
    named = cfg.get("dataset")
    if isinstance(named, str) and named.strip():
        return named.strip().lower()
    if num_classes == 1000:
        return "imagenet"
    return HUB_DATASETS.get((num_classes, int(size[-1])), "unknown")


def timm_hub_spec(name: str, plugin: str, fetch: Callable[[str, str, str | None], Path] | None = None) -> ModelSpec:
    """A spec for any ``hf-hub:ORG/NAME`` timm model: accurate role; classes, input size, mean/std and dataset
    from the hub config (:func:`hub_dataset`). Reads only ``config.json``, never the weights."""
    repo, revision = parse_hf_hub(name)
    arch, cfg, _ = timm_hub_config(repo, revision, fetch)
    num_classes = int(cfg.get("num_classes", 1000))
    size = [int(v) for v in cfg.get("input_size", (3, 224, 224))]
    mean, std = list(cfg.get("mean", (0.485, 0.456, 0.406))), list(cfg.get("std", (0.229, 0.224, 0.225)))
    return ModelSpec(
        name=name, role="accurate", dataset=hub_dataset(cfg, num_classes, tuple(size)),
        num_classes=num_classes, input_size=tuple(size), source={"kind": "timm", "model": name},
        mean=tuple(float(v) for v in mean), std=tuple(float(v) for v in std),
        license=str(cfg.get("license") or ""), citation=str(cfg.get("paper_name") or ""),
        description=f"timm {arch} from the Hugging Face hub ({repo}); input size and normalization from its"
                    " config.json",
        plugin=plugin,
    )


def robustbench_entry(dataset: str, threat: str, name: str) -> Mapping[str, Any]:
    """RobustBench's model-zoo entry (``{'model': constructor, 'gdrive_id': ...}``), or UnknownNameError."""
    from mixzoo.core.compat import import_robustbench

    import_robustbench()
    from robustbench.model_zoo import model_dicts
    from robustbench.model_zoo.enums import BenchmarkDataset, ThreatModel

    zoo = model_dicts[BenchmarkDataset(dataset)][ThreatModel(threat)]
    if name not in zoo:
        raise UnknownNameError(f"RobustBench {dataset}/{threat} model", name, zoo)
    return zoo[name]


def source_loader(module: str, function: str) -> Callable[[ModelSpec, str, bool], Any]:
    """A loader of hook ``mixzoo_model_sources``, ``(spec, device, allow_unsafe)``: ``module.function(spec,
    allow_unsafe)``, the module imported at the first load (the wrapper moves the network to the device)."""
    def load(spec: ModelSpec, device: str, allow_unsafe: bool) -> Any:
        return getattr(importlib.import_module(module), function)(spec, allow_unsafe)

    return load


def check_pair_specs(abc_spec: Any, rbc_spec: Any, dataset: str | None = None) -> None:
    """Refuse an ABC/RBC pair from their specs alone, before any weights load: an RBC that is an accurate
    model, or two models of different classes, input sizes or (unless ``dataset`` chooses the calibration data)
    datasets. ``None`` specs (plain modules) are checked once loaded (:func:`check_model_fits`)."""
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


def check_pair_early(abc: Any, rbc: Any, dataset: str | None = None, data_dir: str | None = None) -> None:
    """What can be refused about an ABC/RBC pair before any weights load: ``abc`` / ``rbc`` are names (resolved
    to specs: registry, hub ``config.json``) or specs (None for plain modules). A pair that does not fit is refused
    by :func:`check_pair_specs`; offline, a pair with files missing is refused naming all of them
    (:func:`mixzoo.zoo.files.check_files_offline`), also when a name cannot be resolved because its
    ``config.json`` is one of them."""
    from mixzoo.core.registry import get_spec

    names = [m for m in (abc, rbc) if isinstance(m, str)]
    try:
        abc_spec, rbc_spec = (get_spec(m) if isinstance(m, str) else m for m in (abc, rbc))
    except MissingFileError:
        check_files_offline(names, dataset, data_dir)
        raise
    check_pair_specs(abc_spec, rbc_spec, dataset)
    check_files_offline(names, dataset, data_dir)
