"""Edge cases found by a mutation audit of the mix card, the black-box wrapper, the model wrapper, the report writer,
the datasets, the compat shims, the clamps and the built-in zoo: each test pins down a behaviour that a small,
plausible bug (a skipped check, an off-by-one, a wrong field written) used to get past the rest of the suite."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mixzoo.zoo.pairs
from mixzoo.blackbox import BlackBoxModel, BlackBoxOutputError, QueryBudgetExceeded, as_black_box
from mixzoo.card import MixCard
from mixzoo.data import ImageDataset, shortfall_note
from mixzoo.errors import InputError, RegistryError
from mixzoo.models import Normalize, check_images, check_labels, weight_hash


# ------------------------------------------------------------------------------------------------ mix card
def _card(**changes) -> dict:
    base = dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, beta=0.985)
    base.update(changes)
    return base


def _edited(changes: dict) -> dict:
    """A schema-2 card dict (as loaded from a file) of ``_card()`` with ``changes`` made in the method's section;
    ``method="linear"`` gives the linear method's section (the schema-1 linear card: fit by the margin rule)."""
    d = MixCard(**_card()).to_dict()
    changes = dict(changes)
    if changes.pop("method", None) == "linear":
        del d["mixednuts"]
        d["method"] = "linear"
        d["linear"] = {"alpha": 0.9, "beta": 0.985, "temperature": 1.0, "fit": "linear"}
    d[d["method"]].update(changes)
    return d


@pytest.mark.parametrize(("changes", "message"), [
    ({"s": 0.0}, "'mixednuts.s' must be positive"),
    ({"p": 0.0}, "'mixednuts.p' must be positive"),
    ({"s": -1.0}, "'mixednuts.s' must be positive"),
    ({"beta": 1.5}, r"'mixednuts.beta' must be in \[0.0, 1.0\]"),
    ({"beta": -0.1}, r"'mixednuts.beta' must be in \[0.0, 1.0\]"),
    ({"alpha_d": 1.2}, r"'mixednuts.alpha_d' must be in \[0.0, 1.0\]"),
    ({"alpha_d": -0.5}, r"'mixednuts.alpha_d' must be in \[0.0, 1.0\]"),
    ({"temperature": -1.0}, r"'mixednuts.temperature' must be in \[0.0, inf\]"),
    ({"s": float("nan")}, "'mixednuts.s' must be a finite number"),
    ({"alpha": float("inf")}, "'mixednuts.alpha' must be a finite number"),
    ({"beta": float("nan")}, "'mixednuts.beta' must be a finite number"),
    ({"s": True}, "'mixednuts.s' must be a finite number"),
    ({"top_k": True}, "'mixednuts.top_k' must be an integer"),
    ({"method": "linear", "beta": None}, "missing field 'linear.beta'"),
])
def test_card_values_outside_their_domain_are_refused(changes, message):
    """Paper Eq. 4/5: s, p > 0; beta, alpha_d are probabilities; a temperature is >= 0; numbers are finite reals
    (a bool is not one); the MMAA and linear methods are calibrated at a beta, so their cards must record it."""
    with pytest.raises(InputError, match=message):
        MixCard(**_card(**changes))
    with pytest.raises(InputError, match=message):
        MixCard.from_dict(_edited(changes), source="edited.toml")


