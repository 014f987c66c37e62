"""Built-in mixing methods, the attacks made for their classifiers, their commands and published cards, registered
through the hooks like any third party's (``mixzoo mix --method``, ``mixzoo bench --attack``, ``mixzoo check``,
``mixzoo bench NAME``)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl

PROVIDES = {  # what `mixzoo plugins` lists
    "attacks": ["adaptive-smoothing-apgd", "adaptive-smoothing-gate", "local-smoothing-policy-gate"],
    "methods": ["adaptive-smoothing", "knn-smoothing", "linear", "local-smoothing", "local-smoothing-adaptive",
                "mixednuts"],
    "cards": ["fmnist-adaptive-smoothing-a", "fmnist-adaptive-smoothing-b", "fmnist-adaptive-smoothing-c",
              "mixednuts-cifar10", "mixednuts-cifar100", "mixednuts-imagenet"],
    "commands": ["check", "transfer-params"]}


@hookimpl
def mixzoo_mixing_methods() -> dict[str, Any]:
    """``mixednuts`` (Bai et al. 2024a, the default), ``linear`` (constant alpha, Bai et al. 2024b, Eq. 3.4),
    ``adaptive-smoothing`` (a trained mixing network alpha_theta(x), Bai et al. 2024b, Sec. 4-5), ``knn-smoothing``,
    ``local-smoothing`` and ``local-smoothing-adaptive`` (locally biased smoothing, Bai et al. (local smoothing); the
    last with a trained policy, Eq. 7-9)."""
    from mixzoo.methods.adaptive.method import AdaptiveSmoothing
    from mixzoo.methods.linear import Linear
    from mixzoo.methods.local_smoothing.adaptive_method import LocalSmoothingAdaptive
    from mixzoo.methods.local_smoothing.method import KNNSmoothing, LocalSmoothing
    from mixzoo.methods.mixednuts.method import MixedNUTS

    return {"mixednuts": MixedNUTS(), "linear": Linear(), "adaptive-smoothing": AdaptiveSmoothing(),
            "knn-smoothing": KNNSmoothing(), "local-smoothing": LocalSmoothing(),
            "local-smoothing-adaptive": LocalSmoothingAdaptive()}


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """The attacks a method declares for its own classifier (its ``extra_attacks``): ``adaptive-smoothing-apgd``
    (setting D and the attack on the mixing network alone, Bai et al. 2024b, Sec. 4.2,
    :mod:`mixzoo.methods.adaptive.attacks`), ``adaptive-smoothing-gate`` (the attack on the mixing network's logit,
    :mod:`mixzoo.methods.adaptive.gate_attacks`) and ``local-smoothing-policy-gate`` (the same on the policy's logit,
    :mod:`mixzoo.methods.local_smoothing.policy_attacks`)."""
    from mixzoo.methods.adaptive.attacks import AlphaAPGD
    from mixzoo.methods.adaptive.gate_attacks import AdaptiveGateAttack
    from mixzoo.methods.local_smoothing.policy_attacks import PolicyGateAttack

    return {"adaptive-smoothing-apgd": AlphaAPGD, "adaptive-smoothing-gate": AdaptiveGateAttack,
            "local-smoothing-policy-gate": PolicyGateAttack}


@hookimpl
def mixzoo_cli_commands() -> dict[str, Any]:
    """MixedNUTS's ``mixzoo check`` (Bai et al. 2024a, App. D.9) and ``mixzoo transfer-params`` (App. D.5)."""
    from mixzoo_plugins.mixednuts_commands import check, transfer_params

    return {"check": check, "transfer-params": transfer_params}


@hookimpl
def mixzoo_cards() -> dict[str, Any]:
    """The paper's three published MixedNUTS models (Bai et al. 2024a, the authors' configs/optimal_spca.yaml), by file
    name: ``mixednuts-cifar10``, ``mixednuts-cifar100``, ``mixednuts-imagenet`` (package data in ``cards/``)."""
    from importlib import resources

    folder = resources.files("mixzoo_plugins") / "cards"
    return {f.name.removesuffix(".toml"): str(f) for f in folder.iterdir() if f.name.endswith(".toml")} \
        if folder.is_dir() else {}
