"""What every ``mixzoo`` command shares, the core's and the ones plugins add (hook ``mixzoo_cli_commands``): the
:func:`command` decorator (mixzoo's own errors and file-system refusals end a command with one line on stderr and
exit status 2), the parameter aliases, and :data:`out_console` (stdout) for tables; JSON (``--json``) is ``print``ed.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape

from mixzoo.core.budget import budget_help
from mixzoo.core.errors import MixzooError
from mixzoo.core.options import world_size_env
from mixzoo.core.progress import console


class WholeTables(console.__class__):  # type: ignore[misc]
    """stdout's console, with one rule for every table a command prints: on a terminal a table fits the terminal's
    width; without one (a pipe, a file) it is printed at its natural width, so that no name or number is cut or
    folded at 80 columns."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        from rich.measure import Measurement
        from rich.table import Table

        tables = [o for o in objects if isinstance(o, Table)]
        if not tables or self.is_terminal or kwargs.get("width") is not None:
            return super().print(*objects, **kwargs)
        wide = self.options.update(max_width=10_000)
        natural = max(Measurement.get(self, wide, t).maximum for t in tables)
        if natural <= self.width:
            return super().print(*objects, **kwargs)
        detected, self._width = self._width, natural
        try:
            return super().print(*objects, **kwargs)
        finally:
            self._width = detected


out_console = WholeTables()  # stdout (``console``, the progress bars' and errors', is stderr)

# options several commands share
DataDir = Annotated[str | None, typer.Option(help="directory holding the data set files")]
CacheDir = Annotated[Path | None, typer.Option(help="cache directory (default $MIXZOO_CACHE, else ~/.cache/mixzoo)")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="neither read nor write the cache")]
AllowUnsafe = Annotated[bool, typer.Option("--allow-unsafe", help="permit pickled checkpoints")]
AsJson = Annotated[bool, typer.Option("--json", help="machine-readable output")]
Device = Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1, ...; auto: cuda when a GPU is visible, "
                                          "else cpu (the report records which)")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print the plan (what will run, with an estimate from "
                                                        "timing a few calls) and stop; nothing is written")]
CardABC = Annotated[str | None, typer.Option(help="the ABC, if the card's name is not a registry name")]
CardRBC = Annotated[str | None, typer.Option(help="the RBC, if the card's name is not a registry name")]
Precision = Annotated[str, typer.Option(
    help="the attacks' arithmetic: float32 | tf32 (TF32 tensor cores, channels-last conv nets) | bf16 (bfloat16 "
         "autocast, faster on GPUs and CPUs with AVX-512 BF16 or AMX) | auto (bf16 on a GPU that has it, else tf32 "
         "on a GPU, float32 on a CPU); every break is re-checked in float32 and dropped if not confirmed")]
# the evaluation options `bench` and `sanity` share (mixzoo.core.settings.RunSettings)
AttackName = Annotated[str | None, typer.Option(
    "--attack", help="the shared attack: adaptive (App. B.2.1) | adaptive-strong (+ exact, bypass and re-seeded "
                     "APGD) | adaptive-apgd | autoattack | apgd | pgd | a plugin's (default: the budget's, else "
                     "the command's)")]
Budget = Annotated[str, typer.Option("--budget", help=budget_help())]
ExtraAttacks = Annotated[bool, typer.Option(help="run the extra attacks each card's method declares")]
PerExampleSeeds = Annotated[bool, typer.Option(
    "--per-example-seeds/--batch-seeds", help="draw every attack's randomness per example index, so results do "
    "not depend on --batch-size or the number of processes; --batch-seeds: seed + k for batch k")]
Baseline = Annotated[bool, typer.Option("--baseline/--no-baseline", "--linear/--no-linear",
                                        help="add the matched baseline (linear) row")]

F = TypeVar("F", bound=Callable[..., Any])


def command(fn: F) -> F:
    """Turn mixzoo's own errors, and file-system refusals, into one line on stderr and exit status 2; warnings are
    printed as one line each (``warning: MESSAGE``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            from mixzoo.core.checks import check_int_arguments

            check_int_arguments(kwargs)  # `--n 99999999999999999999` fits no tensor, seed or count
            launched = world_size_env()[0] > 1  # `WORLD_SIZE=abc`: one line before any work
            with warnings.catch_warnings():  # the filters stay the user's; only the printing changes
                warnings.showwarning = show_warning
                result = fn(*args, **kwargs)
            if launched:  # under torchrun: every rank done before any leaves
                from mixzoo.core.distributed import finish

                finish()
            return result
        except MixzooError as exc:
            message = str(exc)
        except KeyboardInterrupt:  # Ctrl-C: finished batches are in the cache, a re-run starts from them
            console.print(interrupted_message(kwargs), highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `mixzoo list | head`: the reader has gone, nothing to say (Python docs' recipe)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except OSError as exc:  # a file system refusal the up-front checks could not foresee (disk full, ...)
            where = f": {exc.filename}" if exc.filename else ""
            message = f"{exc.strerror or exc}{where}"
        except (MemoryError, RuntimeError) as exc:  # memory that cannot be allocated is the user's to lower
            from mixzoo.core.plugins.guard import out_of_memory

            problem = out_of_memory(exc, "run the command")
            if problem is None:
                raise
            message = str(problem)
        console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def interrupted_message(kwargs: dict[str, Any]) -> str:
    """What Ctrl-C prints: for a command that caches its work, that the same command resumes from the cache."""
    if "no_cache" not in kwargs:
        return "interrupted"
    if kwargs["no_cache"]:
        return "interrupted; nothing was cached (--no-cache): a re-run starts from the beginning"
    return "interrupted; finished work is in the cache: run the same command again to resume from it"


def examples(*lines: str) -> Callable[[F], F]:
    """Give a command two or three example command lines, shown at the end of its ``--help`` (``epilog_of``)."""

    def mark(fn: F) -> F:
        fn.examples = tuple(lines)  # type: ignore[attr-defined]
        return fn

    return mark


def epilog_of(fn: Callable[..., Any]) -> str | None:
    """The ``--help`` epilog of a command function: its :func:`examples`, one per paragraph."""
    lines = getattr(fn, "examples", ())
    return "Examples:\n\n" + "\n\n".join(f"  {line}" for line in lines) if lines else None


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
    """A warning as one line on stderr, ``warning: MESSAGE`` (no file name, no source line)."""
    text = " ".join(str(message).split())
    console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False, soft_wrap=True)


def command_line() -> str:
    """The command line as typed, for a card's provenance (:attr:`mixzoo.methods.FitRequest.command`)."""
    return "mixzoo " + " ".join(shlex.quote(a) for a in sys.argv[1:])


__all__ = ["AllowUnsafe", "AsJson", "CacheDir", "CardABC", "CardRBC", "DataDir", "DryRun", "NoCache",
           "Precision", "WholeTables", "command", "command_line", "epilog_of", "examples", "interrupted_message",
           "out_console", "show_warning"]
