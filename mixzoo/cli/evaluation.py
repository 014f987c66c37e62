"""``mixzoo bench``, ``sanity`` and ``verify``: robust accuracy of a card's rows with report files
(:func:`mixzoo.evaluation.bench.bench`), over growing eps (:func:`mixzoo.evaluation.sanity.eps_sweep`), and a
report's robust errors re-checked (:func:`mixzoo.evaluation.verify.verify_report`). ``--dry-run`` prints the
plan (:func:`mixzoo.evaluation.plan.plan_bench`, :func:`~mixzoo.evaluation.plan.plan_sanity`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.cli.options import (
    EvalGroup,
    MachineGroup,
    chosen_attack,
    grouped,
    parse_floats,
    print_attack_options,
    run_settings,
)
from mixzoo.core.commands import (
    AsJson,
    Baseline,
    CardABC,
    CardRBC,
    command,
    command_line,
    examples,
    out_console,
)
from mixzoo.core.labels import eps_text, row_label


@command
@examples(
    'mixzoo bench card.toml --n 200 --attack adaptive-apgd --out bench/',
    'mixzoo bench card.toml lin.toml --attack adaptive --save-adversarial --out bench/',
    'mixzoo bench card.toml --device cuda --batch-size 500 --attack adaptive-strong --out bench/',
)
@grouped
def bench(
    cards: Annotated[list[str] | None, typer.Argument(
        help="mix cards of one pair (files or published names), any methods; without one the pair is fitted first")]
    = None,
    abc: Annotated[str | None, typer.Option(help="the ABC (registry name), replacing the card's; without a card, the "
                                                 "pair to fit first")] = None,
    rbc: Annotated[str | None, typer.Option(help="the RBC (registry name), replacing the card's")] = None,
    n: Annotated[int, typer.Option("--n", "--n-images", help="number of evaluation images (--n-images under torchrun,"
                                                              " whose parser takes --n for its own)")] = 1000,
    out: Annotated[Path, typer.Option(help="directory for report.json, report.md and plots")] = Path("bench"),
    eps: Annotated[float | None, typer.Option(help="attack radius (default: the card's, else the RBC's)")] = None,
    curve: Annotated[bool, typer.Option(help="trade-off curve over beta / alpha (Fig. 8)")] = True,
    curve_n: Annotated[int | None, typer.Option(help="images attacked per curve point (default: the budget's)")]
    = None,
    plots: Annotated[bool, typer.Option(help="draw the PNG figures (each card method's own figures may need its "
                                             "calibration data, e.g. MixedNUTS's MMAA; rank 0 alone under torchrun)")
                     ] = True,
    save_adversarial: Annotated[bool, typer.Option(
        "--save-adversarial", help="also write adversarial.safetensors: the point that broke each broken example, "
                                   "for `mixzoo verify`")] = False,
    baseline: Baseline = True,
    run: EvalGroup = EvalGroup(),
) -> None:
    """Clean and robust accuracy of the ABC, the RBC and each card's mixed classifier, with report files and
    plots."""
    from mixzoo.core.distributed import world as distributed_world
    from mixzoo.evaluation.bench import CurveSettings
    from mixzoo.evaluation.bench import bench as run_bench

    if run.show_options:
        return print_attack_options(chosen_attack(run))
    card: Any = None if not cards else cards[0] if len(cards) == 1 else list(cards)
    settings = run_settings(run, eps=eps, n=n, abc=abc, rbc=rbc, progress=not run.as_json)
    from mixzoo.core.plan import Plan, planned_work
    from mixzoo.evaluation.plan import plan_bench

    chosen_curve = curve and (True if curve_n is None else replace(CurveSettings.for_budget(run.budget), n=curve_n))
    shape = dict(baseline=True if baseline else None, curve=chosen_curve or None)
    build = (lambda: _unless_missing(lambda: plan_bench(card, settings, plots=plots, command=command_line(),
                                                        save_adversarial=save_adversarial, **shape),
                                     [*(cards or []), *(m for m in (abc, rbc) if m)], run.data_dir)) \
        if card is not None else \
        (lambda: Plan(command_line(), notes=["no card: the pair is fitted first (`mixzoo mix --dry-run` plans that)"]))
    with planned_work(build, dry_run=run.dry_run, wanted=not run.as_json,
                      shown=not run.as_json and distributed_world().main) as plan:
        if plan is None:
            return
        report = run_bench(card, settings, out=out, plots=plots, save_adversarial=save_adversarial, **shape)
    if distributed_world().main:  # under torchrun only rank 0 prints
        _print_bench(report, out, run.as_json)


def _unless_missing(build: Callable[[], Any], names: list[str], data_dir: str | None) -> Any:
    """The plan ``build`` makes; when a file it needs is not on this machine, a plan without estimates whose
    notes list every missing file of ``names`` (cards and models) and their data
    (:func:`mixzoo.zoo.files.fetch_list`)."""
    from mixzoo.core.errors import MissingFileError
    from mixzoo.core.plan import Plan
    from mixzoo.zoo.files import fetch_list, missing_summary

    try:
        return build()
    except MissingFileError:
        summary = missing_summary(fetch_list(names, data_dir=data_dir))
        if summary is None:
            raise
        return Plan(command_line(), notes=[f"not estimated (the phases are timed on the models): {summary}"])


def _print_bench(report: Any, out: Path, as_json: bool) -> None:
    """What ``bench`` prints: the results table (stdout; progress and warnings go to stderr) or JSON, and where
    the report was written."""
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
        return
    from mixzoo.core.checks import listing
    from mixzoo.evaluation.report import print_report

    print_report(report, to=out_console)
    out_console.print(f"report written to {out}/{listing(['report.json', 'report.md', *report.files])}",
                      soft_wrap=True)


@command
@examples(
    'mixzoo sanity card.toml --n 200 --out sanity/',
    'mixzoo sanity card.toml --eps 0.05,0.1,0.2,0.4 --attack adaptive-apgd --out sanity/',
)
@grouped
def sanity(
    card: Annotated[Path | None, typer.Argument(help="a mix card written by `mixzoo mix`, or a published card's name",
                                                show_default=False)] = None,
    eps: Annotated[str | None, typer.Option(help="radii, comma-separated (default: eps, 2 eps, 4 eps and the "
                                                 "radius where the grey image reaches every example)")] = None,
    n: Annotated[int, typer.Option("--n", "--n-images", help="number of evaluation images")] = 200,
    linear: Baseline = True,
    linear_alpha: Annotated[float | None, typer.Option(
        help="the linear baseline's alpha (default: matched to the card's worst case as `mixzoo bench` does)")]
    = None,
    abc: CardABC = None,
    rbc: CardRBC = None,
    out: Annotated[Path, typer.Option(help="directory for sanity.json, sanity.md and sanity.png")] = Path("sanity"),
    strict: Annotated[bool, typer.Option("--strict", help="exit with status 1 when a check finds misses")] = False,
    run: EvalGroup = EvalGroup(),
) -> None:
    """Does the attack find what there is to find? Robust accuracy over growing eps, checked for monotonicity and
    against the grey image (Carlini et al. 2019). The shared attack (default adaptive-apgd), the budget and -O
    are bench's."""
    from mixzoo.evaluation.sanity import SWEEP_ATTACK, eps_sweep

    t0 = time.perf_counter()  # what the command took, its plan and files included, is what it prints
    if run.show_options:
        return print_attack_options(chosen_attack(run, SWEEP_ATTACK))
    if card is None:
        raise typer.BadParameter("a mix card is needed (a file written by `mixzoo mix` or a published card's name)",
                                 param_hint="'CARD'")
    settings = run_settings(run, default=SWEEP_ATTACK, n=n, abc=abc, rbc=rbc, progress=not run.as_json)
    baseline = None if not linear else linear_alpha if linear_alpha is not None else True
    from mixzoo.core.plan import planned_work
    from mixzoo.evaluation.plan import plan_sanity

    with planned_work(lambda: plan_sanity(card, settings, radii=parse_floats(eps, "--eps"), baseline=baseline,
                                          command=command_line()), dry_run=run.dry_run, wanted=not run.as_json) as plan:
        if plan is None:
            return
        sweep = eps_sweep(card, settings, radii=parse_floats(eps, "--eps"), baseline=baseline, out=out)
    _print_sweep(sweep, out, run.as_json, time.perf_counter() - t0)
    if strict and not sweep.passed:
        raise typer.Exit(1)


