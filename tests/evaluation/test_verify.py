"""``mixzoo bench --save-adversarial`` and ``mixzoo verify``: the robust errors re-checked from saved points."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from eval_requests import ask
from report_edits import reseal
from safetensors.torch import load_file, save_file
from torch import nn
from typer.testing import CliRunner

from mixzoo.attacks.runner import evaluate
from mixzoo.cli import app
from mixzoo.core.cache import Cache
from mixzoo.core.errors import InputError
from mixzoo.evaluation.bench import ADVERSARIAL_FILE, MatchSettings, bench
from mixzoo.evaluation.recheck import row_outcomes
from mixzoo.evaluation.verify import _margins, _verify_row, verify_report
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)
N = 60
BENCH = dict(attack="apgd", n=N, attack_options={"n_iter": 5, "n_target_classes": 2}, curve=None, plots=False,
             baseline=MatchSettings(options={"n_iter": 3, "n_target_classes": 1}), batch_size=25, progress=False)


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    mix("digits-std", "digits-pgd", out=root / "card.toml", cache_dir=root / "cache", **FAST)
    report = bench(root / "card.toml", out=root / "bench", cache_dir=root / "cache", save_adversarial=True, **BENCH)
    return root, report


def copy_of(bench_dir, tmp_path):
    root, _ = bench_dir
    shutil.copytree(root / "bench", tmp_path / "bench")
    return tmp_path / "bench"


@pytest.mark.slow
def test_saved_points_confirm_every_reported_robust_error(bench_dir):
    root, report = bench_dir
    points = load_file(root / "bench" / ADVERSARIAL_FILE)
    assert {k.split(".")[0] for k in points} == {"abc", "rbc", "linear", "mixednuts"}
    res = verify_report(root / "bench")
    assert res.passed and len(res.rows) == 4
    for row, m in zip(res.rows, report.models, strict=True):
        assert row.kind == m.kind and row.verified_robust_accuracy == pytest.approx(m.robust_accuracy)
        broken = sum(c == "1" and r == "0" for c, r in zip(m.clean_outcomes, m.robust_outcomes, strict=True))
        assert row.confirmed == row.points_saved == row.broken_reported == broken
        assert row.fragile <= row.confirmed and (row.closest_margin is None) == (row.confirmed == 0)
        assert row.closest_margin is None or row.closest_margin < 0
    assert next(r for r in res.rows if r.kind == "abc").confirmed > 0  # the attack broke something to check


@pytest.mark.slow
def test_cached_rows_carry_their_points_and_rows_without_points_are_attacked_again(bench_dir, tmp_path):
    root, report = bench_dir
    again = bench(root / "card.toml", out=tmp_path / "again", cache_dir=root / "cache", save_adversarial=True,
                  **BENCH)
    assert all(m.cached for m in again.models)
    first, second = load_file(root / "bench" / ADVERSARIAL_FILE), load_file(tmp_path / "again" / ADVERSARIAL_FILE)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    # a cache filled without --save-adversarial has outcomes but no points: those rows are attacked again
    fresh = tmp_path / "fresh-cache"
    shutil.copytree(root / "cache" / "mmaa", fresh / "mmaa")
    plain = bench(root / "card.toml", cache_dir=fresh, **BENCH)
    assert not plain.adversarial and not any(m.cached for m in plain.models)
    saved = bench(root / "card.toml", out=tmp_path / "saved", cache_dir=fresh, save_adversarial=True, **BENCH)
    assert not any(m.cached for m in saved.models)
    assert [m.robust_outcomes for m in saved.models] == [m.robust_outcomes for m in report.models]
    assert verify_report(tmp_path / "saved").passed


def test_an_interrupted_evaluation_resumes_with_its_points(tmp_path, monkeypatch):
    rbc = load_model("digits-pgd")
    data = load_dataset("digits", "evaluation", n=N)
    kwargs = dict(attack="apgd", eps=0.2, norm="Linf", seed=0, batch_size=20, key_parts={"test": "resume"},
                  label="rbc", attack_options={"n_iter": 5, "n_target_classes": 2}, save_adversarial=True,
                  progress=False)
    whole = evaluate(rbc, data.images, data.labels, ask(cache=Cache(tmp_path / "a"), **kwargs))
    from mixzoo.attacks.suites import APGDEnsemble

    run, calls = APGDEnsemble.run, []

    def flaky(self, *args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # simulated interruption in the second batch
        return run(self, *args, **kw)

    monkeypatch.setattr(APGDEnsemble, "run", flaky)
    with pytest.raises(KeyboardInterrupt):
        evaluate(rbc, data.images, data.labels, ask(cache=Cache(tmp_path / "b"), **kwargs))
    resumed = evaluate(rbc, data.images, data.labels, ask(cache=Cache(tmp_path / "b"), **kwargs))
    assert len(calls) == 4  # batch 0 was read back, with its points; batches 1 and 2 attacked
    assert resumed["robust_correct"] == whole["robust_correct"]
    assert torch.equal(resumed["adversarial"]["index"], whole["adversarial"]["index"])
    assert torch.equal(resumed["adversarial"]["images"], whole["adversarial"]["images"])


def test_tampered_points_and_reports_are_caught(bench_dir, tmp_path):
    out = copy_of(bench_dir, tmp_path)
    eps = json.loads((out / "report.json").read_text())["settings"]["eps"]
    points = load_file(out / ADVERSARIAL_FILE)
    index, images = points["mixednuts.index"], points["mixednuts.images"].clone()
    clean = load_dataset("digits", "evaluation", n=N).images[index]
    images[0] = (clean[0] + 3 * eps * torch.sign(images[0] - clean[0] + 1e-9)).clamp(0, 1)  # pushed out of the ball
    images[1] = clean[1]  # the clean image: classified correctly (the example is clean-correct)
    save_file({**points, "mixednuts.images": images}, out / ADVERSARIAL_FILE)
    res = verify_report(out)
    nuts = next(r for r in res.rows if r.kind == "mixednuts")
    assert not res.passed and not nuts.passed
    assert nuts.outside == [int(index[0])] and nuts.not_misclassified == [int(index[1])]
    assert nuts.verified_robust_accuracy == pytest.approx(nuts.reported_robust_accuracy + 2 / N)
    assert all(r.passed for r in res.rows if r.kind != "mixednuts")
    # the report claims one more broken example than there are points for
    report = json.loads((out / "report.json").read_text())
    rbc = next(m for m in report["models"] if m["kind"] == "rbc")
    robust = list(rbc["robust_outcomes"])
    first = next(i for i, (c, r) in enumerate(zip(rbc["clean_outcomes"], robust, strict=True)) if c == r == "1")
    robust[first] = "0"
    rbc["robust_outcomes"] = "".join(robust)
    (out / "report.json").write_text(json.dumps(reseal(report)))
    row = next(r for r in verify_report(out).rows if r.kind == "rbc")
    assert row.missing == [first] and not row.passed


def test_cli_verify_exit_status_and_one_line_errors(bench_dir, tmp_path):
    root, _ = bench_dir
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(root / "bench"), "--out", str(tmp_path / "v.json")])
    assert ok.exit_code == 0, ok.output
    assert "verified" in ok.output and json.loads((tmp_path / "v.json").read_text())["passed"] is True
    out = copy_of(bench_dir, tmp_path)
    points = load_file(out / ADVERSARIAL_FILE)
    save_file({**points, "abc.images": points["abc.images"] * 0 + 2.0}, out / ADVERSARIAL_FILE)  # outside [0, 1]
    bad = runner.invoke(app, ["verify", str(out), "--json"])
    assert bad.exit_code == 1 and json.loads(bad.output)["passed"] is False
    missing = runner.invoke(app, ["verify", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "report.json not found" in missing.output
    (out / ADVERSARIAL_FILE).unlink()
    nopoints = runner.invoke(app, ["verify", str(out)])
    assert nopoints.exit_code == 2 and "--save-adversarial" in nopoints.output
    assert len(nopoints.output.strip().splitlines()) == 1


def test_points_must_be_for_the_reports_images(bench_dir, tmp_path):
    out = copy_of(bench_dir, tmp_path)
    report = json.loads((out / "report.json").read_text())
    report["dataset"]["fingerprint"] = "0000000000000000"
    (out / "report.json").write_text(json.dumps(reseal(report)))
    with pytest.raises(InputError, match="are not the report's"):
        verify_report(out)


def test_verifying_needs_no_attack(bench_dir, tmp_path):
    """The points are checked with forward passes: a report from a plugin's attack verifies without that plugin."""
    out = copy_of(bench_dir, tmp_path)
    report = json.loads((out / "report.json").read_text())
    report["settings"]["attack"] = "some-plugins-attack"
    (out / "report.json").write_text(json.dumps(reseal(report)))
    assert verify_report(out).passed


