"""The built-in zoo: every registry zoo model loads by name, verifies, and matches its recorded accuracy;
training is deterministic; the training ingredients do what they claim."""

from __future__ import annotations

import hashlib
import tomllib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mixzoo
import mixzoo.zoo.pairs
from mixzoo.core.errors import MissingFileError, RegistryError
from mixzoo.core.registry import list_models, spec_from_dict
from mixzoo.training.model_metrics import _ln_margin, evaluate_model
from mixzoo.training.objectives import (
    augment_batch,
    hat_loss,
    mart_loss,
    shift_weights,
    trades_adversary,
    weight_perturbation,
)
from mixzoo.training.recipes import RECIPES, Recipe
from mixzoo.training.train import registry_entry, train_model
from mixzoo.zoo.data import load_dataset
from mixzoo_plugins import zoo

ZOO = [s.name for s in list_models() if s.source.get("kind") == "zoo"]


def _tiny(method: str, **kw) -> Recipe:
    base = RECIPES["digits-pgd" if method != "standard" else "digits-std"]
    if method == "hat":
        kw.setdefault("helper", "digits-std")
    return base.replace(name=f"tiny-{method}", method=method, epochs=1, train_n=192, batch_size=64,
                        arch_kwargs={"widths": (4,), "hidden": 8, "input_hw": 8}, **kw)


def test_registry_has_the_zoo():
    assert {"digits-std", "digits-pgd"} <= set(ZOO)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_loads_verifies_and_matches_its_recorded_accuracy(name):
    spec = mixzoo.core.registry.get_spec(name)
    assert zoo.file_sha256(zoo.weights_path(spec)) == spec.sha256
    assert zoo.weights_path(spec).stat().st_size < 8_000_000  # fmnist-lip100 is 6.6 MB
    try:
        data = load_dataset(spec.dataset, "evaluation", n=500)
    except MissingFileError as exc:
        pytest.skip(str(exc))
    model = mixzoo.zoo.models.load_model(name)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        logits = model(data.images)
    assert logits.shape == (len(data), spec.num_classes)
    acc = (logits.argmax(1) == data.labels).float().mean().item()
    assert abs(acc - spec.reported["clean_eval500"]) <= 0.015, (acc, spec.reported)
    accurate = [s for s in list_models("accurate", spec.dataset) if s.source.get("kind") == "zoo"]
    if spec.smoothing_sigma is not None:  # the base of a randomized-smoothing RBC: certified (L2), not attacked
        assert spec.role == "robust" and spec.threat_model == "L2" and spec.epsilon == spec.smoothing_sigma
        assert all(s.reported["clean"] > spec.reported["clean"] for s in accurate)
    elif spec.lipschitz:  # a Lipschitz RBC: certified in L2 by its declared constant (tests/test_certify_lipschitz.py)
        assert spec.role == "robust" and spec.threat_model == "L2" and spec.lipschitz["norm"] == "l2"
        assert all(s.reported["clean"] > spec.reported["clean"] for s in accurate)
    elif spec.role == "robust":  # the training trade-off: robust entries are less accurate than their ABC
        assert spec.threat_model == "Linf" and spec.epsilon > 0
        assert all(s.reported["clean"] > spec.reported["clean"] for s in accurate)
        assert spec.reported["pgd20"] < spec.reported["clean"]


def test_digits_pgd_robust_accuracy_matches_its_record():
    spec = mixzoo.core.registry.get_spec("digits-pgd")
    metrics = evaluate_model(mixzoo.zoo.models.load_model(spec), load_dataset("digits", "evaluation"), eps=spec.epsilon)
    assert abs(metrics["pgd"] - spec.reported["pgd20"]) <= 0.015
    assert abs(metrics["clean"] - spec.reported["clean"]) <= 0.015


def _zoo_spec(**changes):
    raw = mixzoo.core.registry.get_spec("digits-std").to_dict()
    raw.update(changes)
    for key in ("name", "plugin"):
        raw.pop(key)
    return spec_from_dict("tampered", raw)


