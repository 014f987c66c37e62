"""One registry entry as data: :class:`ModelSpec`, what a model is and where it comes from.

:mod:`mixzoo.core.registry` reads entries from ``registry.toml`` and from plugins, validates them and answers names;
the hook specifications (:mod:`mixzoo.core.hookspecs`) name this record without depending on the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["accurate", "robust"]


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry: everything needed to load a base classifier and describe it honestly."""

    name: str
    role: Role
    dataset: str
    num_classes: int
    input_size: tuple[int, int, int]
    source: Mapping[str, Any]
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    aliases: tuple[str, ...] = ()
    threat_model: str | None = None
    epsilon: float | None = None
    reported: Mapping[str, Any] = field(default_factory=dict)
    citation: str = ""
    license: str = ""
    sha256: str | None = None
    description: str = ""
    # the base of a Gaussian randomized-smoothing RBC (Bai et al. 2024b, App. A; certify)
    smoothing_sigma: float | None = None
    # a Lipschitz constant the architecture guarantees for the map from [0, 1] images to logits (normalisation
    # included): {constant = L, norm = "l2"}; mixzoo certify derives deterministic radii from it
    lipschitz: Mapping[str, Any] = field(default_factory=dict)
    # intermediate features a trained mixing network reads (Bai et al. 2024b, Sec. 4.3, App. D.1): depth -> module name
    taps: Mapping[str, str] = field(default_factory=dict)
    plugin: str = "registry.toml"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["input_size"] = list(self.input_size)
        d["mean"], d["std"], d["aliases"] = list(self.mean), list(self.std), list(self.aliases)
        d["source"], d["reported"], d["taps"] = dict(self.source), dict(self.reported), dict(self.taps)
        d["lipschitz"] = dict(self.lipschitz)
        return d
