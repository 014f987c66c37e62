"""``mixzoo``: a thin typer layer over the library. Each command calls one public function and prints its result."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from mixzoo.core.commands import (
    AllowUnsafe,
    AsJson,
    AttackName,
    Baseline,
    Budget,
    CacheDir,
    CardABC,
    CardRBC,
    DataDir,
    Device,
    DryRun,
    ExtraAttacks,
    NoCache,
    PerExampleSeeds,
    Precision,
    command,
    command_line,
    epilog_of,
    examples,
    out_console,
)
from mixzoo.core.errors import MixzooError
from mixzoo.core.labels import eps_text
from mixzoo.core.progress import console


class PluginCommands(TyperGroup):
    """The core's commands, then those plugins add through the hook ``mixzoo_cli_commands`` (loaded only when
    the command list is shown or a name is not the core's; a core name always wins)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        core = super().list_commands(ctx)
        return core + sorted(set(plugin_commands()) - set(core))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        found = found if found is not None else plugin_commands().get(cmd_name)
        if found is not None and not found.short_help:  # `mixzoo --help` lists it: one paragraph, wrapped to fit
            found.short_help = " ".join((found.help or "").split())
        return found


def plugin_commands() -> dict[str, click.Command]:
    """The commands plugins contribute (hook ``mixzoo_cli_commands``), as click commands by name."""
    from mixzoo.core.plugins import collect_named

    group = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    found = collect_named("mixzoo_cli_commands", "CLI command")
    for name, fn in sorted(found.items()):
        group.command(name, epilog=epilog_of(fn))(fn)
    return dict(typer.main.get_group(group).commands) if found else {}



class OneLineUsageErrors(PluginCommands):
    """Usage errors (an option's value of the wrong type, a missing argument, an unknown command) as one line on
    stderr naming the fix, exit status 2, like every other refusal (``error: ...``), not a usage box."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            from typer._click import exceptions as click_errors  # typer's own copy of click
        except ImportError:  # a typer built on click itself
            from click import exceptions as click_errors

        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.Abort:  # Ctrl-C (or the end of input) outside a command's own handling
            console.print("interrupted", highlight=False)
            sys.exit(130)
        except getattr(click_errors, "NoArgsIsHelpError", ()) as exc:  # plain `mixzoo`: the help, as before
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            where = getattr(getattr(exc, "ctx", None), "command_path", None) or "mixzoo"
            where = "mixzoo" + where[where.index(" "):] if " " in where else "mixzoo"
            text = " ".join(exc.format_message().split()).rstrip(".")
            console.print(f"[red]error:[/red] {escape(text)}; see `{where} --help`", highlight=False,
                          soft_wrap=True)
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineUsageErrors, help="Mixed classifiers for any accurate/robust model pair, by name.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _show_version(value: bool) -> None:
    if value:
        from mixzoo.core import __version__

        print(f"mixzoo {__version__}")
        raise typer.Exit()


@app.callback()
def _main(ctx: typer.Context,
          version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                                help="print mixzoo's version and exit")] = False,
          threads: Annotated[int | None, typer.Option(
              "--threads", help="torch's intra-op threads, 1 to the CPUs mixzoo may use (default: those idle at "
                                "the start, from the affinity mask, cgroup quota and load average; at most 2 for "
                                "small networks; also $MIXZOO_THREADS)")] = None) -> None:
    """Mixed classifiers for any accurate/robust model pair, by name."""
    from mixzoo.core.threads import configure

    try:  # before any torch work: every command runs with the threads chosen for the machine and the work
        configure(threads, torch_now=ctx.invoked_subcommand not in ("list", "info", "plugins", "fetch-list", "mix"))
    except MixzooError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None

AttackBatch = Annotated[str, typer.Option(
    help="images per attack batch, or auto: on a GPU the batch that fits in its free memory (one attack step's "
         "measured memory per image), on a CPU 250; with per-example seeds, the default, results do not depend on "
         "it; recorded in the report")]


ShowAttackOptions = Annotated[bool, typer.Option("--show-options", help="print the attack's options (type, default, "
                                                                     "range, meaning) and exit")]
AttackOptions = Annotated[list[str] | None, typer.Option(
    "--attack-option", "-O", metavar="KEY=VALUE",
    help="an option of the attack, repeatable, e.g. -O n_iter=200 -O n_restarts=2 (numbers, true/false, "
         "comma-separated lists); --show-options lists the attack's options")]


def parse_attack_options(values: list[str] | None) -> dict[str, Any] | None:
    """``["n_iter=200", "components=apgd-ce,apgd-t"]`` -> ``{"n_iter": 200, "components": ["apgd-ce", "apgd-t"]}``,
    read by mixzoo's one ``KEY=VALUE`` parser (:func:`mixzoo.core.options.parse_pairs`)."""
    from mixzoo.core.options import parse_pairs

    return parse_pairs(values, "-O") if values else None


