"""A command: ``mixzoo example-accuracy MODEL``, a model's clean accuracy on a split of its data set.

A command is a typer function decorated with :func:`mixzoo.core.commands.command` (mixzoo's errors become one line
and exit status 2), a thin layer over a library function (:func:`clean_accuracy`) that Python users call as well.
This module imports no torch at module level: ``mixzoo --help`` imports it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mixzoo.core.commands import command


def clean_accuracy(model: str, split: str = "evaluation", n: int | None = 200) -> float:
    """The share of the first ``n`` examples of ``split`` of the model's data set that ``model`` classifies right."""
    import torch

    import mixzoo
    from mixzoo.zoo.data import load_dataset

    net = mixzoo.load_model(model)
    data = load_dataset(net.spec.dataset, split, n)
    with torch.no_grad():
        return float((net(data.images).argmax(1) == data.labels).float().mean())


@command
def accuracy_command(
    model: Annotated[str, typer.Argument(help="a model name (`mixzoo list`)")],
    split: Annotated[str, typer.Option(help="train | calibration | evaluation")] = "evaluation",
    n: Annotated[int, typer.Option(help="examples (the first n of the split)")] = 200,
) -> None:
    """Print the clean accuracy of MODEL on a split of its data set."""
    print(f"{model}: {clean_accuracy(model, split, n):.1%} clean accuracy on {split}")
