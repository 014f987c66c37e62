"""``mixzoo bench`` / ``sanity`` / ``verify`` (mixzoo/cli/evaluation.py): the shared options reach the settings
as one group, the default attack is RunSettings', and a dry run of a card whose files are missing lists them."""

from __future__ import annotations

import dataclasses

from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.cli.options import AttackGroup, CacheGroup, MachineGroup, chosen_attack, run_settings
from mixzoo.core.catalog import card_entry
from mixzoo.core.settings import RunSettings


def test_the_default_attack_is_run_settings_own():
    assert chosen_attack(AttackGroup()) == RunSettings().attack
    assert chosen_attack(AttackGroup(attack="pgd")) == "pgd"
    assert chosen_attack(AttackGroup(budget="strong")) == "adaptive-strong"  # the budget's attack
    assert chosen_attack(AttackGroup(), "adaptive-apgd") == "adaptive-apgd"  # a command's own default


def test_default_groups_give_the_library_defaults():
    """Each option group's defaults are RunSettings' (the batch size as text, as typed)."""
    made = run_settings(AttackGroup(), MachineGroup(device="cpu"), CacheGroup())
    assert made == RunSettings()
    changed = run_settings(AttackGroup(seed=3, batch_size="auto", attack_option=["n_iter=7"]),
                           MachineGroup(device="cpu", allow_unsafe=True), CacheGroup(no_cache=True), n=5)
    assert (changed.seed, changed.batch_size, changed.attack_options) == (3, "auto", {"n_iter": 7})
    assert (changed.allow_unsafe, changed.use_cache, changed.n) == (True, False, 5)


def test_bench_and_sanity_take_the_same_attack_options():
    import typer

    group = typer.main.get_command(app)
    names = {c: {p.name for p in group.commands[c].params} for c in ("bench", "sanity")}
    shared = {f.name for g in (AttackGroup, MachineGroup, CacheGroup) for f in dataclasses.fields(g)}
    assert shared <= names["bench"] & names["sanity"]


def test_bench_dry_run_of_a_card_whose_files_are_missing_plans_and_lists_them(hf_cache, rb_dir, tmp_path):
    card = "mixednuts-cifar10"
    entry = card_entry(card)
    result = CliRunner().invoke(app, ["bench", card, "--dry-run", "--data-dir", str(tmp_path / "nodata")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "plan of `mixzoo" in said and "not estimated" in said and "--dry-run: stopped" in said
    for needed in (f"{entry['abc']}: ", f"{entry['rbc']}: ", str(tmp_path / "nodata" / "cifar-10-batches-py")):
        assert needed in said, needed
    assert not (tmp_path / "bench").exists()
