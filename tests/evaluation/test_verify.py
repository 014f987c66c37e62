"""``mixzoo bench --save-adversarial`` and ``mixzoo verify``: the robust errors re-checked from saved points."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from mixzoo.bench import ADVERSARIAL_FILE, bench, evaluate
from mixzoo.cache import Cache
from mixzoo.cli import app
from mixzoo.data import load_dataset
from mixzoo.errors import InputError
from mixzoo.models import load_model
from mixzoo.pipeline import mix
from mixzoo.verify import verify_report

FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)
N = 60
BENCH = dict(attack="apgd", n=N, attack_options={"n_iter": 5, "n_target_classes": 2}, curve=False, plots=False,
             match_options={"n_iter": 3, "n_target_classes": 1}, batch_size=25, progress=False)


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
    whole = evaluate(rbc, data.images, data.labels, cache=Cache(tmp_path / "a"), **kwargs)
    from mixzoo.attacks.evaluation import APGDEnsemble

    run, calls = APGDEnsemble.run, []

    def flaky(self, *args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # simulated interruption in the second batch
        return run(self, *args, **kw)

    monkeypatch.setattr(APGDEnsemble, "run", flaky)
    with pytest.raises(KeyboardInterrupt):
        evaluate(rbc, data.images, data.labels, cache=Cache(tmp_path / "b"), **kwargs)
    resumed = evaluate(rbc, data.images, data.labels, cache=Cache(tmp_path / "b"), **kwargs)
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
    (out / "report.json").write_text(json.dumps(report))
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
    (out / "report.json").write_text(json.dumps(report))
    with pytest.raises(InputError, match="are not the report's"):
        verify_report(out)


def test_verifying_needs_no_attack(bench_dir, tmp_path):
    """The points are checked with forward passes: a report from a plugin's attack verifies without that plugin."""
    out = copy_of(bench_dir, tmp_path)
    report = json.loads((out / "report.json").read_text())
    report["settings"]["attack"] = "some-plugins-attack"
    (out / "report.json").write_text(json.dumps(report))
    assert verify_report(out).passed


def _row(out, kind):
    return next(r for r in verify_report(out).rows if r.kind == kind)


def _edit_row(out, kind, field, edit):
    report = json.loads((out / "report.json").read_text())
    m = next(m for m in report["models"] if m["kind"] == kind)
    m[field] = edit(m)
    (out / "report.json").write_text(json.dumps(report))


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
    from mixzoo.verify import FRAGILE

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