def test_card_boundary_values_are_accepted():
    for changes in ({"beta": 0.0}, {"beta": 1.0}, {"alpha_d": 0.0}, {"alpha_d": 1.0}, {"alpha": 0.5},
                    {"alpha": 1.0}, {"temperature": 0.0}, {"top_k": 2}, {"method": "guess", "beta": None}):
        MixCard(**_card(**changes))


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_every_card_field_survives_a_round_trip(tmp_path, suffix):
    """Each field differs from its default, so a field that to_dict forgets to write comes back changed."""
    # ``method=`` in the keyword form is the fit (default "mmaa"); "linear" would give a linear card without s, p, c
    card = MixCard(s=1.5, p=3.0, c=-0.25, alpha=0.8, beta=0.95, clamp="relu", top_k=5, temperature=0.7,
                   alpha_d=0.6, objective=0.3, method="transfer", abc={"name": "a"}, rbc={"name": "r"},
                   dataset="digits", data={"n_clean": 3}, attack={"name": "apgd"}, provenance={"seed": 1},
                   notes=["x"], weights={"w.pt": "0" * 64})
    written = card.to_dict()
    # schema 2: the common fields, then the method's section under its name (``params``); ``path`` is not written
    assert set(written) == ({f for f in MixCard.__dataclass_fields__} - {"params", "path"}) | {card.method}
    assert written[card.method] == card.params
    assert set(card.params) >= {"s", "p", "c", "alpha", "beta", "clamp", "top_k", "temperature", "alpha_d",
                                "objective", "fit"}
    loaded = MixCard.load(card.save(tmp_path / f"card{suffix}"))
    assert loaded == card and loaded.temperature == 0.7 and loaded.fit == "transfer"
    linear = MixCard(alpha=0.8, beta=0.95, temperature=0.7, method="linear", abc={"name": "a"}, dataset="digits")
    loaded = MixCard.load(linear.save(tmp_path / f"linear{suffix}"))
    assert loaded == linear and loaded.method == "linear" and loaded.temperature == 0.7 and loaded.beta == 0.95


def test_none_inside_grid_arrays_keeps_the_grid_shape_in_toml(tmp_path):
    """TOML has no null: a ``None`` inside an array becomes nan, so the [s][p][c] shape survives the file."""
    grid = {"s_values": [1.0, 2.0], "p_values": [1.0], "c_values": [0.0, 0.5],
            "objectives": [[[0.5, None]], [[0.25, 0.75]]]}
    card = MixCard(**_card(grid=grid))
    loaded = MixCard.load(card.save(tmp_path / "card.toml"))
    obj = np.asarray(loaded.grid["objectives"], dtype=float)
    assert obj.shape == (2, 1, 2) and math.isnan(obj[0, 0, 1]) and obj[1, 0, 1] == 0.75


def _mmaa_card(**attack_changes) -> dict:
    attack = {"name": "mmaa", "eps": 0.2, "norm": "Linf", "n_iter": 10, "n_target_classes": 9, "n_restarts": 1,
              "seed": 0}
    attack.update(attack_changes)
    return _card(attack=attack, data={"n": 100})


def test_mmaa_record_accepts_zero_target_classes_and_zero_counts():
    """MMAA with ``n_target_classes = 0`` (no targeted runs, e.g. fewer than 4 classes) is a valid record, and a
    calibration set can have no clean mistakes: 0 counts are integers >= 0."""
    MixCard(**_mmaa_card(n_target_classes=0))
    card = _mmaa_card()
    card["data"] = {"n": 100, "n_clean": 0, "n_attacked": 0}
    MixCard(**card)


@pytest.mark.parametrize(("changes", "field"), [({"n_iter": True}, "attack.n_iter"),
                                                ({"n_restarts": False}, "attack.n_restarts"),
                                                ({"seed": True}, "attack.seed")])
def test_mmaa_record_refuses_booleans_as_integers(changes, field):
    with pytest.raises(InputError, match=field):
        MixCard(**_mmaa_card(**changes))


def test_grid_record_with_wrong_axis_length_is_refused():
    """Same number of axes, one of the wrong length: a 2x1x2 grid with a 2x1x3 objective table."""
    grid = {"s_values": [1.0, 2.0], "p_values": [1.0], "c_values": [0.0, 0.5],
            "objectives": [[[0.5, 0.6, 0.7]], [[0.4, 0.7, 0.1]]]}
    with pytest.raises(InputError, match="'mixednuts.grid.objectives' must be a 2x1x2"):
        MixCard(**_card(grid=grid))


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_numpy_scalars_in_tables_are_written_as_plain_numbers(tmp_path, suffix):
    card = MixCard(**_card(provenance={"seed": np.int64(3), "share": np.float32(0.5)}))
    loaded = MixCard.load(card.save(tmp_path / f"card{suffix}"))
    assert loaded.provenance == {"seed": 3, "share": 0.5} and type(loaded.provenance["seed"]) is int