def _row(out, kind):
    return next(r for r in verify_report(out).rows if r.kind == kind)


def _edit_row(out, kind, field, edit):
    report = json.loads((out / "report.json").read_text())
    m = next(m for m in report["models"] if m["kind"] == kind)
    m[field] = edit(m)
    (out / "report.json").write_text(json.dumps(reseal(report)))


def test_points_for_robust_examples_and_clean_disagreements_are_caught(bench_dir, tmp_path):
    out = copy_of(bench_dir, tmp_path)
    points = load_file(out / ADVERSARIAL_FILE)
    index = points["abc.index"]
    # the report calls a broken example robust: its saved point is then one it did not claim
    report = json.loads((out / "report.json").read_text())
    abc = next(m for m in report["models"] if m["kind"] == "abc")
    claimed = int(index[0])

    def mark_robust(m):
        return m["robust_outcomes"][:claimed] + "1" + m["robust_outcomes"][claimed + 1:]

    _edit_row(out, "abc", "robust_outcomes", mark_robust)
    row = _row(out, "abc")
    assert row.unexpected == [claimed] and not row.passed and row.missing == []
    # the report calls a clean-correct example clean-wrong: the clean outcome disagrees, and a point for an example
    # that is not clean-correct here would not be confirmed
    shutil.copy(bench_dir[0] / "bench" / "report.json", out / "report.json")
    wrong = int(index[1])

    def flip_clean(m):
        return m["clean_outcomes"][:wrong] + "0" + m["clean_outcomes"][wrong + 1:]

    _edit_row(out, "abc", "clean_outcomes", flip_clean)
    row = _row(out, "abc")
    assert row.clean_disagrees == [wrong] and not row.passed
    assert abc["clean_outcomes"][wrong] == "1"


