"""Every hook a mixzoo plugin can implement.

A plugin is a module (or object) registered under the entry-point group ``mixzoo``, as the built-ins in
``plugins/`` are; it implements any subset of these hooks, decorated with :data:`mixzoo.hookimpl`.

Hooks that *collect* are called on every plugin and their answers merged by :mod:`mixzoo.core.plugins`: a name two
plugins provide is left out, reported by ``mixzoo plugins``, and using it is an error naming both. Hooks that
*resolve* are ``firstresult``: a plugin answers ``None`` for what it does not handle; the first other answer wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import torch

    from mixzoo.core.model_spec import ModelSpec

hookspec = pluggy.HookspecMarker("mixzoo")


@hookspec
def mixzoo_model_specs() -> list[ModelSpec | dict[str, Any]]:
    """Registry entries: :class:`~mixzoo.core.registry.ModelSpec` objects or dicts of a ``registry.toml`` entry's
    fields (validated as the file is), each of a ``source.kind`` some :func:`mixzoo_model_sources` loads. Called
    once, when the registry is first built."""


@hookspec(firstresult=True)
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """A spec for a name no registry has (``hf-hub:timm/...``, a RobustBench ``dataset/threat/Name``), or ``None``
    for names of a form this plugin does not understand. Called only when the registry lookup fails."""


@hookspec
def mixzoo_model_sources() -> dict[str, Callable[[ModelSpec, str, bool], torch.nn.Module]]:
    """Model loaders by source kind, ``{kind: loader}``; called once, when a model is first loaded.

    ``loader(spec, device, allow_unsafe)`` gets only specs of its ``kind`` and returns a plain ``nn.Module`` taking
    NORMALIZED input (NCHW float32 at ``spec.input_size``) and returning logits: mixzoo wraps it in
    :class:`mixzoo.zoo.models.BaseClassifier`, which applies the spec's ``mean`` / ``std`` to [0, 1] images, freezes
    it and sets eval mode (a network that normalizes itself needs ``mean = [0.0]``, ``std = [1.0]``, or return a
    ready ``BaseClassifier``). Without ``allow_unsafe`` (the user's permission to unpickle arbitrary objects) only
    safetensors or ``torch.load(weights_only=True)`` may be used. A loader's exception is one line naming the plugin
    and the model; a :class:`~mixzoo.core.errors.MixzooError` raised on purpose passes as it is.
    """


@hookspec(firstresult=True)
def mixzoo_load_model(spec: ModelSpec, device: str, allow_unsafe: bool) -> torch.nn.Module | None:
    """Deprecated (removed in mixzoo 0.3; use :func:`mixzoo_model_sources`): the network behind ``spec`` (as a
    loader returns it), or ``None`` for kinds this plugin does not handle. Asked, with a ``DeprecationWarning``, only
    for a kind no :func:`mixzoo_model_sources` provides; a plugin that raises for another plugin's kind is passed
    over."""


@hookspec
def mixzoo_architectures() -> dict[str, Callable[..., torch.nn.Module]]:
    """Network architectures by name (``source.arch`` of a registry entry, ``arch`` of a training recipe): each
    ``builder(**kwargs)`` returns a freshly initialised network taking NORMALIZED input and returning logits.
    Called when :mod:`mixzoo.training` builds a recipe's network."""


@hookspec(firstresult=True)
def mixzoo_weights_dir(kind: str) -> Path | None:
    """The directory relative weight files (``source.file``) of source kind ``kind`` are read from (and ``mixzoo
    train`` writes weights that reproduce the registry's ``sha256`` to), or ``None`` for other kinds."""


@hookspec
def mixzoo_clamp_functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Clamp functions of the RBC transform M(s, p, c) (Bai et al. 2024a, Eq. 4, App. D.2) by name: elementwise,
    shape-preserving, differentiable where attacks need gradients. Called once, at the first lookup."""


@hookspec
def mixzoo_attacks() -> dict[str, Any]:
    """Attacks by name (``mixzoo bench --attack NAME``); called once, at the first lookup.

    Each value is an :class:`mixzoo.attacks.Attack` subclass or a factory ``factory(eps=..., norm=..., seed=...,
    **options)`` whose result's ``run(model, images, labels)`` returns an :class:`mixzoo.attacks.AttackResult`. A
    ``run`` taking ``index`` draws its randomness per example; only one taking ``precision`` runs under
    ``--precision bf16`` (judging its breaks in float32, as :meth:`mixzoo.attacks.Attack.run` does).
    """


@hookspec
def mixzoo_calibration_optimizers() -> dict[str, Callable[..., Any]]:
    """Searches solving the surrogate problem (Bai et al. 2024a, Eq. 7) by name (``calibrate(optimizer=NAME)``):
    ``optimizer(problem: CalibrationProblem, grid: Grid) -> SearchResult`` (:mod:`mixzoo.methods.mixednuts.calibrate`;
    the Plugin rules page, "Calibration optimizers", documents ``problem``). Called once, at the first lookup."""


@hookspec
def mixzoo_datasets() -> dict[str, Any]:
    """Datasets by name (``--dataset NAME``); called once, at the first lookup; read through
    :func:`mixzoo.zoo.data.load_dataset`.

    ``factory(split, n, root, **options) -> mixzoo.zoo.data.ImageDataset``: the first ``n`` examples (all if
    ``None``) of ``"train"``, ``"calibration"`` or ``"evaluation"``; calibration and evaluation never overlap, and
    the dataset's shipped models are not trained on calibration images. ``root`` is a user-named directory or file
    (``--dataset NAME:PATH``) or ``None``; ``options`` are the dataset's own (``size`` for ``imagenet``). A factory
    with ``input_size`` and ``num_classes`` keywords receives the models' (for data that does not declare them).
    """


@hookspec
def mixzoo_mixing_methods() -> dict[str, Any]:
    """Mixing methods by name (``mixzoo mix --method NAME``; a card's ``method`` field); called once, at the first
    lookup. Each value is an instance of a :class:`mixzoo.methods.MixingMethod` subclass (its module docstring lists
    the members). At most one has ``default = True`` (what ``mixzoo mix`` fits without ``--method``) and one
    ``baseline = True`` (the bench's matched row)."""


@hookspec
def mixzoo_cli_commands() -> dict[str, Callable[..., Any]]:
    """CLI commands by name: typer functions (parameters ``Annotated[T, typer.Option(help=...)]``, the docstring
    the help) decorated with :func:`mixzoo.core.commands.command`. Called only when the CLI lists its commands or
    is given a name that is not a core command's (core names win); import the command's module inside the hook."""


@hookspec
def mixzoo_cards() -> dict[str, Any]:
    """Published mix cards by name (``mixzoo bench NAME``, ``mixzoo.load_mixed(NAME)``): the path of a card file
    (TOML or JSON) shipped with the plugin. Called once, at the first lookup."""


@hookspec(firstresult=True)
def mixzoo_resolve_card(name: str) -> str | None:
    """The local file of a card reference that is neither a file nor a published card (``hf-hub:ORG/NAME``), its
    weight files next to it, or ``None`` for references this plugin does not handle. Asked by
    :meth:`mixzoo.core.card.MixCard.load`, so every card argument accepts such references."""
