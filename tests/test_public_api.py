"""The public surface changes only as CHANGELOG.md records, and moved names keep working with a warning.

``tests/public_api.py`` flattens the surface that ``mixzoo/core/surface.py`` declares into ``tests/api_snapshot.json``
(``python tests/public_api.py --update`` refreshes it); here the live surface is compared with it, and every
difference must be named in the "## Unreleased" section of CHANGELOG.md.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings

import pytest
from public_api import CHANGELOG, SNAPSHOT, differences, live_surface, mentioned, unrecorded, unreleased

import mixzoo


def test_every_change_of_the_public_surface_is_in_the_changelog():
    old = json.loads(SNAPSHOT.read_text())
    missing = unrecorded(old, live_surface(), CHANGELOG.read_text())
    assert not missing, ("public names changed without a CHANGELOG.md entry (name each in backticks under"
                         " '## Unreleased', then run `python tests/public_api.py --update`):\n"
                         + "\n".join(f"{k}: {v}" for k, v in missing.items()))


def test_the_check_sees_a_removed_an_added_and_a_changed_name():
    """The comparison can fail: a signature change, a removal and an addition are each reported until the
    Unreleased section names them (a mention under an older version does not count)."""
    old = {"mixzoo.methods.MixingMethod.fit": "def(self, request)", "mixzoo.hookimpl": "value 1",
           "mixzoo.core.card.SCHEMA_VERSION": "value 2"}
    new = {"mixzoo.methods.MixingMethod.fit": "def(self, request, extra)", "mixzoo.core.card.SCHEMA_VERSION":
           "value 2", "mixzoo.methods.fit_all": "def()"}
    assert differences(old, new) == {"mixzoo.hookimpl": "removed", "mixzoo.methods.MixingMethod.fit":
                                     "changed: def(self, request) -> def(self, request, extra)",
                                     "mixzoo.methods.fit_all": "added"}
    log = "# Changelog\n\n## Unreleased\n\n- nothing\n\n## 0.1.0\n\n- `MixingMethod.fit`, `mixzoo.hookimpl`\n"
    assert set(unrecorded(old, new, log)) == {"mixzoo.hookimpl", "mixzoo.methods.MixingMethod.fit",
                                              "mixzoo.methods.fit_all"}
    log = log.replace("- nothing", "- `MixingMethod.fit(request, extra)`; `mixzoo.hookimpl` moved; `methods.fit_all`")
    assert unrecorded(old, new, log) == {}
    assert not mentioned("mixzoo.methods.MixingMethod.fit", "`fit`")  # one part is too vague to count
    assert "0.1.0" not in unreleased(log)


def test_the_snapshot_covers_the_declared_surface():
    surface = live_surface()
    for name in ("mixzoo.hookimpl", "mixzoo.load_mixed", "mixzoo.methods.MixingMethod.fit",
                 "mixzoo.methods.MethodOption.default", "mixzoo.attacks.Attack.components",
                 "mixzoo.attacks.Component.fn", "mixzoo.core.hookspecs.mixzoo_load_model",
                 "mixzoo.core.card.SCHEMA_VERSION", "mixzoo.core.card.MixCard.params",
                 "mixzoo.evaluation.bench.Report.models", "mixzoo.evaluation.bench.ModelResult.robust_accuracy",
                 "mixzoo.plugins"):
        assert name in surface, name
    assert surface["mixzoo.core.hookspecs.mixzoo_load_model"].endswith("firstresult")
    assert set(json.loads(SNAPSHOT.read_text())) == set(surface)


def test_the_top_level_names_are_the_declared_ones():
    from mixzoo.deprecated.modules import TOP_LEVEL

    assert TOP_LEVEL == set(mixzoo._PUBLIC) - {"calibrate"}
    assert set(mixzoo.__all__) == {*mixzoo._PUBLIC, "__version__"}


# --------------------------------------------------------------------------------------------- deprecation shims
def test_mixzoo_plugins_hookimpl_comes_back_with_a_warning_naming_the_new_place():
    with pytest.warns(DeprecationWarning, match=r"mixzoo\.plugins\.hookimpl is deprecated .* use mixzoo\.hookimpl"):
        from mixzoo.plugins import hookimpl
    assert hookimpl is mixzoo.hookimpl
    with pytest.warns(DeprecationWarning, match=r"use mixzoo\.core\.plugins\.register_plugin"):
        from mixzoo.plugins import register_plugin
    from mixzoo.core.plugins import register_plugin as current

    assert register_plugin is current


@pytest.mark.parametrize(("old", "name", "new"), [
    ("mixzoo.errors", "MissingFileError", "mixzoo.core.errors.MissingFileError"),
    ("mixzoo.hookspecs", "mixzoo_load_model", "mixzoo.core.hookspecs.mixzoo_load_model"),
    ("mixzoo.card", "provenance", "mixzoo.core.card.provenance"),
    ("mixzoo.data", "load_dataset", "mixzoo.zoo.data.load_dataset"),
    ("mixzoo.models", "BaseClassifier", "mixzoo.BaseClassifier"),
    ("mixzoo.pipeline", "model_key", "mixzoo.zoo.pairs.model_key"),
    ("mixzoo.pipeline", "prepare_pair", "mixzoo.zoo.pairs.prepare_pair"),
    ("mixzoo.bench", "bench", "mixzoo.evaluation.bench.bench"),
    ("mixzoo.bench", "evaluate", "mixzoo.attacks.runner.evaluate"),
    ("mixzoo.bench", "load_card", "mixzoo.evaluation.loading.load_card"),
    ("mixzoo.bench", "matched_linear_alpha", "mixzoo.evaluation.matching.matched_linear_alpha"),
    ("mixzoo.train", "train_model", "mixzoo.training.train.train_model"),
    ("mixzoo.train", "mart_loss", "mixzoo.training.objectives.mart_loss"),
    ("mixzoo.train", "get_recipe", "mixzoo.training.recipes.get_recipe"),
    ("mixzoo.train", "evaluate_model", "mixzoo.training.model_metrics.evaluate_model"),
    ("mixzoo.train", "save_weights", "mixzoo.training.weights.save_weights"),
])
def test_old_module_names_answer_with_the_current_object(old, name, new):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated and will be removed in mixzoo 0\.3;"
                                                rf" use {new}$"):
        value = getattr(module, name)
    home, _, attr = new.rpartition(".")
    assert value is getattr(importlib.import_module(home), attr)


def test_an_unknown_name_of_an_old_module_is_an_attribute_error_naming_the_new_module():
    import mixzoo.errors

    with pytest.raises(AttributeError, match="moved to 'mixzoo.core.errors'"), warnings.catch_warnings():
        warnings.simplefilter("error")
        mixzoo.errors.NoSuchError  # noqa: B018
    with pytest.raises(AttributeError), warnings.catch_warnings():  # private names were never public
        warnings.simplefilter("error")
        mixzoo.errors._debug  # noqa: B018


@pytest.mark.subprocess
def test_import_mixzoo_imports_nothing_for_the_shims_and_calibrate_stays_callable():
    """The finder costs ``import mixzoo`` nothing (itself and its table of moved names, no shim); importing the old
    module ``mixzoo.calibrate`` (which rebinds ``mixzoo.calibrate``) leaves ``mixzoo.calibrate(...)`` working as the
    function."""
    code = ("import sys, mixzoo\nassert not any(m.startswith('mixzoo.') and m != 'mixzoo.core' and"
            " not m.startswith('mixzoo.core.') and m not in ('mixzoo.deprecated', 'mixzoo.deprecated.modules')"
            " for m in sys.modules), sorted(sys.modules)\n"
            "assert 'torch' not in sys.modules\n"
            "import warnings\nwarnings.simplefilter('error')\n"
            "from mixzoo.methods.mixednuts.calibrate import calibrate\n"
            "try:\n    from mixzoo.calibrate import grid_search\nexcept DeprecationWarning as w:\n    print(w)\n"
            "warnings.simplefilter('ignore')\nfrom mixzoo.calibrate import grid_search\n"
            "import inspect\nassert callable(mixzoo.calibrate)\n"
            "try:\n    mixzoo.calibrate(clean_logits=None, clean_labels=None, attacked_logits=None,"
            " attacked_labels=None, no_such_argument=1)\nexcept TypeError as e:\n    print('TypeError', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mixzoo.calibrate.grid_search is deprecated" in proc.stdout
    assert "TypeError calibrate() got an unexpected keyword argument 'no_such_argument'" in proc.stdout


def test_a_plain_object_method_is_adapted_with_a_warning():
    from mixzoo.deprecated.methods import adapt_method
    from mixzoo.methods import MixingMethod
    from mixzoo.methods.base import LegacyMethod

    class Plain:
        name = "plain-method"
        options = {"tau": "a threshold"}

        def validate(self, params, source):
            return params

        def build(self, abc, rbc, card, *, gradient="exact"):
            return abc

        def fit(self, request):
            return None

        def check_options(self, options):
            return None

    with pytest.warns(DeprecationWarning, match="'plain-method' of plugin 'p' does not subclass"
                                                " mixzoo.methods.MixingMethod"):
        method = adapt_method(Plain(), "p")
    assert isinstance(method, LegacyMethod) and isinstance(method, MixingMethod)
    assert method.check_options({"tau": 0.5}) == {"tau": 0.5} and method.extra_attacks(None) == []
    assert method.gradients(None) == ("exact",) and method.name == "plain-method"
    current = LegacyMethod.__mro__[1]()
    assert adapt_method(current, "p") is current