def test_sha256_mismatch_is_a_one_line_error():
    with pytest.raises(RegistryError, match="has sha256") as err:
        mixzoo.zoo.models.load_model(_zoo_spec(sha256="0" * 64))
    assert "\n" not in str(err.value) and "mixzoo train" in str(err.value)


def test_missing_weights_and_wrong_architecture_are_named():
    src = dict(mixzoo.core.registry.get_spec("digits-std").source)
    with pytest.raises(MissingFileError, match="mixzoo train"):
        mixzoo.zoo.models.load_model(_zoo_spec(source={**src, "file": "nope.safetensors"}, sha256=None))
    with pytest.raises(RegistryError, match="do not fit"):
        mixzoo.zoo.models.load_model(_zoo_spec(source={**src, "kwargs": {"widths": [8], "input_hw": 8}}))


def test_the_zoo_plugin_loads_the_zoo_source_kind_only():
    assert zoo.mixzoo_model_sources() == {"zoo": zoo.load} and zoo.SOURCE_KINDS == ["zoo"]


@pytest.mark.parametrize("method", ["standard", "pgd", "trades", "mart", "hat", "pgd+awp"])
def test_training_is_deterministic(method, tmp_path):
    method, awp = method.removesuffix("+awp"), 0.01 if method.endswith("+awp") else 0.0
    a = train_model(_tiny(method, awp=awp), tmp_path / "a", evaluate=False, progress=False)
    b = train_model(_tiny(method, awp=awp), tmp_path / "b", evaluate=False, progress=False)
    assert a.sha256 == b.sha256 == (tmp_path / "a" / f"tiny-{method}.sha256").read_text().split()[0]
    assert (tmp_path / "a" / a.recipe.file).read_bytes() == (tmp_path / "b" / b.recipe.file).read_bytes()
    c = train_model(_tiny(method, awp=awp), save=False, evaluate=False, progress=False, seed=1)
    assert c.sha256 != a.sha256
    assert all(torch.isfinite(v.float()).all() for v in a.state_dict.values())


def test_trained_result_gives_a_valid_registry_entry(tmp_path):
    res = train_model(_tiny("pgd"), tmp_path, eval_n=100, progress=False)
    assert set(res.metrics) >= {"clean", "pgd", "clean_mistake_margin_median", "attacked_correct_margin_q0.015"}
    entry = tomllib.loads(registry_entry(res, "cmd", "2026-01-01"))["models"]["tiny-pgd"]
    entry["source"]["file"] = str(res.path)
    spec = spec_from_dict("tiny-pgd", entry)
    model = mixzoo.zoo.models.load_model(spec)
    data = load_dataset("digits", "evaluation", n=100)
    acc = (model(data.images).argmax(1) == data.labels).float().mean().item()
    assert acc == pytest.approx(spec.reported["clean"], abs=1e-4)


def test_augment_batch_crops_and_flips():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 6, 6)
    same = augment_batch(x, 0, g)  # no padding: each image is itself or its mirror image
    assert all(torch.equal(s, o) or torch.equal(s, o.flip(-1)) for s, o in zip(same, x, strict=True))
    moved = augment_batch(x, 2, g)
    assert moved.shape == x.shape and not torch.equal(moved, x)
    assert float(moved.sum()) <= float(x.sum()) + 1e-3  # crops only drop pixels or add zeros


def test_trades_adversary_stays_in_the_ball():
    model = mixzoo.zoo.models.load_model("digits-pgd")
    data = load_dataset("digits", "evaluation", n=64)
    x_adv = trades_adversary(model, data.images, eps=0.1, steps=5, generator=torch.Generator().manual_seed(0))
    assert (x_adv - data.images).abs().max() <= 0.1 + 1e-6
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    kl = torch.nn.functional.kl_div
    with torch.no_grad():
        p = model(data.images).softmax(1)
        gain = kl(model(x_adv).log_softmax(1), p, reduction="sum")
    assert gain > kl(model(data.images).log_softmax(1), p, reduction="sum")


