"""``mixzoo``: a thin typer layer over the library. Each command calls one public function and prints its result."""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.core.errors import MixzooError
from mixzoo.core.progress import console

app = typer.Typer(help="Training-free mixed classifiers (MixedNUTS) for any accurate/robust model pair, by name.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
out_console = console.__class__()  # stdout

# options several commands share
DataDir = Annotated[str | None, typer.Option(help="directory holding the data set files")]
CacheDir = Annotated[Path | None, typer.Option(help="cache directory (default $MIXZOO_CACHE, else ~/.cache/mixzoo)")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="neither read nor write the cache")]
AllowUnsafe = Annotated[bool, typer.Option("--allow-unsafe", help="permit pickled checkpoints")]
AsJson = Annotated[bool, typer.Option("--json", help="machine-readable output")]
AttackBatch = Annotated[int, typer.Option(help="images per attack batch (larger is faster on a GPU; each batch has its "
                                               "own seed, so results depend on it)")]
CardABC = Annotated[str | None, typer.Option(help="the ABC, if the card's name is not a registry name")]
CardRBC = Annotated[str | None, typer.Option(help="the RBC, if the card's name is not a registry name")]


AttackOptions = Annotated[list[str] | None, typer.Option(
    "--attack-option", "-O", metavar="KEY=VALUE",
    help="an option of the attack, repeatable, e.g. -O n_iter=200 -O n_restarts=2 (numbers, true/false, "
         "comma-separated lists); an unknown key is refused with the attack's known keys")]


def parse_attack_options(values: list[str] | None) -> dict[str, Any] | None:
    """``["n_iter=200", "components=apgd-ce,apgd-t"]`` -> ``{"n_iter": 200, "components": ["apgd-ce", "apgd-t"]}``:
    JSON values where they parse (numbers, true/false, null), comma-separated text as a list, else the text."""
    if not values:
        return None
    options: dict[str, Any] = {}
    for item in values:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise MixzooError(f"--attack-option {item!r} is not KEY=VALUE; write e.g. -O n_iter=200")
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = [v.strip() for v in text.split(",")] if "," in text else text.strip()
        options[key] = value
    return options


def _errors(fn):
    """Turn mixzoo's own errors, and file-system refusals, into one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():  # the filters stay the user's; only the printing changes
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except MixzooError as exc:
            message = str(exc)
        except BrokenPipeError:  # `mixzoo list | head`: the reader has gone, nothing to say (Python docs' recipe)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except OSError as exc:  # a file system refusal the up-front checks could not foresee (disk full, ...)
            where = f": {exc.filename}" if exc.filename else ""
            message = f"{exc.strerror or exc}{where}"
        console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None

    return wrapper


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning as one line on stderr, ``warning: MESSAGE`` (no file name, no source line)."""
    text = " ".join(str(message).split())
    console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False, soft_wrap=True)


def _command_line() -> str:
    return "mixzoo " + " ".join(shlex.quote(a) for a in sys.argv[1:])


