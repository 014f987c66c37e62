"""Every hook a mixzoo plugin can implement.

A plugin is a module (or object) registered under the entry-point group ``mixzoo``; it implements any subset of
the hooks below, decorated with :data:`mixzoo.hookimpl`. The built-in plugins in ``plugins/`` are ordinary
plugins registered the same way, so each hook here has at least one real implementation in this repository.

Hooks that *collect* (model specs, model sources, clamps, attacks, optimizers, datasets, mixing methods, cards) are
called on every plugin and their results are merged by :mod:`mixzoo.core.plugins`; a name provided twice is left out
and reported by ``mixzoo plugins``, and using it is an error naming both plugins (the other names keep working).
Hooks that *resolve* (a name that is not in any registry, a weights directory, a card reference) are
``firstresult``: plugins answer ``None`` for what they do not handle and the first non-``None`` answer wins.
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
    """Registry entries (accurate and robust models) this plugin provides.

    Called once when the registry is first built (``mixzoo list``, ``load_model``, ...). Return a list of
    :class:`~mixzoo.core.registry.ModelSpec` or plain dicts with the fields of a ``registry.toml`` entry; dicts are
    validated exactly like the file. Each entry's ``source.kind`` must be a kind some plugin can load
    (see :func:`mixzoo_model_sources`).
    """


@hookspec(firstresult=True)
def mixzoo_resolve_model_name(name: str) -> ModelSpec | None:
    """Build a spec for a name that is in no registry (e.g. ``hf-hub:timm/...`` or a RobustBench
    ``dataset/threat/Name``). Called only when the registry lookup fails; return ``None`` if the name is not
    of a form this plugin understands. First non-``None`` result wins."""


@hookspec
def mixzoo_model_sources() -> dict[str, Callable[[ModelSpec, str, bool], torch.nn.Module]]:
    """Model loaders by source kind: ``{kind: loader}``, called as ``loader(spec, device, allow_unsafe)`` for every
    spec whose ``spec.source['kind']`` is ``kind``.

    Called once when a model is first loaded (:func:`mixzoo.load_model`); mixzoo picks the loader by the spec's
    kind, so a loader sees only its own kinds. It returns a plain ``nn.Module`` taking NORMALIZED input (NCHW float32
    at ``spec.input_size``) and returning logits: mixzoo wraps it in :class:`mixzoo.zoo.models.BaseClassifier`,
    which applies the spec's ``mean`` / ``std`` to [0, 1] images, freezes it and puts it in eval mode. A network that
    normalizes internally needs a spec with ``mean = [0.0]``, ``std = [1.0]`` (or return a ready
    ``BaseClassifier``), else it normalizes twice. An exception raised by a loader is reported as a one-line error
    naming the plugin and the model; a :class:`~mixzoo.core.errors.MixzooError` it raises on purpose passes as it
    is. ``allow_unsafe`` is the user's explicit permission to unpickle arbitrary checkpoint objects; without it
    only safetensors or ``torch.load(weights_only=True)`` may be used. A kind two plugins provide is left out, and
    loading a model of that kind is an error naming both.
    """


@hookspec(firstresult=True)
def mixzoo_load_model(spec: ModelSpec, device: str, allow_unsafe: bool) -> torch.nn.Module | None:
    """Deprecated (removed in mixzoo 0.3): return ``{kind: loader}`` from :func:`mixzoo_model_sources` instead.

    Load the network behind ``spec`` when ``spec.source['kind']`` is a kind this plugin handles (what a
    :func:`mixzoo_model_sources` loader returns), else return ``None``. Asked, with a ``DeprecationWarning``, only
    for a kind no :func:`mixzoo_model_sources` table provides; a plugin whose hook raises for a kind another plugin
    loads is passed over. First non-``None`` result wins.
    """


@hookspec
def mixzoo_architectures() -> dict[str, Callable[..., torch.nn.Module]]:
    """Network architectures by name (``source.arch`` of a registry entry, ``arch`` of a training recipe).

    Called when :mod:`mixzoo.training` builds a recipe's network. Each value is a constructor
    ``builder(**kwargs) -> nn.Module`` returning a freshly initialised network that takes NORMALIZED input and
    returns logits (as a :func:`mixzoo_model_sources` loader returns).
    """


@hookspec(firstresult=True)
def mixzoo_weights_dir(kind: str) -> Path | None:
    """The directory that relative weight files (``source.file``) of source kind ``kind`` are read from, or
    ``None`` for kinds this plugin does not load. ``mixzoo train`` writes re-trained weights there when they
    reproduce the registry's ``sha256``. First non-``None`` result wins.
    """


@hookspec
def mixzoo_clamp_functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Clamp functions for the RBC transform M(s, p, c) (Bai et al. 2024a, Eq. 4, App. D.2), by name.

    Called once when clamps are first looked up. Each function maps a tensor elementwise to a tensor of the
    same shape and must be differentiable where attacks need gradients.
    """