def test_a_point_for_a_clean_mistake_is_not_a_confirmed_robust_error(bench_dir, tmp_path):
    out = copy_of(bench_dir, tmp_path)
    before = _row(out, "abc")
    data = load_dataset("digits", "evaluation", n=N)
    abc = load_model("digits-std")
    with torch.no_grad():
        mistakes = torch.nonzero(abc(data.images).argmax(1) != data.labels).squeeze(1)
    assert len(mistakes) > 0
    points = load_file(out / ADVERSARIAL_FILE)
    extra = int(mistakes[0])
    save_file({**points, "abc.index": torch.cat([points["abc.index"], torch.tensor([extra])]),
               "abc.images": torch.cat([points["abc.images"], data.images[extra:extra + 1]])}, out / ADVERSARIAL_FILE)
    row = _row(out, "abc")
    assert row.confirmed == before.confirmed and row.unexpected == [extra]
    assert row.verified_robust_accuracy == before.verified_robust_accuracy


@pytest.mark.parametrize("bad", ["duplicate", "negative", "beyond"])
def test_points_indexing_outside_the_images_or_twice_are_refused(bench_dir, tmp_path, bad):
    out = copy_of(bench_dir, tmp_path)
    points = load_file(out / ADVERSARIAL_FILE)
    index = points["rbc.index"].clone()
    index[-1] = {"duplicate": index[0], "negative": -1, "beyond": N}[bad]
    save_file({**points, "rbc.index": index}, out / ADVERSARIAL_FILE)
    with pytest.raises(InputError, match="outside 0..59 or twice"):
        verify_report(out)


