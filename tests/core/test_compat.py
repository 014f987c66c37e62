"""mixzoo.core.compat: robustbench, timm and AutoAttack import and work together, in fresh interpreters.

Each check runs in a subprocess so that ``sys.modules`` starts clean (the quirks are about import order), with the
Hugging Face hub offline and pointed at a cache built here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from mixzoo.core.compat import import_autoattack, import_timm
from mixzoo.zoo.models import weight_hash

REV = "fedcba9876543210fedcba9876543210fedcba98"


def run_fresh(code: str, env: dict[str, str] | None = None, timeout: int = 240) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON line last, which is returned."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
def test_robustbench_through_compat_gets_pyautoattack_in_a_fresh_process():
    out = run_fresh("""
        import json, sys
        assert "autoattack" not in sys.modules and "robustbench" not in sys.modules
        from mixzoo.core.compat import import_robustbench
        rb = import_robustbench()
        import autoattack
        from autoattack.state import EvaluationState
        from robustbench.eval import benchmark
        print(json.dumps({"autoattack": autoattack.__name__, "state": EvaluationState.__module__,
                          "has_aa": hasattr(autoattack, "AutoAttack"), "rb": rb.__name__,
                          "load_model": callable(rb.load_model)}))
    """)
    assert out == {"autoattack": "pyautoattack", "state": "pyautoattack.state", "has_aa": True, "rb": "robustbench",
                   "load_model": True}


@pytest.mark.subprocess
def test_importing_timm_and_robustbench_prints_no_warnings_a_user_cannot_act_on():
    """torch's FutureWarning about timm's ``torch.jit.interface`` and pkg_resources' deprecation UserWarning used to
    print above every command that loads a hub or RobustBench model; both are silenced for those imports only."""
    out = run_fresh("""
        import json, warnings
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", UserWarning)
        from mixzoo.core.compat import import_robustbench
        rb = import_robustbench()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("still shown", FutureWarning)  # the filters are restored after the imports
        print(json.dumps({"rb": rb.__name__, "after": [str(w.message) for w in caught]}))
    """)
    assert out == {"rb": "robustbench", "after": ["still shown"]}


def test_import_autoattack_is_idempotent():
    first, second = import_autoattack(), import_autoattack()
    assert first is second and hasattr(first, "AutoAttack")
    assert sys.modules["autoattack"] is first


def test_timm_hub_integration_is_on_after_import_timm():
    import_timm()
    import huggingface_hub
    from timm.models import _hub

    assert _hub.has_hf_hub(necessary=True)
    assert callable(huggingface_hub.repo_type_and_id_from_hf_id)


def _write_hub_cache(cache: Path) -> dict[str, torch.Tensor]:
    """A timm hub repo (random convnextv2_atto, 10 classes) in the standard cache layout; returns its weights."""
    import timm
    from timm.models._hub import save_for_hf

    import_timm()
    torch.manual_seed(0)
    model = timm.create_model("convnextv2_atto.fcmae_ft_in1k", pretrained=False, num_classes=10)
    root = cache / "models--timm--convnextv2_atto.fcmae_ft_in1k"
    save_for_hf(model, root / "snapshots" / REV, safe_serialization=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(REV)
    return model.state_dict()


@pytest.mark.subprocess
def test_timm_own_hf_hub_path_works_offline_in_a_fresh_process(tmp_path):
    """timm 1.0.9 turns a broken huggingface_hub import into 'Hugging Face hub model specified but package not
    installed'; through mixzoo.core.compat, timm's own ``create_model('hf-hub:...', pretrained=True)`` must load the
    cached weights with HF_HUB_OFFLINE=1 and HF_HUB_CACHE set before import."""
    weights = _write_hub_cache(tmp_path / "hf")
    out = run_fresh("""
        import json
        from mixzoo.core.compat import import_timm
        timm = import_timm()
        from mixzoo.zoo.models import weight_hash
        m = timm.create_model("hf-hub:timm/convnextv2_atto.fcmae_ft_in1k", pretrained=True)
        print(json.dumps({"hash": weight_hash(m), "classes": m.num_classes}))
    """, env={"HF_HUB_CACHE": str(tmp_path / "hf")})
    assert out == {"hash": _hash_of(weights), "classes": 10}


def _hash_of(state_dict: dict[str, torch.Tensor]) -> str:
    """weight_hash of a module whose state dict is exactly ``state_dict`` (same keys, same order)."""

    class Holder(torch.nn.Module):
        def state_dict(self, *args, **kwargs):  # noqa: ARG002 - mirrors nn.Module.state_dict
            return state_dict

    return weight_hash(Holder())


@pytest.mark.subprocess
def test_mixzoo_loads_hf_hub_name_with_env_offline_in_a_fresh_process(tmp_path):
    """The environment route (not monkeypatched constants): HF_HUB_OFFLINE=1 and HF_HUB_CACHE before import;
    also a name absent from the cache gives MissingFileError in that process."""
    weights = _write_hub_cache(tmp_path / "hf")
    out = run_fresh("""
        import json, mixzoo
        from mixzoo.core.errors import MissingFileError
        m = mixzoo.load_model("hf-hub:timm/convnextv2_atto.fcmae_ft_in1k")
        try:
            mixzoo.load_model("hf-hub:timm/convnextv2_femto.fcmae_ft_in1k")
            missing = ""
        except MissingFileError as exc:
            missing = str(exc)
        print(json.dumps({"hash": m.weight_hash, "missing": missing, "size": list(m.spec.input_size)}))
    """, env={"HF_HUB_CACHE": str(tmp_path / "hf")})
    assert out["hash"] == _hash_of(weights)
    assert out["size"] == [3, 224, 224]
    assert "convnextv2_femto" in out["missing"] and str(tmp_path / "hf") in out["missing"]


def test_hub_name_timm_imports_parses_repo_ids():
    import_timm()
    import huggingface_hub

    fn = huggingface_hub.repo_type_and_id_from_hf_id
    assert fn("timm/convnextv2_atto.fcmae_ft_in1k")[1:] == ("timm", "convnextv2_atto.fcmae_ft_in1k")


# ------------------------------------------------------------------------------------------------ compat
class _FakeAutoAttack:
    """Stands in for pyautoattack.AutoAttack: records its arguments, returns (x_adv, y_adv)."""

    def __init__(self, model, **kwargs):
        self.model, self.kwargs = model, kwargs

    def run_standard_evaluation(self, x, y, **kwargs):
        self.run_kwargs = kwargs
        return x + 1, y + 1


def test_reference_api_maps_the_reference_call():
    from mixzoo.core.compat import _reference_api

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
    from mixzoo.core.compat import import_autoattack

    monkeypatch.setitem(sys.modules, "autoattack", types.ModuleType("autoattack"))  # e.g. an unrelated package
    mod = import_autoattack()
    assert hasattr(mod, "AutoAttack")
