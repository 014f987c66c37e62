"""Source kind ``robustbench``: the models of RobustBench's model zoo on CIFAR-10, CIFAR-100 and ImageNet, among them
the robust base classifiers of Bai et al. 2024a (App. C.1, Table 2: Peng et al. 2023 RaWideResNet-70-16 on CIFAR-10,
Wang et al. 2023 WideResNet-70-16 on CIFAR-100, Liu et al. 2023 Swin-L on ImageNet, Linf 4/255; Table 5 reports
78.92% clean, 59.56% AutoAttack for the last).

``{kind = "robustbench", name = "Wang2023Better_WRN-70-16", dataset = "cifar100", threat_model = "Linf"}``: checkpoints
in ``$MIXZOO_ROBUSTBENCH_DIR/{dataset}/{threat_model}/{name}.pt`` (default ``~/.cache/mixzoo/robustbench``), missing
ones downloaded by RobustBench unless offline (:func:`mixzoo.zoo.robustbench_loading.load_robustbench`). The networks
normalize internally: specs carry mean 0 / std 1 (:class:`mixzoo.zoo.input_layers.NormalizationInside`). RobustBench
evaluates ImageNet at 224x224 (Swin's 7x7 windows need exactly that), so ImageNet entries say ``input_size = [3, 224,
224]``. The accurate Swin-L (``swin-l``) is a timm hub model (plugin ``timm-hub``). Any other ``dataset/threat/Name``
(``cifar10/Linf/Ding2020MMA``) resolves to a robust spec with RobustBench's default radius (Linf 8/255 on CIFAR,
4/255 on ImageNet; L2 0.5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    from mixzoo.core.registry import ModelSpec

PLUGIN = "robustbench"  # the entry-point name, recorded as the plugin of the specs it resolves
SOURCE_KINDS = ["robustbench"]
NAME_FORMS = "DATASET/THREAT/Name"
DATASETS = ("cifar10", "cifar100", "imagenet")


@hookimpl
def mixzoo_model_sources() -> dict[str, Any]:
    """``robustbench``: the RobustBench model of a spec (:func:`~mixzoo.zoo.robustbench_loading.load_robustbench`)."""
    from mixzoo.zoo.specs import source_loader

    return {"robustbench": source_loader("mixzoo.zoo.robustbench_loading", "load_robustbench")}


@hookimpl
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """``cifar10|cifar100|imagenet/THREAT/Name`` -> a robust spec; None for other names."""
    if name.split("/", 1)[0] not in DATASETS:
        return None
    from mixzoo.zoo import specs

    return specs.robustbench_spec(name, plugin=PLUGIN)
