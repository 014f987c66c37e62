"""``benchmarks/attack_overhead.py`` keeps its figure honest: the networks' own time replays exactly the calls the
attack made, through the same functions, and the reported overhead is recomputable from the raw times (no timed
assertion: the machine is shared)."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import torch
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("attack_overhead", ROOT / "benchmarks/attack_overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 16 * 16, 10))


def test_the_networks_time_replays_the_attacks_own_calls_and_the_figure_recomputes(tmp_path):
    script = load_script()
    out = script.measure(n=3, size=16, n_iter=3, reps=2, model=tiny())
    calls = [tuple(c) for c in out["calls"]]
    assert out["calls_equal"] and [tuple(c) for c in out["replay_calls"]] == calls
    # APGD-CE: the start and one pass per iteration with autograd on all 3 images (nothing breaks at eps 1e-4);
    # the clean pass and the float32 judgement without
    assert calls.count((3, True)) == 3 + 1 and out["robust"] == 3
    assert sum(1 for _, grad in calls if not grad) >= 2
    path = tmp_path / "o.json"
    path.write_text(json.dumps(out))
    back = json.loads(path.read_text())
    attack, inside, replayed = back["attack_seconds"], back["network_seconds_inside_attack"], \
        back["network_seconds_replay"]
    assert len(attack) == len(inside) == len(replayed) == back["reps"] == 2
    assert all(0 < i < a for i, a in zip(inside, attack, strict=True))  # the network's time is part of the attack's
    assert back["overhead"] == (sum(attack) - sum(inside)) / sum(inside)
    a, b = statistics.median(attack), statistics.median(replayed)
    assert back["median_attack_s"] == a and back["median_network_replay_s"] == b
    assert back["overhead_vs_replay"] == (a - b) / b
    assert back["machine"] and back["target"] == 0.10


def test_the_network_time_inside_the_attack_counts_every_step_and_every_no_grad_call():
    script = load_script()
    rec = script.Recorder(tiny().requires_grad_(False))
    x, y = torch.rand(2, 3, 16, 16), torch.tensor([1, 2])
    with script.timed_steps("cpu") as steps:
        from mixzoo.attacks import apgd

        apgd.apgd_ce(rec, x, y, ApgdSettings(eps=1e-4, n_iter=3, seed=0), index=torch.arange(2))
    assert len(steps) == 3 + 1  # the start and every iteration
    assert len(rec.seconds) == sum(1 for _, grad in rec.log if not grad) == 1  # the clean record's pass
    from mixzoo.attacks import apgd as restored

    assert restored._loss_and_grad is script._loss_and_grad  # put back after the block


def test_the_replay_makes_the_attacks_step_forward_loss_and_input_gradient():
    script = load_script()
    rec = script.Recorder(tiny().requires_grad_(False))
    x, y = torch.rand(2, 3, 16, 16), torch.tensor([1, 2])
    script.replay(rec, [(2, True), (1, False)], x, y)
    assert rec.log == [(2, True), (1, False)]