def test_points_next_to_the_boundary_are_counted_as_fragile(bench_dir, tmp_path):
    """A confirmed point whose true-class output is within FRAGILE of the largest other one is reported fragile."""
    from mixzoo.evaluation.verify import FRAGILE

    out = copy_of(bench_dir, tmp_path)
    before = _row(out, "abc")
    points = load_file(out / ADVERSARIAL_FILE)
    index, images = points["abc.index"], points["abc.images"].clone()
    data = load_dataset("digits", "evaluation", n=N)
    abc = load_model("digits-std")
    clean, adv, y = data.images[index[0]], images[0], data.labels[index[0]]

    def margin(t: float) -> float:
        with torch.no_grad():
            z = abc((clean + t * (adv - clean)).unsqueeze(0))[0]
        return float(z[y] - torch.cat([z[:y], z[y + 1:]]).max())

    lo, hi = 0.0, 1.0  # margin(lo) > 0 (clean-correct), margin(hi) < 0 (broken): bisect to just past the boundary
    assert margin(lo) > 0 > margin(hi)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if margin(mid) > 0 else (lo, mid)
        if -FRAGILE / 2 < margin(hi) < 0:
            break
    assert -FRAGILE < margin(hi) < 0
    images[0] = clean + hi * (adv - clean)
    save_file({**points, "abc.images": images}, out / ADVERSARIAL_FILE)
    row = _row(out, "abc")
    assert row.passed and row.confirmed == before.confirmed
    assert row.fragile == before.fragile + 1 and -FRAGILE < row.closest_margin < 0


def test_a_report_without_points_removes_the_old_points_and_verify_says_why(bench_dir, tmp_path):
    root, _ = bench_dir
    out = copy_of(bench_dir, tmp_path)
    assert (out / ADVERSARIAL_FILE).exists()
    bench(root / "card.toml", out=out, cache_dir=root / "cache", **BENCH)  # the same rows, without --save-adversarial
    assert not (out / ADVERSARIAL_FILE).exists()  # old points must not pass for this report's
    with pytest.raises(InputError, match="written without --save-adversarial"):
        verify_report(out)


def test_a_report_that_fails_half_way_leaves_the_directory_as_it_was(bench_dir, tmp_path, monkeypatch):
    import mixzoo.methods.mixednuts.figures

    root, _ = bench_dir
    out = copy_of(bench_dir, tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(mixzoo.methods.mixednuts.figures, "plot_margins", broken)  # after objective.png has been drawn
    with pytest.raises(RuntimeError, match="plotting failed"):
        bench(root / "card.toml", out=out, cache_dir=root / "cache", **{**BENCH, "plots": True})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench"]  # no staging directory left behind
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError, match="plotting failed"):
        bench(root / "card.toml", out=fresh, cache_dir=root / "cache", **{**BENCH, "plots": True})
    assert not fresh.exists()


N_SMALL = 20
BENCH_SMALL = dict(attack="apgd", n=N_SMALL, attack_options={"n_iter": 5, "n_target_classes": 2}, curve=None,
                   plots=False, baseline=MatchSettings(options={"n_iter": 3, "n_target_classes": 1}), batch_size=25,
                   progress=False)


# ------------------------------------------------------------------------------------ digits card and report
@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("check")
    mix("digits-std", "digits-pgd", out=root / "card.toml", cache_dir=root / "cache", **FAST)
    bench(root / "card.toml", out=root / "bench", cache_dir=root / "cache", save_adversarial=True, **BENCH_SMALL)
    return root


# ------------------------------------------------------------------------------------------------- verify
def _copy(digits, tmp_path):
    shutil.copytree(digits / "bench", tmp_path / "bench")
    return tmp_path / "bench"


def _edit_report(out, edit, seal=True):
    """``edit`` applied to the report in ``out``; ``seal``: made self-consistent (:func:`reseal`), so that what
    verify checks beyond the file is tested."""
    path = out / "report.json"
    report = json.loads(path.read_text())
    edit(report)
    path.write_text(json.dumps(reseal(report) if seal else report))


def _model_row(report, kind):
    return next(m for m in report["models"] if m["kind"] == kind)


