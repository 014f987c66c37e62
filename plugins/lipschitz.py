"""Plugin ``lipschitz``: the 1-Lipschitz zoo architecture ``lipconvnet`` (:mod:`mixzoo_plugins.lipschitz_arch`), hook
``mixzoo_architectures``; torch and deel-torchlip load when a network is built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mixzoo.core.plugins import hookimpl

PROVIDES = {"architectures": ["lipconvnet"]}  # what `mixzoo plugins` lists

if TYPE_CHECKING:
    from mixzoo_plugins.lipschitz_arch import LipConvNet


def build_lipconvnet(**kwargs: Any) -> LipConvNet:
    """``lipconvnet``: :class:`~mixzoo_plugins.lipschitz_arch.LipConvNet` with the registry's keyword arguments."""
    from mixzoo_plugins.lipschitz_arch import LipConvNet

    return LipConvNet(**kwargs)


@hookimpl
def mixzoo_architectures() -> dict[str, Any]:
    """``lipconvnet``, for training recipes and the zoo loader."""
    return {"lipconvnet": build_lipconvnet}