def _print_sweep(sweep: Any, out: Path, as_json: bool, seconds: float) -> None:
    """What ``sanity`` prints: the robust accuracy table over eps with the misses in red, the notes, the files (or
    the JSON)."""
    if as_json:
        print(json.dumps(sweep.to_dict(), indent=2))
        return
    arithmetic = "" if sweep.precision == "float32" else f" in {sweep.precision}, breaks confirmed in float32"
    table = Table(title=f"robust % under {sweep.attack} ({sweep.budget} budget){arithmetic} over {sweep.norm} eps "
                        f"(n={sweep.n}; nominal eps {eps_text(sweep.eps)}; the grey image reaches every example "
                        f"at {eps_text(sweep.reach)})")
    for col in ("model", "clean %", "class at grey", *(f"eps {eps_text(r)}" for r in sweep.radii)):
        table.add_column(col, justify="left" if col == "model" else "right")
    for m in sweep.models:
        cells = [f"{100 * r:.1f}" if not k else f"[red]{100 * r:.1f} -> {100 * c:.1f} ({k} missed)"
                 for r, c, k in zip(m.robust_accuracy, m.checked_robust_accuracy, m.misses, strict=True)]
        table.add_row(row_label(m), f"{100 * m.clean_accuracy:.1f}", str(m.grey_class), *cells)
    out_console.print(table)
    for note in sweep.notes:
        style = "green" if sweep.passed else "yellow"
        label = "ok" if sweep.passed else "note"
        out_console.print(f"[{style}]{label}:[/{style}] {escape(note)}", highlight=False)
    out_console.print(f"{seconds:.1f} s; written to {out}/sanity.json, sanity.md, "
                      f"{', '.join(sweep.files)}")


