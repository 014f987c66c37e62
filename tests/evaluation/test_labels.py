"""One label per row and one eps notation, the same in the terminal table, report.md, report.json, the Hub model
card and RobustBench's model_info."""

from __future__ import annotations

import io
import json

from rich.console import Console

from mixzoo.core.labels import eps_text, row_label
from tests.evaluation.test_report import _report


def test_eps_text_gives_the_decimal_and_k_over_255_where_exact():
    assert eps_text(8 / 255) == "0.0314 (8/255)"
    assert eps_text(0.2) == "0.2 (51/255)"
    assert eps_text(4 / 255) == "0.0157 (4/255)"
    assert eps_text(0.5) == "0.5"
    assert eps_text(0.1) == "0.1"
    assert eps_text(None) == "?"


def test_a_row_has_one_label_in_terminal_markdown_and_json():
    from mixzoo.evaluation.report import markdown, print_report

    report = _report()
    labels = [row_label(m) for m in report.models]
    assert labels == ["ABC abc-model", "RBC rbc-model", "linear-model, alpha 0.700", "mixednuts-model, alpha 0.900"]
    term = Console(width=200, record=True, file=io.StringIO())
    print_report(report, to=term)
    terminal = term.export_text()
    text = markdown(report)
    data = json.loads(json.dumps(report.to_dict(), default=str))
    for m, label in zip(report.models, labels, strict=True):
        assert any(line.strip().startswith(label) for line in terminal.splitlines()), label
        assert f"| {label} | {m.kind} |" in text
    assert [m["label"] for m in data["models"]] == labels
    assert "α" not in terminal and "(alpha=" not in terminal
    assert "eps 0.2 (51/255)" in terminal and "eps = 0.2 (51/255)" in text
    # comparisons name the rows by their labels
    assert all(c["a_label"] in labels and c["b_label"] in labels for c in data["comparisons"])


def test_a_baseline_name_with_its_alpha_is_labelled_like_the_others():
    row = {"name": "Linear mix (alpha=0.87)", "kind": "linear", "alpha": 0.87}
    assert row_label(row) == "Linear mix, alpha 0.870"


def test_report_md_cites_the_stats_module_where_it_is():
    from pathlib import Path

    from mixzoo.evaluation.report import markdown

    report = _report()
    for k, m in enumerate(report.models):  # outcomes per image: the paired comparisons are written
        m.clean_outcomes = m.robust_outcomes = ("10" * 30)[k:k + 60].ljust(60, "1")
    text = markdown(report)
    assert "mixednuts-model, alpha 0.900 - RBC rbc-model, paired" in text
    cited = [w.strip("`():;,") for w in text.split() if w.strip("`():;,").endswith(".py")]
    assert cited and all((Path(__file__).parents[2] / path).is_file() for path in cited), cited


def test_robustbench_and_model_card_use_the_same_eps_and_label():
    from mixzoo.share.push import model_card
    from mixzoo.share.robustbench import eps_text as rb_eps

    assert rb_eps(8 / 255) == "8/255" and rb_eps(0.5) == "0.5"  # RobustBench's own field format
    report = _report()
    card = report.card
    figures = {"attack": "apgd", "eps": 0.2, "norm": "Linf", "seed": 0, "dataset": "digits", "split": "evaluation",
               "n": 60, "created": "now", "extra_attacks": True, "card_row": "mixednuts-model",
               "rows": [{"name": m.name, "kind": m.kind, "alpha": m.alpha, "clean_accuracy": m.clean_accuracy,
                         "robust_accuracy": m.robust_accuracy, "clean_ci": None, "robust_ci": None}
                        for m in report.models]}
    card.abc, card.rbc = {"name": "abc-model"}, {"name": "rbc-model"}
    card.attack = {"eps": 0.2, "norm": "Linf"}
    text = model_card(card, "org/name", {"abc": {"name": "abc-model"}, "rbc": {"name": "rbc-model"}}, figures,
                      "bench/report.json")
    assert "eps 0.2 (51/255)" in text and "51/255)" not in text.replace("0.2 (51/255)", "")
    assert "| mixednuts-model, alpha 0.900 |" in text


def test_report_md_says_whether_results_depend_on_the_batch_size():
    from mixzoo.evaluation.report import markdown

    report = _report()
    report.settings["per_example_seeds"] = True
    assert "do not depend on the batch size" in markdown(report)
    report.settings["per_example_seeds"] = False
    text = markdown(report)
    assert "outcomes depend on the batch size" in text and "do not depend" not in text
