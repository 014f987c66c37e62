"""Progress on stderr: rich bars on a terminal, one plain line every :data:`PLAIN_INTERVAL` seconds without one
(a log file, CI), and over both one overall line, "phase k of m" with an ETA, while a command runs the phases of its
plan (:func:`phases`, :func:`next_phase`). Bars can be switched off (tests, ``--json``); one live display at a time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)

PLAIN_INTERVAL = 30.0  # seconds between two plain progress lines when stderr is not a terminal
SCALED_FROM_S = 2.0  # a phase estimated below this many seconds does not rescale the ETA of the others
MAX_SCALE = 2.0  # the finished phases rescale the later ones' estimates by at most this factor either way


def clock(seconds: float | None) -> str:
    """``73`` -> ``1:13``, ``3725`` -> ``1:02:05``; ``?`` when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    s = round(seconds)
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Phases:
    """The phases of a command's plan, in order, with their estimated seconds: which one runs, how long the whole
    has taken and how long it should still take (:meth:`eta`). ``now`` is the clock (seconds; a test's fake)."""

    def __init__(self, names: Sequence[str], estimates: Sequence[float | None] | None = None, *,
                 now: Callable[[], float] = time.perf_counter) -> None:
        self.names = list(names)
        self.estimates = list(estimates) if estimates is not None else [None] * len(self.names)
        self.now = now
        self.k = 0  # 1-based index of the running phase; 0 before the first
        self.t0 = now()
        self.phase_t0 = self.t0
        self.took: list[float] = []
        self.bar: tuple[str, float, float | None] | None = None  # the running bar: description, completed, total
        self.bar_t0 = self.t0  # when the running bar started (its first count seen in this phase)
        self.bar_tc = self.t0  # when the running bar last counted

    def advance(self, name: str | None = None) -> None:
        now = self.now()
        if self.k:
            self.took.append(now - self.phase_t0)
        self.k = min(self.k + 1, len(self.names))
        if name is not None and self.k:
            self.names[self.k - 1] = name
        self.phase_t0, self.bar = now, None

    def show(self, description: str, completed: float, total: float | None) -> None:
        """The running phase's bar stands at ``completed`` of ``total``: a new bar (another description, or its count
        back below the last) starts its own clock."""
        now = self.now()
        if self.bar is None or self.bar[0] != description or completed < self.bar[1]:
            self.bar_t0 = self.bar_tc = now
        elif completed > self.bar[1]:
            self.bar_tc = now
        self.bar = (description, float(completed), total)

    def scale(self) -> float:
        """How the finished phases' measured time compares with their estimates, counting only phases estimated at
        :data:`SCALED_FROM_S` or more (a phase planned at about nothing, e.g. cached, that takes seconds says nothing
        about the others), within [1 / :data:`MAX_SCALE`, :data:`MAX_SCALE`]; 1 when none counts."""
        pairs = [(t, e) for t, e in zip(self.took, self.estimates, strict=False) if e and e >= SCALED_FROM_S]
        if not pairs:
            return 1.0
        return min(MAX_SCALE, max(1.0 / MAX_SCALE, sum(t for t, _ in pairs) / sum(e for _, e in pairs)))

    def running_left(self) -> float:
        """Seconds left of the running phase: its estimate (times :meth:`scale`) less its time so far, and, once its
        bar has counted some of its total, the bar's measured pace over what the bar has left; the two weighed by
        the bar's done share ``d``: the measured pace by ``1 - (1 - d)^2``. Between two counts the measured part
        counts down from what the last count left (at least 0), as the plan's part does."""
        current = self.estimates[self.k - 1] if self.k else None
        planned = None if current is None else max(0.0, self.scale() * current - (self.now() - self.phase_t0))
        if not (self.bar and self.bar[2] and self.bar[1] > 0):
            return planned or 0.0
        done = min(1.0, self.bar[1] / self.bar[2])
        measured = max(0.0, (self.bar_tc - self.bar_t0) * (1.0 - done) / done - (self.now() - self.bar_tc))
        trust = 1.0 - (1.0 - done) ** 2  # the measured pace's weight: early counts say little, late ones most
        return measured if planned is None else trust * measured + (1.0 - trust) * planned

    def eta(self) -> float | None:
        """Seconds still to go, or None when nothing is estimated: the running phase's (:meth:`running_left`) and
        the later phases' estimates times :meth:`scale`."""
        left = [e for e in self.estimates[self.k:] if e is not None]
        if not left and not self.k:
            return None
        return self.scale() * sum(left) + self.running_left()

    def line(self) -> str:
        name = self.names[self.k - 1] if self.k else "starting"
        text = f"phase {max(self.k, 1)} of {len(self.names)}: {name}"
        if self.bar:
            desc, done, total = self.bar
            text += f" ({desc} {int(done)}/{int(total)})" if total else f" ({desc})"
        return f"{text}; elapsed {clock(self.now() - self.t0)}, ETA {clock(self.eta())}"


_phases: Phases | None = None


