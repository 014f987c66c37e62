"""``mixzoo mix``: fit a mixing method for an ABC/RBC pair and write its mix card (:func:`mixzoo.methods.fit`;
``--dry-run``: :func:`mixzoo.methods.plan_fit`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.cli.options import CacheGroup, MachineGroup, grouped, parse_attack_options, print_options
from mixzoo.core.commands import AsJson, DryRun, command, command_line, examples, out_console


@command
@examples(
    'mixzoo mix --out card.toml',
    'mixzoo mix --abc digits-std --rbc digits-pgd --beta 0.95 --out digits.toml',
    'mixzoo mix --method linear --abc fmnist-std --rbc fmnist-pgd -O alpha=0.95 --out lin.toml',
)
@grouped
def mix(
    ctx: typer.Context,
    abc: Annotated[str | None, typer.Option(help="accurate base classifier (default: built-in Fashion-MNIST)")] = None,
    rbc: Annotated[str | None, typer.Option(help="robust base classifier")] = None,
    method: Annotated[str | None, typer.Option(help="mixing method (`mixzoo plugins` lists them; default: the "
                                                    "one marked default)")] = None,
    dataset: Annotated[str | None, typer.Option(help="calibration data set (default: the RBC's)")] = None,
    n_calib: Annotated[int | None, typer.Option(help="number of calibration images (default: 1000, or all the "
                                                     "calibration split holds when fewer)")] = None,
    eps: Annotated[float | None, typer.Option(help="attack radius (default: the RBC's)")] = None,
    norm: Annotated[str | None, typer.Option(help="Linf | L2 (default: the RBC's)")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-O", metavar="KEY=VALUE", help="an option of the method, repeatable (e.g. -O alpha=0.95 for "
                                                    "linear); also --KEY VALUE. --show-options lists them")] = None,
    show_options: Annotated[bool, typer.Option("--show-options", help="print the method's options (type, default, "
                                                                      "meaning) and exit")] = False,
    seed: int = 0,
    batch_size: Annotated[int, typer.Option(help="images per batch of the calibration attack (larger is faster on a "
                                                 "GPU; with per-example seeds results do not depend on it)")] = 250,
    out: Annotated[Path, typer.Option(help="where to write the mix card (.toml or .json)")] = Path("card.toml"),
    machine: MachineGroup = MachineGroup(),
    cache: CacheGroup = CacheGroup(),
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Fit a mixing method for an ABC/RBC pair and write the mix card. The method's own options are given as
    --KEY VALUE (--FLAG / --no-FLAG for true/false ones) or -O KEY=VALUE."""
    if abc and rbc and not show_options:  # refused from the specs and files, before torch is imported
        from mixzoo.core.errors import UnknownNameError
        from mixzoo.zoo.specs import check_pair_early

        try:
            check_pair_early(abc, rbc, dataset, machine.data_dir)
        except UnknownNameError:
            pass  # the fit says so, as for any name it cannot resolve
    from mixzoo.methods import default_method, fit, get_method

    chosen = get_method(method if method is not None else default_method())
    if show_options:
        print_options(f"options of mixing method {chosen.name} (--KEY VALUE or -O KEY=VALUE)", chosen.option_specs(),
                      lambda key: f"--{key.replace('_', '-')}")
        return
    options = chosen.options_from_args(ctx.args)
    options.update(parse_attack_options(option) or {})
    request = dict(dataset=dataset, n_calib=n_calib, eps=eps, norm=norm, seed=seed, batch_size=batch_size,
                   data_dir=machine.data_dir, cache_dir=cache.cache_dir, use_cache=not cache.no_cache,
                   device=machine.device, allow_unsafe=machine.allow_unsafe, progress=not as_json,
                   command=command_line())
    from mixzoo.core.plan import planned_work
    from mixzoo.methods import plan_fit

    with planned_work(lambda: plan_fit(chosen.name, abc, rbc, options=options, out=out, **request), dry_run=dry_run,
                      wanted=not as_json) as plan:
        if plan is None:
            return
        res = fit(chosen.name, abc, rbc, options=options, out=out, **request)
    from mixzoo.core.distributed import world

    if world().main:  # under torchrun only rank 0 prints
        _print_fit(chosen, res, as_json)


def _print_fit(chosen: Any, res: Any, as_json: bool) -> None:
    """What ``mix`` prints once the card is written: the method's fit summary (or JSON), its notes, the path."""
    card = res.card
    if as_json:
        print(json.dumps({"card": str(res.path), "method": card.method, **{
            k: v for k, v in card.params.items() if k != "grid"}, "summary": res.summary, "seconds": res.seconds,
            "cache_hits": res.cache_hits}, indent=2, default=str))
        return
    title = chosen.title or card.method
    table = Table(title=f"{title} for {card.abc.get('name')} + {card.rbc.get('name')} on {card.dataset}")
    table.add_column("")
    table.add_column("value", justify="right")
    for label, value in chosen.fit_summary(res):
        table.add_row(label, value)
    out_console.print(table)
    for note in card.notes:
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    out_console.print(written_message(res.path, card), soft_wrap=True)


def card_files(path: Path, card: Any) -> list[Path]:
    """The files loading the card written at ``path`` reads: the card, the arrays sidecar its ``[arrays]`` table
    names (TOML cards) and its weight files, all beside it."""
    from mixzoo.core.reading import CARD_BYTES, read_data

    files = [path]
    if path.suffix == ".toml" and path.is_file():
        sidecar = read_data(path, "toml", limit=CARD_BYTES, what="mix card").get("arrays", {}).get("file")
        files += [path.with_name(sidecar)] if sidecar else []
    return files + [path.with_name(name) for name in getattr(card, "weights", None) or {}]


def written_message(path: Path | None, card: Any) -> str:
    """``mix card written to card.toml``, naming every file beside it that loading needs (copy them together)."""
    if path is None:
        return "mix card written to None"
    files = card_files(Path(path), card)
    if len(files) == 1:
        return f"mix card written to {path}"
    names = [f.name for f in files[1:]]
    beside = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    both = "both" if len(files) == 2 else "them all"
    return (f"mix card written to {path}, with {beside} beside it; loading the card reads {both}, so copy {both} "
            "together")


COMMANDS: dict[str, Callable[..., None]] = {"mix": mix}
CONTEXT = {"mix": {"allow_extra_args": True, "ignore_unknown_options": True}}
