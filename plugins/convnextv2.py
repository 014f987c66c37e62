"""ConvNeXt V2 (Woo et al., 2023) and every other timm model on the Hugging Face hub: the accurate base classifiers
of Bai et al. 2024a on ImageNet (App. C.1, Table 2: ConvNeXt V2-L; Table 5 reports 86.18% clean, 0% AutoAttack).

Source kind ``timm``: ``{kind = "timm", model = "hf-hub:timm/convnextv2_large.fcmae_ft_in22k_in1k"}`` (or a timm
name with a pretrained tag whose weights are on the hub). Registry entries using it: ``convnextv2-l``,
``convnextv2-l-384``, ``swin-l`` (timm's Swin-L, accurate) and ``bit-r152x2-imagenet``.

Names no registry knows: any ``hf-hub:ORG/NAME[@REV]`` resolves to an accurate spec whose classes, input size and
mean/std come from the repo's ``config.json`` (:func:`mixzoo.zoo.loading.timm_hub_spec`). The loaded network
takes normalized input; the :class:`mixzoo.zoo.models.BaseClassifier` wrapper applies the spec's mean/std, so the
model takes [0, 1] images at the spec's resolution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.registry import ModelSpec

SOURCE_KINDS = ["timm"]


@hookimpl
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """``hf-hub:ORG/NAME[@REV]`` -> a spec from the hub config; None for other names."""
    if not name.startswith("hf-hub:"):  # mixzoo.zoo.loading.HF_PREFIX, checked before loading imports torch
        return None
    from mixzoo.zoo import specs

    try:
        return specs.timm_hub_spec(name, plugin="convnextv2")  # config.json in the cache: no torch, no network
    except specs.NotCachedError:
        from mixzoo.zoo import loading

        return loading.timm_hub_spec(name, plugin="convnextv2")


@hookimpl
def mixzoo_load_model(spec: ModelSpec, device: str, allow_unsafe: bool) -> nn.Module | None:
    """Load ``timm`` sources (weights from the hub or its cache); None for every other kind."""
    if spec.source.get("kind") != "timm":
        return None
    from mixzoo.zoo import loading

    return loading.load_timm_hub(spec, allow_unsafe)