def test_ln_margin_is_scale_free_and_in_range():
    logits = torch.randn(100, 10) * 5
    m = _ln_margin(logits)
    assert (m >= 0).all() and (m <= 1).all()
    assert torch.allclose(m, _ln_margin(3 * logits + 7), atol=1e-5)


def _plain_forward(network: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The textbook layer order: conv -> batch norm -> ReLU -> ... -> max pool, contiguous NCHW, no folding."""
    h = x.contiguous()
    layers = list(network.features)
    for i, layer in enumerate(layers):
        if isinstance(layer, torch.nn.MaxPool2d) and isinstance(layers[i + 1], torch.nn.ReLU):
            continue  # pooled after the ReLU below
        h = torch.relu(h) if isinstance(layer, torch.nn.ReLU) else layer(h)
        if isinstance(layer, torch.nn.ReLU) and i > 0 and isinstance(layers[i - 1], torch.nn.MaxPool2d):
            h = layers[i - 1](h)
    return network.classifier(h)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_convnet_fast_layout_computes_the_plain_network(batch_norm, one_thread):
    from mixzoo_plugins.zoo_arch import ConvNet

    torch.manual_seed(0)
    net = ConvNet(widths=(6, 8), hidden=16, convs_per_stage=2, batch_norm=batch_norm)
    if batch_norm:  # non-trivial running statistics, as after training
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)
    net.eval()
    x = torch.randn(5, 1, 28, 28, requires_grad=True)
    y = net(x)
    g, = torch.autograd.grad(y.logsumexp(1).sum(), x)
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = _plain_forward(net, x_ref)
    g_ref, = torch.autograd.grad(y_ref.logsumexp(1).sum(), x_ref)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)
    # checkpoints keep the plain layer indices (conv [bn] relu conv [bn] relu pool, per stage)
    weights = sorted(k for k in net.state_dict() if k.startswith("features") and k.endswith("weight"))
    indices = [0, 1, 3, 4, 7, 8, 10, 11] if batch_norm else [0, 2, 5, 7]
    assert weights == sorted(f"features.{i}.weight" for i in indices)


def test_weight_average_is_an_ema_of_the_trained_weights():
    """With ``ema`` the saved weights are the moving average (deterministic, different from the last
    iterate); without it the recipe metadata has no ``ema`` key, so older weight files keep their bytes."""
    plain = train_model(_tiny("pgd"), save=False, evaluate=False, progress=False)
    avg = train_model(_tiny("pgd", ema=0.9), save=False, evaluate=False, progress=False)
    again = train_model(_tiny("pgd", ema=0.9), save=False, evaluate=False, progress=False)
    assert avg.sha256 == again.sha256 != plain.sha256
    assert "ema" not in plain.recipe.to_dict() and avg.recipe.to_dict()["ema"] == 0.9
    # the average lags the last iterate: every weight tensor differs, none by a non-finite amount
    for k, v in plain.state_dict.items():
        assert torch.isfinite(avg.state_dict[k]).all() and not torch.equal(avg.state_dict[k], v)
    with pytest.raises(mixzoo.core.errors.InputError, match="ema is a decay"):
        _tiny("pgd", ema=1.0)


def test_mart_loss_matches_the_reference_code():
    """Against the loss as written in the MART authors' code (Wang et al. 2020; argsort for the best wrong class,
    their 1e-12 / 1.0001 guards), on random logits."""
    g = torch.Generator().manual_seed(0)
    logits, logits_adv = torch.randn(64, 10, generator=g) * 3, torch.randn(64, 10, generator=g) * 3
    y = torch.randint(0, 10, (64,), generator=g)
    adv_probs = torch.softmax(logits_adv, dim=1)
    tmp1 = torch.argsort(adv_probs, dim=1)[:, -2:]
    new_y = torch.where(tmp1[:, -1] == y, tmp1[:, -2], tmp1[:, -1])
    loss_adv = F.cross_entropy(logits_adv, y) + F.nll_loss(torch.log(1.0001 - adv_probs + 1e-12), new_y)
    nat_probs = torch.softmax(logits, dim=1)
    true_probs = nat_probs.gather(1, y[:, None]).squeeze(1)
    kl = F.kl_div(torch.log(adv_probs + 1e-12), nat_probs, reduction="none").sum(1)
    reference = loss_adv + 6.0 * (kl * (1.0000001 - true_probs)).mean()
    assert float(mart_loss(logits, logits_adv, y, 6.0)) == pytest.approx(float(reference), rel=1e-3)
    # a clean example classified with certainty contributes no consistency term
    sure = torch.full((1, 10), -50.0)
    sure[0, 3] = 50.0
    assert float(mart_loss(sure, logits_adv[:1], torch.tensor([3]), 6.0)) == pytest.approx(
        float(mart_loss(sure, logits_adv[:1], torch.tensor([3]), 0.0)), abs=1e-6)


def test_hat_loss_matches_the_reference_code():
    """Against HAT's loss as written in the authors' code (Rade & Moosavi-Dezfooli 2022: KLDivLoss(sum) / batch
    for the TRADES term, plain CE on the helper example), on random logits; gamma 0 is the TRADES objective."""
    g = torch.Generator().manual_seed(0)
    clean, adv, help_ = (torch.randn(32, 10, generator=g) * 3 for _ in range(3))
    y, y_help = torch.randint(0, 10, (32,), generator=g), torch.randint(0, 10, (32,), generator=g)
    kl = torch.nn.KLDivLoss(reduction="sum")(F.log_softmax(adv, dim=1), F.softmax(clean, dim=1)) / 32
    ref = F.cross_entropy(clean, y) + 2.5 * kl + 0.5 * F.cross_entropy(help_, y_help)
    torch.testing.assert_close(hat_loss(clean, adv, help_, y, y_help, 2.5, 0.5), ref)
    torch.testing.assert_close(hat_loss(clean, adv, help_, y, y_help, 2.5, 0.0), F.cross_entropy(clean, y) + 2.5 * kl)


def test_hat_needs_a_helper_and_records_it():
    with pytest.raises(mixzoo.core.errors.InputError, match="helper=NAME"):
        _tiny("pgd").replace(method="hat")
    d = _tiny("hat").to_dict()
    assert (d["helper"], d["helper_weight"], d["helper_scale"]) == ("digits-std", 0.5, 2.0)
    # recipes that do not use them keep the metadata (hence the bytes) of weights trained before the fields existed
    assert not {"helper", "helper_weight", "helper_scale", "awp", "ema"} & set(_tiny("pgd").to_dict())
    assert _tiny("pgd", awp=0.005).to_dict()["awp"] == 0.005
    with pytest.raises(mixzoo.core.errors.InputError, match="awp"):
        _tiny("pgd", awp=-1.0)


def test_weight_perturbation_is_a_layerwise_ascent_step_and_is_undone():
    """AWP (Wu et al. 2020): each weight tensor moves by gamma times its own norm, along its loss gradient, so
    the loss goes up; biases stay; removing the shift restores the weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    x, y = torch.randn(128, 1, 8, 8), torch.randint(0, 10, (128,))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loss = F.cross_entropy(model(x), y)
    shift = weight_perturbation(model, loss, 0.01)
    assert set(shift) == {"1.weight", "3.weight"}
    for k, v in shift.items():
        assert v.norm().item() == pytest.approx(0.01 * before[k].norm().item(), rel=1e-5)
    shift_weights(model, shift, 1.0)
    assert F.cross_entropy(model(x), y).item() > loss.item()
    assert torch.equal(model.state_dict()["1.bias"], before["1.bias"])
    shift_weights(model, shift, -1.0)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], atol=1e-7, rtol=0)


