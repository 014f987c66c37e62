"""WideResNets from RobustBench on CIFAR-10/100: the robust base classifiers of Bai et al. 2024a on CIFAR (App. C.1,
Table 2: Peng et al. 2023 RaWideResNet-70-16 on CIFAR-10, Wang et al. 2023 WideResNet-70-16 on CIFAR-100).

Source kind ``robustbench`` for ``dataset = "cifar10" | "cifar100"``:
``{kind = "robustbench", name = "Wang2023Better_WRN-70-16", dataset = "cifar100", threat_model = "Linf"}``.
Any CIFAR entry of RobustBench's model zoo loads, WideResNet or not. Checkpoints are read from
``$MIXZOO_ROBUSTBENCH_DIR/{dataset}/{threat_model}/{name}.pt`` (default ``~/.cache/mixzoo/robustbench``); RobustBench
downloads missing ones unless offline. The networks normalize internally: specs carry mean 0 / std 1 and the
wrapper's normalization step says so (:class:`mixzoo.zoo.loading.NormalizationInside`).

Names no registry knows: ``cifar10/Linf/Ding2020MMA``-style ``dataset/threat/Name`` resolve to a robust spec with
RobustBench's default radius (Linf 8/255, L2 0.5). ImageNet entries are the ``swin`` plugin's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.registry import ModelSpec

SOURCE_KINDS = ["robustbench (cifar10, cifar100)"]
DATASETS = ("cifar10", "cifar100")


@hookimpl
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """``cifar10|cifar100/THREAT/Name`` -> a robust spec; None for other names."""
    if name.split("/", 1)[0] not in DATASETS:
        return None
    from mixzoo.zoo import specs

    return specs.robustbench_spec(name, plugin="wideresnet")


@hookimpl
def mixzoo_load_model(spec: ModelSpec, device: str, allow_unsafe: bool) -> nn.Module | None:
    """Load CIFAR ``robustbench`` sources; None for everything else."""
    if spec.source.get("kind") != "robustbench" or spec.source.get("dataset") not in DATASETS:
        return None
    from mixzoo.zoo import loading

    return loading.load_robustbench(spec, allow_unsafe)
