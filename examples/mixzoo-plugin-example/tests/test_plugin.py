"""The plugin through mixzoo's public API. The tests register the package at run time when it is not
installed (an installed one is already loaded through its entry point)."""

from __future__ import annotations

import pytest
import torch
import typer

import mixzoo_plugin_example


@pytest.fixture(autouse=True, scope="module")
def registered():
    from mixzoo.core.plugins import clear_caches, get_plugin_manager, register_plugin, unregister_plugin

    if get_plugin_manager().is_registered(mixzoo_plugin_example):
        yield
        return
    name = register_plugin(mixzoo_plugin_example, name="example")
    yield
    unregister_plugin(name)
    clear_caches()


def test_provides_is_what_the_hooks_give():
    from mixzoo.core.plugins import plugin_infos

    info = next(i for i in plugin_infos(check=True) if i.name == "example")
    assert "differs from the hooks" not in (info.error or ""), info.error
    assert {label: info.provides[label] for label in mixzoo_plugin_example.PROVIDES} == mixzoo_plugin_example.PROVIDES


def test_the_model_loads_by_name_and_is_deterministic():
    import mixzoo
    from mixzoo.zoo.data import load_dataset

    model = mixzoo.load_model("example-digits-linear")
    data = load_dataset("digits", "evaluation", 200)
    with torch.no_grad():
        accuracy = (model(data.images).argmax(1) == data.labels).float().mean().item()
    assert accuracy > 0.7
    assert model.weight_hash == mixzoo.load_model("example-digits-linear").weight_hash


def test_the_dataset_loads_by_name_with_disjoint_splits():
    from mixzoo.zoo.data import load_dataset

    data = load_dataset("example-inverted-digits", "calibration", 10)
    assert torch.equal(data.images, 1.0 - load_dataset("digits", "calibration", 10).images)
    evaluation = load_dataset("example-inverted-digits", "evaluation")
    assert not set(data.indices.tolist()) & set(evaluation.indices.tolist())


def test_the_clamp_is_elementwise_and_differentiable():
    from mixzoo.core.plugins import lookup

    clamp = lookup("clamp", "example-tanh")
    x = torch.linspace(-6, 6, 25, requires_grad=True)
    y = clamp(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert y.shape == x.shape and torch.isfinite(grad).all()
    y = y.detach()
    assert abs(float(y[0])) < 1e-3 and abs(float(y[-1]) - 6) < 1e-3


def test_the_optimizer_calibrates_mixednuts(tmp_path):
    from mixzoo.methods import fit

    result = fit("mixednuts", "digits-std", "digits-pgd", options={"optimizer": "example-coarse", "n_iter": 3},
                 n_calib=200, out=tmp_path / "card.toml", cache_dir=str(tmp_path / "cache"), progress=False)
    assert "example-coarse" in (tmp_path / "card.toml").read_text()
    assert 0 < result.card.params["alpha"] <= 1


def test_the_attack_declares_only_its_option_and_runs():
    import mixzoo
    from mixzoo.core.plugins import lookup
    from mixzoo.zoo.data import load_dataset

    attack = lookup("attack", "example-fgsm")
    assert set(attack.options_spec) == {"step", "batch_size"}  # batch_size comes from the base
    data = load_dataset("digits", "evaluation", 100)
    result = attack(eps=0.1, step=0.5).run(mixzoo.load_model("digits-pgd"), data.images, data.labels,
                                           progress=False)
    assert result.robust_correct.sum() <= result.clean_correct.sum()
    assert [c.name for c in result.components] == ["fgsm"]


def test_the_method_fits_a_card_and_builds_a_classifier(tmp_path):
    import mixzoo
    from mixzoo.methods import fit

    result = fit("example-switch", "digits-std", "digits-pgd", options={"tau": 0.8}, n_calib=50,
                 out=tmp_path / "card.toml", cache_dir=str(tmp_path / "cache"), progress=False)
    assert result.card.params == {"tau": 0.8} and 0 < result.summary["calibration_clean_accuracy"] <= 1
    mixed = mixzoo.load_mixed(str(tmp_path / "card.toml"))
    out = mixed(torch.rand(4, 1, 8, 8))
    assert out.shape == (4, 10) and torch.allclose(out.exp().sum(1), torch.ones(4), atol=1e-5)


def test_the_command_prints_the_accuracy():
    from typer.testing import CliRunner

    from mixzoo.core.plugins import lookup

    accuracy_command = lookup("command", "example-accuracy")
    assert accuracy_command.__module__ == "mixzoo_plugin_example.command"
    app = typer.Typer()
    app.command("example-accuracy")(accuracy_command)
    app.command("unused")(lambda: None)  # two commands: typer keeps the command name
    result = CliRunner().invoke(app, ["example-accuracy", "digits-std", "--n", "50"])
    assert result.exit_code == 0 and "digits-std:" in result.output and "clean accuracy" in result.output
