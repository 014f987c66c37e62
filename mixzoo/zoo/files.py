"""Every file a command needs for some models and data, where it belongs on this machine, whether it is there and
its size (``mixzoo fetch-list``, ``mixzoo info``), so an offline machine can be prepared in one go.

Nothing here loads weights, imports torch or touches the network: paths come from the specs (registry entries,
hub ``config.json`` files already in the cache) and from the places the loaders read:

* ``timm`` sources: ``config.json`` and ``model.safetensors`` (or a cached ``pytorch_model.bin``) of the hub repo
  (``hf-hub:ORG/NAME``; a timm name with a pretrained tag lives in ``timm/NAME``, timm's own convention) in the
  Hugging Face cache (``HF_HUB_CACHE``);
* ``bit-hf`` sources: their ``path``, or ``filename`` of ``repo`` in the Hugging Face cache;
* ``robustbench`` sources: ``$MIXZOO_ROBUSTBENCH_DIR/{dataset}/{threat}/{name}.pt`` (``{name}.pt_m{i}.pt`` for each
  member of an ensemble), the member count read from RobustBench's model-zoo source without importing it;
* ``zoo`` sources: the weight file the plugin ships (``mixzoo_weights_dir``);
* data: the files the built-in datasets read (CIFAR batches, Fashion-MNIST IDX files, ``ROOT/val`` of ImageNet, a
  user's ImageFolder tree or ``.npz`` file).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROBUSTBENCH_DIR_ENV = "MIXZOO_ROBUSTBENCH_DIR"
ROBUSTBENCH_DEFAULT_DIR = "~/.cache/mixzoo/robustbench"
# the variable RobustBench's model_zoo/{dataset}.py binds each threat model's OrderedDict to
_RB_VARIABLES = {"Linf": "linf", "L2": "l2", "corruptions": "common_corruptions"}
CIFAR_FILES = {"cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch",
                                                                                               "batches.meta"]),
               "cifar100": ("cifar-100-python", ["train", "test", "meta"])}
FMNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                "t10k-labels-idx1-ubyte.gz")


@dataclass(frozen=True)
class NeededFile:
    """One file (or folder) a command reads: for ``what`` (a model or data set name), its ``path`` here, whether
    it is ``present``, its ``size`` in bytes (None for a folder or a missing file), how to ``fetch`` it and its
    ``kind`` (``model`` or ``data``)."""

    what: str
    path: str
    present: bool
    size: int | None
    fetch: str
    kind: str = "model"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def whole_pickle(path: Path) -> bool:
    """Whether ``path`` is a file that reads as a whole pickle from its ends: it opens with a pickle opcode (PROTO
    ``\\x80`` of protocol 2 and later, or MARK / EMPTY_DICT) and closes with STOP (``.``), the byte a truncated
    copy has lost (a cut that happens to end in that byte passes; the CIFAR loader parses every batch)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1)
            fh.seek(-1, os.SEEK_END)
            tail = fh.read(1)
    except OSError:  # missing, a folder, or shorter than a byte
        return False
    return head in (b"\x80", b"(", b"}") and tail == b"."


def _file(what: str, path: Path, fetch: str, folder: bool = False, check: Any = None, kind: str = "model"
          ) -> NeededFile:
    present = path.is_dir() if folder else path.is_file() and (check is None or check(path))
    size = path.stat().st_size if present and not folder else None
    return NeededFile(what, str(path), present, size, fetch, kind)


