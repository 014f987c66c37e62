"""Every bad input a one-line error, and no plugin fault spreads: the fourteen failures a user and a third-party
plugin author met, each reproduced as they met it (real plugins registered through the plugin manager, real
files, the real CLI), plus Ctrl-C and plugin isolation."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import InputError, PluginError, PluginWarning
from mixzoo.core.plugins import (
    clear_caches,
    hookimpl,
    lookup,
    plugin_failures,
    plugin_infos,
    register_plugin,
    unregister_plugin,
)
from mixzoo.core.registry import get_spec
from mixzoo.methods.linear import Linear
from mixzoo.zoo.models import load_model

DIGITS = {"dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8]}
FMNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture()
def plugin():
    names: list[str] = []

    def add(obj, name: str) -> str:
        names.append(register_plugin(obj, name=name))
        return names[-1]

    yield add
    for name in names:
        unregister_plugin(name)
    clear_caches()


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def one_error_line(result) -> str:
    """The single line a refused command prints: exit status 2, one line on stderr, no traceback."""
    lines = stderr_lines(result)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


# ------------------------------------------------------------------------------------------- third-party plugins
class ForeignLoader:
    """A (deprecated) load hook that raises for every source kind, its own included (a plugin author's bug)."""

    @hookimpl
    def mixzoo_model_specs(self):
        return [{"name": "i46-foreign-model", "role": "accurate", **DIGITS, "source": {"kind": "i46-foreign"}}]

    @hookimpl
    def mixzoo_load_model(self, spec, device, allow_unsafe):
        raise KeyError(spec.source["kind"])


class Specs:
    """Model specs of source kind ``i46`` and the loader for them: ``networks`` maps name -> nn.Module."""

    def __init__(self, networks: dict[str, nn.Module], **fields):
        self.networks, self.fields = networks, fields

    @hookimpl
    def mixzoo_model_specs(self):
        return [{"name": name, "role": "accurate", **DIGITS, "source": {"kind": "i46"}, **self.fields}
                for name in self.networks]

    @hookimpl
    def mixzoo_model_sources(self):
        return {"i46": lambda spec, device, allow_unsafe: self.networks[spec.name]}


class Clashes:
    """A third party that reuses names of the built-ins: a clamp, an attack and a model."""

    @hookimpl
    def mixzoo_clamp_functions(self):
        return {"gelu": torch.tanh, "i46-own-clamp": torch.tanh}

    @hookimpl
    def mixzoo_attacks(self):
        return {"adaptive-apgd": object}

    @hookimpl
    def mixzoo_model_specs(self):
        return [{"name": "fmnist-std", "role": "accurate", **DIGITS, "source": {"kind": "zoo"}}]


class FaultyLinear(Linear):
    """A third party's method whose fit and build raise (a bug in its code)."""

    name, title, baseline = "i46-faulty", "Faulty", False

    def fit(self, request):
        raise ValueError("fit exploded")

    def build(self, abc, rbc, card, *, gradient="exact"):
        raise RuntimeError("build exploded")


class NaNOutput(nn.Module):
    def forward(self, x):
        return torch.full((x.shape[0], 10), float("nan"))


class NaNLinear(Linear):
    """A third party's method whose mixed classifier returns NaN logits."""

    name, title, baseline = "i46-nan", "NaN mix", False

    def build(self, abc, rbc, card, *, gradient="exact"):
        return NaNOutput()


class Methods:
    def __init__(self, *methods):
        self.methods = methods

    @hookimpl
    def mixzoo_mixing_methods(self):
        return {m.name: m for m in self.methods}


class FaultyAttack:
    """A third party's attack whose run raises."""

    def __init__(self, eps, norm="Linf", seed=0, **options):
        self.eps = eps

    def run(self, model, images, labels, progress=True, index=None):
        raise ZeroDivisionError("division by zero in the attack")


class Attacks:
    @hookimpl
    def mixzoo_attacks(self):
        return {"i46-faulty-attack": FaultyAttack}


def linear_card(path: Path, alpha: float = 0.9, method: str | None = None) -> Path:
    result = run("mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O", f"alpha={alpha}",
                 "--out", str(path))
    assert result.exit_code == 0, result.output
    if method is not None:  # the same section under another method's name
        path.write_text(path.read_text().replace('method = "linear"', f'method = "{method}"')
                        .replace("[linear]", f"[{method}]"))
    return path


# ------------------------------------------------------------------------------------------------------ item 1
def test_a_load_hook_raising_for_kinds_it_does_not_own_breaks_no_other_model(plugin):
    plugin(ForeignLoader(), "i46-foreign-loader")
    assert load_model("digits-std").name == "digits-std"  # the zoo's loader is the table's: the hook is not asked
    with pytest.raises(PluginError, match="plugin 'i46-foreign-loader' failed to load model 'i46-foreign-model':"
                                          " KeyError: 'i46-foreign'"):
        load_model("i46-foreign-model")
    infos = {i.name: i.error for i in plugin_infos()}
    assert "at run time" in infos["i46-foreign-loader"] and "load model 'i46-foreign-model'" in \
        infos["i46-foreign-loader"]
    result = run("plugins", "--json")
    assert result.exit_code == 0
    shown = {p["name"]: p["error"] for p in json.loads(result.stdout)}
    assert "KeyError" in shown["i46-foreign-loader"]


@pytest.mark.subprocess
def test_plugins_shows_a_load_hook_fault_seen_in_an_earlier_process(tmp_path):
    """A real installed plugin (entry point in a dist-info on the path), two processes: the first loads a model
    (fine: the plugin's hook is not asked) and then the plugin's own model (its hook raises), the second, `mixzoo
    plugins`, shows the fault."""
    dist = tmp_path / "i46_foreign-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: i46-foreign\nVersion: 0.3\n")
    (dist / "entry_points.txt").write_text("[mixzoo]\nzz-i46-foreign = i46_foreign_mod\n")
    (tmp_path / "i46_foreign_mod.py").write_text(textwrap.dedent("""
        from mixzoo.core.plugins import hookimpl

        @hookimpl
        def mixzoo_model_specs():
            return [{"name": "i46-own", "role": "accurate", "dataset": "digits", "num_classes": 10,
                     "input_size": [1, 8, 8], "source": {"kind": "i46-own"}}]

        @hookimpl
        def mixzoo_load_model(spec, device, allow_unsafe):
            raise KeyError(spec.source["kind"])
    """))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MIXZOO_CACHE": str(tmp_path / "cache")}
    load = ("from mixzoo.zoo.models import load_model\nfrom mixzoo.core.errors import PluginError\n"
            "print(load_model('digits-std').name)\ntry:\n    load_model('i46-own')\nexcept PluginError:\n"
            "    print('refused')")
    out = subprocess.run([sys.executable, "-c", load], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["digits-std", "refused"], out.stderr
    out = subprocess.run([sys.executable, "-m", "mixzoo.cli", "plugins", "--json"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    error = {p["name"]: p["error"] for p in json.loads(out.stdout)}["zz-i46-foreign"]
    assert "at run time" in error and "load model 'i46-own'" in error and "KeyError" in error


# ------------------------------------------------------------------------------------------------------ item 2
def test_built_in_names_win_a_collision_and_both_are_named(plugin):
    from mixzoo.attacks.suites import AdaptiveAPGD

    with pytest.warns(PluginWarning) as caught:
        plugin(Clashes(), "i46-clashes")
        assert lookup("clamp", "gelu") is not torch.tanh  # the built-in gelu
        assert lookup("clamp", "i46-own-clamp") is torch.tanh  # the plugin's other names stay
        assert lookup("attack", "adaptive-apgd") is AdaptiveAPGD
        assert get_spec("fmnist-std").plugin == "registry.toml"
    said = " ".join(str(w.message) for w in caught)
    for name in ("gelu", "adaptive-apgd", "fmnist-std"):
        assert f"'{name}'" in said
    assert "i46-clashes" in said and "'clamps'" in said and "'attacks'" in said and "'registry.toml'" in said
    failure = plugin_failures()["i46-clashes"]
    assert "gelu" in failure and "adaptive-apgd" in failure and "fmnist-std" in failure
    clear_caches()
    result = run("info", "fmnist-std", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["plugin"] == "registry.toml"
    assert stderr_lines(result) == ["warning: plugin 'i46-clashes' provides model 'fmnist-std', a name of the"
                                    " built-in 'registry.toml': the built-in one is used and 'i46-clashes''s is left"
                                    " out; rename it in that plugin"]


# -------------------------------------------------------------------------------------------------- items 3, 4
def test_a_network_returning_fewer_classes_than_declared_fails_when_loaded(plugin, tmp_path):
    plugin(Specs({"i46-five": nn.Sequential(nn.Flatten(), nn.Linear(64, 5))}), "i46-five-classes")
    with pytest.raises(InputError) as err:
        load_model("i46-five")
    msg = str(err.value)
    assert "'i46-five'" in msg and "declares num_classes 10" in msg and "returns 5 logits" in msg
    card = tmp_path / "card.toml"
    line = one_error_line(run("mix", "--abc", "i46-five", "--rbc", "digits-pgd", "--out", str(card)))
    assert "declares num_classes 10" in line and not card.exists()


def test_a_network_that_cannot_take_its_declared_input_size_fails_when_loaded(plugin, tmp_path):
    plugin(Specs({"i46-rgb": nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))}), "i46-wrong-size")
    with pytest.raises(InputError) as err:
        load_model("i46-rgb")
    msg = str(err.value)
    assert "'i46-rgb'" in msg and "input_size [1, 8, 8]" in msg and "fix input_size" in msg and "\n" not in msg
    card = tmp_path / "card.toml"
    line = one_error_line(run("mix", "--abc", "i46-rgb", "--rbc", "digits-pgd", "--out", str(card)))
    assert "input_size" in line and not card.exists()


# ------------------------------------------------------------------------------------------------------ item 5
def test_attack_options_of_the_wrong_type_are_one_line_naming_option_and_type(tmp_path):
    from mixzoo.attacks.suites import AdaptiveAutoAttack, PGDAttack

    with pytest.raises(InputError, match=r"option n_iter \(-O n_iter\) of attack 'adaptive' must be an"
                                         " integer, got 2.5"):
        AdaptiveAutoAttack.check_options({"n_iter": 2.5})
    with pytest.raises(InputError, match=r"option step_size \(-O step_size\) of attack 'pgd' must be a"
                                         " finite number"):
        PGDAttack.check_options({"step_size": "big"})
    with pytest.raises(InputError, match=r"option layer_norm \(-O layer_norm\) of attack"
                                         " 'min-margin-square' must be true or false"):
        lookup("attack", "min-margin-square").check_options({"layer_norm": 3})
    out = tmp_path / "bench"
    for option, kind in (("n_iter=2.5", " must be an integer"), ("n_restarts=abc", " must be an integer"),
                         ("components=1", ": must be a list of names")):
        line = one_error_line(run("bench", "--abc", "digits-std", "--rbc", "digits-pgd", "-O", option,
                                  "--out", str(out)))
        key = option.split("=")[0]
        assert f"option {key} (-O {key}) of attack 'adaptive'{kind}" in line
    assert not out.exists()


def test_a_plugin_attack_declares_its_option_types(plugin, tmp_path):
    from mixzoo.attacks.suites import APGDEnsemble

    class Tuned(APGDEnsemble):
        name = "i46-tuned"
        defaults = {**APGDEnsemble.defaults, "temperature": None}
        option_types = {**APGDEnsemble.option_types, "temperature": float}

    class TunedPlugin:
        @hookimpl
        def mixzoo_attacks(self):
            return {"i46-tuned": Tuned}

    plugin(TunedPlugin(), "i46-tuned-attack")
    line = one_error_line(run("bench", "--abc", "digits-std", "--rbc", "digits-pgd", "--attack", "i46-tuned",
                              "-O", "temperature=warm", "--out", str(tmp_path / "b")))
    assert "option temperature (-O temperature) of attack 'i46-tuned' must be a finite number, got 'warm'" in line


# ------------------------------------------------------------------------------------------------------ item 6
def test_mix_refuses_to_overwrite_a_file_that_is_not_a_card(tmp_path):
    from mixzoo.core.card import MixCard

    project = tmp_path / "pyproject.toml"
    project.write_text('[project]\nname = "mine"\n')
    with pytest.raises(InputError, match="exists and is not a mix card; pass another --out"):
        MixCard.check_path(project)
    line = one_error_line(run("mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O",
                              "alpha=0.9", "--out", str(project)))
    assert str(project) in line and "not a mix card" in line
    assert project.read_text() == '[project]\nname = "mine"\n'
    results = tmp_path / "results.json"
    results.write_text('{"accuracy": 0.9}')
    one_error_line(run("mix", "--method", "linear", "-O", "alpha=0.9", "--out", str(results)))
    assert results.read_text() == '{"accuracy": 0.9}'
    card = linear_card(tmp_path / "card.toml")  # an existing card is replaced, as before
    linear_card(card, alpha=0.8)
    assert "alpha = 0.8" in card.read_text()


# ------------------------------------------------------------------------------------------------------ item 7
@pytest.mark.parametrize("command", [
    ["mix", "--abc", "digits-std", "--rbc", "digits-pgd"], ["bench", "--abc", "digits-std", "--rbc", "digits-pgd"],
    ["sanity", "card.toml"], ["check", "card.toml"], ["certify", "--rbc", "digits-pgd"],
    ["transfer-params", "--from", "card.toml", "--rbc", "digits-pgd"]])
def test_a_device_this_torch_cannot_use_is_one_line(command, tmp_path, monkeypatch):
    from mixzoo.zoo.pairs import check_device

    if torch.backends.mps.is_available():
        pytest.skip("this machine has an MPS device")
    with pytest.raises(InputError, match="--device mps: this PyTorch build or machine has no mps support"):
        check_device("mps")
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run(*command, "--device", "mps"))
    assert "--device mps" in line and "use --device cpu" in line
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------------ item 8
def _fmnist_copy(tmp_path: Path) -> Path:
    if not FMNIST.is_dir():
        pytest.skip("Fashion-MNIST is not installed")
    data = tmp_path / "fm"
    data.mkdir()
    for f in FMNIST.glob("*-ubyte.gz"):
        shutil.copy(f, data / f.name)
    return data


def test_a_truncated_dataset_file_names_the_file_and_the_fix(tmp_path):
    from mixzoo.zoo.data import load_dataset

    data = _fmnist_copy(tmp_path)
    for name in ("t10k-images-idx3-ubyte.gz", "train-images-idx3-ubyte.gz"):
        f = data / name
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(InputError) as err:
        load_dataset("fashion-mnist", "evaluation", n=5, root=str(data))
    assert "t10k-images-idx3-ubyte.gz" in str(err.value) and "truncated" in str(err.value)
    line = one_error_line(run("mix", "--data-dir", str(data), "--out", str(tmp_path / "card.toml")))
    assert "train-images-idx3-ubyte.gz" in line and "re-download it" in line


def test_a_dataset_file_that_is_not_gzip_names_the_file(tmp_path):
    from mixzoo.zoo.data import load_dataset

    data = _fmnist_copy(tmp_path)
    (data / "t10k-labels-idx1-ubyte.gz").write_bytes(b"garbage, not gzip")
    with pytest.raises(InputError) as err:
        load_dataset("fashion-mnist", "evaluation", n=5, root=str(data))
    assert "t10k-labels-idx1-ubyte.gz" in str(err.value) and "not a valid gzip file" in str(err.value)
    assert gzip.decompress(gzip.compress(b"ok")) == b"ok"


# ------------------------------------------------------------------------------------------- items 9, 11, 13
@pytest.fixture(scope="module")
def bench_twins(tmp_path_factory):
    """Two linear cards with the same file stem in two folders, benched together at L-inf eps 1 (every image
    reachable), without figures or saved points."""
    root = tmp_path_factory.mktemp("twins")
    os.environ["MIXZOO_CACHE"] = str(root / "cache")
    try:
        a = linear_card((root / "run1").joinpath("card.toml"), alpha=0.9)
        b = linear_card((root / "run2").joinpath("card.toml"), alpha=0.8)
        out = root / "bench"
        result = run("bench", str(a), str(b), "--attack", "apgd", "-O", "n_iter=2", "--n", "12", "--eps", "1",
                     "--no-curve", "--no-plots", "--no-baseline", "--no-extra-attacks", "--out", str(out))
    finally:
        os.environ.pop("MIXZOO_CACHE", None)
    assert result.exit_code == 0, result.output
    return result, json.loads((out / "report.json").read_text()), out


def test_two_cards_with_one_file_stem_get_distinct_rows(bench_twins):
    result, report, _ = bench_twins
    names = [m["name"] for m in report["models"] if m["kind"] not in ("abc", "rbc")]
    assert len(set(names)) == 2 and any("run1/card" in n for n in names) and any("run2/card" in n for n in names)
    assert all(c["a"] != c["b"] for c in report["comparisons"])


def test_an_eps_that_reaches_every_image_is_said(bench_twins):
    result, report, _ = bench_twins
    warned = [line for line in stderr_lines(result) if line.startswith("warning: eps 1 (Linf)")]
    assert warned and "every image lies in every example's ball" in warned[0]
    assert any("every image lies in every example's ball" in n for n in report["notes"])


def test_a_report_without_figures_lists_its_files_in_plain_words(bench_twins):
    result, _, out = bench_twins
    assert f"report written to {out}/report.json and report.md\n" in result.stdout
    assert "and \n" not in result.stdout


# ----------------------------------------------------------------------------------------------------- item 10
def test_a_third_party_methods_fit_and_build_errors_are_one_line_naming_the_plugin(plugin, tmp_path):
    plugin(Methods(FaultyLinear()), "i46-faulty-plugin")
    card = tmp_path / "card.toml"
    line = one_error_line(run("mix", "--method", "i46-faulty", "--abc", "digits-std", "--rbc", "digits-pgd",
                              "-O", "alpha=0.9", "--out", str(card)))
    assert "plugin 'i46-faulty-plugin' failed to fit mixing method 'i46-faulty': ValueError: fit exploded" in line
    assert not card.exists()
    faulty = linear_card(tmp_path / "faulty.toml", method="i46-faulty")
    line = one_error_line(run("bench", str(faulty), "--attack", "apgd", "-O", "n_iter=2", "--n", "4", "--no-curve",
                              "--no-plots", "--out", str(tmp_path / "bench")))
    assert "plugin 'i46-faulty-plugin' failed to build mixing method 'i46-faulty': RuntimeError: build" in line
    assert not (tmp_path / "bench" / "report.json").exists()
    assert "fit exploded" in {i.name: i.error for i in plugin_infos()}["i46-faulty-plugin"]


def test_a_third_party_attacks_errors_are_one_line_naming_the_plugin(plugin, tmp_path):
    plugin(Attacks(), "i46-attack-plugin")
    card = linear_card(tmp_path / "card.toml")
    line = one_error_line(run("bench", str(card), "--attack", "i46-faulty-attack", "--n", "4", "--no-curve",
                              "--no-plots", "--no-baseline", "--no-cache", "--json", "--out", str(tmp_path / "bench")))
    assert "plugin 'i46-attack-plugin' failed to run attack 'i46-faulty-attack': ZeroDivisionError" in line


def test_a_third_party_dataset_error_is_one_line_naming_the_plugin(plugin):
    from mixzoo.zoo.data import load_dataset

    class Broken:
        @hookimpl
        def mixzoo_datasets(self):
            def tiny(split, n=None, root=None):
                return [][0]
            return {"i46-tiny": tiny}

    plugin(Broken(), "i46-dataset-plugin")
    with pytest.raises(PluginError, match="plugin 'i46-dataset-plugin' failed to run dataset 'i46-tiny': IndexError"):
        load_dataset("i46-tiny", "evaluation", n=3)


# ----------------------------------------------------------------------------------------------------- item 12
def test_an_altered_weight_file_of_a_trained_card_names_the_fix(tmp_path):
    from mixzoo.core.card import MixCard

    src = Path(__file__).parents[2] / "plugins" / "cards"
    for f in src.glob("fmnist-adaptive-smoothing-a.*"):
        shutil.copy(f, tmp_path / f.name)
    weights = tmp_path / "fmnist-adaptive-smoothing-a.mixing-network.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0")
    card = MixCard.load(tmp_path / "fmnist-adaptive-smoothing-a.toml")
    with pytest.raises(InputError) as err:
        card.weight_file(weights.name)
    msg = str(err.value)
    assert "does not belong to this card" in msg and "fit the card again with `mixzoo mix`" in msg
    line = one_error_line(run("bench", str(tmp_path / "fmnist-adaptive-smoothing-a.toml"), "--n", "4",
                              "--no-curve", "--no-plots", "--out", str(tmp_path / "bench")))
    assert weights.name in line and "restore the file" in line


