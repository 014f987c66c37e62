"""Model sources: the loader of a spec is picked by its ``source.kind`` from the merged table of the hook
``mixzoo_model_sources``, so a loader sees only its own kinds and its errors are never passed over. A kind no
table provides is asked of the deprecated hook ``mixzoo_load_model`` (plugins written before the table), with a
``DeprecationWarning``."""

from __future__ import annotations

import warnings
from typing import Any

from mixzoo.core.errors import MixzooError, PluginError
from mixzoo.core.moved import REMOVED_IN
from mixzoo.core.plugins.guard import guarded_call
from mixzoo.core.plugins.hooks import first_answer
from mixzoo.core.plugins.manager import get_plugin_manager
from mixzoo.core.plugins.state import STATE
from mixzoo.core.plugins.tables import provider

OLD_HOOK = "mixzoo_load_model"
OLD_HOOK_DEPRECATED = (f"mixzoo.core.hookspecs.{OLD_HOOK} is deprecated and will be removed in mixzoo {REMOVED_IN};"
                       " return {kind: loader} from the hook mixzoo_model_sources instead (loader(spec, device,"
                       " allow_unsafe) returns the network)")


def load_network(spec: Any, device: str, allow_unsafe: bool) -> Any:
    """The network of ``spec`` (a :class:`~mixzoo.core.model_spec.ModelSpec`) from the loader of its source kind:
    the table's, else the first answer of the deprecated ``mixzoo_load_model``. A loader's exception is one line
    naming the plugin and the model (:func:`~mixzoo.core.plugins.guard.guarded_call`); a kind two plugins provide,
    or none, is a one-line error naming them or the fix."""
    kind = str(spec.source.get("kind"))
    doing = f"load model {spec.name!r}"
    found = provider("source", kind)
    if found is not None:
        plugin_name, loader = found
        network = guarded_call(plugin_name, doing, loader, spec, device, allow_unsafe)
        _check_network(network, plugin_name, kind, spec.name)
        return network
    answer = first_answer(OLD_HOOK, doing, spec=spec, device=device, allow_unsafe=allow_unsafe)
    if answer is None:
        raise MixzooError(f"no installed plugin loads source kind {kind!r} (model {spec.name!r}); install the plugin"
                          " that provides it (see `mixzoo plugins`)")
    plugin_name, network = answer
    STATE.record_deprecation(plugin_name, OLD_HOOK_DEPRECATED)
    warnings.warn(f"plugin {plugin_name!r} loads source kind {kind!r} through {OLD_HOOK}: {OLD_HOOK_DEPRECATED}",
                  DeprecationWarning, stacklevel=3)
    return network


def _check_network(network: Any, plugin_name: str, kind: str, model: str) -> None:
    from torch import nn

    if not isinstance(network, nn.Module):
        raise PluginError(f"plugin {plugin_name!r}'s loader for source kind {kind!r} returned"
                          f" {type(network).__name__} for model {model!r}, not an nn.Module; report it to the"
                          " plugin's author")


def note_old_loaders() -> None:
    """Record, for ``mixzoo plugins --check``, each plugin that still implements the deprecated hook."""
    for plugin_name, plugin in get_plugin_manager().list_name_plugin():
        if plugin_name is not None and getattr(plugin, OLD_HOOK, None) is not None:
            STATE.record_deprecation(plugin_name, OLD_HOOK_DEPRECATED)
