"""Model names as data: :class:`ModelSpec` entries from ``registry.toml`` (package data, ``mixzoo/registry.toml``)
and from plugins.

The names users type (``convnextv2-l``, ``liu2023-swin-l``, ``fmnist-trades``) resolve here to a spec that says
what the model is (role, dataset, classes, input size, normalization, threat model) and where it comes from
(``source``: a table whose ``kind`` picks the plugin that loads it). Loading validates every field and an error
names the entry and the field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError, PluginError, RegistryError, UnknownNameError
from mixzoo.core.model_spec import ModelSpec

ROLES: tuple[str, ...] = ("accurate", "robust")
THREAT_MODELS: tuple[str, ...] = ("Linf", "L2", "corruptions")


_REQUIRED = ("role", "dataset", "num_classes", "input_size", "source")


def spec_from_dict(name: str, raw: Mapping[str, Any], plugin: str = "registry.toml") -> ModelSpec:
    """Validate one entry; errors read ``registry entry 'NAME' (PLUGIN): field 'F' ...``."""

    def bad(fld: str, why: str) -> RegistryError:
        return RegistryError(f"registry entry {name!r} ({plugin}): field {fld!r} {why}")

    for fld in _REQUIRED:
        if fld not in raw:
            raise bad(fld, "is missing")
    known = set(ModelSpec.__dataclass_fields__) - {"name", "plugin"}
    for fld in raw:
        if fld not in known and fld != "name":
            raise bad(fld, f"is not a known field (known: {', '.join(sorted(known))})")
    if raw["role"] not in ROLES:
        raise bad("role", f"must be one of {ROLES}, got {raw['role']!r}")
    if not isinstance(raw["num_classes"], int) or raw["num_classes"] < 2:
        raise bad("num_classes", f"must be an integer >= 2, got {raw['num_classes']!r}")
    size = raw["input_size"]
    if not (isinstance(size, list | tuple) and len(size) == 3 and all(isinstance(v, int) and v > 0 for v in size)):
        raise bad("input_size", f"must be [channels, height, width] of positive integers, got {size!r}")
    src = raw["source"]
    if not isinstance(src, Mapping) or not isinstance(src.get("kind"), str):
        raise bad("source", "must be a table with a string 'kind' (e.g. timm, robustbench, zoo)")
    mean, std = tuple(raw.get("mean", (0.0,))), tuple(raw.get("std", (1.0,)))
    for fld, vals in (("mean", mean), ("std", std)):
        if len(vals) not in (1, size[0]) or not all(isinstance(v, int | float) for v in vals):
            raise bad(fld, f"must be 1 or {size[0]} numbers, got {list(vals)!r}")
    if any(v <= 0 for v in std):
        raise bad("std", "must be positive")
    threat, eps = raw.get("threat_model"), raw.get("epsilon")
    if raw["role"] == "robust":
        if threat not in THREAT_MODELS:
            raise bad("threat_model", f"must be one of {THREAT_MODELS} for a robust model, got {threat!r}")
        if threat != "corruptions" and (not isinstance(eps, int | float) or eps <= 0):
            raise bad("epsilon", f"must be a positive number for a robust model, got {eps!r}")
    aliases = raw.get("aliases", ())
    if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
        raise bad("aliases", "must be a list of strings")
    sha = raw.get("sha256")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64):
        raise bad("sha256", "must be a 64-character hex digest")
    sigma = raw.get("smoothing_sigma")
    if sigma is not None and (isinstance(sigma, bool) or not isinstance(sigma, int | float) or sigma <= 0):
        raise bad("smoothing_sigma", f"must be a positive number (the noise std it was trained for), got {sigma!r}")
    taps = raw.get("taps", {})
    if not isinstance(taps, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                for k, v in taps.items()):
        raise bad("taps", f"must be a table of depth = \"module name\" (e.g. {{early = \"features.2\"}}), got {taps!r}")
    lip = raw.get("lipschitz", {})
    if lip and not (isinstance(lip, Mapping) and set(lip) <= {"constant", "norm"} and lip.get("norm") == "l2"
                    and isinstance(lip.get("constant"), int | float) and not isinstance(lip.get("constant"), bool)
                    and lip["constant"] > 0):
        raise bad("lipschitz", f"must be {{constant = L, norm = \"l2\"}} with L > 0 (the l2 Lipschitz constant of"
                               f" the map from [0, 1] images to logits), got {lip!r}")
    return ModelSpec(
        name=name, role=raw["role"], dataset=raw["dataset"], num_classes=raw["num_classes"],
        input_size=tuple(size), source=dict(src), mean=mean, std=std, aliases=tuple(aliases),
        threat_model=threat, epsilon=float(eps) if eps is not None else None,
        reported=dict(raw.get("reported", {})), citation=raw.get("citation", ""), license=raw.get("license", ""),
        sha256=sha, description=raw.get("description", ""), plugin=plugin,
        smoothing_sigma=float(sigma) if sigma is not None else None, taps=dict(taps),
        lipschitz={"constant": float(lip["constant"]), "norm": lip["norm"]} if lip else {},
    )


def default_registry_path() -> Path | Traversable:
    """``$MIXZOO_REGISTRY`` if set, else the ``registry.toml`` shipped inside the package (package data)."""
    env = os.environ.get("MIXZOO_REGISTRY")
    return Path(env) if env else resources.files("mixzoo") / "registry.toml"


def load_registry_file(path: str | os.PathLike[str] | Traversable) -> list[ModelSpec]:
    """Parse and validate a registry file (``[models.NAME]`` tables)."""
    if not isinstance(path, Traversable):
        path = Path(path)
    if not path.is_file():
        hint = ("set MIXZOO_REGISTRY to an existing file or unset it" if os.environ.get("MIXZOO_REGISTRY")
                else "reinstall mixzoo (its package data is missing)")
        raise RegistryError(f"registry file {path} does not exist; {hint}")
    from mixzoo.core.reading import CARD_BYTES, read_data

    try:
        data = read_data(path, "toml", limit=CARD_BYTES, what="registry file")
    except InputError as exc:  # too large, not text, not TOML, nested too deep: one line naming the file
        raise RegistryError(str(exc)) from None
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise RegistryError(f"registry file {path}: field 'models' must be a table of [models.NAME] tables")
    return [spec_from_dict(name, raw, plugin=path.name) for name, raw in models.items()]


class Registry:
    """All known model specs by name and alias, a view of a merged table (kind ``model``): an entry whose own name
    was left out is left out whole, aliases included; :meth:`get` of a left-out name raises a :class:`PluginError`
    naming the plugins that claim it (``collisions``)."""

    def __init__(self, index: Mapping[str, ModelSpec], collisions: Mapping[str, list[str]] | None = None):
        self.collisions: dict[str, list[str]] = dict(collisions or {})
        self._specs = {s.name: s for key, s in index.items() if key == s.name}
        self._index = {key: s.name for key, s in index.items() if self._specs.get(s.name) is s}

    def specs(self, role: str | None = None, dataset: str | None = None) -> list[ModelSpec]:
        return [s for s in self._specs.values()
                if (role is None or s.role == role) and (dataset is None or s.dataset == dataset)]

    def names(self) -> list[str]:
        return sorted(self._index)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def get(self, name: str) -> ModelSpec:
        """The spec for a name or alias; names no registry knows go to the resolve hook (hf-hub:, RobustBench)."""
        from mixzoo.core.plugins import first_result
        from mixzoo.core.plugins.state import STATE
        from mixzoo.core.plugins.tables import collision_message

        if name in self._index:
            return self._specs[self._index[name]]
        if name in self.collisions:
            raise PluginError(collision_message("model", name, self.collisions[name]))
        spec = first_result("mixzoo_resolve_model_name", f"resolve model name {name!r}", name=name)
        if spec is not None:
            return spec
        raise UnknownNameError("model", name, self._index, failed=STATE.failure_texts())


def get_registry() -> Registry:
    """The merged registry: ``registry.toml`` (:func:`file_specs`, built-in) and every plugin's
    ``mixzoo_model_specs`` (:func:`plugin_specs`), the table of kind ``model``."""
    from mixzoo.core.plugins.tables import collisions, table

    return Registry(table("model"), collisions("model"))


def file_specs() -> tuple[str, dict[str, ModelSpec]]:
    """The registry file's entries (:func:`default_registry_path`), with the file's name as their owner."""
    path = default_registry_path()
    return Path(str(path)).name, {spec.name: spec for spec in load_registry_file(path)}


def plugin_specs(plugin_name: str, entries: Any) -> dict[str, ModelSpec]:
    """A plugin's ``mixzoo_model_specs`` answer as ``{name: spec}``: each entry validated (a dict as a file entry; a
    :class:`ModelSpec` credited to the plugin unless it names another), a bad one recorded and left out."""
    from mixzoo.core.plugins.state import STATE

    if not isinstance(entries, list | tuple):
        STATE.record_failure(plugin_name, f"mixzoo_model_specs returned {type(entries).__name__}, expected a list"
                                          " of ModelSpecs or dicts; its models are left out")
        return {}
    out: dict[str, ModelSpec] = {}
    for entry in entries:
        try:
            spec = _plugin_spec(plugin_name, entry)
        except RegistryError as exc:
            STATE.record_failure(plugin_name, f"{exc}; entry left out")
            continue
        if spec.name in out:
            STATE.record_failure(plugin_name, f"model {spec.name!r} listed twice; the second entry left out")
            continue
        out[spec.name] = spec
    return out


def _plugin_spec(plugin_name: str, entry: Any) -> ModelSpec:
    if isinstance(entry, ModelSpec):
        return entry if entry.plugin != "registry.toml" else ModelSpec(**{**entry.__dict__, "plugin": plugin_name})
    if not isinstance(entry, Mapping):
        raise RegistryError(f"registry entry {entry!r} ({plugin_name}) is a {type(entry).__name__}, expected a"
                            " ModelSpec or a dict")
    entry = dict(entry)
    name = entry.pop("name", None)
    if not isinstance(name, str) or not name:
        raise RegistryError(f"registry entry {name!r} ({plugin_name}): field 'name' must be a non-empty string")
    return spec_from_dict(name, entry, plugin=plugin_name)


def get_spec(name: str) -> ModelSpec:
    """Shorthand for ``get_registry().get(name)``."""
    return get_registry().get(name)


def list_models(role: str | None = None, dataset: str | None = None) -> list[ModelSpec]:
    """Specs filtered by role (accurate | robust) and dataset, sorted by name."""
    if role is not None and role not in ROLES:
        raise InputError(f"role must be one of {ROLES}, got {role!r}")
    registry = get_registry()
    if dataset is not None:
        known = {s.dataset for s in registry.specs(None, None)}
        if dataset not in known:
            raise UnknownNameError("dataset", dataset, known)
    return sorted(registry.specs(role, dataset), key=lambda s: s.name)
