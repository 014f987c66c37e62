"""What a long command will run, and about how long it will take, before it starts.

``mixzoo bench``, ``sanity``, ``mix`` and ``certify`` first build a :class:`Plan`: its phases in order (the rows, the
components, the images, the curve points), each with an estimate from timing a few real calls on a few images
(:func:`per_image`: a call's fixed share counted once per call of the run), and print it; ``--dry-run`` stops
there. While the command runs, the plan's phases are the overall progress line's "phase k of m" and its ETA
(:func:`mixzoo.core.progress.phases`).

A row's estimate counts only the examples the cache does not hold (they cost about nothing); a matched baseline's
search counts as cached only when the cache holds all of it, and a trade-off curve is estimated as if nothing were
cached.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mixzoo.core.progress import clock


@dataclass
class Phase:
    """One phase: a short ``name`` (the progress line's), what it runs, and its estimated seconds (None: unknown)."""

    name: str
    what: str
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "seconds": self.seconds}


@dataclass
class Plan:
    """A command's phases, in the order they run, and notes on the estimate."""

    command: str
    phases: list[Phase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probe_seconds: float = 0.0  # what timing the sample calls took

    def add(self, name: str, what: str, seconds: float | None = None) -> Phase:
        self.phases.append(Phase(name, what, seconds))
        return self.phases[-1]

    @property
    def seconds(self) -> float | None:
        """The estimate of the phases that have one, None when none has."""
        known = [p.seconds for p in self.phases if p.seconds is not None]
        return float(sum(known)) if known else None

    def names(self) -> list[str]:
        return [p.name for p in self.phases]

    def estimates(self) -> list[float | None]:
        return [p.seconds for p in self.phases]

    def lines(self) -> list[str]:
        """The plan as text: one line per phase, then the total."""
        out = [f"plan of `{self.command}` ({len(self.phases)} phases):"]
        for k, p in enumerate(self.phases, 1):
            est = f"~{clock(p.seconds)}" if p.seconds is not None else "not estimated"
            out.append(f"  {k}. {p.name}: {p.what} ({est})")
        total, unknown = self.seconds, [str(k) for k, p in enumerate(self.phases, 1) if p.seconds is None]
        rest = f" + phase {', '.join(unknown)}" if unknown and total is not None else ""
        out.append(f"estimate: ~{clock(total)}{rest}, from timing a few calls (less where the cache holds results)"
                   if total is not None else "estimate: none (no phase could be timed)")
        out += [f"note: {n}" for n in self.notes]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "phases": [p.to_dict() for p in self.phases], "seconds": self.seconds,
                "notes": self.notes}


def per_image(run: Callable[[int], Any], n: int, k: int = 4, *, batch: int | None = None) -> float:
    """Seconds per image of ``run(k)`` on ``n`` images in calls of ``batch`` (``None``: one call for all of them):
    :func:`per_image_cut` with nothing to cut."""
    def whole(m: int, f: float) -> None:
        run(m)

    return per_image_cut(whole, n, (1.0, 1.0), k, batch=batch)


FRACTIONS = (0.05, 0.1, 0.15)  # a probe's cuts of an iteration count, evenly spaced
MIN_CUT = 5  # the fewest iterations a cut keeps: fewer do not show how the attack stops early (timed whole then)


def cut_fractions(full: int, cut: Callable[[float], int], fractions: tuple[float, ...] = FRACTIONS
                  ) -> tuple[float, ...]:
    """``fractions`` of an iteration count ``full`` as ``cut(f)``, the count cut to ``f``, makes them: ``(1, 1)``,
    no cut, when the first cut is under :data:`MIN_CUT` or two cuts are equal (timed whole)."""
    cuts = [cut(f) for f in fractions]
    ok = MIN_CUT <= cuts[0] and all(a < b for a, b in zip(cuts, cuts[1:], strict=False))
    return tuple(c / full for c in cuts) if ok else (1.0, 1.0)


PROBE_SHARE = 0.1  # an attack's probe: this share of the run's images (early stopping then shows in it) ...
PROBE_MIN = 8  # ... and at least this many


def probe_images(n: int) -> int:
    """How many of a run's ``n`` images a probe of an attack that stops early times: :data:`PROBE_SHARE` of them,
    at least :data:`PROBE_MIN` (at most ``n``), so the probe's share of examples broken at once is the run's."""
    return max(1, min(n, max(PROBE_MIN, math.ceil(round(PROBE_SHARE * n, 9)))))


