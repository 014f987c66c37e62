"""Sharing: mix cards on the Hugging Face Hub (hook ``mixzoo_resolve_card``): ``hf-hub:ORG/NAME[@REVISION]`` wherever
a card is taken (``mixzoo.load_mixed``, ``mixzoo bench``, ``mixzoo certify``), read from the local Hugging Face cache
(:func:`mixzoo.share.hub.resolve_card`); and the commands ``mixzoo push``, ``export`` and ``report``
(hook ``mixzoo_cli_commands``, as any plugin adds commands)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl

PROVIDES = {"commands": ["export", "push", "report"]}  # what `mixzoo plugins` lists


@hookimpl
def mixzoo_resolve_card(name: str) -> str | None:
    from mixzoo.share.hub import HUB_PREFIX, resolve_card

    return str(resolve_card(name)) if name.startswith(HUB_PREFIX) else None


@hookimpl
def mixzoo_cli_commands() -> dict[str, Any]:
    """``mixzoo push`` (a card to the Hub), ``mixzoo export`` (torch.export / ONNX) and ``mixzoo report`` (a bench
    report in another format, e.g. RobustBench's)."""
    from mixzoo.cli.share import commands

    return commands()