# ------------------------------------------------------------------------------------------------ zoo
def test_file_sha256_sees_a_file_rewritten_in_place(tmp_path):
    from mixzoo_plugins.zoo import file_sha256

    path = tmp_path / "w.safetensors"
    path.write_bytes(b"first")
    assert file_sha256(path) == hashlib.sha256(b"first").hexdigest()
    path.write_bytes(b"second version")
    assert file_sha256(path) == hashlib.sha256(b"second version").hexdigest()


def test_file_sha256_sees_same_size_bytes_with_the_modification_time_set_back(tmp_path):
    """A same-size rewrite whose mtime is restored (``touch -r``, a copy with ``cp -p``) still changes the digest."""
    import os

    from mixzoo_plugins.zoo import file_sha256

    path = tmp_path / "w.safetensors"
    path.write_bytes(b"AAAA")
    st = path.stat()
    assert file_sha256(path) == hashlib.sha256(b"AAAA").hexdigest()
    path.write_bytes(b"BBBB")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size
    assert file_sha256(path) == hashlib.sha256(b"BBBB").hexdigest()


def test_file_sha256_hashes_every_block(tmp_path):
    from mixzoo_plugins.zoo import file_sha256

    blob = bytes(range(256)) * (3 * 4096 + 7)  # about 3 MiB: several read blocks
    path = tmp_path / "big.bin"
    path.write_bytes(blob)
    assert file_sha256(path) == hashlib.sha256(blob).hexdigest()


