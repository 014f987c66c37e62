"""A mix card as a Hugging Face Hub repository: the folder (:func:`hub_folder`) and its upload (:func:`push`).

The folder holds the card (:data:`~mixzoo.share.hub.CARD_FILE`) with its method's weight files (checked against
their recorded sha256), the base-model references (:data:`~mixzoo.share.hub.BASE_MODELS_FILE`: name, the weight hash
the card was fitted for, the registry's weight-file sha256; with ``bundle_weights`` the networks' weights as
safetensors with their sha256), the card's bench report with the most images under ``bench/`` and a ``README.md``
whose YAML metadata (``library_name: mixzoo``, ``tags``, ``datasets``, ``base_model``, ``metrics``,
``model-index``) the Hub indexes; ``mixzoo.load_mixed("hf-hub:ORG/NAME")`` loads it. The folder is staged and
renamed into place; the upload is one ``upload_folder`` call, refused in one line offline.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError, MixzooError
from mixzoo.core.labels import eps_text, row_label
from mixzoo.core.reading import copy_of
from mixzoo.share.hub import BASE_MODELS_FILE, CARD_FILE, HUB_PREFIX, parse_hub_id
from mixzoo.share.robustbench import pct, read_report
from mixzoo.zoo.files import offline
from mixzoo.zoo.hub import hub_reachable

REPORT_DIR = "bench"
MARKER = BASE_MODELS_FILE  # a folder holding it was written by hub_folder and may be replaced by the next push
SEARCH_DEPTH = 2  # report.json files are looked for this many folders below the card's folder and the current one


@dataclass
class HubFolder:
    """What :func:`hub_folder` wrote: the folder, the repository it is meant for, its files and the bench report
    whose figures the model card shows (None when no report of this card was given or found)."""

    path: Path
    repo: str
    files: list[str] = field(default_factory=list)
    report: Path | None = None
    figures: dict[str, Any] | None = None
    report_choice: str = ""  # why this report: given, or the largest n of the reports found


@dataclass
class PushResult:
    """The folder and, unless a dry run, the URL of the commit that uploaded it."""

    folder: HubFolder
    url: str | None = None


# ------------------------------------------------------------------------------------------------- bench report
def _card_identity(card_dict: dict[str, Any]) -> tuple[str, ...]:
    method = card_dict.get("method")
    keep = {k: card_dict.get(k) for k in ("abc", "rbc", "weights", "dataset")}
    return (str(method), json.dumps(card_dict.get(method), sort_keys=True), json.dumps(keep, sort_keys=True))


def card_row(report: dict[str, Any], card: Any) -> dict[str, Any] | None:
    """The row of ``report`` (a parsed ``report.json``) that evaluated ``card`` (same method section, base models,
    weight files and dataset), or None."""
    want = _card_identity(card.to_dict())
    return next((m for m in report.get("models", []) if isinstance(m.get("card"), dict)
                 and _card_identity(m["card"]) == want), None)


def _find_reports(card: Any, report: str | Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """The bench reports of ``card``, the one to take first: ``report`` (a bench directory or its report.json;
    refused when it did not evaluate this card), else the ``report.json`` files within :data:`SEARCH_DEPTH` folders
    below the card's folder or the current directory that have a row for it, the most images first (then the
    latest); each read and checked by :func:`mixzoo.share.robustbench.read_report`."""
    if report is not None:
        path = Path(report)
        data = read_report(path)
        if card_row(data, card) is None:
            raise InputError(f"{path} has no row for this card (other method parameters, base models or weights);"
                             " pass the report of a `mixzoo bench` run of this very card")
        return [((path / "report.json" if path.is_dir() else path), data)]
    roots = {Path.cwd().resolve()}
    if card.path is not None:
        roots.add(card.path.parent.resolve())
    found = []
    for root in roots:
        for depth in range(SEARCH_DEPTH + 1):
            for file in root.glob("/".join(["*"] * depth + ["report.json"])):
                if (file.parent.parent / MARKER).is_file():  # the copy inside a folder `mixzoo push` wrote
                    continue
                try:
                    data = read_report(file)
                except InputError:
                    continue
                row = card_row(data, card)
                if row is not None:
                    n = row.get("n") if isinstance(row.get("n"), int) else 0
                    found.append((n, str((data.get("run") or {}).get("created", "")), file.resolve(), data))
    unique = {t[2]: t for t in found}.values()  # the card's folder may lie below the current directory
    return [(file, data) for _, _, file, data in sorted(unique, key=lambda t: (t[0], t[1], str(t[2])), reverse=True)]


def _report_choice(card: Any, given: bool, found: list[tuple[Path, dict[str, Any]]]) -> str:
    """One line: which report of :func:`_find_reports` is taken and why; empty when there is none."""
    if not found:
        return ""
    file, data = found[0]
    n = (card_row(data, card) or {}).get("n")
    if given:
        return f"bench figures from {file} (given with --report; n={n})"
    if len(found) == 1:
        return f"bench figures from {file} (n={n}; the only report of this card found)"
    others = ", ".join(f"n={(card_row(d, card) or {}).get('n')}" for _, d in found[1:])
    return (f"bench figures from {file} (n={n}, the most images of the {len(found)} reports of this card found;"
            f" the others: {others}; pass --report to choose)")


def bench_figures(report: dict[str, Any], card: Any) -> dict[str, Any]:
    """The card's row and the base models' rows of a bench report, as the model card shows them."""
    row = card_row(report, card)
    if row is None:
        raise InputError("the bench report has no row for this card")
    from mixzoo.core.schema import counts
    from mixzoo.evaluation.stats import wilson_interval

    st = report.get("settings", {})
    rows = [m for m in report["models"] if m.get("kind") in ("abc", "rbc")] + [row]

    def figures(m: dict[str, Any]) -> dict[str, Any]:  # every figure from the row's outcomes
        n, clean, robust = counts(m)
        return {"clean_accuracy": clean / n, "robust_accuracy": robust / n,
                "clean_ci": list(wilson_interval(clean, n)), "robust_ci": list(wilson_interval(robust, n))}

    return {"attack": st.get("attack"), "eps": st.get("eps"), "norm": st.get("norm"), "seed": st.get("seed"),
            "dataset": (report.get("dataset") or {}).get("name"), "split": (report.get("dataset") or {}).get("split"),
            "n": row.get("n"), "created": (report.get("run") or {}).get("created"),
            "extra_attacks": st.get("extra_attacks", True),
            "rows": [{"name": m["name"], "kind": m["kind"], "alpha": m.get("alpha"), **figures(m)} for m in rows],
            "card_row": row["name"]}


# ------------------------------------------------------------------------------------------------- base models
def base_model_reference(card: Any, role: str, folder: Path | None = None) -> dict[str, Any]:
    """``{"name", "weight_hash", "file_sha256", "source", "hub_id"}`` of the card's ``role`` model (the registry's
    record; ``hub_id`` from an ``hf-hub:`` name or source); with ``folder``, its network's weights, checked to be
    the card's, are also written there as ``ROLE.safetensors`` and named with their sha256."""
    from mixzoo.core.errors import MissingFileError, UnknownNameError
    from mixzoo.core.registry import get_spec

    recorded = getattr(card, role) or {}
    name = recorded.get("name")
    if not name:
        raise InputError(f"the mix card records no {role.upper()} name; a pushed card must name its base models")
    entry: dict[str, Any] = {"name": name, "weight_hash": recorded.get("weight_hash")}
    try:
        spec = get_spec(name)
        entry.update(file_sha256=spec.sha256, source=copy_of(dict(spec.source)),
                     dataset=spec.dataset, role=spec.role)
    except (UnknownNameError, MissingFileError):  # not registered, or an hf-hub: name whose config is not cached
        entry.update(file_sha256=None, source=None)
    hub = next((str(v) for v in (name, (entry["source"] or {}).get("model")) if str(v).startswith(HUB_PREFIX)), None)
    entry["hub_id"] = hub.removeprefix(HUB_PREFIX).partition("@")[0] if hub else None
    if folder is not None:
        entry.update(_bundle(card, role, name, folder))
    return entry


