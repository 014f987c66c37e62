"""``mixzoo push``, ``export`` and ``report`` over :func:`mixzoo.share.push.push`, :func:`mixzoo.share.export.export`
and :func:`mixzoo.share.robustbench.model_info`, which the built-in plugin ``share`` hands to the app through the hook
``mixzoo_cli_commands`` (:func:`commands`); torch, onnx and huggingface_hub are imported inside the commands only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mixzoo.core.commands import AsJson, examples
from mixzoo.core.errors import InputError

CardArg = Annotated[str, typer.Argument(help="a mix card file, a published card's name or an hf-hub:ORG/NAME id")]


@examples('mixzoo push card.toml --repo my-org/fmnist-mixednuts --dry-run --out hub/',
          'mixzoo push card.toml --repo my-org/fmnist-mixednuts --report bench/')
def push_cmd(
    card: CardArg,
    repo: Annotated[str, typer.Option(help="the Hugging Face Hub repository, ORG/NAME")],
    bundle_weights: Annotated[bool, typer.Option("--bundle-weights", help="also upload the base models' weights "
                                                 "(default: their names and weight hashes only)")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="write the folder, do not upload")] = False,
    out: Annotated[Path | None, typer.Option(help="the folder to write (default: hub/ORG--NAME)")] = None,
    report: Annotated[Path | None, typer.Option(help="a `mixzoo bench` directory of this card whose figures the "
                                                     "model card shows (default: of those found next to the card "
                                                     "or in the current directory, the one with the most images; "
                                                     "the command says which it took)")] = None,
    private: Annotated[bool, typer.Option("--private", help="create the repository as private")] = False,
    as_json: AsJson = False,
) -> None:
    """Write a Hugging Face Hub folder for a mix card (card, weights, base-model references, model card with its
    bench figures) and upload it; load it back with mixzoo.load_mixed("hf-hub:ORG/NAME")."""
    from mixzoo.share.push import push

    res = push(card, repo, out=out, bundle_weights=bundle_weights, report=report, dry_run=dry_run, private=private)
    f = res.folder
    summary = {"folder": str(f.path), "repo": f.repo, "files": f.files, "report": str(f.report) if f.report else None,
               "report_choice": f.report_choice, "uploaded": res.url}
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    print(f"folder for {f.repo} written to {f.path}: {', '.join(f.files)}")
    print(f.report_choice or f"bench figures from {f.report}" if f.report else
          "no bench report of this card found (pass --report)")
    print(f"uploaded: {res.url}" if res.url else "dry run: nothing uploaded")


@examples('mixzoo export card.toml --format onnx --out export/',
          'mixzoo export card.toml --format torch-export --out export/ --check-n 200')
def export_cmd(
    card: CardArg,
    format: Annotated[str, typer.Option("--format", help="onnx | torch-export (.pt2)")] = "onnx",
    out: Annotated[Path, typer.Option(help="directory for the artifact")] = Path("export"),
    check_n: Annotated[int, typer.Option(help="evaluation images its outputs are checked on")] = 100,
    tolerance: Annotated[float | None, typer.Option(
        help="the largest difference allowed between the artifact's log-probabilities and mixzoo's, in units of "
             "the spread of mixzoo's (the standard deviation of its finite log-probabilities over the checked "
             "images and classes); default 1e-4")] = None,
    abc: Annotated[str | None, typer.Option(help="the ABC, if the card's name is not a registry name")] = None,
    rbc: Annotated[str | None, typer.Option(help="the RBC, if the card's name is not a registry name")] = None,
    data_dir: Annotated[str | None, typer.Option(help="directory holding the data set files")] = None,
    allow_unsafe: Annotated[bool, typer.Option("--allow-unsafe", help="permit pickled checkpoints")] = False,
    as_json: AsJson = False,
) -> None:
    """Export the mixed classifier as one artifact that runs without mixzoo ([0, 1] NCHW images in, any batch size;
    log-probabilities out), kept only if it matches mixzoo's outputs on the evaluation images."""
    from mixzoo.share.export import TOLERANCE, check_format, export

    check_format(format)
    res = export(card, format, out, abc=abc, rbc=rbc, check_n=check_n, data_dir=data_dir, allow_unsafe=allow_unsafe,
                 tolerance=TOLERANCE if tolerance is None else tolerance)
    if as_json:
        print(json.dumps({"path": str(res.path), "format": res.format, "max_abs_diff": res.max_abs_diff,
                          "max_scaled_diff": res.max_scaled_diff, "spread": res.spread,
                          "tolerance": res.tolerance, "n_checked": res.n_checked,
                          "input_size": list(res.input_size), "metadata": res.metadata}, indent=2))
        return
    print(f"{res.format} artifact written to {res.path}: input float32 [batch, {', '.join(map(str, res.input_size))}]"
          f" in [0, 1], output log-probabilities; on {res.n_checked} evaluation images it differs from mixzoo by at"
          f" most {res.max_abs_diff:.3g}, {res.max_scaled_diff:.3g} of the spread of its outputs (std"
          f" {res.spread:.3g}; tolerance {res.tolerance:g})")