# ------------------------------------------------------------------------------------------ Hugging Face cache
def hub_repo_folder(repo_id: str) -> Path:
    """``{HF_HUB_CACHE}/models--ORG--NAME``: where huggingface_hub caches a model repository."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"


def hub_cached_file(repo_id: str, filename: str, revision: str | None = None) -> tuple[Path, bool]:
    """Where ``filename`` of ``repo_id`` sits in the local Hugging Face cache, and whether it is there: ``refs/REV``
    read with whitespace stripped (a hand-written ref often ends in a newline, which huggingface_hub's own offline
    lookup takes as part of the commit), a commit-hash revision used as it is; with no ref the path names
    ``<commit>``."""
    folder = hub_repo_folder(repo_id)
    ref = revision or "main"
    commit: str | None = ref if re.fullmatch(r"[0-9a-f]{40}", ref) else None
    if commit is None:
        try:
            commit = (folder / "refs" / ref).read_text(encoding="utf-8").strip() or None
        except (OSError, UnicodeDecodeError):
            commit = None
    path = folder / "snapshots" / (commit or "<commit>") / filename
    return path, commit is not None and path.is_file()


def _hub_file(what: str, repo: str, filename: str, revision: str | None) -> NeededFile:
    path, present = hub_cached_file(repo, filename, revision)
    rev = f" --revision {revision}" if revision else ""
    return NeededFile(what, str(path), present, path.stat().st_size if present else None,
                      f"huggingface-cli download {repo} {filename}{rev} (then copy {hub_repo_folder(repo)})")


def _hub_repo(model: str) -> tuple[str, str | None]:
    body = model.removeprefix("hf-hub:")
    repo, _, revision = body.partition("@")
    return (repo if "/" in repo else f"timm/{repo}"), revision or None


# ------------------------------------------------------------------------------------------------ RobustBench
def robustbench_dir() -> Path:
    """``$MIXZOO_ROBUSTBENCH_DIR`` or ``~/.cache/mixzoo/robustbench`` (RobustBench's ``model_dir``)."""
    from mixzoo.core.paths import env_folder

    return env_folder(ROBUSTBENCH_DIR_ENV, ROBUSTBENCH_DEFAULT_DIR)


def robustbench_package() -> Path | None:
    """The folder of the installed robustbench package, found without importing it (which costs seconds)."""
    try:
        found = importlib.util.find_spec("robustbench")
    except (ImportError, ValueError):
        return None
    return Path(next(iter(found.submodule_search_locations))) if found and found.submodule_search_locations else None


@functools.cache
def robustbench_zoo(dataset: str) -> dict[str, dict[str, int]]:
    """``{threat: {name: checkpoint count}}`` of RobustBench's model zoo for ``dataset``, read from the source of
    ``robustbench/model_zoo/{dataset}.py`` without importing it; empty when robustbench is not installed or the file
    has another shape."""
    package = robustbench_package()
    if package is None:
        return {}
    source = package / "model_zoo" / f"{dataset}.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    out: dict[str, dict[str, int]] = {}
    wanted = {v: k for k, v in _RB_VARIABLES.items()}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in wanted and isinstance(node.value, ast.Call) and node.value.args
                and isinstance(node.value.args[0], ast.List)):
            continue
        names: dict[str, int] = {}
        for item in node.value.args[0].elts:
            if isinstance(item, ast.Tuple) and len(item.elts) == 2 and isinstance(item.elts[0], ast.Constant):
                count = 1
                if isinstance(item.elts[1], ast.Dict):
                    for key, value in zip(item.elts[1].keys, item.elts[1].values, strict=True):
                        if isinstance(key, ast.Constant) and key.value == "gdrive_id" and isinstance(value, ast.List):
                            count = len(value.elts)
                names[str(item.elts[0].value)] = count
        out[wanted[node.targets[0].id]] = names
    return out


def robustbench_checkpoints(dataset: str, threat: str, name: str, count: int = 1) -> list[Path]:
    """Checkpoint paths RobustBench reads: ``{dir}/{dataset}/{threat}/{name}.pt``, or ``{name}.pt_m{i}.pt`` for
    each of ``count`` members of an ensemble."""
    base = robustbench_dir() / dataset / threat / f"{name}.pt"
    return [Path(f"{base}_m{i}.pt") for i in range(count)] if count > 1 else [base]


# ------------------------------------------------------------------------------------------------ per model
def model_files(spec: Any) -> list[NeededFile]:
    """The files loading ``spec`` reads (see the module docstring); empty for a source kind this module does not
    know (a third party's plugin loads it its own way)."""
    src, what = spec.source, spec.name
    kind = src.get("kind")
    if kind == "timm":
        repo, revision = _hub_repo(str(src.get("model", "")))
        weights = _hub_file(what, repo, "model.safetensors", revision)
        if not weights.present:
            pickled = _hub_file(what, repo, "pytorch_model.bin", revision)
            weights = pickled if pickled.present else weights
        return [_hub_file(what, repo, "config.json", revision), weights]
    if kind == "bit-hf":
        if src.get("path"):
            return [_file(what, Path(str(src["path"])).expanduser(), "the source's path (registry entry)")]
        return [_hub_file(what, str(src.get("repo", "")), str(src.get("filename", "")), src.get("revision"))]
    if kind == "robustbench":
        dataset, threat, name = str(src.get("dataset")), str(src.get("threat_model")), str(src.get("name"))
        count = robustbench_zoo(dataset).get(threat, {}).get(name, 1)
        how = (f"python -c \"import robustbench; robustbench.load_model('{name}', dataset='{dataset}',"
               f" threat_model='{threat}', model_dir='{robustbench_dir()}')\"")
        return [_file(what, p, how) for p in robustbench_checkpoints(dataset, threat, name, count)]
    if kind == "zoo" and src.get("file"):
        from mixzoo.core.plugins import first_result

        folder = first_result("mixzoo_weights_dir", "find weights", kind=kind)
        path = Path(str(src["file"]))
        path = path if path.is_absolute() or folder is None else Path(folder) / path
        return [_file(what, path, f"ships with mixzoo (or `mixzoo train {spec.name}`)")]
    return []