@app.command("list")
@command
@examples('mixzoo list --role robust --dataset cifar10', 'mixzoo list --dataset fashion-mnist --json')
def list_cmd(
    role: Annotated[str | None, typer.Option(help="accurate | robust | mixed (the published mix cards)")] = None,
    dataset: Annotated[str | None, typer.Option(help="e.g. fashion-mnist, cifar10, imagenet")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list of entries")] = False,
) -> None:
    """List the models that can be mixed, and the published mix cards, by name."""
    from mixzoo.core.catalog import ROLE, list_cards
    from mixzoo.core.registry import list_models

    specs = list_models(role=role if role != ROLE else None, dataset=dataset) if role != ROLE else []
    cards = list_cards(dataset=dataset) if role in (None, ROLE) else []
    if as_json:
        print(json.dumps([s.to_dict() for s in specs] + cards, indent=2))
        return
    table = Table(title=f"{len(specs)} models" + (f", {len(cards)} published mix cards" if cards else ""))
    table.add_column("name", no_wrap=True)  # names are what users type: never cut or folded
    for col in ("role", "dataset", "threat", "eps", "clean", "robust", "plugin"):
        table.add_column(col)
    for s in specs:
        rep = s.reported or {}
        table.add_row(s.name, s.role, s.dataset, s.threat_model or "", eps_text(s.epsilon) if s.epsilon else "",
                      _pct(rep.get("clean")), _pct(rep.get("autoattack", rep.get("robust"))), s.plugin)
    for c in cards:
        table.add_row(c["name"], f"{c['role']} ({c['method']})", c["dataset"] or "", c["threat_model"] or "",
                      eps_text(c["epsilon"]) if c["epsilon"] else "", "", "", "")
    _print_whole(table)


def _print_whole(table: Table) -> None:
    """Print a table at its natural width when the terminal (or a pipe's default 80 columns) is narrower, so that
    no cell is cut short."""
    from rich.measure import Measurement

    natural = Measurement.get(out_console, out_console.options.update(max_width=1000), table).maximum
    if natural <= out_console.width:
        out_console.print(table)
    else:
        out_console.__class__(width=natural).print(table)


def _pct(v: Any) -> str:
    return f"{100 * v:.2f}%" if isinstance(v, int | float) else ""


@app.command()
@command
@examples('mixzoo info fmnist-pgd', 'mixzoo info peng2023-rawrn-70-16 --json', 'mixzoo info mixednuts-cifar10')
def info(name: Annotated[str, typer.Argument(help="a registry name or alias, hf-hub: id, RobustBench name, or a "
                                                  "published mix card's name")],
         as_json: AsJson = False) -> None:
    """Show one model (registry name, alias, hf-hub: id or RobustBench name) or published mix card: its entry, and
    where its files belong on this machine, whether they are there and their size. Loads no weights and uses no
    network."""
    from mixzoo.core.catalog import card_entry
    from mixzoo.core.errors import UnknownNameError
    from mixzoo.core.plugins import published_cards
    from mixzoo.core.registry import get_spec
    from mixzoo.zoo.files import model_files

    try:
        spec = get_spec(name)
    except UnknownNameError:
        if name not in published_cards():
            raise
        spec = None
    entry = spec.to_dict() if spec is not None else card_entry(name)
    files = [f.to_dict() for f in model_files(spec)] if spec is not None else []
    if as_json:
        print(json.dumps({**entry, **({"files": files} if spec is not None else {})}, indent=2))
        return
    table = Table(title=entry["name"], show_header=False)
    for k, v in entry.items():
        text = eps_text(v) if k == "epsilon" and v else json.dumps(v) if isinstance(v, dict | list) else str(v)
        table.add_row(k, escape(text))
    for f in files:
        state = f"present, {f['size']:,} bytes" if f["present"] and f["size"] is not None else (
            "present" if f["present"] else "[red]missing")
        table.add_row("file", f"{escape(f['path'])} ({state})")
    _print_whole(table)


@app.command("fetch-list")
@command
@examples('mixzoo fetch-list convnextv2-l liu2023-swin-l --data-dir /data/imagenet',
          'mixzoo fetch-list card.toml --json', 'mixzoo fetch-list hf-hub:org/model cifar10/Linf/Wong2020Fast')
def fetch_list_command(
    names: Annotated[list[str], typer.Argument(help="model names, hf-hub: ids, RobustBench names or mix cards")],
    dataset: Annotated[str | None, typer.Option(help="data set (default: each robust model's or card's)")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Every file mix, bench and sanity would read for these models and their data: where it belongs on this
    machine, whether it is there, its size and how to fetch it, to prepare an offline machine in one go.
    Exits 1 when a file is missing."""
    from mixzoo.zoo.files import fetch_list

    files = fetch_list(names, dataset=dataset, data_dir=data_dir)
    if as_json:
        print(json.dumps([f.to_dict() for f in files], indent=2))
    else:
        table = Table(title=f"files for {', '.join(names)}")
        for col in ("for", "path", "present", "bytes", "fetch"):
            table.add_column(col)
        for f in files:
            table.add_row(escape(f.what), escape(f.path), "yes" if f.present else "[red]no",
                          f"{f.size:,}" if f.size is not None else "", escape(f.fetch))
        _print_whole(table)
    if not all(f.present for f in files):
        raise typer.Exit(1)


@app.command()
@command
@examples('mixzoo plugins', 'mixzoo plugins --json', 'mixzoo plugins --check')
def plugins(
    as_json: AsJson = False,
    check: Annotated[bool, typer.Option("--check", help="also call every hook and build every table (imports torch):"
                                                        " list the names each plugin provides and the faults found"
                                                        " there")] = False,
) -> None:
    """List installed plugins, their versions, modules and hooks; a plugin that fails to import shows its error.
    --check also calls every hook (see its help)."""
    from dataclasses import asdict

    from mixzoo.core.plugins import plugin_infos

    infos = plugin_infos(check=check)
    if as_json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return
    table = Table(title="mixzoo plugins" + (" (checked)" if check else ""))
    for col in ("plugin", "version", "module", "provides" if check else "hooks", "status"):
        table.add_column(col)
    for i in infos:
        shown = {**i.provides} if check else {"hooks": [h.removeprefix("mixzoo_") for h in i.hooks], **i.provides}
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in shown.items() if v)
        status = f"[red]{escape(i.error)}" if i.error else "[green]ok"
        if i.deprecations:
            status += "\n[yellow]deprecated: " + escape("; ".join(i.deprecations))
        table.add_row(escape(i.name), i.version, escape(i.module), escape(provides), status)
    out_console.print(table)
    if not check:
        out_console.print("`mixzoo plugins --check` calls every hook and lists what each plugin provides")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@command
@examples(
    'mixzoo mix --out card.toml',
    'mixzoo mix --abc digits-std --rbc digits-pgd --beta 0.95 --out digits.toml',
    'mixzoo mix --method linear --abc fmnist-std --rbc fmnist-pgd -O alpha=0.95 --out lin.toml',
)
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
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: Device = "auto",
    allow_unsafe: AllowUnsafe = False,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Fit a mixing method for an ABC/RBC pair and write the mix card. The method's own options are given as
    --KEY VALUE (--FLAG / --no-FLAG for true/false ones) or -O KEY=VALUE."""
    if abc and rbc and not show_options:  # refused from the specs and files, before torch is imported
        from mixzoo.core.errors import UnknownNameError
        from mixzoo.zoo.specs import check_pair_early

        try:
            check_pair_early(abc, rbc, dataset, data_dir)
        except UnknownNameError:
            pass  # the fit says so, as for any name it cannot resolve
    from mixzoo.methods import default_method, fit, get_method

    chosen = get_method(method if method is not None else default_method())
    if show_options:
        _print_method_options(chosen)
        return
    options = chosen.options_from_args(ctx.args)
    options.update(parse_attack_options(option) or {})
    request = dict(dataset=dataset, n_calib=n_calib, eps=eps, norm=norm, seed=seed, batch_size=batch_size,
                   data_dir=data_dir, cache_dir=cache_dir, use_cache=not no_cache, device=device,
                   allow_unsafe=allow_unsafe, progress=not as_json, command=command_line())
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


def _print_method_options(chosen: Any) -> None:
    """``mix --show-options``: the method's options as a table (option, type, default, range, meaning)."""
    _print_options(f"options of mixing method {chosen.name} (--KEY VALUE or -O KEY=VALUE)", chosen.option_specs(),
                   lambda key: f"--{key.replace('_', '-')}")


def _print_attack_options(name: str) -> None:
    """``bench --show-options`` / ``sanity --show-options``: the attack's options as a table."""
    from mixzoo.core.plugins import lookup

    _print_options(f"options of attack {name} (-O KEY=VALUE)", lookup("attack", name).options_spec,
                   lambda key: key)


def _print_options(title: str, specs: dict[str, Any], spelled: Callable[[str], str]) -> None:
    """Option specs (:class:`mixzoo.core.options.OptionSpec`) as a table: option, type, default, range, meaning."""
    table = Table(title=title)
    for col in ("option", "type", "default", "range", "meaning"):
        table.add_column(col, no_wrap=col == "option", overflow="fold")
    for key, spec in sorted(specs.items()):
        table.add_row(*(Text(cell) for cell in (spelled(key), spec.type_name, spec.default_text, spec.range_text,
                                                spec.help)))
    out_console.print(table)


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
    out_console.print(f"mix card written to {res.path}")


@app.command()
@command
@examples(
    'mixzoo bench card.toml --n 200 --attack adaptive-apgd --out bench/',
    'mixzoo bench card.toml lin.toml --attack adaptive --save-adversarial --out bench/',
    'mixzoo bench card.toml --device cuda --batch-size 500 --attack adaptive-strong --out bench/',
)
def bench(
    cards: Annotated[list[str] | None, typer.Argument(
        help="mix cards of one pair (files or published names), any methods; without one the pair is fitted first")]
    = None,
    abc: Annotated[str | None, typer.Option(help="the ABC (registry name), replacing the card's; without a card, the "
                                                 "pair to fit first")] = None,
    rbc: Annotated[str | None, typer.Option(help="the RBC (registry name), replacing the card's")] = None,
    attack: AttackName = None,
    budget: Budget = "standard",
    n: Annotated[int, typer.Option("--n", "--n-images", help="number of evaluation images (--n-images under torchrun,"
                                                              " whose parser takes --n for its own)")] = 1000,
    out: Annotated[Path, typer.Option(help="directory for report.json, report.md and plots")] = Path("bench"),
    eps: Annotated[float | None, typer.Option(help="attack radius (default: the card's, else the RBC's)")] = None,
    norm: Annotated[str | None, typer.Option(help="Linf | L2 (default: the card's, else the RBC's)")] = None,
    seed: Annotated[int, typer.Option(help="seed of the attacks' random draws")] = 0,
    batch_size: AttackBatch = "250",
    curve: Annotated[bool, typer.Option(help="trade-off curve over beta / alpha (Fig. 8)")] = True,
    curve_n: Annotated[int | None, typer.Option(help="images attacked per curve point (default: the budget's)")]
    = None,
    plots: Annotated[bool, typer.Option(help="draw the PNG figures (each card method's own figures may need its "
                                             "calibration data, e.g. MixedNUTS's MMAA; rank 0 alone under torchrun)")
                     ] = True,
    attack_option: AttackOptions = None,
    show_options: ShowAttackOptions = False,
    save_adversarial: Annotated[bool, typer.Option(
        "--save-adversarial", help="also write adversarial.safetensors: the point that broke each broken example, "
                                   "for `mixzoo verify`")] = False,
    per_example_seeds: PerExampleSeeds = True,
    baseline: Baseline = True,
    extra_attacks: ExtraAttacks = True,
    precision: Precision = "float32",
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: Device = "auto",
    allow_unsafe: AllowUnsafe = False,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Clean and robust accuracy of the ABC, the RBC and each card's mixed classifier, with report files and
    plots."""
    from mixzoo.attacks.memory import parse_batch_size
    from mixzoo.core.budget import shared_attack
    from mixzoo.core.distributed import world as distributed_world
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.bench import CurveSettings
    from mixzoo.evaluation.bench import bench as run_bench

    if show_options:
        return _print_attack_options(shared_attack(budget, attack, "adaptive"))
    card: Any = None if not cards else cards[0] if len(cards) == 1 else list(cards)
    settings = RunSettings(attack=shared_attack(budget, attack, "adaptive"),
                           attack_options=parse_attack_options(attack_option) or {}, eps=eps, norm=norm, n=n,
                           batch_size=parse_batch_size(batch_size), seed=seed, per_example_seeds=per_example_seeds,
                           extra_attacks=extra_attacks, abc=abc, rbc=rbc, device=device, precision=precision,
                           budget=budget, data_dir=data_dir,
                           cache_dir=cache_dir, use_cache=not no_cache, allow_unsafe=allow_unsafe,
                           progress=not as_json)
    from mixzoo.core.plan import Plan, planned_work
    from mixzoo.evaluation.plan import plan_bench

    chosen_curve = curve and (True if curve_n is None else replace(CurveSettings.for_budget(budget), n=curve_n))
    shape = dict(baseline=True if baseline else None, curve=chosen_curve or None)
    build = (lambda: plan_bench(card, settings, plots=plots, command=command_line(), save_adversarial=save_adversarial,
                                **shape)) \
        if card is not None else \
        (lambda: Plan(command_line(), notes=["no card: the pair is fitted first (`mixzoo mix --dry-run` plans that)"]))
    with planned_work(build, dry_run=dry_run, wanted=not as_json, shown=not as_json and distributed_world().main) \
            as plan:
        if plan is None:
            return
        report = run_bench(card, settings, out=out, plots=plots, save_adversarial=save_adversarial, **shape)
    if distributed_world().main:  # under torchrun only rank 0 prints
        _print_bench(report, out, as_json)


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


def _parse_floats(text: str | None, option: str) -> list[float] | None:
    if not text:
        return None
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise MixzooError(f"{option} {text!r} is not a comma-separated list of numbers, e.g. 0.1,0.2,0.5") from None


@app.command("sanity")
@command
@examples(
    'mixzoo sanity card.toml --n 200 --out sanity/',
    'mixzoo sanity card.toml --eps 0.05,0.1,0.2,0.4 --attack adaptive-apgd --out sanity/',
)
def sanity(
    card: Annotated[Path | None, typer.Argument(help="a mix card written by `mixzoo mix`, or a published card's name",
                                                show_default=False)] = None,
    eps: Annotated[str | None, typer.Option(help="radii, comma-separated (default: eps, 2 eps, 4 eps and the "
                                                 "radius where the grey image reaches every example)")] = None,
    attack: AttackName = None,
    budget: Budget = "standard",
    n: Annotated[int, typer.Option("--n", "--n-images", help="number of evaluation images")] = 200,
    linear: Baseline = True,
    linear_alpha: Annotated[float | None, typer.Option(
        help="the linear baseline's alpha (default: matched to the card's worst case as `mixzoo bench` does)")]
    = None,
    abc: CardABC = None,
    rbc: CardRBC = None,
    out: Annotated[Path, typer.Option(help="directory for sanity.json, sanity.md and sanity.png")] = Path("sanity"),
    seed: Annotated[int, typer.Option(help="seed of the attacks' random draws")] = 0,
    batch_size: AttackBatch = "250",
    norm: Annotated[str | None, typer.Option(help="Linf | L2 (default: the card's, else the RBC's)")] = None,
    per_example_seeds: PerExampleSeeds = True,
    extra_attacks: ExtraAttacks = True,
    strict: Annotated[bool, typer.Option("--strict", help="exit with status 1 when a check finds misses")] = False,
    attack_option: AttackOptions = None,
    show_options: ShowAttackOptions = False,
    precision: Precision = "float32",
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: Device = "auto",
    allow_unsafe: AllowUnsafe = False,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Does the attack find what there is to find? Robust accuracy over growing eps, checked for monotonicity and
    against the grey image (Carlini et al. 2019). The shared attack (default adaptive-apgd), the budget and -O
    are bench's."""
    from mixzoo.attacks.memory import parse_batch_size
    from mixzoo.core.budget import shared_attack
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.sanity import eps_sweep

    if show_options:
        return _print_attack_options(shared_attack(budget, attack, "adaptive-apgd"))
    if card is None:
        raise typer.BadParameter("a mix card is needed (a file written by `mixzoo mix` or a published card's name)",
                                 param_hint="'CARD'")
    settings = RunSettings(attack=shared_attack(budget, attack, "adaptive-apgd"),
                           attack_options=parse_attack_options(attack_option) or {}, n=n,
                           batch_size=parse_batch_size(batch_size),
                           seed=seed, abc=abc, rbc=rbc, device=device, precision=precision,
                           norm=norm, per_example_seeds=per_example_seeds, extra_attacks=extra_attacks,
                           budget=budget, data_dir=data_dir,
                           cache_dir=cache_dir, use_cache=not no_cache, allow_unsafe=allow_unsafe,
                           progress=not as_json)
    baseline = None if not linear else linear_alpha if linear_alpha is not None else True
    from mixzoo.core.plan import planned_work
    from mixzoo.evaluation.plan import plan_sanity

    with planned_work(lambda: plan_sanity(card, settings, radii=_parse_floats(eps, "--eps"), baseline=baseline,
                                          command=command_line()), dry_run=dry_run, wanted=not as_json) as plan:
        if plan is None:
            return
        sweep = eps_sweep(card, settings, radii=_parse_floats(eps, "--eps"), baseline=baseline, out=out)
    _print_sweep(sweep, out, as_json)
    if strict and not sweep.passed:
        raise typer.Exit(1)

def _print_sweep(sweep: Any, out: Path, as_json: bool) -> None:
    """What ``sanity`` prints: the robust accuracy table over eps with the misses in red, the notes, the files (or
    the JSON)."""
    from mixzoo.evaluation.bench import display_name

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
        table.add_row(display_name(m), f"{100 * m.clean_accuracy:.1f}", str(m.grey_class), *cells)
    out_console.print(table)
    for note in sweep.notes:
        style = "green" if sweep.passed else "yellow"
        label = "ok" if sweep.passed else "note"
        out_console.print(f"[{style}]{label}:[/{style}] {escape(note)}", highlight=False)
    out_console.print(f"{sweep.seconds:.1f} s; written to {out}/sanity.json, sanity.md, "
                      f"{', '.join(sweep.files)}")


@app.command("certify")
@command
@examples(
    'mixzoo certify --rbc fmnist-lip100 --abc fmnist-std --alpha 0.62 --n 1000 --out cert/',
    'mixzoo certify --rbc fmnist-rs050 --abc fmnist-std --alpha 0.9 --n 100 --out cert-rs/',
    'mixzoo certify lin.toml --norm linf --out cert-lin/',
)
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
    data_dir: DataDir = None,
    device: Device = "auto",
    allow_unsafe: AllowUnsafe = False,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> None:
    """Certified robust radii of the RBC and of constant-alpha mixtures (Bai et al. 2024b, Lemma 3.2, Thm 3.5, Thm A.2):
    certified accuracy per radius, for Lipschitz-bounded and randomized-smoothing RBCs."""
    from mixzoo.certify import SmoothingSettings, certify
    from mixzoo.core.settings import RunSettings

    settings = RunSettings(norm=norm, n=n, batch_size=batch_size, seed=seed, abc=abc, rbc=rbc, device=device,
                           data_dir=data_dir, allow_unsafe=allow_unsafe, progress=not as_json)
    from mixzoo.certify.plan import plan_certify
    from mixzoo.core.plan import planned_work

    smoothing_settings = SmoothingSettings(sigma=sigma, samples=samples, selection_samples=n0, confidence=confidence,
                                           kind=smoothing)
    with planned_work(lambda: plan_certify(card, settings, smoothing=smoothing_settings, dataset=dataset, split=split,
                                           estimate_eps=_parse_floats(estimate, "--estimate"),
                                           command=command_line()), dry_run=dry_run, wanted=not as_json) as plan:
        if plan is None:
            return
        result = certify(card, settings, alphas=alpha, radii=_parse_floats(radii, "--radii"), dataset=dataset,
                         split=split, smoothing=smoothing_settings, estimate=_parse_floats(estimate, "--estimate"),
                         out=out)
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


@app.command("verify")
@command
@examples('mixzoo verify bench/', 'mixzoo verify bench/ --recheck 20', 'mixzoo verify bench/ --device cuda --json')
def verify(
    bench_dir: Annotated[Path, typer.Argument(help="the --out directory of `mixzoo bench --save-adversarial`")],
    abc: CardABC = None,
    rbc: CardRBC = None,
    out: Annotated[Path | None, typer.Option(help="also write the result as JSON here")] = None,
    batch_size: Annotated[int, typer.Option(help="images per forward pass")] = 250,
    recheck: Annotated[int, typer.Option(help="also attack again, from scratch and without the cache, N examples "
                                              "each row calls robust and N it calls broken; fail when an outcome "
                                              "differs")] = 0,
    data_dir: DataDir = None,
    device: Device = "auto",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Check a bench report's robust errors without attacking: each saved point in the ball and misclassified
    (--recheck N: and N robust and N broken examples per row attacked again). Exit status 0 verified, 1 a check
    failed (a false claim), 2 unusable input (a report whose parts disagree, points of the wrong shape)."""
    from rich import box

    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.bench import display_name
    from mixzoo.evaluation.verify import FRAGILE, verify_report

    res = verify_report(bench_dir, RunSettings(abc=abc, rbc=rbc, data_dir=data_dir, device=device,
                                               batch_size=batch_size, allow_unsafe=allow_unsafe), out=out,
                        recheck=recheck)
    if as_json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        table = Table(title=f"adversarial points re-checked: {res.norm} eps {eps_text(res.eps)}, n={res.n}, "
                            f"{res.device}",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("model", "broken", "confirmed", "robust %", "verified %", "problems"):
            table.add_column(col, justify="left" if col in ("model", "problems") else "right")
        for r in res.rows:
            problems = ", ".join(f"{len(v)} {k.replace('_', ' ')}" for k, v in (
                ("outside", r.outside), ("not_misclassified", r.not_misclassified), ("missing", r.missing),
                ("unexpected", r.unexpected), ("clean_disagrees", r.clean_disagrees),
                ("outcomes differ on recheck", r.recheck_differs)) if v)
            table.add_row(display_name(r), str(r.broken_reported), str(r.confirmed),
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
                say = f"[red]{len(r.recheck_differs)} outcomes differ[/red]" if r.recheck_differs else "same outcomes"
                out_console.print(f"recheck: {escape(r.name)}: {len(r.rechecked)} examples attacked again without "
                                  f"the cache, {say}", highlight=False)
        verdict = "[green]verified[/green]: every" if res.passed else "[red]NOT verified[/red]: not every"
        out_console.print(f"{verdict} reported robust error has a point in the threat model that the model "
                          f"misclassifies ({res.seconds:.1f} s)", highlight=False)
    if not res.passed:
        raise typer.Exit(1)


@app.command()
@command
@examples('mixzoo train --list', 'mixzoo train digits-pgd --out weights/')
def train(
    name: Annotated[str, typer.Argument(help="zoo recipe name (see `mixzoo train --list`)")] = "",
    list_recipes: Annotated[bool, typer.Option("--list", help="list recipes")] = False,
    seed: Annotated[int | None, typer.Option(help="override the recipe's seed (needs --out: the weights then "
                                                   "differ from the shipped ones)")] = None,
    out: Annotated[Path | None, typer.Option(help="directory for NAME.safetensors and NAME.sha256 (default: "
                                                  "plugins/weights/, written only when the result reproduces the "
                                                  "shipped sha256)")] = None,
) -> None:
    """Train a model of the built-in zoo from its deterministic recipe (weights go to --out, or to plugins/weights/
    only when they reproduce the shipped file)."""
    from mixzoo.training import train as training

    if list_recipes or not name:
        for recipe in training.RECIPES:
            out_console.print(recipe)
        return
    result = training.train_model(name, out, seed=seed)
    out_console.print(result)


for _info in app.registered_commands:  # each command's --help ends with its examples
    _info.epilog = _info.epilog or epilog_of(_info.callback)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