@app.command("list")
@_errors
def list_cmd(
    role: Annotated[str | None, typer.Option(help="accurate | robust")] = None,
    dataset: Annotated[str | None, typer.Option(help="e.g. fashion-mnist, cifar10, imagenet")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list of entries")] = False,
) -> None:
    """List the models that can be mixed, by name."""
    from mixzoo.core.registry import list_models

    specs = list_models(role=role, dataset=dataset)
    if as_json:
        print(json.dumps([s.to_dict() for s in specs], indent=2))
        return
    table = Table(title=f"{len(specs)} models")
    table.add_column("name", no_wrap=True)  # names are what users type: never cut or folded
    for col in ("role", "dataset", "threat", "eps", "clean", "robust", "plugin"):
        table.add_column(col)
    for s in specs:
        rep = s.reported or {}
        table.add_row(s.name, s.role, s.dataset, s.threat_model or "", f"{s.epsilon:.4g}" if s.epsilon else "",
                      _pct(rep.get("clean")), _pct(rep.get("autoattack", rep.get("robust"))), s.plugin)
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
@_errors
def info(name: str, as_json: AsJson = False) -> None:
    """Show one registry entry (name or alias)."""
    from mixzoo.core.registry import get_spec

    spec = get_spec(name)
    if as_json:
        print(json.dumps(spec.to_dict(), indent=2))
        return
    table = Table(title=spec.name, show_header=False)
    for k, v in spec.to_dict().items():
        table.add_row(k, json.dumps(v) if isinstance(v, dict | list) else str(v))
    out_console.print(table)


@app.command()
@_errors
def plugins(as_json: AsJson = False) -> None:
    """List loaded plugins, their versions and what each provides; failed plugins show their error."""
    from dataclasses import asdict

    from mixzoo.core.plugins import plugin_infos

    infos = plugin_infos()
    if as_json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return
    table = Table(title="mixzoo plugins")
    for col in ("plugin", "version", "module", "provides", "status"):
        table.add_column(col)
    for i in infos:
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in i.provides.items())
        table.add_row(escape(i.name), i.version, escape(i.module), escape(provides),
                      f"[red]{escape(i.error)}" if i.error else "[green]ok")
    out_console.print(table)


def _parse_grid(grid: str | None):
    """``s=0.05:10:8,p=1:4:8,c=-2:0:8`` -> Grid (any subset of s, p, c)."""
    if not grid:
        return None
    from mixzoo.methods.mixednuts.calibrate import Grid

    kw: dict[str, Any] = {}
    try:
        for part in grid.split(","):
            key, rng = part.split("=")
            lo, hi, n = rng.split(":")
            kw.update({f"{key.strip()}_min": float(lo), f"{key.strip()}_max": float(hi), f"{key.strip()}_n": int(n)})
    except ValueError as exc:
        raise MixzooError(f"--grid {grid!r} is not of the form s=MIN:MAX:N,p=MIN:MAX:N,c=MIN:MAX:N ({exc})") from exc
    try:
        return Grid(**kw)
    except TypeError:  # a key other than s, p, c
        raise MixzooError(f"--grid {grid!r}: the axes are s, p and c, e.g. s=0.05:10:8,p=1:4:8,c=-2:0:8") from None