def _vrow(res, kind):
    return next(r for r in res.rows if r.kind == kind)


def _predict(model, images):
    with torch.no_grad():
        return model(images).argmax(1)


def test_margins_of_log_probabilities():
    out = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]))  # all outputs negative
    labels = torch.tensor([0, 0])
    expected = torch.log(torch.tensor([0.6 / 0.3, 0.2 / 0.5]))
    assert torch.allclose(_margins(out, labels), expected)


@pytest.mark.slow
def test_closest_margin_is_the_true_class_minus_the_best_other_output(digits):
    res = verify_report(digits / "bench")
    from mixzoo.methods.mixednuts.mixing import MixedClassifier

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mixed = MixedClassifier.from_card(digits / "card.toml", abc, rbc)
    points = load_file(digits / "bench" / ADVERSARIAL_FILE)
    labels = load_dataset("digits", "evaluation", n=N_SMALL).labels
    index = points["mixednuts.index"]
    with torch.no_grad():
        z = mixed(points["mixednuts.images"])  # log-probabilities: every output is negative
    y = labels[index]
    true = z[torch.arange(len(y)), y]
    other = torch.stack([torch.cat([row[:c], row[c + 1:]]).max() for row, c in zip(z, y, strict=True)])
    expected = float((true - other).max())
    assert expected < 0
    assert _vrow(res, "mixednuts").closest_margin == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("bad", ["short", "not-binary"])
def test_malformed_outcome_strings_are_refused(digits, tmp_path, bad):
    out = _copy(digits, tmp_path)

    def edit(report):
        m = _model_row(report, "rbc")
        m["clean_outcomes"] = m["clean_outcomes"][:-1] if bad == "short" else "2" + m["clean_outcomes"][1:]

    _edit_report(out, edit, seal=False)
    with pytest.raises(InputError, match="clean_outcomes") as err:  # refused by the report's schema
        verify_report(out)
    assert str(out / "report.json") in str(err.value) and "\n" not in str(err.value)


def test_points_files_with_unmatched_or_missing_entries_are_refused(digits, tmp_path):
    out = _copy(digits, tmp_path)
    points = load_file(out / ADVERSARIAL_FILE)
    save_file({**points, "abc.index": points["abc.index"][:-1].clone()}, out / ADVERSARIAL_FILE)
    with pytest.raises(InputError, match="matching 'index' and 'images'"):
        verify_report(out)
    save_file({k: v for k, v in points.items() if not k.startswith("linear.")}, out / ADVERSARIAL_FILE)
    with pytest.raises(InputError, match="has no points for row"):
        verify_report(out)


def test_a_zero_batch_size_is_refused(digits):
    with pytest.raises(InputError, match="--batch-size must be positive"):
        verify_report(digits / "bench", batch_size=0)


def test_a_mixednuts_point_is_judged_by_the_true_mixture(digits, tmp_path):
    """With the card's alpha at 1/2 and T = 0 the mixture answers the ABC's class (paper Eq. 5: the ABC's one-hot
    weighs 1/2), so the ABC's broken points, given as MixedNUTS's, are all confirmed; the RBC (or the auxiliary
    mixture of Eq. 8, alpha_d near 1) is right on some of them."""
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.mixing import MixedClassifier

    out = _copy(digits, tmp_path)

    def edit(report):
        abc_row, nuts = _model_row(report, "abc"), _model_row(report, "mixednuts")
        # the report's card, its list of cards and the row's own card (the one verify rebuilds the row from)
        for card in (report["card"], *report["cards"], nuts["card"]):
            card[card["method"]]["alpha"] = 0.5
        nuts["clean_outcomes"], nuts["robust_outcomes"] = abc_row["clean_outcomes"], abc_row["robust_outcomes"]

    _edit_report(out, edit)
    points = load_file(out / ADVERSARIAL_FILE)
    copied = {"mixednuts.index": points["abc.index"].clone(), "mixednuts.images": points["abc.images"].clone()}
    save_file({**points, **copied}, out / ADVERSARIAL_FILE)
    data = load_dataset("digits", "evaluation", n=N_SMALL)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    card = MixCard.from_dict(json.loads((out / "report.json").read_text())["card"])
    mixed = MixedClassifier.from_card(card, abc, rbc)
    index, adv = points["abc.index"], points["abc.images"]
    y = data.labels[index]
    assert torch.equal(_predict(mixed, adv), _predict(abc, adv))  # premise: at alpha 1/2 the ABC decides
    assert torch.equal(_predict(mixed, data.images), _predict(abc, data.images))
    assert (_predict(rbc, adv) == y).any() and (_predict(mixed.auxiliary, adv) == y).any()
    row = _vrow(verify_report(out), "mixednuts")
    assert row.passed and row.confirmed == len(index) and row.not_misclassified == []


