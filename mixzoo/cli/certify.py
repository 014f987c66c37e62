"""``mixzoo certify``: certified robust radii of an RBC and of constant-alpha mixtures
(:func:`mixzoo.certify.certify`; ``--dry-run``: :func:`mixzoo.certify.plan.plan_certify`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.cli.options import MachineGroup, grouped, parse_floats, run_settings
from mixzoo.core.commands import AsJson, DryRun, command, command_line, examples, out_console


@command
@examples(
    'mixzoo certify --rbc fmnist-lip100 --abc fmnist-std --alpha 0.62 --n 1000 --out cert/',
    'mixzoo certify --rbc fmnist-rs050 --abc fmnist-std --alpha 0.9 --n 100 --out cert-rs/',
    'mixzoo certify lin.toml --norm linf --out cert-lin/',
)
@grouped
def certify_cmd(
    card: Annotated[str | None, typer.Argument(help="a mix card whose method mixes probabilities with a constant "
                                                    "alpha (linear); or name the pair with --rbc / --abc")] = None,
    rbc: Annotated[str | None, typer.Option(help="the RBC (registry name): Lipschitz-bounded, or the base of a "
                                                 "randomized-smoothing model (registry smoothing_sigma, or --sigma)")]
    = None,
    abc: Annotated[str | None, typer.Option(help="the ABC, for mixtures (alpha < 1)")] = None,
    alpha: Annotated[list[float] | None, typer.Option(help="the RBC's weight in [1/2, 1], repeatable; alpha 1 (the "
                                                           "RBC alone) is always certified")] = None,
    norm: Annotated[str, typer.Option(help="l2 or linf (randomized smoothing: l2)")] = "l2",
    radii: Annotated[str | None, typer.Option(help="radius grid, comma-separated (default: 26 points up to the "
                                                   "largest certified radius)")] = None,
    n: Annotated[int, typer.Option(help="number of evaluation images")] = 500,
    sigma: Annotated[float | None, typer.Option(help="smoothing noise std (default: the RBC's smoothing_sigma)")]
    = None,
    samples: Annotated[int, typer.Option(help="Monte Carlo samples per image (Bai et al. 2024b, App. A.2: "
                                              "10,000)")] = 10_000,
    n0: Annotated[int, typer.Option(help="extra samples per image that choose the class (Cohen et al.)")] = 100,
    confidence: Annotated[float, typer.Option(help="joint confidence of each image's bounds")] = 0.999,
    smoothing: Annotated[str, typer.Option(help="hard (votes, Cohen et al.; certifies more at the same confidence)"
                                           " or soft (average probabilities, Bai et al. 2024b, App. A)")] = "hard",
    estimate: Annotated[str | None, typer.Option(help="also ESTIMATE local Lipschitz radii at these radii "
                                                      "(Bai et al. 2024b, App. C.3, PGD; labelled, not a "
                                                      "certificate)")] = None,
    dataset: Annotated[str | None, typer.Option(help="data set (default: the RBC's)")] = None,
    split: Annotated[str, typer.Option(help="evaluation or calibration")] = "evaluation",
    out: Annotated[Path, typer.Option(help="directory for certify.json, certify.md, certify.png")] = Path("certify"),
    seed: int = 0,
    batch_size: Annotated[int, typer.Option(help="noisy images per forward batch")] = 1000,
    machine: MachineGroup = MachineGroup(),
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Certified robust radii of the RBC and of constant-alpha mixtures (Bai et al. 2024b, Lemma 3.2, Thm 3.5, Thm A.2):
    certified accuracy per radius, for Lipschitz-bounded and randomized-smoothing RBCs."""
    from mixzoo.certify import SmoothingSettings, certify
    from mixzoo.certify.plan import plan_certify
    from mixzoo.core.plan import planned_work

    settings = run_settings(machine=machine, norm=norm, n=n, batch_size=batch_size, seed=seed, abc=abc, rbc=rbc,
                            progress=not as_json)
    smoothing_settings = SmoothingSettings(sigma=sigma, samples=samples, selection_samples=n0, confidence=confidence,
                                           kind=smoothing)
    with planned_work(lambda: plan_certify(card, settings, smoothing=smoothing_settings, dataset=dataset, split=split,
                                           estimate_eps=parse_floats(estimate, "--estimate"),
                                           command=command_line()), dry_run=dry_run, wanted=not as_json) as plan:
        if plan is None:
            return
        result = certify(card, settings, alphas=alpha, radii=parse_floats(radii, "--radii"), dataset=dataset,
                         split=split, smoothing=smoothing_settings, estimate=parse_floats(estimate, "--estimate"),
                         out=out)
    _print_certified(result, out, as_json)


def _print_certified(result: Any, out: Path, as_json: bool) -> None:
    """What ``certify`` prints: the certified (and estimated) accuracy tables over radius, the notes, the files
    (or the JSON)."""
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    s = result.settings
    for title, curves in (("certified accuracy %", result.certified_curves),
                          ("ESTIMATED accuracy % (Bai et al. 2024b, App. C.3; not a certificate)",
                           result.estimated_curves)):
        header, rows = result.table_rows(curves, bound=False)
        if not rows:
            continue
        table = Table(title=f"{s['rbc']}: {title} over {s['norm']} radius (n={s['n']}, {s['mode']})")
        for k, col in enumerate(header):  # numbers never wrap nor shorten; the label wraps on a narrow terminal
            table.add_column(col, justify="left" if k == 0 else "right", no_wrap=k > 0,
                             min_width=None if k == 0 else len(col))
        for row in rows:
            table.add_row(*row)
        out_console.print(table)
    for note in result.notes:
        out_console.print(f"note: {escape(note)}", highlight=False)
    out_console.print(f"{s['seconds']:.1f} s; written to {out}/certify.json, certify.md, certify.png")


COMMANDS: dict[str, Callable[..., None]] = {"certify": certify_cmd}