def _tiny_zoo_spec(path, arch_kwargs):
    from mixzoo.core.registry import ModelSpec

    return ModelSpec(name="tiny-zoo", role="robust", dataset="digits", num_classes=10, input_size=(1, 8, 8),
                     source={"kind": "zoo", "arch": "convnet", "file": str(path), "kwargs": arch_kwargs})


def test_zoo_weights_missing_or_extra_keys_are_refused(tmp_path):
    from safetensors.torch import save_file

    from mixzoo.zoo.models import load_model
    from mixzoo_plugins.zoo_arch import ConvNet

    kwargs = {"widths": [4], "hidden": 8, "input_hw": 8}
    state = {k: v.contiguous() for k, v in ConvNet(**kwargs).state_dict().items()}
    good = tmp_path / "good.safetensors"
    save_file(state, str(good))
    load_model(_tiny_zoo_spec(good, kwargs))
    missing = tmp_path / "missing.safetensors"
    save_file({k: v for k, v in state.items() if k != "classifier.3.bias"}, str(missing))
    with pytest.raises(RegistryError, match="do not fit"):
        load_model(_tiny_zoo_spec(missing, kwargs))
    extra = tmp_path / "extra.safetensors"
    save_file({**state, "features.9.weight": torch.zeros(2)}, str(extra))
    with pytest.raises(RegistryError, match="do not fit"):
        load_model(_tiny_zoo_spec(extra, kwargs))


@pytest.mark.parametrize("conv_bias", [False, True])
def test_conv_bn_eval_equals_batch_norm_after_convolution(conv_bias):
    """The folded convolution against PyTorch's conv then batch norm, with small running variances (where bn.eps
    matters) and a convolution bias (which the batch norm scales)."""
    from mixzoo_plugins.zoo_arch import conv_bn_eval

    torch.manual_seed(0)
    conv, bn = nn.Conv2d(2, 3, 3, padding=1, bias=conv_bias), nn.BatchNorm2d(3, eps=1e-3)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(1e-4, 1e-3)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
        if conv_bias:
            conv.bias.uniform_(1.0, 2.0)
    bn.eval()
    x = torch.randn(2, 2, 5, 5)
    torch.testing.assert_close(conv_bn_eval(conv, bn, x), bn(conv(x)), atol=1e-4, rtol=1e-4)


def test_convnet_with_too_many_pooling_stages_is_refused():
    from mixzoo_plugins.zoo_arch import ConvNet

    ConvNet(widths=(4, 4, 4), hidden=8, input_hw=8)  # 8 -> 4 -> 2 -> 1
    with pytest.raises(RegistryError, match="pooling stages"):
        ConvNet(widths=(4, 4, 4, 4), hidden=8, input_hw=8)  # 8 -> ... -> 0