def test_a_linear_point_is_judged_by_the_linear_mixture_at_the_rows_alpha(digits, tmp_path):
    """At alpha = 1 the linear mixture of Bai et al. (Eq. 1) is the RBC alone, so the RBC's broken points, given
    as the linear row's, are all confirmed; the ABC (the other end of alpha) is right on some of them."""
    out = _copy(digits, tmp_path)

    def edit(report):
        rbc_row, lin = _model_row(report, "rbc"), _model_row(report, "linear")
        lin["alpha"] = lin["card"]["linear"]["alpha"] = 1.0  # verify rebuilds the row from the card it records
        lin["clean_outcomes"], lin["robust_outcomes"] = rbc_row["clean_outcomes"], rbc_row["robust_outcomes"]

    _edit_report(out, edit)
    points = load_file(out / ADVERSARIAL_FILE)
    copied = {"linear.index": points["rbc.index"].clone(), "linear.images": points["rbc.images"].clone()}
    save_file({**points, **copied}, out / ADVERSARIAL_FILE)
    y = load_dataset("digits", "evaluation", n=N_SMALL).labels[points["rbc.index"]]
    assert (_predict(load_model("digits-std"), points["rbc.images"]) == y).any()  # premise
    row = _vrow(verify_report(out), "linear")
    assert row.alpha == 1.0 and row.passed and row.confirmed == len(y) and row.not_misclassified == []