def _bundle(card: Any, role: str, name: str, folder: Path) -> dict[str, Any]:
    from safetensors.torch import save_file

    from mixzoo.zoo.checkpoints import sha256_file
    from mixzoo.zoo.models import load_model
    from mixzoo.zoo.pairs import model_hash

    model = load_model(name)
    expected = (getattr(card, role) or {}).get("weight_hash")
    if expected and model_hash(model) != expected:
        raise InputError(f"{role.upper()} {name!r} has weight hash {model_hash(model)} but the card was fitted for"
                         f" {expected}; bundle only the weights the card was fitted for")
    network = getattr(model, "network", model)
    file = folder / f"{role}.safetensors"
    save_file({k: v.detach().contiguous().cpu() for k, v in network.state_dict().items()}, str(file))
    return {"file": file.name, "sha256": sha256_file(file)}


# ------------------------------------------------------------------------------------------------- model card
def model_card(card: Any, repo: str, refs: dict[str, dict[str, Any]], figures: dict[str, Any] | None,
               report_file: str | None) -> str:
    """``README.md``: YAML metadata (``model-index`` when there are bench figures; ``base_model`` only the models
    hosted on the Hub, which takes only repository ids there; registry names under ``mixzoo``), then what the
    classifier is, how to load it, its figures with their report and its files."""
    method = card.mixing_method
    title = method.title or method.name
    attack = card.attack or {}
    abc, rbc = refs["abc"]["name"], refs["rbc"]["name"]
    hub_bases = [r["hub_id"] for r in (refs["abc"], refs["rbc"]) if r.get("hub_id")]
    meta: dict[str, Any] = {
        "library_name": "mixzoo",
        "tags": ["mixzoo", "mixed-classifier", "adversarial-robustness", "image-classification", card.method],
        "datasets": [card.dataset] if card.dataset else [],
        **({"base_model": hub_bases} if hub_bases else {}),
        "metrics": ["accuracy"],
        "mixzoo": {"method": card.method, "abc": abc, "rbc": rbc, "card": CARD_FILE},
    }
    if figures:
        row = next(r for r in figures["rows"] if r["name"] == figures["card_row"])
        task = {"type": "image-classification", "name": "Image Classification"}
        ds = {"name": figures["dataset"], "type": figures["dataset"], "split": figures["split"]}
        meta["model-index"] = [{"name": repo.split("/")[1], "results": [{"task": task, "dataset": ds, "metrics": [
            {"type": "accuracy", "name": "clean accuracy", "value": round(100 * row["clean_accuracy"], 2)},
            {"type": "accuracy", "name": f"robust accuracy ({figures['attack']}, {figures['norm']} eps"
                                           f" {eps_text(figures['eps'])})",
             "value": round(100 * row["robust_accuracy"], 2)}]}]}]
    front = "\n".join(f"{k}: {json.dumps(v)}" for k, v in meta.items())  # JSON is YAML: no quoting surprises
    lines = [
        "---", front, "---", "",
        f"# {repo.split('/')[1]}: {title} of {abc} and {rbc}", "",
        f"A mixed classifier made with mixzoo: the accurate base classifier (ABC) `{abc}` and"
        f" the robust base classifier (RBC) `{rbc}`, combined by {title} ({method.paper or card.method}). [0, 1]"
        " NCHW images in, log-probabilities out.", "",
        f"- dataset: `{card.dataset}`; threat model: {attack.get('norm', '?')}, eps {eps_text(attack.get('eps'))}",
        f"- card: `{CARD_FILE}` ({card.summary()})",
        f"- base models: `{BASE_MODELS_FILE}` (names, the weight hashes the card was fitted for"
        + (", bundled weights" if any(r.get("file") for r in refs.values()) else "") + ")", "",
        "## Load", "", "```python", "import mixzoo", "",
        f'model = mixzoo.load_mixed("hf-hub:{repo}")  # offline too, once it is in the Hugging Face cache',
        "```", "", "```bash", f"mixzoo bench hf-hub:{repo} --attack adaptive-strong", "```", "",
    ]
    if figures:
        lines += [f"## Evaluation ({report_file})", "",
                  f"`mixzoo bench --attack {figures['attack']}`, {figures['norm']} eps {eps_text(figures['eps'])},"
                  f" {figures['n']} images of the `{figures['split']}` split of {figures['dataset']}, seed"
                  f" {figures['seed']} ({figures['created']}). Robust accuracy is the worst case, example by"
                  " example, over the attack's components"
                  + (" and the extra attacks the method declares." if figures["extra_attacks"]
                     else "; the extra attacks the method declares were not run."), "",
                  "| model | clean % (95% CI) | robust % (95% CI) |", "|---|---|---|"]
        for r in figures["rows"]:
            cells = [f"{pct(r[f'{k}_accuracy'])} ({'-'.join(pct(v) for v in r.get(f'{k}_ci') or [None, None])})"
                     for k in ("clean", "robust")]
            lines.append(f"| {row_label(r)} | {' | '.join(cells)} |")
        lines.append("")
    else:
        lines += ["## Evaluation", "", f"No bench report was pushed; run `mixzoo bench hf-hub:{repo}`.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- the folder
def hub_folder(card: Any, repo: str, out: str | Path | None = None, *, bundle_weights: bool = False,
               report: str | Path | None = None) -> HubFolder:
    """Write the Hub-ready folder of ``card`` (a card, its file or a published card's name) for repository
    ``repo`` (``ORG/NAME``) into ``out`` (default ``hub/ORG--NAME``): see the module docstring. A folder an
    earlier push wrote is replaced; any other non-empty folder is refused."""
    from mixzoo.core.card import MixCard

    repo_id, revision = parse_hub_id(repo)
    if revision:
        raise InputError(f"--repo {repo!r}: name the repository without a revision (ORG/NAME)")
    card = card if isinstance(card, MixCard) else MixCard.load(card)
    out = Path(out) if out is not None else Path("hub") / repo_id.replace("/", "--")
    if out.is_symlink():
        raise InputError(f"--out {out} is a symbolic link; pass the folder itself or a new path")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise InputError(f"{out} exists and was not written by `mixzoo push`; pass another --out")
    reports = _find_reports(card, report)
    choice, found = _report_choice(card, report is not None, reports), (reports[0] if reports else None)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        card.save_as(stage / CARD_FILE)
        refs = {role: base_model_reference(card, role, stage if bundle_weights else None) for role in ("abc", "rbc")}
        (stage / BASE_MODELS_FILE).write_text(json.dumps(refs, indent=2) + "\n", encoding="utf-8")
        figures, report_file = None, None
        if found is not None:
            file, data = found
            (stage / REPORT_DIR).mkdir()
            shutil.copyfile(file, stage / REPORT_DIR / "report.json")
            if file.with_name("report.md").is_file():
                shutil.copyfile(file.with_name("report.md"), stage / REPORT_DIR / "report.md")
            figures, report_file = bench_figures(data, card), f"{REPORT_DIR}/report.json"
        (stage / "README.md").write_text(model_card(card, repo_id, refs, figures, report_file), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    return HubFolder(out, repo_id, files, found[0] if found else None, figures, choice)


def upload(folder: HubFolder, *, token: str | None = None, private: bool = False) -> str:
    """Upload ``folder`` to its repository with huggingface_hub (``create_repo(exist_ok=True)``, then
    ``upload_folder``); returns the commit URL. Offline, or when the hub refuses, a one-line error."""
    if offline():
        raise MixzooError(f"cannot upload to the Hugging Face Hub: HF_HUB_OFFLINE or MIXZOO_OFFLINE is set; the"
                          f" folder is ready in {folder.path}: upload it where there is network (unset it and run"
                          " `mixzoo push` again, or `huggingface-cli upload`)")
    from huggingface_hub import HfApi, constants

    if not hub_reachable():
        raise MixzooError(f"cannot upload to the Hugging Face Hub: {constants.ENDPOINT} is unreachable; the folder is"
                          f" ready in {folder.path}: upload it where there is network, or pass --dry-run")
    api = HfApi(token=token)
    try:
        api.create_repo(folder.repo, private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder.path), repo_id=folder.repo,
                                 commit_message="mixzoo push: mix card, base-model references, model card")
    except Exception as exc:  # noqa: BLE001 - network, auth and hub errors of any kind become one line
        first = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise MixzooError(f"upload of {folder.path} to {folder.repo} failed ({type(exc).__name__}: {first}); check"
                          " the network and `huggingface-cli login`, or pass --dry-run") from None
    return str(getattr(info, "commit_url", info))


def push(card: Any, repo: str, *, out: str | Path | None = None, bundle_weights: bool = False,
         report: str | Path | None = None, dry_run: bool = False, token: str | None = None,
         private: bool = False) -> PushResult:
    """Write the Hub folder of ``card`` (:func:`hub_folder`) and, unless ``dry_run``, upload it (:func:`upload`)."""
    folder = hub_folder(card, repo, out, bundle_weights=bundle_weights, report=report)
    return PushResult(folder, None if dry_run else upload(folder, token=token, private=private))