@app.command()
@_errors
def mix(
    abc: Annotated[str | None, typer.Option(help="accurate base classifier (default: built-in Fashion-MNIST)")] = None,
    rbc: Annotated[str | None, typer.Option(help="robust base classifier")] = None,
    method: Annotated[str | None, typer.Option(help="mixing method (`mixzoo plugins` lists them; default: the "
                                                    "one marked default, mixednuts)")] = None,
    dataset: Annotated[str | None, typer.Option(help="calibration data set (default: the RBC's)")] = None,
    beta: Annotated[float | None, typer.Option(help="share of the RBC's robustness to keep (mixednuts: 0.985; "
                                                    "linear: the margin rule)")] = None,
    clamp: Annotated[str | None, typer.Option(help="mixednuts: clamp function (gelu, relu, elu, softplus, linear, "
                                                   "or a plugin's)")] = None,
    n_calib: Annotated[int, typer.Option(help="number of calibration images")] = 1000,
    grid: Annotated[str | None, typer.Option(help="mixednuts: s=MIN:MAX:N,p=MIN:MAX:N,c=MIN:MAX:N")] = None,
    objective: Annotated[str | None, typer.Option(help="mixednuts: standard | relaxed (App. D.8.3)")] = None,
    optimizer: Annotated[str | None, typer.Option(help="mixednuts: calibration optimizer from the plugin hook")]
    = None,
    top_k: Annotated[int | None, typer.Option(help="mixednuts: layer-norm statistics of the top-k logits "
                                                   "(App. D.7)")] = None,
    search: Annotated[str | None, typer.Option(help="mixednuts: mixzoo | authors: Algorithm 1 exactly as the "
                                               "authors' code (percentile threshold, no App. D.8.2 filter)")]
    = None,
    refit_alpha: Annotated[bool, typer.Option("--refit-alpha", help="mixednuts: second pass, MMAA on the "
                                              "transformed RBC, alpha chosen again there (App. D.9)")] = False,
    eps: Annotated[float | None, typer.Option(help="attack radius (default: the RBC's)")] = None,
    norm: Annotated[str | None, typer.Option(help="Linf | L2 (default: the RBC's)")] = None,
    n_iter: Annotated[int | None, typer.Option(help="APGD iterations in MMAA")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-O", metavar="KEY=VALUE", help="an option of the method, repeatable (e.g. -O alpha=0.95 for "
                                                    "linear); `mixzoo plugins --json` lists each method's")] = None,
    seed: int = 0,
    batch_size: AttackBatch = 250,
    out: Annotated[Path, typer.Option(help="where to write the mix card (.toml or .json)")] = Path("card.toml"),
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Fit a mixing method (default MixedNUTS: MMAA + Algorithm 1) for an ABC/RBC pair and write the mix card."""
    from mixzoo.methods import fit

    given = {"beta": beta, "clamp": clamp, "grid": _parse_grid(grid), "objective": objective,
             "optimizer": optimizer, "top_k": top_k, "search": search, "refit_alpha": refit_alpha or None,
             "n_iter": n_iter}
    options = {k: v for k, v in given.items() if v is not None}
    options.update(parse_attack_options(option) or {})
    options["command"] = _command_line()
    res = fit(method, abc, rbc, options=options, dataset=dataset, n_calib=n_calib, eps=eps, norm=norm, seed=seed,
              batch_size=batch_size, out=out, data_dir=data_dir, cache_dir=cache_dir, use_cache=not no_cache,
              device=device, allow_unsafe=allow_unsafe, progress=not as_json)
    card = res.card
    from mixzoo.core.distributed import world

    if not world().main:
        return  # under torchrun only rank 0 prints
    if as_json:
        print(json.dumps({"card": str(res.path), "method": card.method, **{
            k: v for k, v in card.params.items() if k != "grid"}, "summary": res.summary, "seconds": res.seconds,
            "cache_hits": res.cache_hits}, indent=2, default=str))
        return
    title = card.mixing_method.title or card.method
    table = Table(title=f"{title} for {card.abc.get('name')} + {card.rbc.get('name')} on {card.dataset}")
    table.add_column("")
    table.add_column("value", justify="right")
    for k, v in card.params.items():
        if isinstance(v, float):
            table.add_row(k, f"{v:.4g}")
        elif isinstance(v, int | str):
            table.add_row(k, str(v))
    sm = res.summary
    if "n_attacked_correct" in sm:  # MixedNUTS's Fig. 6 summary
        table.add_row("calibration images / clean mistakes / attacked correct",
                      f"{sm['n']} / {sm['n_clean_incorrect']} / {sm['n_attacked_correct']}")
        for stage in ("layer_norm", "transformed"):
            label = "before (LN)" if stage == "layer_norm" else "after M(s,p,c)"
            table.add_row(f"median margin {label}: clean incorrect / attacked correct",
                          f"{_f(sm[stage]['clean_incorrect_median_margin'])} / "
                          f"{_f(sm[stage]['attacked_correct_median_margin'])}")
    cached = " (MMAA cached)" if res.cache_hits.get("mmaa") else ""
    table.add_row(f"seconds{cached}", f"{res.seconds['total']:.1f}")
    out_console.print(table)
    for note in card.notes:
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    out_console.print(f"mix card written to {res.path}")


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


@app.command()
@_errors
def bench(
    cards: Annotated[list[str] | None, typer.Argument(
        help="mix cards of one pair (files or published names), any methods; without one the pair is fitted first")]
    = None,
    abc: Annotated[str | None, typer.Option()] = None,
    rbc: Annotated[str | None, typer.Option()] = None,
    attack: Annotated[str, typer.Option(help="adaptive (App. B.2.1) | adaptive-strong (+ exact, bypass and "
                                             "re-seeded APGD) | adaptive-apgd | autoattack | apgd | pgd | a "
                                             "plugin's")] = "adaptive",
    n: Annotated[int, typer.Option("--n", "--n-images", help="number of evaluation images (--n-images under torchrun,"
                                                              " whose parser takes --n for its own)")] = 1000,
    out: Annotated[Path, typer.Option(help="directory for report.json, report.md and plots")] = Path("bench"),
    eps: float | None = None,
    norm: str | None = None,
    seed: int = 0,
    batch_size: AttackBatch = 250,
    curve: Annotated[bool, typer.Option(help="trade-off curve over beta / alpha (Fig. 8)")] = True,
    curve_n: Annotated[int, typer.Option(help="images attacked per curve point")] = 300,
    plots: Annotated[bool, typer.Option(help="draw the PNG figures (each card method's own figures may need its "
                                             "calibration data, e.g. MixedNUTS's MMAA; rank 0 alone under torchrun)")
                     ] = True,
    attack_option: AttackOptions = None,
    save_adversarial: Annotated[bool, typer.Option(
        "--save-adversarial", help="also write adversarial.safetensors: the point that broke each broken example, "
                                   "for `mixzoo verify`")] = False,
    per_example_seeds: Annotated[bool, typer.Option(
        "--per-example-seeds/--batch-seeds", help="draw every attack's randomness per example index, so results do "
        "not depend on --batch-size or the number of processes (issue 29); --batch-seeds: seed + k for batch k, "
        "as before bench-6")] = True,
    baseline: Annotated[bool, typer.Option(help="with one card: add the matched baseline (linear) row")] = True,
    extra_attacks: Annotated[bool, typer.Option(help="run the extra attacks each card's method declares")] = True,
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Clean and robust accuracy of the ABC, the RBC and each card's mixed classifier, with report files and
    plots."""
    from mixzoo.core.distributed import world as distributed_world
    from mixzoo.evaluation.bench import bench as run_bench
    from mixzoo.evaluation.report import print_report

    card: Any = None if not cards else cards[0] if len(cards) == 1 else list(cards)
    report = run_bench(card, abc=abc, rbc=rbc, attack=attack, n=n, out=out, eps=eps, norm=norm, seed=seed,
                       batch_size=batch_size, attack_options=parse_attack_options(attack_option), curve=curve,
                       curve_n=curve_n, save_adversarial=save_adversarial, data_dir=data_dir, cache_dir=cache_dir,
                       use_cache=not no_cache, device=device, allow_unsafe=allow_unsafe, progress=not as_json,
                       baseline=baseline, extra_attacks=extra_attacks, per_example_seeds=per_example_seeds,
                       plots=plots)
    if not distributed_world().main:
        return  # under torchrun only rank 0 prints
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
        return
    print_report(report)
    out_console.print(f"report written to {out}/report.json, report.md and {', '.join(report.files)}")


@app.command("check")
@_errors
def check(
    card: Annotated[Path, typer.Argument(help="a mix card written by `mixzoo mix`, or a published card's name")],
    rbc: CardRBC = None,
    out: Annotated[Path | None, typer.Option(help="also write the result as JSON here")] = None,
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """How well Algorithm 1's surrogate held (App. D.9): MMAA on the transformed RBC, objective and alpha again."""
    from mixzoo.core.cache import atomic_write_text, check_writable
    from mixzoo.methods.mixednuts.approximation import check_approximation

    if out is not None:
        check_writable(out, what="--out file")
    res = check_approximation(card, rbc=rbc, data_dir=data_dir, cache_dir=cache_dir, use_cache=not no_cache,
                              device=device, allow_unsafe=allow_unsafe, progress=not as_json)
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


def _parse_floats(text: str | None, option: str) -> list[float] | None:
    if not text:
        return None
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise MixzooError(f"{option} {text!r} is not a comma-separated list of numbers, e.g. 0.1,0.2,0.5") from None


@app.command("sanity")
@_errors
def sanity(
    card: Annotated[Path, typer.Argument(help="a mix card written by `mixzoo mix`, or a published card's name")],
    eps: Annotated[str | None, typer.Option(help="radii, comma-separated (default: eps, 2 eps, 4 eps and the "
                                                 "radius where the grey image reaches every example)")] = None,
    attack: Annotated[str, typer.Option(help="the attack to check (as in bench)")] = "adaptive-apgd",
    n: Annotated[int, typer.Option(help="number of evaluation images")] = 200,
    linear: Annotated[bool, typer.Option(help="also check the linear baseline")] = True,
    linear_alpha: Annotated[float | None, typer.Option(
        help="the linear baseline's alpha (default: matched to MixedNUTS as `mixzoo bench` does)")] = None,
    abc: CardABC = None,
    rbc: CardRBC = None,
    out: Annotated[Path, typer.Option(help="directory for sanity.json, sanity.md and sanity.png")] = Path("sanity"),
    seed: int = 0,
    batch_size: Annotated[int, typer.Option(help="images per attack batch (as in bench)")] = 250,
    strict: Annotated[bool, typer.Option("--strict", help="exit with status 1 when a check finds misses")] = False,
    attack_option: AttackOptions = None,
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Does the attack find what there is to find? Robust accuracy over growing eps, checked for monotonicity and
    against the grey image (Carlini et al. 2019)."""
    from mixzoo.evaluation.bench import display_name
    from mixzoo.evaluation.sanity import eps_sweep

    sweep = eps_sweep(card, abc=abc, rbc=rbc, radii=_parse_floats(eps, "--eps"), attack=attack, n=n, seed=seed,
                      linear=linear, linear_alpha=linear_alpha, batch_size=batch_size,
                      attack_options=parse_attack_options(attack_option), out=out,
                      data_dir=data_dir, cache_dir=cache_dir,
                      use_cache=not no_cache, device=device, allow_unsafe=allow_unsafe, progress=not as_json)
    if as_json:
        print(json.dumps(sweep.to_dict(), indent=2))
    else:
        table = Table(title=f"robust % under {sweep.attack} over {sweep.norm} eps (n={sweep.n}; nominal eps "
                            f"{sweep.eps:g}; the grey image reaches every example at {sweep.reach:g})")
        for col in ("model", "clean %", "class at grey", *(f"eps {r:g}" for r in sweep.radii)):
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
    if strict and not sweep.passed:
        raise typer.Exit(1)


@app.command("certify")
@_errors
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
    samples: Annotated[int, typer.Option(help="Monte Carlo samples per image (001 App. A.2: 10,000)")] = 10_000,
    n0: Annotated[int, typer.Option(help="extra samples per image that choose the class (Cohen et al.)")] = 100,
    confidence: Annotated[float, typer.Option(help="joint confidence of each image's bounds")] = 0.999,
    smoothing: Annotated[str, typer.Option(help="hard (votes, Cohen et al.; certifies more at the same confidence)"
                                           " or soft (average probabilities, 001 App. A)")] = "hard",
    estimate: Annotated[str | None, typer.Option(help="also ESTIMATE local Lipschitz radii at these radii "
                                                      "(001 App. C.3, PGD; labelled, not a certificate)")] = None,
    dataset: Annotated[str | None, typer.Option(help="data set (default: the RBC's)")] = None,
    split: Annotated[str, typer.Option(help="evaluation or calibration")] = "evaluation",
    out: Annotated[Path, typer.Option(help="directory for certify.json, certify.md, certify.png")] = Path("certify"),
    seed: int = 0,
    batch_size: Annotated[int, typer.Option(help="noisy images per forward batch")] = 1000,
    data_dir: DataDir = None,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Certified robust radii of the RBC and of constant-alpha mixtures (001 Lemma 3.2, Thm 3.5, Thm A.2):
    certified accuracy per radius, for Lipschitz-bounded and randomized-smoothing RBCs."""
    from mixzoo.certify import certify

    result = certify(card, abc=abc, rbc=rbc, alphas=alpha, norm=norm, radii=_parse_floats(radii, "--radii"), n=n,
                     dataset=dataset, split=split, sigma=sigma, samples=samples, selection_samples=n0,
                     confidence=confidence, smoothing=smoothing, estimate_eps=_parse_floats(estimate, "--estimate"),
                     batch_size=batch_size, seed=seed, device=device, data_dir=data_dir, out=out,
                     progress=not as_json, allow_unsafe=allow_unsafe)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    s = result.settings
    for title, curves in (("certified accuracy %", result.certified_curves),
                          ("ESTIMATED accuracy % (001 App. C.3; not a certificate)", result.estimated_curves)):
        header, rows = result.table_rows(curves, columns=5, bound=False)
        if not rows:
            continue
        table = Table(title=f"{s['rbc']}: {title} over {s['norm']} radius (n={s['n']}, {s['mode']})")
        for k, col in enumerate(header):
            table.add_column(col, justify="left" if k == 0 else "right", no_wrap=k == 0)
        for row in rows:
            table.add_row(*row)
        out_console.print(table)
    for note in result.notes:
        out_console.print(f"note: {escape(note)}", highlight=False)
    out_console.print(f"{s['seconds']:.1f} s; written to {out}/certify.json, certify.md, certify.png")


@app.command("verify")
@_errors
def verify(
    bench_dir: Annotated[Path, typer.Argument(help="the --out directory of `mixzoo bench --save-adversarial`")],
    abc: CardABC = None,
    rbc: CardRBC = None,
    out: Annotated[Path | None, typer.Option(help="also write the result as JSON here")] = None,
    batch_size: Annotated[int, typer.Option(help="images per forward pass")] = 250,
    data_dir: DataDir = None,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Check a bench report's robust errors without attacking: each saved point in the ball and misclassified.
    Exit status 1 when any check fails."""
    from rich import box

    from mixzoo.evaluation.bench import display_name
    from mixzoo.evaluation.verify import FRAGILE, verify_report

    res = verify_report(bench_dir, abc=abc, rbc=rbc, data_dir=data_dir, device=device, batch_size=batch_size,
                        allow_unsafe=allow_unsafe, out=out)
    if as_json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        table = Table(title=f"adversarial points re-checked: {res.norm} eps={res.eps:g}, n={res.n}, {res.device}",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("model", "broken", "confirmed", "robust %", "verified %", "problems"):
            table.add_column(col, justify="left" if col in ("model", "problems") else "right")
        for r in res.rows:
            problems = ", ".join(f"{len(v)} {k.replace('_', ' ')}" for k, v in (
                ("outside", r.outside), ("not_misclassified", r.not_misclassified), ("missing", r.missing),
                ("unexpected", r.unexpected), ("clean_disagrees", r.clean_disagrees)) if v)
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
        verdict = "[green]verified[/green]: every" if res.passed else "[red]NOT verified[/red]: not every"
        out_console.print(f"{verdict} reported robust error has a point in the threat model that the model "
                          f"misclassifies ({res.seconds:.1f} s)", highlight=False)
    if not res.passed:
        raise typer.Exit(1)


@app.command("transfer-params")
@_errors
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
    data_dir: DataDir = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    device: str = "cpu",
    allow_unsafe: AllowUnsafe = False,
    as_json: AsJson = False,
) -> None:
    """Calibrate without the RBC's gradients (paper App. D.5): transfer, min-margin Square, or educated guess."""
    from mixzoo.methods.mixednuts.transfer import transfer_params_by_name

    card = transfer_params_by_name(from_card, rbc, dataset=dataset, n_calib=n_calib, method=method,
                                   queries=queries, query_budget=query_budget, out=out, seed=seed, beta=beta,
                                   eps=eps, norm=norm, data_dir=data_dir, cache_dir=cache_dir, use_cache=not no_cache,
                                   device=device, allow_unsafe=allow_unsafe, progress=not as_json)
    summary = {"card": str(out), "method": card.fit, "s": card.s, "p": card.p, "c": card.c,
               "alpha": card.alpha, "objective": card.objective}
    if as_json:
        print(json.dumps({**summary, "notes": card.notes}, indent=2))
        return
    table = Table(title=f"transferred mix card for {rbc} ({card.fit})", show_header=False)
    for k, v in summary.items():
        table.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out_console.print(table)
    for note in card.notes:
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)


@app.command()
@_errors
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