# ------------------------------------------------------------------------------------------------- per data
def dataset_files(name: str, root: str | None = None) -> list[NeededFile]:
    """The files data set ``name`` (``imagefolder:PATH`` / ``PATH.npz`` too) is read from (see the module
    docstring); empty for digits (it ships with scikit-learn) and for a third party's data set."""
    from mixzoo.core.paths import env_folder
    from mixzoo.zoo.data import split_dataset_name

    name, root = split_dataset_name(name, root)
    user = Path(root).expanduser() if root else env_folder("MIXZOO_DATA_DIR", None)
    file = functools.partial(_file, name, kind="data")
    if name in CIFAR_FILES:
        folder, files = CIFAR_FILES[name]
        base = (user or Path.home() / ".cache" / "mixzoo" / "data") / folder
        how = f"torchvision.datasets.{name.upper()}(ROOT, download=True); pass --data-dir ROOT"
        return [file(base / f, how, check=whole_pickle) for f in files]
    if name == "fashion-mnist":
        downloaded = Path.home() / ".cache" / "mixzoo" / "data" / "FashionMNIST" / "raw"
        places = [user, user / "FashionMNIST" / "raw"] if user is not None else [
            Path("/usr/share/datasets/fashion-mnist"), downloaded]
        base = next((d for d in places if all((d / f).is_file() or (d / f[:-3]).is_file() for f in FMNIST_FILES)),
                    places[0])
        return [file(base / f, "apt-get install dataset-fashion-mnist, or --data-dir DIR") for f in FMNIST_FILES]
    if name == "imagenet":
        return [file((user or Path("<--data-dir ROOT>")) / "val", "the ImageNet validation set as"
                     " ROOT/val/<wnid>/*.JPEG", folder=True)]
    if name == "imagefolder" and user is not None:
        return [file(user, "your images as DIR/<class>/<image>", folder=True)]
    if name == "npz" and user is not None:
        return [file(user, "your arrays (images, labels) saved with numpy.savez")]
    return []


def fetch_list(names: Sequence[str], dataset: str | None = None, data_dir: str | None = None) -> list[NeededFile]:
    """Every file ``mix`` / ``bench`` would read for ``names`` (model names, aliases, ``hf-hub:`` ids, RobustBench
    names, or mix cards: files or published names, whose ABC, RBC and data set count) and their data: ``dataset``
    when given, else each robust model's (or card's) data set. Hub names whose ``config.json`` is not cached are
    listed by that file."""
    from mixzoo.core.errors import MissingFileError
    from mixzoo.core.plugins import table
    from mixzoo.core.registry import get_spec

    out: list[NeededFile] = []
    datasets: list[str] = [dataset] if dataset else []
    models: list[str] = []
    for name in names:
        if name in table("card") or (Path(name).suffix in (".toml", ".json") and Path(name).is_file()):
            from mixzoo.core.card import MixCard

            card = MixCard.load(name)
            models += [n for n in ((card.abc or {}).get("name"), (card.rbc or {}).get("name")) if n]
            if card.dataset and not dataset:
                datasets.append(card.dataset)
        else:
            models.append(name)
    for name in models:
        try:
            spec = get_spec(name)
        except MissingFileError:  # a hub id whose config.json is not here: that file is what is needed first
            repo, revision = _hub_repo(name)
            out.append(_hub_file(name, repo, "config.json", revision))
            continue
        out += model_files(spec)
        if not dataset and spec.role == "robust":
            datasets.append(spec.dataset)
    for name in dict.fromkeys(datasets):
        out += dataset_files(name, data_dir)
    return list({(f.what, f.path): f for f in out}.values())


def missing_summary(files: Sequence[NeededFile]) -> str | None:
    """One line naming every missing file and where it belongs, or None when all are present."""
    missing = [f for f in files if not f.present]
    if not missing:
        return None
    return (f"{len(missing)} file(s) needed are not on this machine: "
            + "; ".join(f"{f.what}: {f.path}" for f in missing)
            + " (`mixzoo fetch-list` lists them with how to fetch each)")


def offline() -> bool:
    """True when downloads are off: ``HF_HUB_OFFLINE=1`` (as huggingface_hub read it) or ``MIXZOO_OFFLINE=1``."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("MIXZOO_OFFLINE", "") not in ("", "0")


def check_files_offline(names: Sequence[str], dataset: str | None = None, data_dir: str | None = None) -> None:
    """With downloads off (:func:`offline`) and a file of one of the models ``names`` missing, one
    :class:`~mixzoo.core.errors.MissingFileError` naming every missing file of the models and their data
    (:func:`fetch_list`), rather than the first one a loader meets. Missing data alone is left to its loader."""
    from mixzoo.core.errors import MissingFileError

    if not names or not offline():
        return
    files = fetch_list(names, dataset=dataset, data_dir=data_dir)
    if not all(f.present for f in files if f.kind == "model"):
        raise MissingFileError(f"downloads are off (HF_HUB_OFFLINE/MIXZOO_OFFLINE) and {missing_summary(files)}")

