"""RobustBench's ``model_info`` JSON for a mixed classifier's bench report.

RobustBench's leaderboard reads one JSON file per model, ``model_info/{dataset}/{threat_model}/{Name}.json`` in its
repository, with the fields :data:`MODEL_INFO_FIELDS` (``external`` when a stronger evaluation than AutoAttack
exists). :func:`model_info` fills them from a ``mixzoo bench`` report:

- ``autoattack_acc``: standard AutoAttack on the exact classifier, the report's ``autoattack-standard`` component
  (``mixzoo bench --attack adaptive-strong``) as a stand-alone evaluation, counted in its per-example outcomes
  (``own_outcomes``). A report without them is refused, naming the attack to run.
- ``external`` (and ``reported``): the adaptive worst case, the row's robust accuracy (every component of the attack
  and every extra attack the method declares, per example), never above ``autoattack_acc``.
- ``clean_acc``; ``eps`` as RobustBench writes it (``8/255``); ``dataset``; ``number_forward_passes`` 2 (one per
  base model); ``architecture`` from the pair's registry entries; ``additional_data`` false unless given.
- ``link``, ``name``, ``authors``, ``venue``, ``footnote``: the paper's, from ``fields``; the footnote says how many
  images were attacked (RobustBench's own figures use the whole test set).

Accuracies are percent strings with two decimals, as in RobustBench's files.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError
from mixzoo.core.labels import eps_fraction, row_label
from mixzoo.core.labels import eps_text as eps_label
from mixzoo.core.options import OptionSpec

# the fields of RobustBench's model_info/*/Linf|L2/*.json files (RobustBench/robustbench, model_info/)
MODEL_INFO_FIELDS = ("link", "name", "authors", "additional_data", "number_forward_passes", "dataset", "venue",
                     "architecture", "eps", "clean_acc", "reported", "autoattack_acc", "external", "footnote",
                     "unreliable")
STANDARD_COMPONENT = "autoattack-standard"
STRONG_ATTACK = "adaptive-strong"
# RobustBench's leaderboards: the data sets it ranks and the test images it evaluates on (the whole CIFAR test set;
# its fixed 5,000-image ImageNet subset)
LEADERBOARD_IMAGES = {"cifar10": 10_000, "cifar100": 10_000, "imagenet": 5_000}
# the fields a user sets (``mixzoo report --set KEY=VALUE``); the others come from the report
USER_FIELDS: dict[str, OptionSpec] = {
    "link": OptionSpec("the paper's URL", str),
    "name": OptionSpec("the paper's title", str, default_note="the card row's label"),
    "authors": OptionSpec("the paper's authors", str),
    "venue": OptionSpec("where the paper appeared (e.g. ICML 2024)", str),
    "footnote": OptionSpec("the leaderboard's footnote", str, default_note="how mixzoo evaluated the row"),
    "additional_data": OptionSpec("trained with data beyond the leaderboard's training set", bool, False),
    "architecture": OptionSpec("the architecture column", str, default_note="the two base models' architectures"),
    "unreliable": OptionSpec("flag the evaluation as unreliable", bool, False),
}


def pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.2f}"


def eps_text(eps: float) -> str:
    """The ``eps`` field as RobustBench's own model_info files write it (``8/255``, ``0.5``): the k/255 part of
    :func:`mixzoo.core.labels.eps_text`, else the decimal."""
    return eps_fraction(eps) or f"{float(eps):.3g}"


def leaderboard_warnings(dataset: str | None, n: int) -> list[str]:
    """Why RobustBench would not take these figures as they are: a data set it has no leaderboard for, or fewer
    images than its leaderboard evaluates (:data:`LEADERBOARD_IMAGES`)."""
    if dataset not in LEADERBOARD_IMAGES:
        return [f"RobustBench has no leaderboard for {dataset!r} (it ranks {', '.join(LEADERBOARD_IMAGES)}); this "
                "model_info cannot be submitted"]
    want = LEADERBOARD_IMAGES[dataset]
    if n < want:
        return [f"the report attacked {n} images; RobustBench's {dataset} leaderboard evaluates {want:,}: run "
                f"`mixzoo bench CARD --attack {STRONG_ATTACK} --n {want}` before submitting"]
    return []


def read_report(bench_dir: str | Path) -> dict[str, Any]:
    """A bench ``report.json`` (the directory ``mixzoo bench --out`` wrote, or the file), checked by the report
    schema (:class:`mixzoo.core.schema.ReportFile`: figures against outcomes, settings against the run record)."""
    path = Path(bench_dir)
    file = path / "report.json" if path.is_dir() else path
    if not file.is_file():
        raise InputError(f"{path} holds no report.json; pass the --out directory of `mixzoo bench`")
    from mixzoo.core.reading import read_data
    from mixzoo.core.schema import ReportFile, validate

    data = read_data(file, "json", what="bench report")
    if not isinstance(data, dict) or not isinstance(data.get("models"), list) or not isinstance(
            data.get("settings"), dict):
        raise InputError(f"{file} is not a bench report.json; pass the --out directory of `mixzoo bench`")
    validate(ReportFile, data, str(file), "pass the report.json `mixzoo bench` wrote, or run the bench again")
    return data


def card_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of mix cards (not the base models, not the matched baseline, which has no card file). A report
    of an older mixzoo keeps its one card at the top level (``card``), not in the rows: its card row is the mixed
    row after the matched baseline, given that card."""
    mixed = [m for m in report["models"] if m.get("kind") not in ("abc", "rbc")]
    rows = [m for m in mixed if m.get("card") and m.get("card_path")] or [m for m in mixed if m.get("card")]
    if rows or not isinstance(report.get("card"), dict) or not mixed:
        return rows
    baseline = 1 if len(mixed) > 1 and (report.get("settings") or {}).get("linear_alpha_match") else 0
    return [{**m, "card": report["card"]} for m in mixed[baseline:]]


