"""The bench plan times each phase with the work that phase does: a card's row with its method's extra attacks, the
trade-off curve's points with the curve's attack alone (as :meth:`MixingMethod.tradeoff_curve` attacks them)."""

from __future__ import annotations

import mixzoo.evaluation.plan as plan_module
from mixzoo.evaluation.bench import CurveSettings, MatchSettings
from mixzoo.evaluation.plan import plan_bench


def test_the_curve_is_timed_without_the_cards_extra_attacks(digits_card, monkeypatch):
    seen: list[tuple[str, bool]] = []
    real = plan_module.evaluate_card

    def spy(card, abc, rbc, images, labels, request, **kw):
        seen.append((request.record.attack, kw.get("extra_attacks")))
        return real(card, abc, rbc, images, labels, request, **kw)

    monkeypatch.setattr(plan_module, "evaluate_card", spy)
    plan = plan_bench(str(digits_card), n=8, attack="apgd", attack_options={"n_iter": 2}, baseline=None,
                      curve=CurveSettings(attack="apgd", options={"n_iter": 1}, n=8))
    assert ("apgd", True) in seen  # the card's row: its extra attacks (MixedNUTS: apgd-bypass) are timed with it
    curve_calls = [extras for attack, extras in seen if attack == "apgd" and extras is False]
    assert curve_calls, seen  # the curve's points: the curve's attack alone
    assert [p.name for p in plan.phases][-2:] == ["trade-off curve", "report"]
    # the report's figures are drawn and timed: MixedNUTS's objective, margins and the curve's
    assert "about 3 figures" in plan.phases[-1].what and plan.phases[-1].seconds > 0


def _seen_options(monkeypatch):
    """Every evaluation's (label, options) as the runner resolves it: probes, cache look-ups, declared attacks."""
    import mixzoo.attacks.runner as runner

    seen: list[tuple[str, dict]] = []
    real = runner.plan_evaluation

    def spy(request, device):
        # an APGD run without n_iter runs APGD's own 100 iterations
        options = request.record.options()
        seen.append((request.label, {"n_iter": 100, **options} if "apgd" in request.record.attack else options))
        return real(request, device)

    monkeypatch.setattr(runner, "plan_evaluation", spy)
    return seen


def _n_iters(seen, prefix="plan"):
    return {o["n_iter"] for label, o in seen if label.startswith(prefix) and "n_iter" in o}


def test_the_sanity_plan_applies_the_budget_as_the_sweep_does(digits_card, monkeypatch, tmp_path):
    seen = _seen_options(monkeypatch)
    plan = plan_module.plan_sanity(str(digits_card), n=120, radii=[0.1], budget="quick", cache_dir=tmp_path)
    # quick: every count at most 10 (shared attack, matching attack, declared attacks), its baseline on 100 images
    assert _n_iters(seen) and max(_n_iters(seen)) <= 10, seen
    assert max(_n_iters(seen, "")) <= 10
    assert "about 6 alphas under adaptive-apgd on 100 images" in plan.phases[0].what
    seen.clear()
    plan = plan_module.plan_sanity(str(digits_card), n=120, radii=[0.1], budget="standard", cache_dir=tmp_path)
    # standard caps nothing: the probes cut APGD's own 100 iterations to FRACTIONS of them and time the matching
    # attack's 25 whole (cut, they would be under MIN_CUT); its baseline on all 120
    assert {round(100 * f) for f in plan_module.FRACTIONS} | {25} <= _n_iters(seen), seen
    assert "on 120 images" in plan.phases[0].what


def test_the_bench_plan_applies_the_budget_to_the_declared_attacks(digits_card, monkeypatch, tmp_path):
    seen = _seen_options(monkeypatch)
    plan_bench(str(digits_card), n=8, attack="apgd", budget="quick", eps=0.01, baseline=None, curve=None,
               cache_dir=tmp_path)  # a small eps: examples stay robust, so the declared attack runs
    assert any(label.endswith("apgd-bypass") for label, _ in seen), seen  # the card's declared attack was timed
    assert max(_n_iters(seen, "")) <= 10, seen


def test_probes_time_cut_iteration_counts(digits_card, monkeypatch, tmp_path):
    seen = _seen_options(monkeypatch)
    plan = plan_bench(str(digits_card), n=8, attack="apgd", baseline=None, curve=None, cache_dir=tmp_path)
    assert _n_iters(seen) == {round(100 * f) for f in plan_module.FRACTIONS}, seen  # cuts of APGD's 100, never all
    assert all(p.seconds > 0 for p in plan.phases[:3])


