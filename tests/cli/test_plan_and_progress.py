"""A plan before long work (--dry-run stops there), the overall progress line, plain progress lines without a
terminal, and the results on stdout with progress and warnings on stderr."""

from __future__ import annotations

import io
import time

from rich.console import Console
from typer.testing import CliRunner

import mixzoo.core.progress as progress
from mixzoo.cli import app
from mixzoo.core.plan import Plan


def _files(path):
    return sorted(p.name for p in path.rglob("*")) if path.exists() else []


def test_bench_dry_run_prints_the_plan_and_writes_nothing(digits_card, tmp_path):
    out, cache = tmp_path / "bench", tmp_path / "cache"
    res = CliRunner().invoke(app, ["bench", str(digits_card), "--n", "20", "--attack", "apgd", "-O", "n_iter=2",
                                   "--out", str(out), "--cache-dir", str(cache), "--dry-run"])
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert text.startswith("plan of `") and "(6 phases)" in text
    from mixzoo.core.card import MixCard

    card = MixCard.load(digits_card)
    size = card.mixing_method.curve_size(card, None)  # every beta and alpha of the standard budget, the ABC
    for phase in ("1. ABC digits-std: apgd (n_iter=2) on 20 images", "2. RBC digits-pgd", "3. MixedNUTS: apgd",
                  "4. matched Linear mix",
                  f"5. trade-off curve: {size} classifiers under fast on 20 images", "6. report"):
        assert phase in text, text
    assert "estimate: ~" in text and "nothing was written" in text
    assert not out.exists() and _files(cache) == []


def test_mix_sanity_and_certify_dry_runs_write_nothing(digits_card, tmp_path):
    card = tmp_path / "card.toml"
    res = CliRunner().invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--out", str(card),
                                   "--n-calib", "40", "-O", "n_iter=2", "--cache-dir", str(tmp_path / "c"),
                                   "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "1. calibration data: RBC clean logits and MMAA (2 steps" in res.stdout and "40 digits" in res.stdout
    assert not card.exists() and _files(tmp_path / "c") == []
    res = CliRunner().invoke(app, ["sanity", str(digits_card), "--n", "10", "--eps", "0.1,0.2", "-O", "n_iter=2",
                                   "--out", str(tmp_path / "s"), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "MixedNUTS: adaptive-apgd on 10 images at 2 radii (eps 0.1, 0.2)" in res.stdout
    assert not (tmp_path / "s").exists()
    res = CliRunner().invoke(app, ["certify", "--rbc", "digits-lip", "--abc", "digits-std", "--alpha", "0.9",
                                   "--n", "30", "--out", str(tmp_path / "cert"), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "ABC: one forward pass on 30 images" in res.stdout and "RBC: one forward pass" in res.stdout
    assert not (tmp_path / "cert").exists()


def test_without_a_terminal_a_plain_progress_line_every_interval(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(progress, "console", Console(file=buf, force_terminal=False, width=200))
    with progress.phases(["ABC", "RBC"], [1.0, 3.0], interval=0.05):
        progress.next_phase()
        progress.next_phase("RBC digits-pgd")
        with progress.progress_bar(interval=0.05) as bar:
            task = bar.add_task("attack", total=10)
            bar.advance(task, 4)
            time.sleep(0.3)
    lines = [line for line in buf.getvalue().splitlines() if line.startswith("progress: ")]
    assert len(lines) >= 2, buf.getvalue()
    assert lines[-1].startswith("progress: phase 2 of 2: RBC digits-pgd (attack 4/10); elapsed 0:00, ETA ")
    # a bar outside any phases prints its own counts
    buf.truncate(0)
    with progress.progress_bar(interval=0.05) as bar:
        bar.add_task("MMAA", total=300)
        time.sleep(0.2)
    assert "progress: MMAA 0/300" in buf.getvalue()


def test_plan_text_and_total():
    plan = Plan("mixzoo bench x")
    plan.add("ABC", "apgd on 20 images", 12.0)
    plan.add("report", "files")
    lines = plan.lines()
    assert lines[1] == "  1. ABC: apgd on 20 images (~0:12)" and lines[2].endswith("(not estimated)")
    assert lines[3].startswith("estimate: ~0:12 + phase 2,")


def test_the_bench_table_goes_to_stdout_and_progress_to_stderr(digits_card, tmp_path):
    res = CliRunner().invoke(app, ["bench", str(digits_card), "--n", "10", "--attack", "apgd", "-O", "n_iter=2",
                                   "--no-curve", "--no-plots", "--no-baseline", "--no-extra-attacks",
                                   "--out", str(tmp_path / "b"), "--cache-dir", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert "digits evaluation, n=10" in res.stdout and "RBC digits-pgd" in res.stdout
    assert "plan of" not in res.stdout  # short work: no plan; a long one's goes to stderr (below)


def test_a_plan_goes_to_stderr_before_long_work_only(capsys):
    from mixzoo.core.plan import LONG_WORK_S, show_plan
    from mixzoo.core.progress import next_phase

    plan = Plan("mixzoo bench x")
    plan.add("RBC", "adaptive on 1000 images", LONG_WORK_S / 2)
    show_plan(plan, dry_run=False)
    assert capsys.readouterr().err == ""
    plan.add("MixedNUTS", "adaptive on 1000 images", LONG_WORK_S)
    show_plan(plan, dry_run=False)
    assert capsys.readouterr().err == ""  # shown when the work starts, after the command has checked its arguments
    next_phase()
    seen = capsys.readouterr()
    assert seen.err.startswith("plan of `mixzoo bench x` (2 phases):") and seen.out == ""
    next_phase()
    assert capsys.readouterr().err == ""  # once


def test_a_dry_run_after_the_run_counts_its_rows_as_cached(digits_card, tmp_path):
    args = ["bench", str(digits_card), "--n", "10", "--attack", "apgd", "-O", "n_iter=2", "--no-curve", "--no-plots",
            "--no-baseline", "--out", str(tmp_path / "b"), "--cache-dir", str(tmp_path / "c")]
    assert CliRunner().invoke(app, args).exit_code == 0
    res = CliRunner().invoke(app, [*args, "--dry-run"])
    assert res.exit_code == 0, res.output
    for phase in ("1. ABC digits-std", "2. RBC digits-pgd", "3. MixedNUTS"):
        line = next(x for x in res.stdout.splitlines() if phase in x)
        assert line.endswith("on 10 images, 10 of 10 cached (~0:00)"), line
    # the same run keeping its adversarial points: the cached outcomes lack them, so they are attacked again
    res = CliRunner().invoke(app, [*args, "--save-adversarial", "--dry-run"])
    assert "cached" not in next(x for x in res.stdout.splitlines() if "1. ABC" in x)


def test_plain_progress_without_phases_prints_a_line_once_until_it_changes(monkeypatch):
    import io

    from rich.console import Console

    buf = io.StringIO()
    monkeypatch.setattr(progress, "console", Console(file=buf, force_terminal=False, width=200))
    with progress.progress_bar(interval=0.05) as bar:
        task = bar.add_task("attack", total=1000)
        bar.advance(task, 250)
        time.sleep(0.3)
    assert buf.getvalue().count("progress: attack 250/1000") == 1, buf.getvalue()
