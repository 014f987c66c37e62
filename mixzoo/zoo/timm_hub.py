"""timm models whose weights are on the Hugging Face hub (source kind ``timm``): the spec from the hub
``config.json`` and the network, its weights read by the safe loader (:mod:`mixzoo.zoo.checkpoints`) and adapted by
timm's own pretrained-weight loader. timm is imported inside the functions (:mod:`mixzoo.core.compat`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from torch import nn

from mixzoo.core.errors import MixzooError, RegistryError
from mixzoo.core.registry import ModelSpec
from mixzoo.zoo import specs as _specs
from mixzoo.zoo.checkpoints import load_checkpoint, state_dict_from, verify_sha256
from mixzoo.zoo.hub import hub_download, hub_weights
from mixzoo.zoo.specs import HF_PREFIX, parse_hf_hub

# the specs' readers, fetching a ``config.json`` that is not cached through :func:`hub_download`
timm_hub_config = functools.partial(_specs.timm_hub_config, fetch=hub_download)
timm_hub_spec = functools.partial(_specs.timm_hub_spec, fetch=hub_download)


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
    """The bare timm network (normalized input) of a ``{kind="timm", model=...}`` spec, weights from the hub or its
    cache: checked against ``spec.sha256``, loaded by :func:`load_checkpoint` and handed to timm's pretrained-weight
    loader (``pretrained_cfg['state_dict']``), which applies the architecture's checkpoint filter exactly as for a hub
    download. The spec's mean/std (which the wrapper applies) must match the hub config's."""
    from mixzoo.core.compat import import_timm

    timm = import_timm()
    repo, revision = timm_repo(str(spec.source.get("model", "")))
    arch, cfg, model_args = timm_hub_config(repo, revision)
    check_normalization(spec, cfg)
    weights = hub_weights(repo, revision)
    verify_sha256(weights, spec.sha256, spec.name)
    state_dict = state_dict_from(load_checkpoint(weights, allow_unsafe), str(weights))
    cfg.update(source="", state_dict=state_dict)  # timm: a state dict in the cfg has top priority
    try:
        return timm.create_model(arch, pretrained=True, pretrained_cfg=cfg, **model_args)
    except RuntimeError as exc:
        raise MixzooError(f"timm could not build {arch} from {weights}: {str(exc).splitlines()[0]}") from None


def check_normalization(spec: ModelSpec, cfg: Mapping[str, Any]) -> None:
    """A :class:`~mixzoo.core.errors.RegistryError` unless the spec's mean/std are the hub config's (one value of the
    spec stands for every channel): the wrapper applies the spec's."""
    for key in ("mean", "std"):
        want, have = cfg.get(key), getattr(spec, key)
        if want is None:
            continue
        want = [float(v) for v in want]
        have_full = list(have) * len(want) if len(have) == 1 else list(have)
        if len(have_full) != len(want) or any(abs(a - b) > 1e-6 for a, b in zip(have_full, want, strict=True)):
            raise RegistryError(f"registry entry {spec.name!r}: {key} {list(have)} differs from the model's"
                                f" config.json {want}; set {key} = {want}")

