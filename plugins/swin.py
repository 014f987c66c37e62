"""Swin-L and the other RobustBench ImageNet models: the robust base classifier of Bai et al. 2024a on ImageNet (App.
C.1, Table 2: Liu et al. 2023 Swin-L, Linf 4/255; Table 5 reports 78.92% clean, 59.56% AutoAttack).

Source kind ``robustbench`` for ``dataset = "imagenet"``:
``{kind = "robustbench", name = "Liu2023Comprehensive_Swin-L", dataset = "imagenet", threat_model = "Linf"}``
(RobustBench builds timm's ``swin_large_patch4_window7_224`` behind an ImageNet normalizer, 196.5M parameters).
Checkpoints: ``$MIXZOO_ROBUSTBENCH_DIR/imagenet/Linf/{name}.pt``. The accurate Swin-L (``swin-l``) is a timm hub
model, loaded by the ``convnextv2`` plugin's ``timm`` kind.

RobustBench evaluates ImageNet at 224x224 (and Swin's 7x7 windows need exactly that), so entries must say
``input_size = [3, 224, 224]``. Names no registry knows: ``imagenet/Linf/Name`` resolves with radius 4/255.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixzoo.core.errors import RegistryError
from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.registry import ModelSpec

SOURCE_KINDS = ["robustbench (imagenet)"]
DATASET = "imagenet"
INPUT_SIZE = (3, 224, 224)


@hookimpl
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """``imagenet/THREAT/Name`` -> a robust spec; None for other names."""
    if name.split("/", 1)[0] != DATASET:
        return None
    from mixzoo.zoo import specs

    return specs.robustbench_spec(name, plugin="swin")


@hookimpl
def mixzoo_load_model(spec: ModelSpec, device: str, allow_unsafe: bool) -> nn.Module | None:
    """Load ImageNet ``robustbench`` sources; None for everything else."""
    if spec.source.get("kind") != "robustbench" or spec.source.get("dataset") != DATASET:
        return None
    if tuple(spec.input_size) != INPUT_SIZE:
        raise RegistryError(f"registry entry {spec.name!r}: RobustBench ImageNet models take 224x224 input; set"
                            " input_size = [3, 224, 224]")
    from mixzoo.zoo import loading

    return loading.load_robustbench(spec, allow_unsafe)
