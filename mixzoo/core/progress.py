"""Rich progress bars that can be switched off (tests, ``--json``), one live display at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


class _NoProgress:
    def add_task(self, *args, **kwargs) -> int:
        return 0

    def advance(self, *args, **kwargs) -> None:
        pass

    def update(self, *args, **kwargs) -> None:
        pass


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress | _NoProgress]:
    """A rich :class:`Progress` (on stderr) or a do-nothing stand-in with the same methods."""
    if not enabled:
        yield _NoProgress()
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        yield bar
