"""Locally biased smoothing (paper 003 Eq. 1-2, 5, 10; 001 Eq. 3.3, App. B.1): the formulas against
direct per-class float64 computations (autograd one class at a time), the limits alpha = 0 -> g and
alpha -> infinity -> h, the K-NN oracle against brute force, the attack-time gradients, the cards, the CLI and a
small bench with the declared extra attacks."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.methods import fit, get_method
from mixzoo.methods.local_smoothing.knn import KNNOracle
from mixzoo.methods.local_smoothing.smoothing import KNNSmoothingClassifier, LocalSmoothingClassifier

PAIR = {"abc": {"name": "digits-std"}, "rbc": {"name": "digits-pgd"}, "dataset": "digits"}
DUAL = {"Linf": 1, "L2": 2, "L1": float("inf")}


def _mlp(seed: int, act: type[nn.Module] = nn.ReLU) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 12), act(), nn.Linear(12, 5))
    return net.double().eval().requires_grad_(False)


@pytest.fixture(scope="module")
def models():
    """Two random float64 MLPs on 1x4x4 inputs with 5 classes; smooth (Softplus) so second derivatives exist."""
    torch.manual_seed(0)
    return _mlp(1, nn.Softplus), _mlp(2, nn.Softplus), torch.rand(7, 1, 4, 4, dtype=torch.float64)


def _grad_norms(fn, x, norm):
    """||grad_x fn(x)[:, i]||_* for every class i, one autograd call per class (the independent reference)."""
    xr = x.clone().requires_grad_(True)
    out = fn(xr)
    cols = [torch.autograd.grad(out[:, i].sum(), xr, retain_graph=True, create_graph=True)[0]
            for i in range(out.shape[1])]
    return out, torch.stack([c.flatten(1).norm(p=DUAL[norm], dim=1) for c in cols], dim=1), xr


def _reference(g, h, x, *, alpha, r, space, norm="Linf", eps_c=1e-6, accelerated=False):
    """003 Eq. 5 / 001 Eq. 3.3 / 003 Eq. 10 written out per class, float64; returns (log-probs, input leaf)."""
    fg = g if space == "logits" else (lambda z: torch.softmax(g(z), -1))
    fh = h if space == "logits" else (lambda z: torch.softmax(h(z), -1))
    xr = x.clone().requires_grad_(True)
    gv, ng, _ = _grad_norms(fg, xr, norm)
    hv, nh, _ = _grad_norms(fh, xr, norm)
    rows = torch.arange(len(x))
    k1, k2 = gv.argmax(1), hv.argmax(1)
    if r == "one":
        rr = torch.ones_like(gv)
    elif r == "grad_g":
        rr = ng[rows, k1].unsqueeze(1).expand_as(gv) if accelerated else ng
    elif r == "grad_max":
        rr = ng[rows, k1].unsqueeze(1).expand_as(gv)
    else:
        rr = (ng[rows, k1] / (nh[rows, k2] + eps_c)).unsqueeze(1).expand_as(gv) if accelerated \
            else ng / (nh + eps_c)
    z = torch.stack([(gv[:, i] + alpha * rr[:, i] * hv[:, i]) / (1 + alpha * rr[:, i]) for i in range(gv.shape[1])],
                    dim=1)
    out = torch.log_softmax(z, -1) if space == "logits" else torch.log(z / z.sum(1, keepdim=True))
    return out, xr


CASES = [(r, space, False) for r in ("one", "grad_g", "grad_max", "ratio") for space in ("logits", "probabilities")]
CASES += [("grad_g", "logits", True), ("ratio", "logits", True), ("ratio", "probabilities", True)]


@pytest.mark.parametrize(("r", "space", "accelerated"), CASES)
def test_local_smoothing_matches_per_class_float64_formula(models, r, space, accelerated):
    g, h, x = models
    clf = LocalSmoothingClassifier(g, h, alpha=0.7, r=r, space=space, accelerated=accelerated, eps_c=1e-3)
    expect, _ = _reference(g, h, x, alpha=0.7, r=r, space=space, accelerated=accelerated, eps_c=1e-3)
    with torch.no_grad():
        got = clf(x)
    assert torch.allclose(got, expect.detach(), atol=1e-12, rtol=0)
    assert torch.allclose(got.exp().sum(1), torch.ones(len(x), dtype=x.dtype))


@pytest.mark.parametrize("norm", ["L2", "L1"])
def test_dual_norm_follows_the_threat_model(models, norm):
    g, h, x = models
    clf = LocalSmoothingClassifier(g, h, alpha=1.3, r="ratio", norm=norm)
    expect, _ = _reference(g, h, x, alpha=1.3, r="ratio", space="logits", norm=norm)
    assert torch.allclose(clf(x), expect.detach(), atol=1e-12, rtol=0)


@pytest.mark.parametrize(("r", "space"), [("ratio", "logits"), ("grad_max", "probabilities"), ("grad_g", "logits")])
def test_exact_gradient_includes_the_second_order_path_of_r(models, r, space):
    """The attack's gradient is that of the whole formula, R_i(x) included (003 Sec. 4.2); fixed-R drops only
    that path."""
    g, h, x = models
    y = torch.arange(len(x)) % 5
    expect, xr = _reference(g, h, x, alpha=0.9, r=r, space=space)
    (ref,) = torch.autograd.grad(nn.functional.nll_loss(expect, y), xr)
    xa = x.clone().requires_grad_(True)
    exact = LocalSmoothingClassifier(g, h, alpha=0.9, r=r, space=space)
    (got,) = torch.autograd.grad(nn.functional.nll_loss(exact(xa), y), xa)
    assert torch.allclose(got, ref, atol=1e-10, rtol=1e-8)
    xb = x.clone().requires_grad_(True)
    fixed = LocalSmoothingClassifier(g, h, alpha=0.9, r=r, space=space, gradient="fixed-R")
    out = fixed(xb)
    assert torch.allclose(out, expect.detach(), atol=1e-12)  # same values
    (gf,) = torch.autograd.grad(nn.functional.nll_loss(out, y), xb)
    assert (gf - got).abs().max() > 1e-6  # Softplus nets: the R path carries gradient


@pytest.mark.parametrize(("alpha_t", "target"), [("0", "g"), ("inf", "h"), ("0.9", "same")])
def test_attack_time_alpha_keeps_values_and_takes_that_gradient(models, alpha_t, target):
    """003 Eq. 6: values of the classifier at alpha, gradient of the classifier at alpha_t (0: g, inf: h)."""
    g, h, x = models
    y = torch.arange(len(x)) % 5
    clf = LocalSmoothingClassifier(g, h, alpha=0.9, r="ratio", gradient=f"alpha_t={alpha_t}")
    xa = x.clone().requires_grad_(True)
    out = clf(xa)
    expect, _ = _reference(g, h, x, alpha=0.9, r="ratio", space="logits")
    assert torch.allclose(out, expect.detach(), atol=1e-12)
    (got,) = torch.autograd.grad(nn.functional.nll_loss(out, y), xa)
    xr = x.clone().requires_grad_(True)
    if target == "same":  # alpha_t = alpha with R held constant: the fixed-R gradient
        surrogate = LocalSmoothingClassifier(g, h, alpha=0.9, r="ratio", gradient="fixed-R")(xr)
    else:
        surrogate = torch.log_softmax((g if target == "g" else h)(xr), -1)
    (ref,) = torch.autograd.grad(nn.functional.nll_loss(surrogate, y), xr)
    assert torch.allclose(got, ref, atol=1e-12)


@pytest.mark.parametrize("space", ["logits", "probabilities"])
def test_limits_alpha_zero_is_g_and_large_alpha_is_h(models, space):
    g, h, x = models
    with torch.no_grad():
        zero = LocalSmoothingClassifier(g, h, alpha=0.0, r="ratio", space=space)(x)
        assert torch.allclose(zero, torch.log_softmax(g(x), -1), atol=1e-12)
        big = LocalSmoothingClassifier(g, h, alpha=1e12, r="ratio", space=space)(x)
        target = torch.log_softmax(h(x), -1)
    assert torch.allclose(big, target, atol=1e-6)
    assert torch.equal(big.argmax(1), h(x).argmax(1))


# ------------------------------------------------------------------------------------------------------- K-NN
def _brute_votes(train, labels, x, k, c):
    out = torch.zeros(len(x), c, dtype=torch.float64)
    for b in range(len(x)):  # the reference: one query at a time, float64, full sort
        d = ((train.flatten(1).double() - x[b].flatten().double()) ** 2).sum(1)
        for j in d.argsort()[:k]:
            out[b, labels[j]] += 1.0 / k
    return 2 * out - 1


@pytest.mark.parametrize(("k", "chunk"), [(1, 1000), (3, 17), (7, 50), (200, 64)])
def test_knn_oracle_matches_brute_force(k, chunk):
    gen = torch.Generator().manual_seed(k)
    train, labels = torch.rand(200, 1, 4, 4, generator=gen), torch.randint(0, 5, (200,), generator=gen)
    x = torch.rand(30, 1, 4, 4, generator=gen)
    oracle = KNNOracle(train, labels, k, 5, chunk=chunk)
    assert torch.allclose(oracle(x).double(), _brute_votes(train, labels, x, k, 5), atol=1e-6)
    assert torch.allclose(oracle(train[:5]).double(), _brute_votes(train, labels, train[:5], k, 5), atol=1e-6)


def test_knn_smoothing_matches_eq_2_and_its_limits(models):
    g, _, x = models
    gen = torch.Generator().manual_seed(3)
    train, labels = torch.rand(300, 1, 4, 4, generator=gen, dtype=torch.float64), torch.randint(0, 5, (300,),
                                                                                                   generator=gen)
    oracle = KNNOracle(train, labels, 4, 5, chunk=70)
    hv = _brute_votes(train, labels, x, 4, 5)
    gv, ng, _ = _grad_norms(g, x, "Linf")
    z = torch.stack([(gv[:, i] + 0.5 * hv[:, i] * ng[:, i]) / (1 + 0.5 * ng[:, i]) for i in range(5)], 1)
    with torch.no_grad():
        got = KNNSmoothingClassifier(g, oracle, alpha=0.5)(x)
        assert torch.allclose(got, torch.log_softmax(z, -1).detach(), atol=1e-12)
        assert torch.allclose(KNNSmoothingClassifier(g, oracle, alpha=0.0)(x), torch.log_softmax(g(x), -1))
        big = KNNSmoothingClassifier(g, oracle, alpha=1e12)(x)
    unique = (hv == hv.max(1, keepdim=True).values).sum(1) == 1  # ties are broken by g (003 Sec. 6.1)
    assert unique.any() and torch.equal(big.argmax(1)[unique], hv.argmax(1)[unique])


def test_knn_gradients_transfer_and_soft_oracle(models):
    g, h, x = models
    gen = torch.Generator().manual_seed(5)
    oracle = KNNOracle(torch.rand(100, 1, 4, 4, generator=gen), torch.randint(0, 5, (100,), generator=gen), 3, 5,
                        chunk=13)
    y = torch.arange(len(x)) % 5
    values = KNNSmoothingClassifier(g, oracle, alpha=0.5)(x)
    grads = {}
    for mode in ("exact", "alpha_t=0", "alpha_t=inf", "rbc"):
        xa = x.clone().requires_grad_(True)
        out = KNNSmoothingClassifier(g, oracle, alpha=0.5, gradient=mode, rbc=h)(xa)
        assert torch.allclose(out, values, atol=1e-12)  # every variant is judged on the classifier itself
        (grads[mode],) = torch.autograd.grad(nn.functional.nll_loss(out, y), xa)
    for mode, fn in (("alpha_t=0", g), ("rbc", h), ("alpha_t=inf", oracle.soft)):
        xr = x.clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(nn.functional.nll_loss(torch.log_softmax(fn(xr), -1), y), xr)
        assert torch.allclose(grads[mode], ref, atol=1e-12), mode
        assert (grads[mode].flatten(1).abs().sum(1) > 0).all(), mode  # a gradient at every example
    soft = oracle.soft(x.float())
    assert torch.all(soft >= -1 - 1e-6) and torch.all(soft <= 1 + 1e-6)
    idx = oracle.class_neighbours(x, 3)  # class-wise neighbours: right labels, nearest of their class
    assert torch.equal(oracle.train_labels[idx], torch.arange(5).view(1, 5, 1).expand_as(idx))
    d = torch.cdist(x.flatten(1).float(), oracle.train_images)
    for i in range(5):
        own = torch.where(oracle.train_labels == i, d, torch.inf).sort(1).indices[:, :3]
        assert torch.equal(idx[:, i].sort(1).values, own.sort(1).values)


# ------------------------------------------------------------------------------------------------- cards, errors
def _knn_params(**kw):
    return {"alpha": 1.0, "k": 5, "train": {"dataset": "digits", "n": 1000, "fingerprint": "x"}, **kw}


@pytest.mark.parametrize(("method", "params", "message"), [
    ("knn-smoothing", _knn_params(k=0), "'knn-smoothing.k' must be an integer K >= 1"),
    ("knn-smoothing", _knn_params(k=1001), "'knn-smoothing.k' = 1001 exceeds the 1000 train images"),
    ("knn-smoothing", _knn_params(alpha=-1.0), "'knn-smoothing.alpha' must be in"),
    ("knn-smoothing", {"alpha": 1.0}, "'knn-smoothing.train' must be a table"),
    ("local-smoothing", {"alpha": -0.5}, "'local-smoothing.alpha' must be in"),
    ("local-smoothing", {"alpha": 1.0, "r": "two"}, "'local-smoothing.r' must be one of one, grad_g"),
    ("local-smoothing", {"alpha": 1.0, "space": "logit"}, "'local-smoothing.space' must be one of"),
    ("local-smoothing", {"alpha": 1.0, "r": "one", "accelerated": True}, "applies to r = grad_g or ratio"),
    ("local-smoothing", {"alpha": 1.0, "eps_c": 0.0}, "'local-smoothing.eps_c' must be positive"),
    ("local-smoothing", {"alpha": 1.0, "norm": "Linfinity"}, "'local-smoothing.norm' must be one of"),
])
def test_bad_card_fields_get_one_line_errors(method, params, message):
    with pytest.raises(InputError, match=message) as info:
        MixCard(method, params, **PAIR)
    assert "\n" not in str(info.value)


def test_bad_fit_options_fail_before_any_work(tmp_path):
    with pytest.raises(InputError, match="needs -O alpha=VALUE"):
        fit("local-smoothing", "digits-std", "digits-pgd", out=tmp_path / "c.toml")
    with pytest.raises(InputError, match="takes no option 'beta'"):
        fit("knn-smoothing", "digits-std", "digits-pgd", options={"alpha": 1.0, "beta": 0.9})
    with pytest.raises(InputError, match="exceeds the 1000 train images"):
        fit("knn-smoothing", "digits-std", "digits-pgd", options={"alpha": 1.0, "k": 5000}, progress=False)
    with pytest.raises(InputError, match=r"option k \(--k\) of mixing method 'knn-smoothing' must be at least 1"):
        fit("knn-smoothing", "digits-std", "digits-pgd", options={"alpha": 1.0, "k": 0})
    with pytest.raises(InputError, match="alpha_t must be a number >= 0"):
        LocalSmoothingClassifier(nn.Identity(), nn.Identity(), alpha=1.0, gradient="alpha_t=-1")
    with pytest.raises(InputError, match="unknown gradient 'bypass'"):
        LocalSmoothingClassifier(nn.Identity(), nn.Identity(), alpha=1.0, gradient="bypass")
    assert not (tmp_path / "c.toml").exists()


def test_knn_card_round_trip_rebuilds_the_same_classifier(tmp_path):
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import load_mixed

    res = fit("knn-smoothing", "digits-std", "digits-pgd", options={"alpha": 0.3, "k": 3, "n_train": 400},
              out=tmp_path / "knn.toml", progress=False)
    card = MixCard.load(tmp_path / "knn.toml")
    assert card == res.card and card.params["train"]["n"] == 400 and card.params["k"] == 3
    assert card.params["train"]["fingerprint"] == load_dataset("digits", "train", n=400).fingerprint
    x = load_dataset("digits", "evaluation", n=20).images
    with torch.no_grad():
        assert torch.equal(load_mixed(card)(x), load_mixed(res.card)(x))
    broken = card.to_dict()
    broken["knn-smoothing"]["train"]["fingerprint"] = "0000"
    with pytest.raises(InputError, match="refit with `mixzoo mix --method knn-smoothing`"):
        load_mixed(MixCard.from_dict(broken))


def test_local_card_round_trip_and_key_parts(tmp_path):
    method = get_method("local-smoothing")
    card = MixCard("local-smoothing", {"alpha": 2.0, "r": "grad_max", "space": "probabilities"}, **PAIR)
    again = MixCard.load(card.save(tmp_path / "ls.toml"))
    assert again == card and again.params["eps_c"] == 1e-6 and again.params["accelerated"] is False
    other = MixCard("local-smoothing", {"alpha": 2.0, "r": "grad_max", "space": "logits"}, **PAIR)
    assert method.key_parts(card) != method.key_parts(other)
    names = [e.name for e in method.extra_attacks(card)]
    assert names == ["apgd-fixed-R", "apgd-alpha_t=0", "apgd-alpha_t=inf", "square"]
    one = MixCard("local-smoothing", {"alpha": 2.0, "r": "one"}, **PAIR)
    assert "apgd-fixed-R" not in [e.name for e in method.extra_attacks(one)]


# ---------------------------------------------------------------------------------------------- CLI and bench
def test_mix_cli_writes_both_methods(tmp_path, cache_dir, one_thread):
    from typer.testing import CliRunner

    from mixzoo.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["mix", "--method", "knn-smoothing", "--abc", "digits-std", "--rbc", "digits-pgd",
                              "-O", "k=5", "-O", "alpha=0.5", "--out", str(tmp_path / "knn.toml"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["method"] == "knn-smoothing" and data["k"] == 5 and data["alpha"] == 0.5
    res = runner.invoke(app, ["mix", "--method", "local-smoothing", "--abc", "digits-std", "--rbc", "digits-pgd",
                              "-O", "alpha=2", "-O", "r=ratio", "-O", "accelerated=true", "--out",
                              str(tmp_path / "ls.toml")])
    assert res.exit_code == 0, res.output
    card = MixCard.load(tmp_path / "ls.toml")
    assert (card.params["r"], card.params["accelerated"], card.params["alpha"]) == ("ratio", True, 2.0)
    res = runner.invoke(app, ["mix", "--method", "local-smoothing", "--abc", "digits-std", "--rbc", "digits-pgd",
                              "-O", "alpha=2", "-O", "r=nope", "--out", str(tmp_path / "bad.toml")])
    assert res.exit_code == 2
    assert "option r (--r) of mixing method 'local-smoothing' must be one of one | grad_g" in res.output
    assert not (tmp_path / "bad.toml").exists()


@pytest.mark.slow
def test_bench_runs_the_declared_extra_attacks(tmp_path, cache_dir, one_thread, monkeypatch):
    from mixzoo.evaluation.bench import bench
    from mixzoo.methods.local_smoothing import method as ls_method

    # the declared attacks themselves, at a test's budget (their full budgets cost minutes on 2 shared cores)
    monkeypatch.setattr(ls_method, "EXTRA_APGD", {"n_iter": 10, "n_target_classes": 1})
    monkeypatch.setattr(ls_method, "EXTRA_SQUARE_QUERIES", 100)

    ls = fit("local-smoothing", "digits-std", "digits-pgd", options={"alpha": 1.0, "r": "grad_g"},
             out=tmp_path / "ls.toml", progress=False).path
    knn = fit("knn-smoothing", "digits-std", "digits-pgd", options={"alpha": 1.0, "k": 5}, out=tmp_path / "knn.toml",
              progress=False).path
    report = bench([str(ls), str(knn)], attack="pgd", attack_options={"n_iter": 3}, eps=0.05, n=12, curve=None,
                   progress=False)
    rows = {m.kind: m for m in report.models}
    assert set(rows) == {"abc", "rbc", "local-smoothing", "knn-smoothing"}
    for kind, path in (("local-smoothing", ls), ("knn-smoothing", knn)):
        declared = [e.name for e in get_method(kind).extra_attacks(MixCard.load(path))]
        ran = [c["name"] for c in rows[kind].components if c["name"] in declared]
        assert ran and ran == declared[:len(ran)], (kind, ran)  # in order; they stop once nothing is robust
        assert rows[kind].robust_accuracy <= rows[kind].clean_accuracy


def test_policy_hook_gives_a_per_example_alpha(models):
    """003 Eq. 7: alpha(x) = exp(beta_theta(x)), cropped to [-14, 14]; the adaptive method plugs its policy here."""
    g, h, x = models

    class Policy(nn.Module):
        def forward(self, z):
            return torch.log(torch.tensor([0.7, 30.0] * 3 + [0.7], dtype=z.dtype)) + 0.0 * z.sum((1, 2, 3))

    got = LocalSmoothingClassifier(g, h, alpha=0.0, r="grad_g", log_alpha=Policy())(x)
    for i, a in enumerate([0.7, 30.0] * 3 + [0.7]):
        one = LocalSmoothingClassifier(g, h, alpha=a, r="grad_g")(x[i:i + 1])
        assert torch.allclose(got[i:i + 1], one, atol=1e-12)
    huge = LocalSmoothingClassifier(g, h, alpha=0.0, r="one", log_alpha=lambda z: torch.full((len(z),), 50.0,
                                                                                               dtype=z.dtype))
    expect = LocalSmoothingClassifier(g, h, alpha=float(torch.exp(torch.tensor(14.0))), r="one")
    assert torch.allclose(huge(x), expect(x), atol=1e-12)


@pytest.mark.parametrize(("method", "options"), [("local-smoothing", {"r": "grad_max"}),
                                                  ("knn-smoothing", {"k": 5, "n_train": 500})])
def test_target_clean_chooses_the_largest_alpha_keeping_that_accuracy(tmp_path, cache_dir, method, options):
    from mixzoo.methods.local_smoothing.method import SCALE_GRID
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import load_mixed

    res = fit(method, "digits-std", "digits-pgd", options={"target_clean": 0.97, **options}, n_calib=200,
              out=tmp_path / "c.toml", progress=False)
    card = MixCard.load(tmp_path / "c.toml")
    q = card.params
    assert q["fit"] == "target_clean" and q["target_clean"] == 0.97 and card.data["n"] == 200
    data = load_dataset("digits", "calibration", n=200)

    def clean(alpha):  # the card's own classifier, built and run as a user would
        c = MixCard.from_dict({**card.to_dict(), method: {**card.to_dict()[method], "alpha": alpha}})
        with torch.no_grad():
            return float((load_mixed(c)(data.images).argmax(1) == data.labels).float().mean())

    assert clean(q["alpha"]) == pytest.approx(q["calibration_clean"]) and q["calibration_clean"] >= 0.97
    # the next alpha of the grid (log-spaced by 10^0.1) falls below the target: the largest that keeps it
    assert q["alpha"] > 0 and clean(q["alpha"] * SCALE_GRID[1] / SCALE_GRID[0]) < 0.97
    assert res.card == card
    with pytest.raises(InputError, match="give one of alpha, target_clean"):
        fit(method, "digits-std", "digits-pgd", options={"alpha": 1.0, "target_clean": 0.9})
    with pytest.raises(InputError, match=r"option target_clean \(--target-clean\) of mixing method '[a-z-]+' must"
                                         r" be in \[0, 1\]"):
        fit(method, "digits-std", "digits-pgd", options={"target_clean": 2})
