"""How many of a request's examples the cache holds (mixzoo.attacks.runner.cached_examples): what a plan counts as
free. The same files evaluate reads: the finished outcome, or the batches an interrupted run saved."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mixzoo.attacks.runner as runner
from mixzoo.attacks.runner import cached_examples, cached_outcome, evaluate
from mixzoo.core.cache import Cache
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest

N = 12


def case(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 5)).eval()
    images = torch.rand(N, 1, 4, 4)
    labels = model(images).argmax(1)
    record = RunRecord(attack="apgd", eps=0.05, norm="Linf", seed=0, batch_size=5,
                       attack_options={"n_iter": 3, "n_target_classes": 1})
    request = EvalRequest(record, Cache(tmp_path / "cache"), key_parts={"test": "cached"}, label="tiny",
                          progress=False)
    return model, images, labels, request


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) if root.exists() else []


def test_nothing_then_every_example_once_evaluated_and_nothing_written(tmp_path):
    model, images, labels, request = case(tmp_path)
    assert cached_examples(request, N) == 0 and cached_outcome(request, N) is None
    assert _files(tmp_path / "cache") == []  # looking writes nothing
    ev = evaluate(model, images, labels, request)
    before = _files(tmp_path / "cache")
    assert cached_examples(request, N) == N
    hit = cached_outcome(request, N)
    assert hit["cached"] and hit["robust_correct"] == ev["robust_correct"]
    assert _files(tmp_path / "cache") == before
    # another eps is another key; a request that keeps the adversarial points needs them next to the outcome
    assert cached_examples(request.replace(eps=0.1), N) == 0
    assert cached_examples(request.replace(save_adversarial=True), N) == 0
    assert cached_examples(request.replace(cache=Cache(tmp_path / "cache", enabled=False)), N) == 0


def test_an_interrupted_run_counts_its_saved_batches(tmp_path, monkeypatch):
    model, images, labels, request = case(tmp_path)
    real, calls = runner._attack_batch, []

    def stop_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "_attack_batch", stop_at_second)
    with pytest.raises(KeyboardInterrupt):
        evaluate(model, images, labels, request)
    assert cached_examples(request, N) == 5  # the first batch of 5
    assert cached_outcome(request, N) is None  # not the whole evaluation
    monkeypatch.setattr(runner, "_attack_batch", real)
    evaluate(model, images, labels, request)
    assert cached_examples(request, N) == N