def spread(n: int, m: int) -> Any:
    """Indices (a LongTensor) of a probe call's ``m`` images among a run's ``n``: ``m`` evenly spaced ones, or when
    ``m`` is over :func:`probe_images`, those images repeated in turn (a probe attacks no more distinct images)."""
    import torch

    k = min(m, probe_images(n))
    return torch.linspace(0, n - 1, k).round().long().repeat(-(-m // k))[:m]


REPEATS = 2  # a short probe call is timed this many times and its least time kept (another job's burst is not the
REPEAT_UNDER_S = 1.0  # work's); one that takes this long or more once (a burst is then a small part of it)


def _least(run: Callable[[int, float], Any], m: int, f: float) -> tuple[float, Any]:
    """The least of up to :data:`REPEATS` timings of ``run(m, f)`` (one when it takes :data:`REPEAT_UNDER_S` or
    more) and what the call returned."""
    best, out = math.inf, None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = run(m, f)
        best = min(best, time.perf_counter() - t0)
        if best >= REPEAT_UNDER_S:
            break
    return best, out


def _rest(took: list[float], fs: tuple[float, ...], robust: list[int | None]) -> float:
    """The time of the cut steps from the last of ``fs`` up to ``f = 1``: along the line through the last two
    timings with two cuts; with three, each step's time the sum of a floor (the last step's time times the share of
    the examples it attacked that it left robust, ``robust``: the robust counts the cuts returned, when counted;
    those examples cost every later step) and a part that decays by the ratio ``q`` (at most 1) of the last two
    steps' parts (broken examples stop), so a fixed part cancels in the steps and ``q = 1`` is the line."""
    step, h = max(0.0, took[-1] - took[-2]), fs[-1] - fs[-2]
    m = (1.0 - fs[-1]) / h  # steps left
    if len(fs) < 3:
        return step * m
    r2, r3 = robust[-2:]
    floor = step * min(1.0, r3 / r2) if r2 is not None and r3 is not None and r2 > 0 else 0.0
    part, before = step - floor, took[-2] - took[-3] - floor
    q = min(1.0, part / before) if before > 0 else 1.0
    return m * floor + (part * m if q >= 1.0 else part * q * (1.0 - q ** m) / (1.0 - q))


def _count(value: Any) -> int | None:
    """``value`` when it is a count (a probe call's examples left robust), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def per_image_cut(run: Callable[[int, float], Any], n: int, fractions: tuple[float, ...], k: int = 4, *,
                  batch: int | None = None) -> float:
    """Seconds per image of the whole work on ``n`` images in calls of ``batch`` images (``None``: one call), from
    ``run(m, f)``: the work on ``m`` images (chosen to represent the run's) cut to fraction ``f`` of its
    iterations, returning how many examples it left robust (or anything else: not used). After a warm-up call on
    one image it is timed (:func:`_least`) on ``k`` (at most ``n``) images at each of ``fractions`` (two, or three
    evenly spaced; ``(1, 1)``: timed whole) and extrapolated to ``f = 1`` (:func:`_rest`).
    One more call, on half the ``k`` images when ``k`` is at least :data:`PROBE_MIN`, else on one (a single image
    broken at once would hide the fixed part), gives how a call's time grows, ``t = F + u v`` (per-iteration
    overhead and vectorised batches are the fixed share ``F``, counted once per call of the run): ``u`` the examples
    left robust when counted and that call left some (each costs every iteration, a broken one stops; the run's
    share of them the probe's; the same count in both calls: no fixed share), else the images. A call left with
    one robust example steps torch's batch-of-one kernels, cheaper per step than any larger batch: the growth call
    is then on the ``k`` images twice over (``run(2 k, f)``, :func:`spread`'s indices)."""
    k, fs = max(1, min(k, n)), tuple(dict.fromkeys(fractions))  # one timing when there is nothing to cut
    run(1, fs[0])
    timed = [_least(run, k, f) for f in fs]
    took, robust = [t for t, _ in timed], [_count(r) for _, r in timed]
    whole = took[-1] + (_rest(took, fs, robust) if len(fs) > 1 else 0.0)  # k images at the full counts
    calls = 1 if batch is None else -(-n // max(1, batch))
    if k < 2 or took[-1] <= 0:
        return whole / k
    half = k // 2 if k >= PROBE_MIN else 1
    part, left = _least(run, half, fs[-1])
    if robust[-1] is not None and robust[-1] > 1 and _count(left) == 1:
        half = 2 * k
        part, left = _least(run, half, fs[-1])
    counted = robust[-1] is not None and _count(left) is not None and _count(left) > 0
    u, u_other = (robust[-1], _count(left)) if counted else (k, half)
    share = min(1.0, max(0.0, 1.0 - u * (took[-1] - part) / (u - u_other) / took[-1])) \
        if (u_other < u if half < k else u_other > u) else 0.0
    return whole * (1.0 - share) / k + whole * share * min(calls, n) / max(1, n)


def figures_seconds(draw: Callable[[Path], int]) -> tuple[int, float]:
    """``draw(folder)``, which writes figures into ``folder`` and returns how many, run twice in a temporary folder:
    the first loads the plotting library, its fonts and caches (the plan runs before the work, so the run finds them
    loaded), the second is timed. Returns the count and those seconds."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        draw(Path(tmp))
        t0 = time.perf_counter()
        count = draw(Path(tmp))
        return count, time.perf_counter() - t0


def _report_like_figure(folder: Path) -> int:
    """One figure like the reports' (a panel of step lines with a legend, a grid and a title) saved in ``folder``."""
    from mixzoo.core.figures import figure_module, save_png

    plt = figure_module()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k in range(4):
        ax.step(range(20), [v * (k + 1) for v in range(20)], where="post", label=f"curve {k}")
        ax.plot([0], [k], "o", ms=4)
    ax.set(xlabel="radius", ylabel="accuracy (%)")
    ax.set_title("a figure like the reports'", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_png(fig, folder / "figure.png")
    plt.close(fig)
    return 1


def drawing_seconds(count: int) -> float:
    """Seconds the run takes to draw and write ``count`` PNG figures like the reports' (:func:`figures_seconds`);
    ``0.0`` for none."""
    return count * figures_seconds(_report_like_figure)[1] if count > 0 else 0.0


__all__ = ["FRACTIONS", "LONG_WORK_S", "MIN_CUT", "PROBE_MIN", "PROBE_SHARE", "Phase", "Plan", "cut_fractions",
           "drawing_seconds", "figures_seconds", "make_plan", "per_image", "per_image_cut", "planned_work",
           "probe_images", "show_plan", "spread"]


def make_plan(build: Callable[[], Plan], command: str, *, dry_run: bool, wanted: bool = True) -> Plan:
    """The plan ``build`` makes. With ``--dry-run`` its errors are the command's; otherwise a plan that cannot be
    made (or is not ``wanted``: ``--json``) is an empty one, and the work itself meets and reports the error."""
    from mixzoo.core.errors import MixzooError

    if dry_run:
        return build()
    if not wanted:
        return Plan(command)
    try:
        return build()
    except (MixzooError, OSError):
        return Plan(command)


LONG_WORK_S = 10.0  # a plan is printed before work estimated to take at least this long (always with --dry-run)


def show_plan(plan: Plan, dry_run: bool, *, enabled: bool = True) -> None:
    """Print the plan before the work: on stdout with ``--dry-run`` (it is then the command's result), else on
    stderr with the progress (stdout keeps the results) when the work is estimated to take :data:`LONG_WORK_S`
    or more."""
    from rich.markup import escape

    from mixzoo.core.commands import out_console

    if not dry_run and (not enabled or not plan.phases or (plan.seconds or 0.0) < LONG_WORK_S):
        return
    if not dry_run:  # printed when the first phase starts: after the command's own checks of its arguments
        from mixzoo.core.progress import announce

        announce(plan.lines())
        return
    to = out_console
    for line in plan.lines():
        to.print(escape(line), highlight=False, soft_wrap=True)
    if dry_run:
        to.print("--dry-run: stopped before the work; nothing was written", highlight=False)


@contextmanager
def planned_work(build: Callable[[], Plan], *, dry_run: bool, wanted: bool = True,
                 shown: bool | None = None) -> Iterator[Plan | None]:
    """A command's long work with its plan: the plan ``build`` makes (:func:`make_plan`), shown (:func:`show_plan`;
    ``shown`` defaults to ``wanted``, false e.g. for ``--json`` or a torchrun rank other than 0), then the body run
    as the plan's phases with their progress line. Yields ``None`` with ``--dry-run`` (the body must then stop:
    nothing is run or written), else the plan."""
    from mixzoo.core.commands import command_line
    from mixzoo.core.progress import phases

    plan = make_plan(build, command_line(), dry_run=dry_run, wanted=wanted)
    show_plan(plan, dry_run, enabled=wanted if shown is None else shown)
    if dry_run:
        yield None
        return
    with phases(plan.names(), plan.estimates(), enabled=wanted):
        yield plan
