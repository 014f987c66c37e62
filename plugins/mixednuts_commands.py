"""MixedNUTS's own commands (hook ``mixzoo_cli_commands``): ``mixzoo check CARD``, how well Algorithm 1's surrogate
held (Bai et al. 2024a, App. D.9, :mod:`mixzoo.methods.mixednuts.approximation`); ``mixzoo transfer-params --from CARD
--rbc BLACKBOX``, calibration without the RBC's gradients (App. D.5, :mod:`mixzoo.methods.mixednuts.transfer`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.cli.options import CacheGroup, MachineGroup, grouped
from mixzoo.core.commands import AsJson, CardRBC, command, examples, out_console


@command
@examples('mixzoo check card.toml', 'mixzoo check card.toml --out check.json --json')
@grouped
def check(
    card: Annotated[Path, typer.Argument(help="a mix card written by `mixzoo mix`, or a published card's name")],
    rbc: CardRBC = None,
    out: Annotated[Path | None, typer.Option(help="also write the result as JSON here")] = None,
    machine: MachineGroup = MachineGroup(),
    cache: CacheGroup = CacheGroup(),
    as_json: AsJson = False,
) -> None:
    """How well Algorithm 1's surrogate held (App. D.9): MMAA on the transformed RBC, objective and alpha again."""
    from mixzoo.core.cache import atomic_write_text, check_writable
    from mixzoo.core.machine import resolve_device
    from mixzoo.methods.mixednuts.approximation import check_approximation

    if out is not None:
        from mixzoo.core.paths import check_output, json_with

        check_writable(out, what="--out file")
        check_output(out, what="a `mixzoo check` result", ours=json_with("card"))
    res = check_approximation(card, rbc=rbc, data_dir=machine.data_dir, cache_dir=cache.cache_dir,
                              use_cache=not cache.no_cache, device=resolve_device(machine.device),
                              allow_unsafe=machine.allow_unsafe, progress=not as_json)
    text = json.dumps({"card": str(card), **res.to_dict(), "notes": res.notes}, indent=2)
    if out is not None:
        atomic_write_text(out, text + "\n")
    if as_json:
        print(text)
        return
    table = Table(title=f"App. D.9 check of {card} (beta {res.beta:g}, {res.n} calibration images)")
    for col in ("", "MMAA on h^LN (Algorithm 1's surrogate)", "MMAA on h^M(s*, p*, c*) (App. D.9)",
                "worst of both, per image"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("objective at (s*, p*, c*): share of clean RBC mistakes kept", f"{res.objective_surrogate:.4f}",
                  f"{res.objective_check:.4f}", f"{res.objective_worst:.4f}")
    table.add_row("alpha for beta", f"{res.alpha_surrogate:.4f}", f"{res.alpha_check:.4f}", f"{res.alpha_worst:.4f}")
    table.add_row("with the card's alpha: share of attacked-correct margins kept (target: beta)",
                  f"{res.beta_kept_surrogate:.4f}", f"{res.beta_kept_check:.4f}", f"{res.beta_kept_worst:.4f}")
    table.add_row("RBC robust accuracy under MMAA", f"{100 * res.robust_accuracy_ln:.1f}%",
                  f"{100 * res.robust_accuracy_m:.1f}%", f"{100 * res.robust_accuracy_worst:.1f}%")
    out_console.print(table)
    for note in res.notes:
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    out_console.print(f"{res.seconds:.1f} s" + (f"; result written to {out}" if out is not None else ""))


@command
@examples('mixzoo transfer-params --from card.toml --rbc fmnist-trades --out transferred.toml',
          'mixzoo transfer-params --from card.toml --rbc fmnist-trades --queries 1000 --query-budget 2000000')
@grouped
def transfer_params(
    from_card: Annotated[Path, typer.Option("--from", help="the white-box surrogate's mix card")],
    rbc: Annotated[str, typer.Option(help="the black-box robust model")],
    method: Annotated[str, typer.Option(help="transfer | square | both | guess")] = "transfer",
    queries: Annotated[int, typer.Option(help="Square queries per image")] = 5000,
    query_budget: Annotated[int | None, typer.Option(help="refuse to start if the method needs more queries")] = None,
    n_calib: int = 1000,
    dataset: str | None = None,
    beta: Annotated[float | None, typer.Option(help="the card's beta unless given")] = None,
    eps: Annotated[float | None, typer.Option(help="attack radius (default: the card's, else the black box's)")] = None,
    norm: Annotated[str | None, typer.Option(help="Linf | L2 (default: the card's, else the black box's)")] = None,
    seed: int = 0,
    out: Annotated[Path, typer.Option(help="where to write the new card")] = Path("card-transfer.toml"),
    machine: MachineGroup = MachineGroup(),
    cache: CacheGroup = CacheGroup(),
    as_json: AsJson = False,
) -> None:
    """Calibrate without the RBC's gradients (Bai et al. 2024a, App. D.5): transfer, min-margin Square, or educated
    guess."""
    from mixzoo.core.machine import resolve_device
    from mixzoo.methods.mixednuts.transfer import BlackBoxSource, TransferSettings, transfer_params_by_name

    settings = TransferSettings(method=method, queries=queries, beta=beta, eps=eps, norm=norm, seed=seed,
                                progress=not as_json)
    source = BlackBoxSource(dataset=dataset, n_calib=n_calib, out=out, query_budget=query_budget,
                            data_dir=machine.data_dir, cache_dir=cache.cache_dir, use_cache=not cache.no_cache,
                            device=resolve_device(machine.device), allow_unsafe=machine.allow_unsafe)
    card = transfer_params_by_name(from_card, rbc, settings, source)
    q = card.params
    summary = {"card": str(out), "method": q["fit"], "s": q["s"], "p": q["p"], "c": q["c"], "alpha": q["alpha"],
               "objective": q["objective"]}
    if as_json:
        print(json.dumps({**summary, "notes": card.notes}, indent=2))
        return
    table = Table(title=f"transferred mix card for {rbc} ({card.params['fit']})", show_header=False)
    for k, v in summary.items():
        table.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out_console.print(table)
    for note in card.notes:
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
