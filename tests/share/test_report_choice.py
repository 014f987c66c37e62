"""`mixzoo push` without --report takes the report of the card with the most images (not the newest) and says
which it took; `mixzoo report --format robustbench` warns where RobustBench would not take the figures."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.card import MixCard
from mixzoo.share import push as share_push


def _report(card: MixCard, n: int, created: str) -> dict:
    def row(name, kind, **kw):
        return {"name": name, "kind": kind, "n": n, "clean_accuracy": 0.9, "robust_accuracy": 0.5, "alpha": None,
                "clean_ci": [0.8, 0.95], "robust_ci": [0.4, 0.6], **kw}

    return {"models": [row("digits-std", "abc"), row("digits-pgd", "rbc"),
                       row("MixedNUTS", "mixednuts", alpha=card.params["alpha"], card=card.to_dict(),
                           method="mixednuts")],
            "settings": {"attack": "apgd", "eps": 0.2, "norm": "Linf", "seed": 0},
            "dataset": {"name": "digits", "split": "evaluation", "n": n}, "run": {"created": created}}


def test_push_takes_the_report_with_the_most_images_and_says_so(digits_card, tmp_path):
    card = MixCard.load(MixCard.load(digits_card).save_as(tmp_path / "c.toml"))
    for folder, n, created in (("big", 200, "2026-01-01"), ("small", 20, "2026-06-01")):
        (tmp_path / "runs" / folder).mkdir(parents=True)
        (tmp_path / "runs" / folder / "report.json").write_text(json.dumps(_report(card, n, created)))
    folder = share_push.hub_folder(card, "someone/mixed", tmp_path / "hub")
    assert folder.report == (tmp_path / "runs" / "big" / "report.json").resolve()
    assert "n=200" in folder.report_choice and "n=20" in folder.report_choice and "--report" in folder.report_choice
    assert "200 images" in (tmp_path / "hub" / "README.md").read_text()
    given = share_push.hub_folder(card, "someone/mixed", tmp_path / "hub2", report=tmp_path / "runs" / "small")
    assert given.report == tmp_path / "runs" / "small" / "report.json" and "given with --report" in given.report_choice
    result = CliRunner().invoke(app, ["push", str(tmp_path / "c.toml"), "--repo", "someone/mixed", "--dry-run",
                                      "--out", str(tmp_path / "hub3")])
    assert result.exit_code == 0, result.output
    assert "n=200, the most images of the 2 reports" in " ".join(result.output.split())


def test_a_report_without_a_card_row_of_its_own_still_finds_its_mixed_row():
    from mixzoo.share.robustbench import card_rows

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "mixednuts_fmnist" / "population_ln"
    reports = sorted(root.glob("adaptive_strong_*/report.json"))
    assert reports, "the committed adaptive-strong reports"
    for file in reports:
        rows = card_rows(json.loads(file.read_text()))
        assert [r["kind"] for r in rows] == ["mixednuts"] and rows[0]["card"], file


def _strong_report(tmp_path: Path, dataset: str, n: int) -> Path:
    card = {"method": "mixednuts", "abc": {"name": "digits-std"}, "rbc": {"name": "digits-pgd"}, "mixednuts": {}}
    clean, robust, own = round(0.9 * n), round(0.5 * n), round(0.9 * n) - n // 4  # own: correct under AutoAttack
    row = {"name": "MixedNUTS", "kind": "mixednuts", "n": n, "alpha": 0.9, "clean_accuracy": 0.9,
           "robust_accuracy": 0.5, "card": card, "card_path": "card.toml",
           "clean_outcomes": "1" * clean + "0" * (n - clean), "robust_outcomes": "1" * robust + "0" * (n - robust),
           "components": [{"name": "apgd-ce", "newly_broken": round(0.4 * n)},
                          {"name": "autoattack-standard", "newly_broken": 0, "own_broken": n // 4,
                           "own_outcomes": "1" * own + "0" * (n - own)}]}
    folder = tmp_path / f"{dataset}-{n}"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({
        "models": [row], "settings": {"attack": "adaptive-strong", "eps": 8 / 255, "norm": "Linf", "seed": 0},
        "dataset": {"name": dataset, "split": "evaluation", "n": n}}))
    return folder


def test_robustbench_export_warns_on_few_images_and_on_data_sets_it_does_not_rank(tmp_path):
    import warnings

    from mixzoo.share.robustbench import model_info

    for dataset, n, expected in (("digits", 20, "no leaderboard for 'digits'"), ("cifar10", 20, "evaluates 10,000"),
                                 ("imagenet", 1000, "evaluates 5,000")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            info, _ = model_info(_strong_report(tmp_path, dataset, n))
        assert any(expected in str(w.message) for w in caught), (dataset, [str(w.message) for w in caught])
        assert info["eps"] == "8/255" and "0.0314 (8/255)" in info["footnote"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model_info(_strong_report(tmp_path, "cifar10", 10_000))  # what the leaderboard evaluates: no warning
    result = CliRunner().invoke(app, ["report", str(tmp_path / "digits-20"), "--format", "robustbench"])
    assert result.exit_code == 0 and "warning: RobustBench has no leaderboard for 'digits'" in result.output