def test_an_l2_report_measures_points_in_l2(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data = load_dataset("digits", "evaluation", n=N_SMALL)
    points = load_file(out / ADVERSARIAL_FILE)
    index = points["abc.index"]
    dist = (points["abc.images"] - data.images[index]).flatten(1).norm(dim=1)
    eps = float(dist.median())  # an L2 radius with the saved L-inf points on both sides of it

    def edit(report):  # every part that states the threat model (settings, rows, run record): they must agree
        report["settings"]["norm"], report["settings"]["eps"] = "L2", eps
        for m in report["models"]:
            m["norm"], m["epsilon"] = "L2", eps
        report["record"].update(norm="L2", eps=eps)

    _edit_report(out, edit)
    far = index[dist > eps * (1 + 1e-3)].tolist()
    near = index[dist < eps * (1 - 1e-3)].tolist()
    assert far and near  # premise: the L-inf points fall on both sides of the L2 radius
    res = verify_report(out)
    assert res.norm == "L2" and res.eps == eps
    row = _vrow(res, "abc")
    assert set(far) <= set(row.outside) and not set(near) & set(row.outside)


def _clean_and_point(digits, kind="abc"):
    data = load_dataset("digits", "evaluation", n=N_SMALL)
    points = load_file(digits / "bench" / ADVERSARIAL_FILE)
    return data, points, points[f"{kind}.index"], points[f"{kind}.images"].clone()


def test_a_point_outside_0_1_is_outside_even_within_eps(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data, points, index, images = _clean_and_point(digits)
    i = int(index[0])
    clean = data.images[i]
    where = clean.flatten().argmin()  # a 0 pixel: pushed to -eps/2, inside the ball but below 0
    assert float(clean.flatten()[where]) == 0.0
    flat = images[0].flatten().clone()
    flat[where] = -0.1
    images[0] = flat.view_as(images[0])
    save_file({**points, "abc.images": images}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "abc")
    assert row.outside == [i] and not row.passed


def test_a_point_just_beyond_eps_is_outside_and_a_correct_outside_point_is_only_outside(digits, tmp_path):
    """Outside the ball is its own failure, whatever the model says there; the tolerance is a rounding one."""
    out = _copy(digits, tmp_path)
    data, points, index, images = _clean_and_point(digits)
    eps = 0.2
    abc = load_model("digits-std")
    # point 0: its adversarial image moved 5% further from the clean one, i.e. at 1.05 eps at most, clamped
    i0, i1 = int(index[0]), int(index[1])
    c0 = data.images[i0]
    images[0] = (c0 + 1.05 * (images[0] - c0)).clamp(0, 1)
    size0 = float((images[0] - c0).abs().max())
    assert eps * 1.01 < size0 <= eps * 1.05 + 1e-6
    # point 1: the clean image with one pixel moved by 3 eps: outside the ball, and the ABC is still right there
    c1 = data.images[i1]
    flat = c1.flatten().clone()
    flat[0] = flat[0] + 0.6 if flat[0] <= 0.4 else flat[0] - 0.6
    images[1] = flat.view_as(c1)
    assert int(_predict(abc, images[1:2])[0]) == int(data.labels[i1])
    save_file({**points, "abc.images": images}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "abc")
    assert sorted(row.outside) == sorted([i0, i1]) and row.not_misclassified == [] and not row.passed
    assert row.confirmed == len(index) - 2
    # two fewer confirmed errors, the same clean-correct examples: two more robust examples out of N
    assert row.verified_robust_accuracy == pytest.approx(row.reported_robust_accuracy + 2 / N_SMALL)


def test_a_point_that_is_not_misclassified_alone_fails_the_row(digits, tmp_path):
    """Each point is judged against the label of the example it indexes (the RBC's points skip its robust ones)."""
    out = _copy(digits, tmp_path)
    data, points, index, images = _clean_and_point(digits, "rbc")
    i = int(index[-1])
    assert data.labels[i] != data.labels[len(index) - 1]  # premise: the point's position is not its example
    images[-1] = data.images[i]  # the clean image: inside the ball, and the RBC is right there (clean-correct)
    save_file({**points, "rbc.images": images}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "rbc")
    assert row.not_misclassified == [i] and row.outside == [] and not row.passed
    assert row.confirmed == len(index) - 1


def test_saved_and_reported_index_sets_are_compared_as_sets(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data, points, index, _ = _clean_and_point(digits, "rbc")
    report = json.loads((out / "report.json").read_text())
    rbc = _model_row(report, "rbc")
    robust_here = [i for i, (c, r) in enumerate(zip(rbc["clean_outcomes"], rbc["robust_outcomes"], strict=True))
                   if c == r == "1"]
    assert robust_here
    moved, to = int(index[0]), robust_here[0]
    new_index = points["rbc.index"].clone()
    new_index[0] = to  # as many points as broken examples, but one for the wrong example
    save_file({**points, "rbc.index": new_index}, out / ADVERSARIAL_FILE)
    row = _vrow(verify_report(out), "rbc")
    assert row.points_saved == row.broken_reported
    assert row.missing == [moved] and row.unexpected == [to] and not row.passed


def test_a_clean_disagreement_alone_fails_the_row_without_changing_the_verified_accuracy(digits, tmp_path):
    out = _copy(digits, tmp_path)
    before = _vrow(verify_report(digits / "bench"), "rbc")
    report = json.loads((out / "report.json").read_text())
    rbc = _model_row(report, "rbc")
    robust = [i for i, (c, r) in enumerate(zip(rbc["clean_outcomes"], rbc["robust_outcomes"], strict=True))
              if c == r == "1"]
    i = robust[0]

    def edit(report):  # the report now calls a robust example a clean mistake (and so not broken, no point)
        m = _model_row(report, "rbc")
        m["clean_outcomes"] = m["clean_outcomes"][:i] + "0" + m["clean_outcomes"][i + 1:]
        m["robust_outcomes"] = m["robust_outcomes"][:i] + "0" + m["robust_outcomes"][i + 1:]

    _edit_report(out, edit)
    row = _vrow(verify_report(out), "rbc")
    assert row.clean_disagrees == [i] and row.missing == [] and row.unexpected == [] and not row.passed
    assert row.outside == row.not_misclassified == [] and row.confirmed == before.confirmed > 0
    # the verified figure counts the clean-correct examples here, not the report's
    assert row.verified_robust_accuracy == before.verified_robust_accuracy


def test_a_report_claiming_a_clean_mistake_correct_disagrees(digits, tmp_path):
    out = _copy(digits, tmp_path)
    data = load_dataset("digits", "evaluation", n=N_SMALL)
    mistakes = torch.nonzero(_predict(load_model("digits-pgd"), data.images) != data.labels).flatten().tolist()
    assert mistakes
    i = mistakes[0]

    def edit(report):  # clean-correct and robust in the report, a clean mistake of the RBC here
        m = _model_row(report, "rbc")
        assert m["clean_outcomes"][i] == "0"
        m["clean_outcomes"] = m["clean_outcomes"][:i] + "1" + m["clean_outcomes"][i + 1:]
        m["robust_outcomes"] = m["robust_outcomes"][:i] + "1" + m["robust_outcomes"][i + 1:]

    _edit_report(out, edit)
    row = _vrow(verify_report(out), "rbc")
    assert row.clean_disagrees == [i] and not row.passed


def test_cli_verify_fails_without_json_too(digits, tmp_path):
    out = _copy(digits, tmp_path)
    _, points, _, images = _clean_and_point(digits)
    save_file({**points, "abc.images": images * 0 + 2.0}, out / ADVERSARIAL_FILE)
    result = CliRunner().invoke(app, ["verify", str(out)])
    assert result.exit_code == 1 and "NOT verified" in result.output


class MeanVersusHalf(nn.Module):
    """Two classes: logits (mean pixel, 1/2), so the margin of class 0 is the mean pixel minus 1/2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.flatten(1).double().mean(dim=1)
        return torch.stack([m, torch.full_like(m, 0.5)], dim=1)


def test_fragile_points_are_those_within_1e_4_of_the_boundary():
    """``FRAGILE = 1e-4``: a confirmed point at margin -5e-5 is fragile, one at -5e-4 is not."""
    images = torch.full((2, 1, 2, 2), 0.6)  # margin +0.1: both clean-correct
    labels = torch.tensor([0, 0])
    adv = torch.stack([torch.full((1, 2, 2), 0.5 - 5e-5), torch.full((1, 2, 2), 0.5 - 5e-4)]).double()
    pts = {"index": torch.tensor([0, 1]), "images": adv}
    m = {"name": "m", "kind": "rbc", "clean_outcomes": "11", "robust_outcomes": "00", "robust_accuracy": 0.0}
    row = _verify_row(m, row_outcomes(m, 2), MeanVersusHalf(), pts, images.double(), labels, 0.2, "Linf", 8, "cpu")
    assert row.passed and row.confirmed == 2 and row.verified_robust_accuracy == 0.0
    assert row.fragile == 1 and row.closest_margin == pytest.approx(-5e-5, rel=1e-3)



@pytest.mark.parametrize("where", ["../outside/x.safetensors", "ABSOLUTE", "sub/x.safetensors"])
def test_the_points_file_is_a_name_in_the_reports_folder(digits, tmp_path, where):
    """``settings.adversarial_file`` naming a file elsewhere (the right points, copied there) is refused in one line:
    verify reads its points only from the report's folder."""
    out = _copy(digits, tmp_path)
    outside = tmp_path / "outside" / "x.safetensors"
    outside.parent.mkdir()
    shutil.copy(out / ADVERSARIAL_FILE, outside)
    (out / "sub").mkdir()
    shutil.copy(out / ADVERSARIAL_FILE, out / "sub" / "x.safetensors")
    name = str(outside) if where == "ABSOLUTE" else where
    _edit_report(out, lambda r: r["settings"].update(adversarial_file=name))
    with pytest.raises(InputError, match=r"settings\.adversarial_file.*plain file name in the report's folder") as e:
        verify_report(out)
    assert "\n" not in str(e.value)