def test_check_path_refuses_a_wrong_suffix_before_any_work(tmp_path):
    with pytest.raises(InputError, match=r"\.toml or \.json"):
        MixCard.check_path(tmp_path / "card.yaml")
    assert MixCard.check_path(tmp_path / "card.toml") == tmp_path / "card.toml"


# ------------------------------------------------------------------------------------------------ black box
def _net(out: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, out)).eval()


def _images(n: int) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(n))


def test_as_black_box_with_a_budget_enforces_it_on_an_already_wrapped_model():
    bb = as_black_box(_net())
    bb(_images(3))
    capped = as_black_box(bb, query_budget=5)
    assert capped.query_budget == 5 and capped.remaining == 5
    capped(_images(5))
    with pytest.raises(QueryBudgetExceeded):
        capped(_images(1))


def test_single_column_outputs_are_not_logits():
    """A classifier needs at least two classes; a [N, 1] output (a score, a regression) is refused even when the
    number of classes is not known."""
    bb = BlackBoxModel(_net(out=1))
    assert bb.num_classes is None
    with pytest.raises(BlackBoxOutputError, match=r"shape \(4, 1\)"):
        bb(_images(4))


class _LogitsAndFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _net()

    def forward(self, x):
        logits = self.net(x)
        return logits, torch.zeros(len(x), 3, 2)  # the logits come first, like (logits, features) models


def test_tuple_outputs_use_their_first_element():
    model = _LogitsAndFeatures()
    x = _images(4)
    assert torch.equal(BlackBoxModel(model)(x), model.net(x))


