"""Source kind ``timm``: any timm model whose weights are on the Hugging Face hub, among them the accurate base
classifiers of Bai et al. 2024a on ImageNet (App. C.1, Table 2: ConvNeXt V2-L, Woo et al. 2023; Table 5 reports
86.18% clean, 0% AutoAttack).

``{kind = "timm", model = "hf-hub:timm/convnextv2_large.fcmae_ft_in22k_in1k"}`` (or a timm name with a pretrained tag
whose weights are on the hub), loaded by :func:`mixzoo.zoo.timm_hub.load_timm_hub`: registry entries ``convnextv2-l``,
``convnextv2-l-384``, ``swin-l`` (timm's Swin-L, accurate) and ``bit-r152x2-imagenet``. Any other
``hf-hub:ORG/NAME[@REV]`` resolves to an accurate spec whose classes, input size and mean/std come from the repo's
``config.json`` (:func:`mixzoo.zoo.specs.timm_hub_spec`); the wrapper applies that mean/std to [0, 1] images.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    from mixzoo.core.registry import ModelSpec

PLUGIN = "timm-hub"  # the entry-point name, recorded as the plugin of the specs it resolves
SOURCE_KINDS = ["timm"]
NAME_FORMS = "hf-hub:ORG/NAME[@REV]"


@hookimpl
def mixzoo_model_sources() -> dict[str, Any]:
    """``timm``: :func:`mixzoo.zoo.timm_hub.load_timm_hub`, weights from the hub or its cache."""
    from mixzoo.zoo.specs import source_loader

    return {"timm": source_loader("mixzoo.zoo.timm_hub", "load_timm_hub")}


@hookimpl
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """``hf-hub:ORG/NAME[@REV]`` -> a spec from the hub config; None for other names."""
    if not name.startswith("hf-hub:"):  # mixzoo.zoo.specs.HF_PREFIX, checked before anything is imported
        return None
    from mixzoo.zoo import specs

    try:
        return specs.timm_hub_spec(name, plugin=PLUGIN)  # config.json in the cache: no torch, no network
    except specs.NotCachedError:
        from mixzoo.zoo.files import offline

        if offline():  # downloads off (MIXZOO_OFFLINE=1, `mixzoo info`): the cache is all there is
            raise
        from mixzoo.zoo.timm_hub import timm_hub_spec

        return timm_hub_spec(name, plugin=PLUGIN)