def test_the_cut_timings_extrapolate_along_a_line(monkeypatch):
    import mixzoo.core.plan as core_plan

    clock = [0.0]
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])

    def run(k, f):  # per image: 0.5 s fixed and 3 s for the whole iteration count
        clock[0] += k * (0.5 + 3.0 * f)

    assert abs(core_plan.per_image_cut(run, 100, (0.1, 0.2)) - 3.5) < 1e-9
    assert abs(core_plan.per_image_cut(run, 100, (1.0, 1.0)) - 3.5) < 1e-9  # nothing to cut: timed whole


def test_a_calls_fixed_share_is_counted_once_per_call_of_the_run(monkeypatch):
    import mixzoo.core.plan as core_plan

    clock = [0.0]
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])

    def run(k, f):  # per call: 2 s per iteration count that do not grow with the images, plus 1 s per image
        clock[0] += f * (2.0 + 1.0 * k)

    assert abs(core_plan.per_image_cut(run, 8, (0.1, 0.2)) * 8 - (2.0 + 8.0)) < 1e-9  # one call on 8 images
    assert abs(core_plan.per_image_cut(run, 100, (0.1, 0.2), batch=25) * 100 - (4 * 2.0 + 100.0)) < 1e-9
    assert abs(core_plan.per_image(lambda k: run(k, 1.0), 16) * 16 - 18.0) < 1e-9


def test_three_cuts_extrapolate_the_decay_of_an_attack_that_stops_early(monkeypatch):
    import mixzoo.core.plan as core_plan

    clock = [0.0]
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])
    q, h = 0.5, 0.1

    def run(k, f):  # 1 s fixed per image, then each step of h costs q times the step before (examples break)
        steps = round(f / h)
        clock[0] += k * (1.0 + sum(q ** j for j in range(steps)))

    expected = 1.0 + sum(q ** j for j in range(round(1 / h)))
    assert abs(core_plan.per_image_cut(run, 4, (0.1, 0.2, 0.3)) - expected) < 1e-9
    linear = core_plan.per_image_cut(run, 4, (0.2, 0.3))  # two cuts: the line, as if no example broke
    assert linear > expected * 1.5


def test_a_calls_time_grows_with_the_examples_it_leaves_robust(monkeypatch):
    import mixzoo.core.plan as core_plan

    clock = [0.0]
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])

    def run(k, f):  # per call: 2 s fixed, 1 s per example left robust (half of them; a broken one stops at once)
        clock[0] += f * (2.0 + 1.0 * (k // 2))
        return k // 2

    k = 2 * core_plan.PROBE_MIN
    assert abs(core_plan.per_image_cut(run, 100, (1.0, 1.0), k) * 100 - (2.0 + 50.0)) < 1e-9
    assert abs(core_plan.per_image_cut(run, 100, (1.0, 1.0), k, batch=25) * 100 - (4 * 2.0 + 50.0)) < 1e-9


def test_a_growth_call_left_with_one_robust_example_is_replaced_by_the_images_twice_over(monkeypatch):
    import mixzoo.core.plan as core_plan

    clock = [0.0]
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])
    seen = []

    def run(k, f):  # a quarter of the images robust; one robust example steps a batch-of-one path, 1 s cheaper
        robust = k // 4
        clock[0] += 3.0 + 0.1 * robust - (1.0 if robust == 1 else 0.0)
        seen.append(k)
        return robust

    k = core_plan.PROBE_MIN
    assert abs(core_plan.per_image_cut(run, 40, (1.0, 1.0), k) * 40 - (3.0 + 0.1 * 10)) < 1e-9
    assert seen[-2:] == [k // 2, 2 * k]  # the half call left one robust example: the k images twice over
    assert core_plan.spread(40, 2 * k).unique().numel() == core_plan.probe_images(40) == k
    assert core_plan.spread(40, 4).tolist() == [0, 13, 26, 39]


def test_examples_left_robust_cost_every_later_step(monkeypatch):
    import mixzoo.core.plan as core_plan

    clock = [0.0]
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])
    q, h = 0.5, 0.1

    def run(k, f, counted):  # the decaying steps of the test above; counted: none of the examples breaks
        clock[0] += k * (1.0 + sum(q ** j for j in range(round(f / h))))
        return k if counted else None

    decay = core_plan.per_image_cut(lambda k, f: run(k, f, False), 4, (0.1, 0.2, 0.3))
    line = core_plan.per_image_cut(lambda k, f: run(k, f, True), 4, (0.1, 0.2, 0.3))
    assert abs(line - (1.0 + 1.0 + 0.5 + 0.25 * 8)) < 1e-9 < line - decay  # the last step's time each step left