@command
@examples('mixzoo verify bench/', 'mixzoo verify bench/ --recheck 20', 'mixzoo verify bench/ --device cuda --json')
@grouped
def verify(
    bench_dir: Annotated[Path, typer.Argument(help="the --out directory of `mixzoo bench --save-adversarial`")],
    abc: CardABC = None,
    rbc: CardRBC = None,
    out: Annotated[Path | None, typer.Option(help="also write the result as JSON here")] = None,
    batch_size: Annotated[int, typer.Option(help="images per forward pass")] = 250,
    recheck: Annotated[int, typer.Option(help="also attack again, from scratch and without the cache, N examples "
                                              "each row calls robust and N it calls broken; fail when an outcome "
                                              "differs")] = 0,
    machine: MachineGroup = MachineGroup(),
    as_json: AsJson = False,
) -> None:
    """Check a bench report's robust errors without attacking: each saved point in the ball and misclassified
    (--recheck N: and N robust and N broken examples per row attacked again). Exit status 0 verified, 1 a check
    failed (a false claim), 2 unusable input (a report whose parts disagree, points of the wrong shape)."""
    from mixzoo.evaluation.verify import verify_report

    res = verify_report(bench_dir, run_settings(machine=machine, abc=abc, rbc=rbc, batch_size=batch_size), out=out,
                        recheck=recheck)
    _print_verified(res, recheck, as_json)
    if not res.passed:
        raise typer.Exit(1)


def _print_verified(res: Any, recheck: int, as_json: bool) -> None:
    """What ``verify`` prints: a row per model (broken, confirmed, robust and verified %, problems), the notes
    and the verdict (or the JSON)."""
    from rich import box

    from mixzoo.evaluation.verify import FRAGILE

    if as_json:
        print(json.dumps(res.to_dict(), indent=2))
        return
    table = Table(title=f"adversarial points re-checked: {res.norm} eps {eps_text(res.eps)}, n={res.n}, {res.device}",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("model", "broken", "confirmed", "robust %", "verified %", "problems"):
        table.add_column(col, justify="left" if col in ("model", "problems") else "right")
    for r in res.rows:
        problems = ", ".join(f"{len(v)} {k.replace('_', ' ')}" for k, v in (
            ("outside", r.outside), ("not_misclassified", r.not_misclassified), ("missing", r.missing),
            ("unexpected", r.unexpected), ("clean_disagrees", r.clean_disagrees),
            ("outcomes differ on recheck", r.recheck_differs),
            ("stand-alone outcomes differ on recheck", [i for v in r.own_differs.values() for i in v])) if v)
        table.add_row(row_label(r), str(r.broken_reported), str(r.confirmed),
                      f"{100 * r.reported_robust_accuracy:.1f}", f"{100 * r.verified_robust_accuracy:.1f}",
                      f"[red]{problems}" if problems else "none")
    out_console.print(table)
    for r in res.rows:
        if r.fragile:
            out_console.print(f"[yellow]note:[/yellow] {escape(r.name)}: {r.fragile} confirmed points lie within "
                              f"{FRAGILE:g} of the decision boundary (output margin); rounding on another "
                              "device may flip them", highlight=False)
    for note in res.notes:
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    if recheck:
        for r in res.rows:
            own = ", ".join(f"{len(v)} of {escape(k)} on its own" for k, v in r.own_differs.items())
            say = (f"[red]{len(r.recheck_differs)} outcomes differ{f', {own}' if own else ''}[/red]"
                   if r.recheck_differs or own else "same outcomes")
            out_console.print(f"recheck: {escape(r.name)}: {len(r.rechecked)} examples attacked again without "
                              f"the cache, {say}", highlight=False)
    verdict = "[green]verified[/green]: every" if res.passed else "[red]NOT verified[/red]: not every"
    out_console.print(f"{verdict} reported robust error has a point in the threat model that the model "
                      f"misclassifies ({res.seconds:.1f} s)", highlight=False)


COMMANDS: dict[str, Callable[..., None]] = {"bench": bench, "sanity": sanity, "verify": verify}