@hookspec
def mixzoo_attacks() -> dict[str, Any]:
    """Attacks by name (``mixzoo bench --attack NAME``).

    Called once when attacks are first looked up. Each value is an :class:`mixzoo.attacks.Attack` subclass or a
    factory with the same call signature: ``factory(eps=..., norm=..., seed=..., **options)`` returning an
    object whose ``run(model, images, labels)`` returns an :class:`mixzoo.attacks.AttackResult`. A ``run`` that
    also takes ``index`` draws its randomness per example; one that takes ``precision`` can run under
    ``--precision bf16`` (it must then judge its breaks in float32, as :meth:`mixzoo.attacks.Attack.run` does);
    any other is refused there.
    """


@hookspec
def mixzoo_calibration_optimizers() -> dict[str, Callable[..., Any]]:
    """Searches that solve the surrogate problem (Bai et al. 2024a, Eq. 7), by name (``calibrate(optimizer=NAME)``).

    Called once when optimizers are first looked up. Each value is
    ``optimizer(problem: mixzoo.methods.mixednuts.calibrate.CalibrationProblem, grid:
    mixzoo.methods.mixednuts.calibrate.Grid) -> SearchResult``;
    the Plugin rules page ("Calibration optimizers") documents ``problem.evaluate`` / ``best_index`` / ``result``
    and the fields of :class:`~mixzoo.methods.mixednuts.calibrate.SearchResult`.
    """


@hookspec
def mixzoo_datasets() -> dict[str, Any]:
    """Datasets by name (``--dataset NAME``).

    Called once when datasets are first looked up. Each value is a factory
    ``factory(split: str, n: int | None, root: str | None, **options) -> mixzoo.zoo.data.ImageDataset`` returning
    the first ``n`` examples (all if ``None``) of split ``"train"``, ``"calibration"`` or ``"evaluation"``;
    calibration and evaluation never overlap, and models shipped for the dataset are not trained on calibration
    images. ``root`` is a user-named data directory or file (or ``None``; ``--dataset NAME:PATH`` names it too);
    ``options`` are dataset-specific (e.g. ``size`` for ``imagenet``). A factory whose signature has
    ``input_size`` and ``num_classes`` keywords receives the models' (for data that does not declare them, like
    the built-in ``imagefolder`` and ``npz``); other factories never see them. Call it through
    :func:`mixzoo.zoo.data.load_dataset`.
    """


@hookspec
def mixzoo_mixing_methods() -> dict[str, Any]:
    """Mixing methods by name (``mixzoo mix --method NAME``; the ``method`` field of a mix card).

    Called once when methods are first looked up. Each value is an instance of a subclass of
    :class:`mixzoo.methods.MixingMethod`, whose members are everything the rest of mixzoo asks of a method (its
    module docstring lists them with their defaults): it validates its card section, builds the mixed ``nn.Module``
    ([0, 1] images -> log-probabilities) and its gradient variants, fits the section from data with typed options,
    and declares the extra adaptive attacks an honest evaluation of it needs, which bench, sanity and the matched
    baseline run without knowing the method. A method with ``default = True`` is what ``mixzoo mix`` fits when no
    ``--method`` is given, one with ``baseline = True`` the bench's matched row (one of each at most).
    """


@hookspec
def mixzoo_cli_commands() -> dict[str, Callable[..., Any]]:
    """Commands a plugin adds to the ``mixzoo`` CLI, by name (as pytest plugins add options).

    Each value is a function typer turns into a command: parameters typed with ``typing.Annotated[T,
    typer.Option(help=...)]`` (or the shared aliases of :mod:`mixzoo.core.commands`), its docstring the help,
    decorated with :func:`mixzoo.core.commands.command` (one-line errors, exit status 2). Called only when the CLI
    lists its commands (``mixzoo --help``) or is given a name that is not one of the core's (which always win); import
    the command's module inside the hook so that loading the plugin stays cheap. MixedNUTS's ``check`` and
    ``transfer-params`` come this way.
    """


@hookspec
def mixzoo_cards() -> dict[str, Any]:
    """Published mix cards by name (``mixzoo bench NAME``, ``mixzoo.load_mixed(NAME)``).

    Called once when cards are first looked up. Each value is the path of a card file (TOML or JSON) shipped with
    the plugin, e.g. the paper's published MixedNUTS parameters for a pair of published models.
    """


@hookspec(firstresult=True)
def mixzoo_resolve_card(name: str) -> str | None:
    """The local file of a mix card named by a reference that is neither a file nor a published card's name (e.g.
    ``hf-hub:ORG/NAME``), or ``None`` for references the plugin does not handle.

    :meth:`mixzoo.core.card.MixCard.load` asks it, so every command and function that takes a card accepts such
    references. The card's weight files must lie next to the returned file.
    """