class _NaNRow(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _net()

    def forward(self, x):
        out = self.net(x)
        out[1, :3] = float("nan")  # three bad logits, all of one image
        return out


def test_nan_message_counts_images_and_the_failed_call_is_still_counted():
    bb = BlackBoxModel(_NaNRow(), query_budget=10)
    with pytest.raises(BlackBoxOutputError, match="for 1 of 4 images"):
        bb(_images(4))
    assert (bb.queries, bb.calls, bb.remaining) == (4, 1, 6)  # the model was asked: the queries are spent


def test_remaining_is_never_negative():
    bb = BlackBoxModel(_net(), query_budget=100)
    bb(_images(10))
    bb.query_budget = 4  # lowered below what was already used
    assert bb.remaining == 0


# ------------------------------------------------------------------------------------------------ models
def test_normalize_is_per_channel_standardization():
    mean, std = [0.3, 0.5, 0.1], [0.4, 0.2, 0.25]
    x = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    expected = torch.stack([(x[:, i] - mean[i]) / std[i] for i in range(3)], dim=1)
    torch.testing.assert_close(Normalize(mean, std)(x), expected)


class _Holder(nn.Module):
    def __init__(self, tensors: dict[str, torch.Tensor]):
        super().__init__()
        self._tensors = tensors

    def state_dict(self, *args, **kwargs):  # noqa: ARG002 - mirrors nn.Module.state_dict
        return self._tensors


def test_weight_hash_covers_names_shapes_and_bytes():
    w = torch.arange(6, dtype=torch.float32)
    base = weight_hash(_Holder({"a": w}))
    assert len(base) == 16 and int(base, 16) >= 0
    assert weight_hash(_Holder({"a": w.clone()})) == base
    assert weight_hash(_Holder({"b": w})) != base  # same bytes, other name
    assert weight_hash(_Holder({"a": w.view(2, 3)})) != base  # same bytes and name, other shape
    assert weight_hash(_Holder({"a": w + 1})) != base


def test_check_images_and_labels_boundaries():
    ok = torch.rand(2, 1, 8, 8)
    check_images(ok, (1, 8, 8))
    check_images(torch.zeros(2, 1, 8, 8))  # 0 and 1 are in [0, 1]
    check_images(torch.ones(2, 1, 8, 8))
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        check_images(ok - 0.5)
    with pytest.raises(InputError, match="the model expects"):
        check_images(ok, (1, 28, 28))
    check_labels(torch.tensor([0, 9]), 2, 10)
    with pytest.raises(InputError, match=r"must lie in \[0, 10\)"):
        check_labels(torch.tensor([0, 10]), 2, 10)
    with pytest.raises(InputError, match="entries for"):
        check_labels(torch.tensor([0, 1, 2]), 2, 10)


# ------------------------------------------------------------------------------------------------ data
def _dataset(split: str = "calibration", n: int = 5, **changes) -> ImageDataset:
    kw = dict(name="toy", split=split, images=torch.zeros(n, 1, 2, 2), labels=torch.zeros(n, dtype=torch.long),
              num_classes=2, indices=torch.arange(n), source="toy/all")
    kw.update(changes)
    return ImageDataset(**kw)


def test_fingerprint_depends_on_the_split_name_and_source_too():
    ref = _dataset()
    assert _dataset().fingerprint == ref.fingerprint
    assert _dataset(split="evaluation").fingerprint != ref.fingerprint
    assert _dataset(name="other").fingerprint != ref.fingerprint
    assert _dataset(source="toy/other").fingerprint != ref.fingerprint
    assert _dataset(indices=torch.arange(1, 6)).fingerprint != ref.fingerprint


def test_image_dataset_checks_indices_and_dtype():
    with pytest.raises(InputError, match="must match"):
        _dataset(indices=torch.arange(4))
    with pytest.raises(InputError, match="float32"):
        _dataset(images=torch.zeros(5, 1, 2, 2, dtype=torch.float64))


@settings(max_examples=40, deadline=None)
@given(held=st.integers(0, 50), requested=st.integers(0, 60))
def test_shortfall_note_only_when_fewer_images_than_asked(held, requested):
    note = shortfall_note(_dataset(n=held), requested, "--n")
    if held >= requested:
        assert note is None
    else:
        assert note is not None and f"--n {requested}" in note and f"all {held} were used" in note
    assert shortfall_note(_dataset(n=held), None, "--n") is None


# ------------------------------------------------------------------------------------------------ compat
class _FakeAutoAttack:
    """Stands in for pyautoattack.AutoAttack: records its arguments, returns (x_adv, y_adv)."""

    def __init__(self, model, **kwargs):
        self.model, self.kwargs = model, kwargs

    def run_standard_evaluation(self, x, y, **kwargs):
        self.run_kwargs = kwargs
        return x + 1, y + 1


def test_reference_api_maps_the_reference_call():
    from mixzoo.compat import _reference_api

    cls = _reference_api(_FakeAutoAttack)
    aa = cls("model", "Linf", 0.03, "standard", log_path="log.txt", verbose=False, attacks_to_run=("apgd-ce",))
    assert aa.kwargs == {"norm": "Linf", "eps": 0.03, "version": "standard", "attacks": ["apgd-ce"]}
    assert aa.verbose is False
    x, y = torch.zeros(2), torch.zeros(2)
    out = aa.run_standard_evaluation(x, y, bs=7)
    assert torch.equal(out, x + 1) and aa.run_kwargs == {"batch_size": 7}
    x_adv, y_adv = aa.run_standard_evaluation(x, y, bs=7, return_labels=True)
    assert torch.equal(x_adv, x + 1) and torch.equal(y_adv, y + 1)
    assert aa.run_standard_evaluation(x, y, batch_size=3)[1] is not None  # pyautoattack-style call unchanged
    assert cls.__name__ == "_FakeAutoAttack"


def test_import_autoattack_replaces_a_stub_module_named_autoattack(monkeypatch):
    from mixzoo.compat import import_autoattack

    monkeypatch.setitem(sys.modules, "autoattack", types.ModuleType("autoattack"))  # e.g. an unrelated package
    mod = import_autoattack()
    assert hasattr(mod, "AutoAttack")


# ------------------------------------------------------------------------------------------------ clamps
def test_builtin_clamps_match_their_definitions_in_float64():
    """Eq. 4 clamps: GELU is the exact x * Phi(x) (not the tanh approximation); softplus is log(1 + e^x)
    everywhere, including x well above 1."""
    from mixzoo.transforms import get_clamp

    xs = [-4.0, -2.0, -0.75, -0.1, 0.0, 0.3, 1.0, 2.5, 6.0, 15.0]
    x = torch.tensor(xs, dtype=torch.float64)
    gelu = get_clamp("gelu")(x).tolist()
    softplus = get_clamp("softplus")(x).tolist()
    elu = get_clamp("elu")(x).tolist()
    for v, g, sp, e in zip(xs, gelu, softplus, elu, strict=True):
        assert g == pytest.approx(0.5 * v * (1 + math.erf(v / math.sqrt(2))), abs=1e-12)
        assert sp == pytest.approx(math.log1p(math.exp(v)), abs=1e-9)
        assert e == pytest.approx(v if v > 0 else math.expm1(v), abs=1e-12)
    assert get_clamp("linear")(x).tolist() == xs


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
    from mixzoo.registry import ModelSpec

    return ModelSpec(name="tiny-zoo", role="robust", dataset="digits", num_classes=10, input_size=(1, 8, 8),
                     source={"kind": "zoo", "arch": "convnet", "file": str(path), "kwargs": arch_kwargs})


def test_zoo_weights_missing_or_extra_keys_are_refused(tmp_path):
    from safetensors.torch import save_file

    from mixzoo.models import load_model
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


# ------------------------------------------------------------------------------------------------ report
def _row(kind: str, clean: float, robust: float, alpha: float | None = None, card: MixCard | None = None):
    from mixzoo.bench import ModelResult

    return ModelResult(name=f"{kind}-model", kind=kind, clean_accuracy=clean, robust_accuracy=robust,
                       attack="apgd", epsilon=0.2, norm="Linf", n=60, seconds=1.0, alpha=alpha, device="cpu",
                       method=None if card is None else card.method, card=None if card is None else card.to_dict())


def _report(rbc_clean: float = 0.8, curve: dict | None = None):
    from mixzoo.bench import Report

    card = MixCard(s=2.0, p=2.0, c=-0.5, alpha=0.9, beta=0.985, top_k=3, objective=0.4,
                   provenance={"mixzoo_version": "9.9", "created": "2026-01-01T00:00:00+00:00"})
    baseline = MixCard("linear", {"alpha": 0.7, "fit": "matched"})
    models = [_row("abc", 0.95, 0.0), _row("rbc", rbc_clean, 0.45), _row("linear", 0.85, 0.40, 0.7, baseline),
              _row("mixednuts", 0.9, 0.40, 0.9, card)]
    return Report(models=models, card=card, cards=[card],
                  dataset={"name": "digits", "split": "evaluation", "n": 60, "fingerprint": "f" * 16,
                           "calibration": {"n": 120}},
                  settings={"attack": "apgd", "norm": "Linf", "eps": 0.2, "seed": 0, "device": "cpu",
                            "seconds": 3.0},
                  curve=curve)


def test_markdown_states_the_relative_clean_error_cut_and_the_robust_change():
    """RBC error 20 %, MixedNUTS error 10 %: half the RBC's clean errors are gone; robust 40 % vs 45 %."""
    from mixzoo.report import markdown

    text = markdown(_report())
    assert "clean error cut by 50.0% (relative), robust accuracy -5.00 points." in text
    # each mixed row shows its card's section (the method's parameters, without the search grid)
    section = text.split("## mixednuts-model: mix card (method `mixednuts`)", 1)[1]
    card_json = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    assert card_json == {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9, "beta": 0.985, "clamp": "gelu", "top_k": 3,
                         "alpha_d": None, "objective": 0.4, "temperature": 0.0, "fit": "mmaa"}
    section = text.split("## linear-model: mix card (method `linear`)", 1)[1]
    assert json.loads(section.split("```json\n", 1)[1].split("```", 1)[0]) == {
        "alpha": 0.7, "temperature": 1.0, "beta": None, "target_robust": None, "fit": "matched"}
    # an RBC without clean errors has no error to cut: no line, no division by zero
    assert "clean error cut" not in markdown(_report(rbc_clean=1.0))


def test_markdown_trade_off_table_shows_each_points_own_numbers():
    from mixzoo.report import markdown

    curve = {"attack": "apgd", "n_robust": 30, "n_clean": 60,
             "mixednuts": [{"beta": 0.95, "alpha": 0.875, "clean_accuracy": 0.9, "robust_accuracy": 0.3}],
             "linear": [{"alpha": 0.6, "clean_accuracy": 0.85, "robust_accuracy": 0.2}]}
    text = markdown(_report(curve=curve))
    assert "## Trade-off curve (apgd on 30 images; clean on 60)" in text
    assert "| 0.95 | 0.8750 | 90.00 | 30.00 |" in text.splitlines()
    assert "| 0.6 | 85.00 | 20.00 |" in text.splitlines()


def test_write_report_files_and_adversarial_metadata(tmp_path):
    from safetensors import safe_open

    from mixzoo.bench import ADVERSARIAL_FILE
    from mixzoo.report import write_report

    report = _report()
    report.adversarial = {"mixednuts": {"index": torch.tensor([3, 7]), "images": torch.zeros(2, 1, 8, 8)}}
    paths = write_report(report, tmp_path / "out", rbc=None, plots=False)
    assert [p.name for p in paths] == ["report.json", "report.md", ADVERSARIAL_FILE]
    with safe_open(str(tmp_path / "out" / ADVERSARIAL_FILE), "pt") as fh:
        meta = fh.metadata()
        assert sorted(fh.keys()) == ["mixednuts.images", "mixednuts.index"]
    assert meta == {"eps": "0.2", "norm": "Linf", "attack": "apgd", "data": "f" * 16, "n": "60"}
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["card"]["method"] == "mixednuts" and data["card"]["mixednuts"]["alpha"] == 0.9
    assert data["cards"] == [data["card"]]
    assert [m["kind"] for m in data["models"]] == ["abc", "rbc", "linear", "mixednuts"]
    assert data["models"][3]["card"] == data["card"] and data["models"][2]["card"]["linear"]["alpha"] == 0.7


@pytest.fixture()
def captured_figures(monkeypatch):
    import matplotlib.pyplot as plt

    import mixzoo.methods.mixednuts.figures as figures

    figs = []
    monkeypatch.setattr(figures, "_save_png", lambda fig, path: figs.append(fig))  # noqa: ARG005
    yield figs
    for fig in figs:
        plt.close(fig)


def _grid_card(objectives) -> MixCard:
    grid = {"s_values": [0.5, 1.0, 2.0], "p_values": [2.0], "c_values": [-1.0, 0.0],
            "objectives": objectives}
    return MixCard(s=2.0, p=2.0, c=-1.0, alpha=0.9, beta=0.985, grid=grid)


def test_objective_plot_marks_the_chosen_point_and_greys_only_objectives_above_one(tmp_path, captured_figures):
    """Objectives above 1 mark excluded grid points; 1.0 itself (every clean mistake kept) is a feasible value."""
    from mixzoo.methods.mixednuts.figures import plot_objective

    plot_objective(_grid_card([[[0.2, 0.3]], [[1.0, 0.5]], [[0.1, 0.4]]]), tmp_path / "o.png")  # [s][p][c]
    plot_objective(_grid_card([[[0.2, 0.3]], [[1.5, 0.5]], [[0.1, 0.4]]]), tmp_path / "o.png")
    (feasible, excluded) = captured_figures
    heat = feasible.axes[0].images[0].get_array()
    assert np.ma.count_masked(heat) == 0 and "excluded" not in feasible._suptitle.get_text()
    assert np.ma.count_masked(excluded.axes[0].images[0].get_array()) == 1
    assert "excluded" in excluded._suptitle.get_text()
    # the red star sits on (c index, s index) of the card's (c, s) = (-1.0, 2.0): column 0, row 2
    star = next(line for line in feasible.axes[0].lines if line.get_marker() == "*")
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([0], [2])


def test_margin_plot_draws_the_alpha_threshold(tmp_path, captured_figures):
    """Fig. 6: the mixture follows the RBC once its margin exceeds (1 - alpha) / alpha."""
    from mixzoo.methods.mixednuts.figures import plot_margins

    g = torch.Generator().manual_seed(0)
    cal = types.SimpleNamespace(clean_logits=torch.randn(40, 5, generator=g),
                                attacked_logits=torch.randn(40, 5, generator=g),
                                labels=torch.randint(0, 5, (40,), generator=g))
    card = MixCard(s=2.0, p=2.0, c=-0.5, alpha=0.8, beta=0.985)
    plot_margins(card, cal, tmp_path / "m.png")
    (fig,) = captured_figures
    lines = [line for line in fig.axes[1].lines if str(line.get_label()).startswith("(1-alpha)/alpha")]
    assert len(lines) == 1 and list(lines[0].get_xdata()) == pytest.approx([0.25, 0.25])


def test_tradeoff_curve_records_its_sizes_and_the_linear_baselines_own_clean_accuracy(monkeypatch):
    """Fig. 8 data with the expensive parts replaced: the clean accuracy of the linear mixture is that of
    (1 - alpha) softmax(g) + alpha softmax(h) on raw logits (Bai et al.), computed here independently."""
    import importlib

    import mixzoo.attacks.runner as runner
    import mixzoo.methods.mixednuts.figures as figures
    from mixzoo.cache import Cache

    n_all, n_robust = 6, 4
    g = torch.tensor([[3.0, 0.0, 0.0, 0.0]] * n_all)  # the ABC: class 0, moderately sure
    h = torch.tensor([[0.0, 10.0, 0.0, 0.0]] * n_all)  # the RBC: class 1, very sure on its raw scale
    labels = torch.zeros(n_all, dtype=torch.long)
    data = _dataset(split="evaluation", n=n_all, labels=labels, num_classes=4)
    cal = types.SimpleNamespace(clean_logits=None, attacked_logits=None, labels=None)  # calibrate is replaced too
    monkeypatch.setattr(figures, "calibration_data_for", lambda *a, **k: cal)
    monkeypatch.setattr(mixzoo.zoo.pairs, "cached_logits", lambda model, d, **k: g if "ABC" in k["what"] else h)
    chosen = MixCard(s=1.0, p=1.0, c=0.0, alpha=0.7, beta=0.9)
    monkeypatch.setattr(importlib.import_module("mixzoo.calibrate"), "calibrate", lambda **k: chosen)
    seen = []

    def fake_evaluate(model, images, labels_r, **kw):
        seen.append(len(images))
        return {"robust_correct": [i % 2 == 0 for i in range(len(images))]}

    monkeypatch.setattr(runner, "evaluate", fake_evaluate)
    card = MixCard(s=1.0, p=1.0, c=0.0, alpha=0.7, beta=0.985)
    cur = figures.tradeoff_curve(card, nn.Flatten(), nn.Flatten(), data, cache=Cache(enabled=False), attack="apgd",
                                n=n_robust, eps=0.1, norm="Linf", seed=0, batch_size=4, betas=(0.9,),
                                alphas=(0.5,), progress=False)
    assert seen == [n_robust, n_robust]
    assert (cur["n_robust"], cur["n_clean"]) == (n_robust, n_all)
    mix = 0.5 * g.softmax(1) + 0.5 * h.softmax(1)
    expected_linear = float((mix.argmax(1) == labels).float().mean())
    assert expected_linear == 0.0  # the raw-scale RBC wins: a different answer than with M(s, p, c) applied
    assert cur["linear"] == [{"alpha": 0.5, "clean_accuracy": expected_linear, "robust_accuracy": 0.5}]
    assert cur["mixednuts"][0]["robust_accuracy"] == 0.5 and cur["mixednuts"][0]["beta"] == 0.9