TINY_MATCH = MatchSettings(attack="apgd", options={"n_iter": 2, "n_target_classes": 1}, n=10)


def _bench_args(tmp_path):
    return dict(n=10, attack="apgd", attack_options={"n_iter": 2}, baseline=TINY_MATCH, curve=None,
                cache_dir=tmp_path)


def test_rows_the_cache_holds_are_estimated_at_nothing_and_not_probed(digits_card, monkeypatch, tmp_path):
    from mixzoo.evaluation.bench import bench

    fresh = plan_bench(str(digits_card), **_bench_args(tmp_path))
    assert all(p.seconds > 0 and "cached" not in p.what for p in fresh.phases[:4]), fresh.lines()
    report = bench(str(digits_card), plots=False, progress=False, **_bench_args(tmp_path))
    seen = _seen_options(monkeypatch)
    plan = plan_bench(str(digits_card), **_bench_args(tmp_path))
    assert [p.name for p in plan.phases][3] == "matched Linear mix"
    assert [p.seconds for p in plan.phases[:4]] == [0.0, 0.0, 0.0, 0.0], plan.lines()
    assert all(p.what.endswith("on 10 images, 10 of 10 cached") for p in plan.phases[:4]), plan.lines()
    alpha = report.row("linear").alpha
    assert f"(cached: alpha {alpha:.2f})" in plan.phases[3].what  # the search replayed from the cache
    assert _n_iters(seen) == set()  # nothing probed
    # the run keeps adversarial points this time: outcomes cached without them are attacked again
    again = plan_bench(str(digits_card), save_adversarial=True, **_bench_args(tmp_path))
    assert all(p.seconds > 0 for p in again.phases[:4])


def test_the_sanity_plan_counts_what_the_sweep_cached(digits_card, tmp_path):
    from mixzoo.evaluation.sanity import eps_sweep

    args = dict(n=10, attack="apgd", attack_options={"n_iter": 2}, baseline=TINY_MATCH, cache_dir=tmp_path)
    eps_sweep(str(digits_card), radii=[0.1, 0.2], progress=False, **args)
    plan = plan_module.plan_sanity(str(digits_card), radii=[0.1, 0.2, 0.3], **args)
    assert [p.name for p in plan.phases] == ["matched Linear mix alpha", "ABC", "RBC", "Linear mix", "MixedNUTS"]
    assert plan.phases[0].seconds == 0.0 and "(cached: " in plan.phases[0].what
    for p in plan.phases[1:]:
        assert "20 of 30 cached" in p.what and p.seconds > 0, plan.lines()
    done = plan_module.plan_sanity(str(digits_card), radii=[0.1, 0.2], **args)
    assert [p.seconds for p in done.phases] == [0.0] * 5, done.lines()


def test_a_probe_times_a_share_of_the_runs_images():
    from mixzoo.core.plan import PROBE_MIN, PROBE_SHARE, probe_images

    assert probe_images(3) == 3  # never more than the run's
    assert probe_images(PROBE_MIN + 1) == PROBE_MIN
    big = 10 * round(PROBE_MIN / PROBE_SHARE)
    assert probe_images(big) == round(PROBE_SHARE * big) > PROBE_MIN  # a share: early stopping shows in it


def test_probes_attack_the_share_of_images_and_short_attacks_whole(digits_card, monkeypatch, tmp_path):
    from mixzoo.core.plan import PROBE_MIN, probe_images

    sizes: list[int] = []
    real = plan_module.evaluate

    def spy(model, images, labels, request):  # the distinct images a call attacks
        sizes.append(len(images.flatten(1).unique(dim=0)))
        return real(model, images, labels, request)

    monkeypatch.setattr(plan_module, "evaluate", spy)
    seen = _seen_options(monkeypatch)
    n = 2 * PROBE_MIN
    plan_bench(str(digits_card), n=n, attack="apgd", budget="quick", baseline=None, curve=None, cache_dir=tmp_path)
    assert max(sizes) == probe_images(n) > 4, sizes  # the ABC's and RBC's probes: a share of the images
    # quick's 10 iterations: cut to a tenth they would be under MIN_CUT, so they are timed whole
    assert _n_iters(seen) == {10}, seen