def pick_row(report: dict[str, Any], card_name: str | None = None) -> dict[str, Any]:
    """The card row to submit: the only one, or the one named ``card_name`` (row name, card file stem or path)."""
    rows = card_rows(report)
    if not rows:
        raise InputError("the bench report has no mixed classifier row; bench a mix card first")
    if card_name is not None:
        hits = [m for m in rows if card_name in (m["name"], m.get("card_path"), Path(m.get("card_path") or "").stem)]
        if not hits:
            raise InputError(f"--card-name {card_name!r} names no row of the report; its card rows are "
                             + ", ".join(repr(m["name"]) for m in rows))
        return hits[0]
    if len(rows) > 1:
        raise InputError("the bench report has several card rows; pass --card-name with one of "
                         + ", ".join(repr(m["name"]) for m in rows))
    return rows[0]


def autoattack_accuracy(row: dict[str, Any]) -> float:
    """Standard AutoAttack's robust accuracy on the row's classifier, counted in its ``autoattack-standard``
    component's stand-alone outcomes (``own_outcomes``), or a one-line refusal naming the attack to run."""
    comp = next((c for c in row.get("components", []) if c.get("name") == STANDARD_COMPONENT), None)
    if comp is None:
        raise InputError(f"the report's row {row['name']!r} has no {STANDARD_COMPONENT} component, so there is no"
                         f" standard AutoAttack figure; run `mixzoo bench CARD --attack {STRONG_ATTACK}`")
    if not isinstance(comp.get("own_outcomes"), str):
        raise InputError(f"the report's {STANDARD_COMPONENT} component records only the breaks new to it (an older"
                         f" mixzoo or its cache); run `mixzoo bench CARD --attack {STRONG_ATTACK} --no-cache`")
    return comp["own_outcomes"].count("1") / int(row["n"])


def _architecture(row: dict[str, Any]) -> str:
    from mixzoo.core.errors import UnknownNameError
    from mixzoo.core.registry import get_spec

    card = row.get("card") or {}
    names = []
    for role in ("abc", "rbc"):
        ref = card.get(role)
        name = ref.get("name") if isinstance(ref, dict) and isinstance(ref.get("name"), str) else None
        name = name or role.upper()
        try:
            source = get_spec(name).source
            names.append(str(source.get("arch") or source.get("model") or source.get("name") or name))
        except UnknownNameError:
            names.append(name)
    trained = " + mixing network" if card.get("weights") else ""
    return f"{names[0]} + {names[1]}{trained}"