# ----------------------------------------------------------------------------------------------------- item 14
def test_nan_logits_in_bench_name_the_model(plugin, tmp_path):
    plugin(Methods(NaNLinear()), "i46-nan-plugin")
    card = linear_card(tmp_path / "nan.toml", method="i46-nan")
    line = one_error_line(run("bench", str(card), "--attack", "apgd", "-O", "n_iter=2", "--n", "4", "--no-curve",
                              "--no-plots", "--no-baseline", "--no-cache", "--json", "--out", str(tmp_path / "bench")))
    assert "model 'NaN mix' returned NaN logits for 4 examples on the clean images" in line


# ------------------------------------------------------------------------------------------------------ Ctrl-C
@pytest.mark.subprocess
def test_ctrl_c_says_that_a_rerun_resumes_from_the_cache(tmp_path):
    """A real SIGINT to a running `mixzoo bench`, once its first batch is in the cache."""
    env = {**os.environ, "MIXZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    os.environ["MIXZOO_CACHE"] = env["MIXZOO_CACHE"]
    try:
        card = linear_card(tmp_path / "card.toml")
    finally:
        os.environ.pop("MIXZOO_CACHE", None)
    cmd = [sys.executable, "-m", "mixzoo.cli", "bench", str(card), "--attack", "apgd", "-O", "n_iter=3000",
           "--n", "200", "--batch-size", "10", "--no-curve", "--no-plots", "--no-baseline", "--out",
           str(tmp_path / "bench")]
    # as at a terminal: a runner that started the tests in the background (SIGINT ignored, inherited by children)
    # must not make the command deaf to the Ctrl-C under test
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not list((tmp_path / "cache").glob("bench/*.partial/*.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in stderr.splitlines() if line.strip() and "━" not in line]
    assert proc.returncode == 130, stderr
    assert lines[-1] == "interrupted; finished work is in the cache: run the same command again to resume from it"
    assert "Traceback" not in stderr and not (tmp_path / "bench" / "report.json").exists()


def test_a_list_of_numbers_option_takes_numbers_and_refuses_names():
    """An option of type ``numbers`` (a sweep, e.g. the gate attack's ``mus``) takes numbers, one or several, and
    refuses names, NaN and booleans in one line naming the option; one of type ``names`` refuses numbers. A legacy
    ``defaults`` table whose default is a list of numbers / names gets those types."""
    from mixzoo.core.options import names, numbers, specs_from_defaults

    specs = specs_from_defaults({"mus": [0.0, 0.3], "components": ["square"]})
    assert specs["mus"].type is numbers and specs["components"].type is names
    assert specs["mus"].convert("mus", [0.0, 0.1], "attack 'x'") == [0.0, 0.1]
    assert specs["mus"].convert("mus", 0.1, "attack 'x'") == [0.1]
    assert specs["mus"].convert("mus", "0, 0.1", "attack 'x'") == [0, 0.1]
    assert specs["components"].convert("components", "a, b", "attack 'x'") == ["a", "b"]
    for bad in (["a"], [0.1, float("nan")], [True], "x"):
        with pytest.raises(InputError, match=r"^option mus \(-O mus\) of attack 'x': must be a comma-separated list"
                                             " of numbers"):
            specs["mus"].convert("mus", bad, "attack 'x'", flag="-O mus")
    with pytest.raises(InputError, match="list of names"):
        specs["components"].convert("components", [1, 2], "attack 'x'")
