"""CUDA paths of the main job: mix, bench (curve and plots included) and logits with models on the GPU.

CI has no GPU, so these run only where ``torch.cuda.is_available()`` (the lent GPU machine; see
``benchmarks/pipeline_speed.md`` for the run). ``test_model_device`` runs everywhere.
"""

from __future__ import annotations

import json

import pytest
import torch

from mixzoo.evaluation.bench import CurveSettings, MatchSettings
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.zoo.pairs import cached_logits, model_device

cuda = pytest.mark.gpu  # skipped where torch.cuda.is_available() is false (tests/conftest.py)
FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)


def test_model_device():
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(torch.nn.ReLU(), "meta") == torch.device("meta")  # no parameters: the fallback
    bn = torch.nn.BatchNorm1d(3, affine=False)  # buffers only
    assert model_device(bn.to("meta")) == torch.device("meta")


def test_bad_device_is_a_one_line_error(tmp_path):
    from mixzoo.core.errors import InputError

    with pytest.raises(InputError, match="not a torch device"):
        mix("digits-std", "digits-pgd", out=tmp_path / "c.toml", cache_dir=tmp_path, device="gpu", **FAST)
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no usable CUDA device; use --device cpu"):
            mix("digits-std", "digits-pgd", out=tmp_path / "c.toml", cache_dir=tmp_path, device="cuda", **FAST)
    assert not (tmp_path / "c.toml").exists()


def test_cuda_index_past_the_last_device_is_a_one_line_error(tmp_path, monkeypatch):
    """Where CUDA is usable, cuda:N with N >= the device count must fail up front, not inside the first kernel."""
    from mixzoo.core.errors import InputError
    from mixzoo.zoo.pairs import check_device

    if not torch.cuda.is_available():  # the check after "is CUDA usable" is what this test is for
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    count = torch.cuda.device_count()
    assert check_device(f"cuda:{count - 1}") == torch.device(f"cuda:{count - 1}")
    assert check_device("cuda") == torch.device("cuda")
    with pytest.raises(InputError, match=f"has {count} CUDA device\\(s\\), cuda:0 to cuda:{count - 1}"):
        check_device(f"cuda:{count}")
    with pytest.raises(InputError, match="no usable CUDA|CUDA device"):
        mix("digits-std", "digits-pgd", out=tmp_path / "c.toml", cache_dir=tmp_path, device=f"cuda:{count + 3}",
            **FAST)
    assert not (tmp_path / "c.toml").exists()


@cuda
def test_logits_follow_the_model_not_the_device_argument(tmp_path):
    from mixzoo.core.cache import Cache
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    data = load_dataset("digits", "evaluation", n=50)
    gpu = cached_logits(load_model("digits-pgd", device="cuda"), data, cache=Cache(tmp_path / "g"), device="cpu",
                        progress=False)
    cpu = cached_logits(load_model("digits-pgd"), data, cache=Cache(tmp_path / "c"), progress=False)
    assert gpu.device.type == "cpu"
    torch.testing.assert_close(gpu, cpu, atol=1e-4, rtol=1e-4)


@cuda
def test_mix_and_bench_on_cuda_match_cpu(tmp_path):
    from mixzoo.evaluation.bench import bench

    runs = {}
    for device in ("cpu", "cuda"):
        card = tmp_path / f"card-{device}.toml"
        mix("digits-std", "digits-pgd", out=card, cache_dir=tmp_path / device, device=device, **FAST)
        runs[device] = bench(card, attack="apgd", n=60, out=tmp_path / f"bench-{device}", cache_dir=tmp_path / device,
             attack_options={"n_iter": 5, "n_target_classes": 2},
             curve=CurveSettings(n=30, options={"n_iter": 3, "n_target_classes": 1}),
             baseline=MatchSettings(options={"n_iter": 3, "n_target_classes": 1}), batch_size=30, device=device,
             progress=False)
    data = json.loads((tmp_path / "bench-cuda" / "report.json").read_text())
    assert data["settings"]["device"] == "cuda"
    for name in ("report.md", "tradeoff.png", "margins.png", "objective.png"):
        assert (tmp_path / "bench-cuda" / name).stat().st_size > 0
    for kind in ("abc", "rbc", "linear", "mixednuts"):
        cpu, gpu = runs["cpu"].row(kind), runs["cuda"].row(kind)
        # float order differs between devices: allow two of 60 examples to flip
        assert abs(cpu.clean_accuracy - gpu.clean_accuracy) <= 2 / 60 + 1e-9
        assert abs(cpu.robust_accuracy - gpu.robust_accuracy) <= 2 / 60 + 1e-9