class _Ticker:
    """Prints ``progress: LINE`` on stderr every ``interval`` seconds from a daemon thread until stopped (without
    ``repeat``: only when LINE differs from the one printed before)."""

    def __init__(self, line: Any, interval: float, *, repeat: bool = True) -> None:
        self._line, self._stop, self._repeat = line, threading.Event(), repeat
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        last = None
        while not self._stop.wait(interval):
            text = self._line()
            if text and (self._repeat or text != last):
                console.print(f"progress: {escape(text)}", highlight=False, soft_wrap=True)
            last = text

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def phases(names: Sequence[str], estimates: Sequence[float | None] | None = None, *, enabled: bool = True,
           interval: float | None = None) -> Iterator[Phases]:
    """Run the body as the phases ``names`` (estimated ``estimates`` seconds each); call :func:`next_phase` as each
    starts. Every bar shown meanwhile carries the overall line; without a terminal a plain line is printed every
    ``interval`` seconds (default :data:`PLAIN_INTERVAL`)."""
    global _phases
    enabled = enabled and bool(names)
    outer, tracker = _phases, Phases(names, estimates)
    _phases = tracker if enabled else None
    ticker = _Ticker(tracker.line, interval or PLAIN_INTERVAL) if enabled and not console.is_terminal else None
    try:
        yield tracker
    finally:
        if ticker is not None:
            ticker.stop()
        _phases = outer
        _announced.clear()


_announced: list[str] = []  # a plan's lines, printed (stderr) when the first phase starts


def announce(lines: Sequence[str]) -> None:
    """Print ``lines`` (a plan) on stderr when the next phase starts, so a command that refuses its arguments first
    prints only its one-line error."""
    _announced[:] = list(lines)


def next_phase(name: str | None = None) -> None:
    """The next phase of the running :func:`phases` starts (``name`` replaces its planned name); else nothing.
    A plan :func:`announce` d before is printed first."""
    if _announced:
        from rich.markup import escape

        for line in _announced:
            console.print(escape(line), highlight=False, soft_wrap=True)
        _announced.clear()
    if _phases is not None:
        _phases.advance(name)


class _NoProgress:
    def add_task(self, *args, **kwargs) -> int:
        return 0

    def advance(self, *args, **kwargs) -> None:
        pass

    def update(self, *args, **kwargs) -> None:
        pass


class _PlainProgress(_NoProgress):
    """Without a terminal: the bars' counts, shown by the overall plain line (or by a line of their own every
    ``interval`` seconds when no phases run)."""

    def __init__(self, interval: float) -> None:
        self.tasks: dict[int, list[Any]] = {}
        # its own line carries no clock: one that says nothing new (no bar advanced) is not printed again
        self._ticker = None if _phases is not None else _Ticker(self.line, interval, repeat=False)

    def add_task(self, description: str, total: float | None = None, **kwargs: Any) -> int:
        self.tasks[len(self.tasks)] = [description, float(kwargs.get("completed", 0)), total]
        self._share(len(self.tasks) - 1)
        return len(self.tasks) - 1

    def advance(self, task: int, advance: float = 1) -> None:
        if task in self.tasks:
            self.tasks[task][1] += advance
            self._share(task)

    def update(self, task: int, **kwargs: Any) -> None:
        if task in self.tasks:
            for i, key in enumerate(("description", "completed", "total")):
                if key in kwargs:
                    self.tasks[task][i] = kwargs[key]
            if "advance" in kwargs:
                self.tasks[task][1] += kwargs["advance"]
            self._share(task)

    def _share(self, task: int) -> None:
        if _phases is not None:
            _phases.show(*self.tasks[task])

    def line(self) -> str:
        return "; ".join(f"{d} {int(c)}/{int(t)}" if t else str(d) for d, c, t in self.tasks.values())

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()


class _WithOverall:
    """A rich :class:`Progress` whose first row is the overall phases line, refreshed as the bars advance."""

    def __init__(self, bar: Progress, tracker: Phases) -> None:
        self._bar, self._tracker = bar, tracker
        self._overall = bar.add_task(tracker.line(), total=None)

    def _refresh(self, task: int) -> None:
        t = self._bar.tasks[task] if task < len(self._bar.tasks) else None
        if t is not None and t.id != self._overall:
            self._tracker.show(t.description, t.completed, t.total)
        self._bar.update(self._overall, description=self._tracker.line())

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        task = self._bar.add_task(*args, **kwargs)
        self._refresh(task)
        return task

    def advance(self, task: int, advance: float = 1) -> None:
        self._bar.advance(task, advance)
        self._refresh(task)

    def update(self, task: int, **kwargs: Any) -> None:
        self._bar.update(task, **kwargs)
        self._refresh(task)


@contextlib.contextmanager
def progress_bar(enabled: bool = True, *, interval: float | None = None) -> Iterator[Any]:
    """A rich :class:`Progress` (on stderr) or a stand-in with the same methods: nothing when not ``enabled``,
    plain lines every ``interval`` seconds (default :data:`PLAIN_INTERVAL`) when stderr is not a terminal."""
    if not enabled:
        yield _NoProgress()
        return
    if not console.is_terminal:
        plain = _PlainProgress(interval or PLAIN_INTERVAL)
        try:
            yield plain
        finally:
            plain.stop()
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        yield bar if _phases is None else _WithOverall(bar, _phases)
