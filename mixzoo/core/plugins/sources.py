"""Model sources: the loader of a spec is picked by its ``source.kind`` from the merged table of the hook
``mixzoo_model_sources``, so a loader sees only its own kinds and its errors are never passed over."""

from __future__ import annotations

from typing import Any

from mixzoo.core.errors import MixzooError, PluginError
from mixzoo.core.plugins.guard import guarded_call
from mixzoo.core.plugins.tables import provider


def load_network(spec: Any, device: str, allow_unsafe: bool) -> Any:
    """The network of ``spec`` (a :class:`~mixzoo.core.model_spec.ModelSpec`) from the loader of its source kind
    in the table. A loader's exception is one line naming the plugin and the model
    (:func:`~mixzoo.core.plugins.guard.guarded_call`); a kind two plugins provide, or none, is a one-line error
    naming them or the fix."""
    kind = str(spec.source.get("kind"))
    found = provider("source", kind)
    if found is None:
        raise MixzooError(f"no installed plugin loads source kind {kind!r} (model {spec.name!r}); install the plugin"
                          " that provides it (see `mixzoo plugins`)")
    plugin_name, loader = found
    network = guarded_call(plugin_name, f"load model {spec.name!r}", loader, spec, device, allow_unsafe)
    _check_network(network, plugin_name, kind, spec.name)
    return network


def _check_network(network: Any, plugin_name: str, kind: str, model: str) -> None:
    from torch import nn

    if not isinstance(network, nn.Module):
        raise PluginError(f"plugin {plugin_name!r}'s loader for source kind {kind!r} returned"
                          f" {type(network).__name__} for model {model!r}, not an nn.Module; report it to the"
                          " plugin's author")
