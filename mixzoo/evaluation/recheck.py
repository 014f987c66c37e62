"""Attacking a few of a bench report's examples again (``mixzoo verify --recheck N``), from scratch and without the
cache, under the report's run record: their robust outcomes and each stand-alone component's outcomes
(``own_outcomes``, what RobustBench's ``autoattack_acc`` counts) against the report's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks import runner
from mixzoo.core.cache import Cache
from mixzoo.core.errors import InputError
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest
from mixzoo.core.settings import RunSettings
from mixzoo.evaluation.worst_case import evaluate_card


def row_outcomes(m: dict[str, Any], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Report row ``m``'s per-image clean and robust outcomes (one character per image each) as bool tensors; a
    one-line error when either is not ``n`` of "0" / "1"."""
    found = []
    for what in ("clean", "robust"):
        text = m.get(f"{what}_outcomes", "")
        if len(text) != n or set(text) - {"0", "1"}:
            raise InputError(f"report row {m['name']!r} has no per-image {what} outcomes for {n} images; re-run "
                             "`mixzoo bench --save-adversarial` with this version")
        found.append(torch.tensor([c == "1" for c in text]))
    return found[0], found[1]


def attack_record(report: dict[str, Any], path: Path, s: RunSettings) -> Any:
    """What a re-run attacks with: the report's run record (its attack, options, seed, precision, batch size, extra
    attacks, budget and ``-O`` counts, which with the budget decide the extra attacks' options) at the eps and norm
    of the report (the settings' batch size for a record without one). Refused without a record, with extra
    attacks but no budget in it (an older mixzoo), or when the outcomes depended on the batches
    (``--batch-seeds``): a subset could not reproduce them."""
    record = report.get("record")
    if not record:
        raise InputError(f"{path} has no run record, so there is no attack to re-run; run `mixzoo bench` again"
                         " with this version, or verify without --recheck")
    if record.get("per_example_seeds") is False:
        raise InputError(f"{path} was attacked with --batch-seeds: its outcomes depend on the batches, so a re-run "
                         "of a few examples cannot reproduce them; run verify without --recheck")
    attack, options, seed = record.get("attack"), record.get("attack_options"), record.get("seed")
    if not isinstance(attack, str) or not isinstance(options, dict) or type(seed) is not int:
        raise InputError(f"{path}: the run record names no attack, options and seed to re-run; pass an unedited"
                         " report")
    extras = bool(record.get("extra_attacks", True))
    if extras and not (isinstance(record.get("budget"), str) and isinstance(record.get("count_overrides"), dict)):
        raise InputError(f"{path}: the run record holds no budget of the extra attacks (budget, count_overrides), so"
                         " --recheck cannot re-run them as the bench did; re-run `mixzoo bench` to record the budget,"
                         " or verify without --recheck")
    precision = record.get("precision", "float32")
    if precision == "auto":  # resolved on the bench's device: the settings say to what (checked to be a name)
        precision = report["settings"].get("precision", "float32")
    size = record.get("batch_size")
    return RunRecord.from_settings(s.changed(attack=attack, attack_options=dict(options), seed=seed,
                                             precision=precision, extra_attacks=extras,
                                             budget=record.get("budget", s.budget),
                                             batch_size=size if type(size) is int and size > 0 else s.batch_size),
                                   per_example_seeds=True, count_overrides=record.get("count_overrides") or {})


def recheck_row(m: dict[str, Any], outcomes: tuple[torch.Tensor, torch.Tensor], model: nn.Module, card: Any, ce: Any,
                images: torch.Tensor, labels: torch.Tensor, count: int,
                record: Any) -> tuple[list[int], list[int], dict[str, list[int]]]:
    """Attack again, without a cache, the first ``count`` examples row ``m`` calls robust and the first ``count``
    it calls broken (``outcomes``: its :func:`row_outcomes`) as run record ``record`` says (a card's row with its
    extra attacks): (those examples, the ones whose robust outcome differs from the report's, and per component
    with ``own_outcomes`` the ones whose stand-alone outcome differs). The examples are attacked within the whole
    batches of the record's batch size that hold them, so a component drawing its randomness per batch
    (``autoattack-standard``) sees the batch it saw in the full run."""
    n = len(labels)
    clean, robust = outcomes
    picked = torch.cat([torch.nonzero(robust).squeeze(1)[:count], torch.nonzero(clean & ~robust).squeeze(1)[:count]])
    picked = picked.sort().values
    if not len(picked):
        return [], [], {}
    size = record.batch_size
    batches = (picked // size).unique()
    attacked = (batches.view(-1, 1) * size + torch.arange(size)).flatten()
    attacked = attacked[attacked < n]
    at = torch.searchsorted(attacked, picked)  # where each picked example is among those attacked
    request = EvalRequest(record.replace(eps=ce.eps, norm=ce.norm), Cache(enabled=False),
                          label=f"{m['name']} (recheck)", example_index=attacked, progress=False)
    x, y = images[attacked], labels[attacked]
    ev = (evaluate_card(card, ce.abc, ce.rbc, x, y, request) if card is not None
          else runner.evaluate(model, x, y, request))
    again = torch.tensor(ev["robust_correct"], dtype=torch.bool)[at]
    return picked.tolist(), picked[again != robust[picked]].tolist(), own_differences(
        m.get("components") or [], ev["components"], picked.tolist(), at.tolist())


def own_differences(reported: list[dict[str, Any]], again: list[dict[str, Any]], picked: list[int],
                    at: list[int]) -> dict[str, list[int]]:
    """Per component of ``reported`` (a report row's) with ``own_outcomes``: the examples ``picked`` whose
    stand-alone outcome differs from that of the same component in ``again`` (a re-run's components, example
    ``picked[j]`` at position ``at[j]`` of its outcomes), every picked one when the re-run has no such outcomes."""
    found = {c["name"]: c.get("own_outcomes") for c in again}
    out: dict[str, list[int]] = {}
    for comp in reported:
        own, here = comp.get("own_outcomes"), found.get(comp["name"])
        if own is not None:
            differs = [i for i, j in zip(picked, at, strict=True) if here is None or here[j] != own[i]]
            if differs:
                out[comp["name"]] = differs
    return out


__all__ = ["attack_record", "own_differences", "recheck_row", "row_outcomes"]