def model_info(bench_dir: str | Path, *, card_name: str | None = None,
               fields: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """``(model_info, where)`` for the card row of a bench report: the JSON object (keys in
    :data:`MODEL_INFO_FIELDS` order; ``fields`` sets those of :data:`USER_FIELDS`, see the module docstring) and
    ``{"dataset", "threat_model"}``, the folder RobustBench files it under."""
    info, where, _ = _model_info(bench_dir, card_name, fields)
    return info, where


def _model_info(bench_dir: str | Path, card_name: str | None, fields: dict[str, Any] | None
                ) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """:func:`model_info` and the report row it fills the JSON from."""
    fields = dict(fields or {})
    unknown = sorted(set(fields) - set(USER_FIELDS))
    if unknown:
        raise InputError(f"model_info field {unknown[0]!r} cannot be set (the figures come from the report); settable:"
                         f" {', '.join(USER_FIELDS)}")
    fields = {k: USER_FIELDS[k].convert(k, v, "model_info", flag=f"--set {k}") for k, v in fields.items()}
    report = read_report(bench_dir)
    row = pick_row(report, card_name)
    st, ds = report["settings"], report.get("dataset") or {}
    if st.get("attack") != STRONG_ATTACK:
        raise InputError(f"the report was attacked with {st.get('attack')!r}, which has no standard AutoAttack"
                         f" figure; run `mixzoo bench CARD --attack {STRONG_ATTACK}`")
    aa = autoattack_accuracy(row)
    for note in leaderboard_warnings(ds.get("name"), int(row["n"])):
        warnings.warn(note, stacklevel=2)
    from mixzoo.core.schema import counts

    n, clean, robust = counts(row)  # every figure from the row's outcomes
    worst = robust / n
    method = row.get("method") or row["kind"]
    footnote = (f"A mixed classifier ({method}) of two base classifiers, one forward pass each. Evaluated by mixzoo"
                f" `mixzoo bench --attack {STRONG_ATTACK}` ({st.get('norm')}, eps {eps_label(st.get('eps'))}) on the"
                f" first {row['n']} images of the {ds.get('name')}"
                f" {ds.get('split')} split (seed {st.get('seed')}); external: the adaptive worst case per example.")
    info: dict[str, Any] = {
        "link": "", "name": row_label(row), "authors": "", "additional_data": False, "number_forward_passes": 2,
        "dataset": ds.get("name"), "venue": "", "architecture": _architecture(row), "eps": eps_text(st["eps"]),
        "clean_acc": pct(clean / n), "reported": pct(worst), "autoattack_acc": pct(aa),
        "external": pct(worst), "footnote": footnote, "unreliable": False,
    }
    info.update(fields)
    return info, {"dataset": str(ds.get("name")), "threat_model": str(st.get("norm"))}, row


def write_model_info(bench_dir: str | Path, out: str | Path, *, card_name: str | None = None,
                     fields: dict[str, Any] | None = None, file_name: str | None = None) -> Path:
    """Write :func:`model_info` where RobustBench keeps it: ``out/{dataset}/{threat_model}/{file_name}.json``
    (default file name: the card's file stem); returns the path."""
    from mixzoo.core.cache import atomic_write_text
    from mixzoo.core.paths import below, check_output, safe_component

    info, where, row = _model_info(bench_dir, card_name, fields)
    if file_name is not None and (not file_name or os.sep in file_name or "/" in file_name
                                  or file_name.startswith(".")):
        raise InputError(f"--file-name {file_name!r} must be a plain file name, e.g. Bai2024MixedNUTS")
    # every part read from the report is reduced to one safe component, so the file stays under ``out``
    stem = safe_component(file_name or Path(row.get("card_path") or row["kind"]).stem, "the file name")
    check_output(out, option="--out", directory=True)
    # every folder between ``out`` and the file is checked too: a symbolic link there would lead the file elsewhere
    path = below(out, safe_component(where["dataset"], "the report's field 'dataset.name'"),
                 safe_component(where["threat_model"], "the report's field 'settings.norm'"), f"{stem}.json",
                 what="--out")
    check_output(path, option="--out", what="a RobustBench model_info file", ours=_is_model_info)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(info, indent=2) + "\n")


def _is_model_info(path: Path) -> bool:
    """Whether ``path`` holds a RobustBench model_info JSON object (one this function may replace)."""
    from mixzoo.core.errors import MixzooError
    from mixzoo.core.reading import read_data

    try:
        data = read_data(path, "json")
    except (OSError, MixzooError):
        return False
    return isinstance(data, dict) and {"clean_acc", "autoattack_acc"} <= set(data)

