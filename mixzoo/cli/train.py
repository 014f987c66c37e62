"""``mixzoo train``: a model of the built-in zoo from its deterministic recipe
(:func:`mixzoo.training.train.train_model`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from mixzoo.core.commands import command, examples, out_console


@command
@examples('mixzoo train --list', 'mixzoo train digits-pgd --out weights/')
def train(
    name: Annotated[str, typer.Argument(help="zoo recipe name (see `mixzoo train --list`)")] = "",
    list_recipes: Annotated[bool, typer.Option("--list", help="list recipes")] = False,
    seed: Annotated[int | None, typer.Option(help="override the recipe's seed (needs --out: the weights then "
                                                   "differ from the shipped ones)")] = None,
    out: Annotated[Path | None, typer.Option(help="directory for NAME.safetensors and NAME.sha256 (default: "
                                                  "plugins/weights/, written only when the result reproduces the "
                                                  "shipped sha256)")] = None,
) -> None:
    """Train a model of the built-in zoo from its deterministic recipe (weights go to --out, or to plugins/weights/
    only when they reproduce the shipped file)."""
    from mixzoo.training import train as training

    if list_recipes or not name:
        for recipe in training.RECIPES:
            out_console.print(recipe)
        return
    result = training.train_model(name, out, seed=seed)
    out_console.print(result)


COMMANDS: dict[str, Callable[..., None]] = {"train": train}