def _fields(values: list[str] | None) -> dict[str, Any]:
    """``--set KEY=VALUE`` words as model_info fields, read by the one parser; a value that reads as a number or
    list keeps its text as written (``--set venue=2024`` is the text "2024") unless its field's spec has another
    type. The specs convert them (:func:`mixzoo.share.robustbench.model_info`)."""
    from mixzoo.core.options import parse_pairs
    from mixzoo.share.robustbench import USER_FIELDS

    out = parse_pairs(values or [], "--set")
    typed = {k for k, spec in USER_FIELDS.items() if spec.type not in (str, None)}
    return {k: v if isinstance(v, bool | str) or k in typed else _raw_text(values or [], k) for k, v in out.items()}


def _raw_text(values: list[str], key: str) -> str:
    """The raw text after ``KEY=`` in ``values`` (a card field keeps numbers and lists as written)."""
    return next(t for k, _, t in (v.partition("=") for v in values) if k.strip().replace("-", "_") == key)


@examples('mixzoo report bench/ --format robustbench --out model_info/',
          'mixzoo report bench/ --format robustbench --card-name Doe2026MixedNUTS --out model_info/')
def report_cmd(
    bench_dir: Annotated[Path, typer.Argument(help="the --out directory of `mixzoo bench`")],
    format: Annotated[str, typer.Option("--format", help="robustbench: RobustBench's model_info JSON")],
    card_name: Annotated[str | None, typer.Option(help="the card row to submit when the report has several")] = None,
    set_field: Annotated[list[str] | None, typer.Option(
        "--set", "-s", metavar="KEY=VALUE", help="a paper field, repeatable: link, name, authors, venue, footnote, "
                                                 "additional_data (true/false), architecture, unreliable "
                                                 "(true/false)")] = None,
    out: Annotated[Path | None, typer.Option(help="also write it as OUT/DATASET/THREAT_MODEL/FILE.json, RobustBench's"
                                                  " model_info layout")] = None,
    file_name: Annotated[str | None, typer.Option(help="the file name under --out (default: the card file's)")]
    = None,
) -> None:
    """A bench report in another format: --format robustbench prints RobustBench's model_info JSON (standard
    AutoAttack from `--attack adaptive-strong`, the adaptive worst case as `external`)."""
    from mixzoo.share.robustbench import model_info, write_model_info

    if format != "robustbench":
        raise InputError(f"--format {format!r} is not a report format; the one format is robustbench")
    fields = _fields(set_field)
    info, where = model_info(bench_dir, card_name=card_name, fields=fields)
    path = None if out is None else write_model_info(bench_dir, out, card_name=card_name, fields=fields,
                                                     file_name=file_name)
    print(json.dumps(info, indent=2))
    if path is not None:
        typer.echo(f"written to {path} (RobustBench files it under model_info/{where['dataset']}/"
                   f"{where['threat_model']}/)", err=True)


COMMANDS: dict[str, Callable[..., None]] = {"push": push_cmd, "export": export_cmd, "report": report_cmd}


def commands() -> dict[str, Any]:
    """``push``, ``export`` and ``report`` as the hook ``mixzoo_cli_commands`` hands them to the CLI (the built-in
    plugin ``share`` does, as a third party's would), each with the commands' one-line error handling
    (:func:`mixzoo.core.commands.command`)."""
    from mixzoo.core.commands import command

    return {name: command(fn) for name, fn in COMMANDS.items()}


__all__ = ["COMMANDS", "commands"]