def test_the_curve_counts_the_methods_calibration_work_and_the_cache(digits_card, tmp_path):
    from mixzoo.evaluation.bench import bench

    args = dict(n=10, attack="apgd", attack_options={"n_iter": 2}, baseline=None, cache_dir=tmp_path,
                curve=CurveSettings(attack="apgd", options={"n_iter": 2}, n=10, points=2))
    fresh = plan_bench(str(digits_card), **args).phases[-2]
    # an empty cache: the curve recalibrates each beta on MMAA it computes first, and the plan says so
    assert fresh.name == "trade-off curve" and "MixedNUTS's own work" in fresh.what and fresh.seconds > 0
    bench(str(digits_card), plots=False, progress=False, **args)
    again = plan_bench(str(digits_card), **args).phases[-2]
    assert again.seconds == 0.0 and again.what.endswith("cached"), again  # the whole curve is in the cache


def test_the_methods_curve_setup_is_nothing_once_its_calibration_data_are_cached(digits_card, tmp_path):
    from mixzoo.core.cache import Cache
    from mixzoo.core.request import EvalRequest, ReportRequest
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.loading import card_evaluation, load_card
    from mixzoo.methods.mixednuts.figures import calibration_data_for

    card = load_card(str(digits_card))
    ce = card_evaluation(card, RunSettings(n=10))
    cache = Cache(tmp_path, enabled=True)
    record = plan_module.RunRecord.from_settings(RunSettings(n=10), eps=ce.eps, norm=ce.norm, precision="float32")
    request = ReportRequest(EvalRequest(record, cache, progress=False), n=10)
    args = (card, ce.abc, ce.rbc, ce.data, request)
    assert card.mixing_method.report_data_seconds(*args) > 0  # MMAA on the calibration images, timed
    calibration_data_for(card, ce.rbc, request, at_most=len(ce.data.labels))  # what the curve computes first
    assert card.mixing_method.report_data_seconds(*args) == 0.0


def test_mmaas_probe_counts_a_calls_fixed_share_once_per_batch(monkeypatch):
    """MMAA's probe (mix's calibration data, the figures'): cut iterations on images spread over the calibration
    set, each call's time a fixed share per iteration plus a part per example left robust, so that the run's batches
    of 250 cost less per image than the probe's few images."""
    import torch

    import mixzoo.core.plan as core_plan
    import mixzoo.methods.mixednuts.calibration_data as calibration
    from mixzoo.methods.mixednuts.calibration_data import MMAASettings
    from mixzoo.methods.mixednuts.method import _mmaa_seconds
    from mixzoo.zoo.data import ImageDataset

    clock, seen = [0.0], []
    monkeypatch.setattr(core_plan.time, "perf_counter", lambda: clock[0])
    fixed, per_example = 2.0, 0.1  # seconds per iteration of a call, and of each example it leaves robust

    def fake_mmaa(rbc, data, mmaa, **kw):  # every example stays robust: each costs every iteration
        seen.append((mmaa.n_iter, data.indices.tolist()))
        clock[0] += mmaa.n_iter * (fixed + per_example * len(data.labels))
        return {"logits": torch.nn.functional.one_hot(data.labels, 2).float()}

    monkeypatch.setattr(calibration, "cached_mmaa", fake_mmaa)
    n = 300
    data = ImageDataset("fake", "calibration", torch.zeros(n, 1, 2, 2), torch.zeros(n, dtype=torch.long), 2,
                        torch.arange(n), "fake")
    sec = _mmaa_seconds(None, data, MMAASettings(0.1, "Linf", batch_size=250), "cpu")
    assert abs(sec - 100 * (2 * fixed + per_example * n)) < 1e-6  # two batches' fixed share, every example's part
    assert {it for it, _ in seen} == {5, 10, 15}  # cuts of the 100 iterations, never all of them
    assert max(len(at) for _, at in seen) == core_plan.probe_images(n) and seen[-1][1][-1] == n - 1  # spread
