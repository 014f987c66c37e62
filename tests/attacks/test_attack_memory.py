"""Attack memory: APGD-T's stacked targets in chunks of at most ``stack_rows`` rows (same outcome per example as
all at once and as one target after another), and ``--batch-size auto``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings, apgd_t
from mixzoo.attacks.memory import (
    CPU_BATCH,
    auto_batch_size,
    parse_batch_size,
    rows_that_fit,
    step_bytes_per_image,
)
from mixzoo.core.errors import InputError


class Rows(nn.Module):
    """A small conv net (10 classes) recording the rows of every forward pass."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 8 * 8, 10))
        self.rows: list[int] = []
        self.requires_grad_(False).eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows.append(x.shape[0])
        return self.net(x)


def data(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        return x, Rows()(x).argmax(1)


@pytest.mark.parametrize("stack_rows", [1, 12, 13])
def test_chunked_stacking_caps_the_rows_and_keeps_every_outcome(stack_rows):
    x, y = data()
    cfg = ApgdSettings(eps=0.01, norm="Linf", n_iter=8, n_target_classes=5, seed=0, early_stop=True)
    index = torch.arange(6)
    sequential = apgd_t(Rows(), x, y, cfg, index=index, stack=False)
    full_model = Rows()
    full = apgd_t(full_model, x, y, cfg, index=index, stack=True)
    model = Rows()
    chunked = apgd_t(model, x, y, cfg, index=index, stack=True, stack_rows=stack_rows)
    assert torch.equal(chunked.misclassified, full.misclassified)
    assert torch.equal(chunked.misclassified, sequential.misclassified)
    assert 0 < int(full.misclassified.sum()) < 6  # some break, some do not: the comparison means something
    assert max(full_model.rows) == 30  # 5 targets x 6 examples at once
    # at least one run per chunk: 6 rows when a single run's rows exceed the cap
    assert max(model.rows[1:]) <= max(stack_rows, 6)


def test_parse_batch_size():
    assert parse_batch_size("auto") == "auto" and parse_batch_size("AUTO") == "auto"
    assert parse_batch_size("64") == 64 and parse_batch_size(8) == 8
    for bad in ("0", "-3", "big", "2.5", None):
        with pytest.raises(InputError, match=r"^--batch-size must be positive \(a number of images\) or 'auto'"):
            parse_batch_size(bad)


def test_rows_that_fit_from_free_memory():
    gib = 2 ** 30
    assert rows_that_fit(100 * gib, gib / 2) == 160  # 80 % of 100 GiB at 0.5 GiB a row
    assert rows_that_fit(100 * gib, gib / 2, at_most=16) == 16
    assert rows_that_fit(gib, 2 * gib) == 1  # always at least one row


def test_auto_batch_size_on_the_cpu_is_the_fixed_default():
    x, y = data(3)
    assert step_bytes_per_image(Rows(), x, y) is None
    assert auto_batch_size(Rows(), x, y) == 3  # never more than the images
    big = torch.rand(CPU_BATCH + 1, 3, 8, 8)
    assert auto_batch_size(Rows(), big, torch.zeros(CPU_BATCH + 1, dtype=torch.long)) == CPU_BATCH
    assert auto_batch_size(Rows(), x[:2], y[:2], n=1000) == CPU_BATCH  # measured on two, sized for the thousand


def test_bench_resolves_auto_and_records_it(tmp_path, digits_card):
    from mixzoo.evaluation.bench import bench

    report = bench(digits_card, n=8, batch_size="auto", attack="apgd", extra_attacks=False,
                   attack_options={"n_iter": 1, "n_target_classes": 0}, cache_dir=tmp_path / "cache", baseline=None,
                   curve=None, plots=False, progress=False)
    assert report.settings["batch_size"] == 8 and report.settings["batch_size_policy"] == "auto"
    assert report.settings["precision"] == "float32" and report.settings["precision_policy"] == "float32"


def test_the_bench_command_takes_auto_and_refuses_other_words(monkeypatch):
    from typer.testing import CliRunner

    from mixzoo.cli import app
    from mixzoo.evaluation import bench as bench_module

    seen = []

    def spy(card, settings, **kwargs):
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(bench_module, "bench", spy)
    assert CliRunner().invoke(app, ["bench", "--batch-size", "auto", "--json"]).exit_code == 0
    assert seen[-1].batch_size == "auto"
    assert CliRunner().invoke(app, ["bench", "--batch-size", "64", "--json"]).exit_code == 0
    assert seen[-1].batch_size == 64
    bad = CliRunner().invoke(app, ["bench", "--batch-size", "many"])
    assert bad.exit_code == 2 and "--batch-size must be positive (a number of images) or 'auto'" in bad.output


def test_square_takes_several_attack_batches_at_once_on_a_gpu_with_the_same_outcomes(monkeypatch):
    from mixzoo.attacks import adapters, base
    from mixzoo.core.plugins import lookup

    square = adapters._square_each(Rows(), {"n_queries": 5}, 0.05, "Linf", 0)
    apgd = adapters._ours("apgd-ce", Rows(), {"n_iter": 2, "n_restarts": 1}, 0.05, "Linf", 0, 0)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert base.forward_only_batches(square, cuda, True) == base.FORWARD_ONLY_BATCHES > 1
    assert base.forward_only_batches(square, cpu, True) == 1  # the CPU's arithmetic is the cost: unchanged
    assert base.forward_only_batches(square, cuda, False) == 1  # batch-seeded draws: the batch matters
    assert base.forward_only_batches(apgd, cuda, True) == 1  # a gradient attack holds its graph

    x, y = data(6)
    attack = lookup("attack", "adaptive")(eps=0.02, norm="Linf", seed=0, n_queries=20, batch_size=2,
                                          components=["square"])
    plain_model = Rows()
    plain = attack.run(plain_model, x, y, progress=False, index=torch.arange(6))
    monkeypatch.setattr(base, "forward_only_batches", lambda comp, device, per_example: 3)
    model = Rows()
    larger = attack.run(model, x, y, progress=False, index=torch.arange(6))
    assert torch.equal(plain.robust_correct, larger.robust_correct) and torch.equal(plain.adv_images,
                                                                                    larger.adv_images)
    assert 0 < int(plain.robust_correct.sum()) < 6
    assert max(plain_model.rows[1:]) == 2 and max(model.rows[1:]) == 6
