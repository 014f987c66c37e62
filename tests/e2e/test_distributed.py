"""Issue 29: the bench under ``torchrun`` (gloo, 2 CPU processes) gives exactly the one-process results, writes its
report only from rank 0, and resumes after a killed rank."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from eval_requests import ask
from safetensors.torch import load_file

from mixzoo.core import distributed
from mixzoo.core.errors import InputError
from mixzoo.evaluation.bench import bench

SCRIPT = Path(__file__).parent / "scripts" / "torchrun_bench.py"


@pytest.fixture()
def card(digits_card):
    return digits_card


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, *args: str, module: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MIXZOO_DIST_TIMEOUT": "600"}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", *(["-m", "mixzoo.cli"] if module else [str(SCRIPT)]), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def rows(out: Path) -> dict[str, str]:
    return {m["kind"]: m["robust_outcomes"] for m in json.loads((out / "report.json").read_text())["models"]}


def points(out: Path) -> dict[str, torch.Tensor]:
    t = load_file(out / "adversarial.safetensors")
    return {k: t[k][t[k.replace("images", "index")].argsort()] if k.endswith(".images") else t[k].sort().values
            for k in t}


@pytest.mark.subprocess
@pytest.mark.timeout(900)  # each torchrun call has its own 600 s limit; the test makes up to three
def test_two_ranks_give_the_one_process_results_and_resume_after_a_killed_rank(card, tmp_path, one_thread):
    one = bench(card, attack="adaptive-apgd", n=60, attack_options={"n_iter": 6, "n_target_classes": 2},
                curve=None, baseline=None, plots=False, progress=False, batch_size=20, out=tmp_path / "one",
                cache_dir=tmp_path / "cache1", save_adversarial=True)
    assert one.settings["world_size"] == 1
    done = torchrun(2, str(card), str(tmp_path / "two"), str(tmp_path / "cache2"), "20")
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows(tmp_path / "two") == rows(tmp_path / "one")
    assert json.loads((tmp_path / "two" / "report.json").read_text())["settings"]["world_size"] == 2
    assert list((tmp_path / "two").glob("*.png"))  # every rank computed the figure data; rank 0 rendered it
    a, b = points(tmp_path / "one"), points(tmp_path / "two")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any("0" in o for o in rows(tmp_path / "one").values())  # something was broken: the check has content
    # the batches were shared out (round-robin), not all attacked by every rank
    counts = {r["rank"]: r["attacked"] for r in map(json.loads, re.findall(r'\{"rank".*?\}', done.stdout))}
    assert counts[0] > counts[1] > 0, counts

    # rank 1 dies after its first batch: the job fails (no hang), writes no report; a re-run resumes and matches
    killed = torchrun(2, str(card), str(tmp_path / "three"), str(tmp_path / "cache3"), "20", "1")
    assert killed.returncode != 0 and re.search(r"exitcode\s*:\s*17", killed.stderr), killed.stderr[-3000:]
    assert not (tmp_path / "three" / "report.json").exists()
    # what finished before the kill was kept: whole rows (their merged outcome) or single batches (partial files)
    assert list((tmp_path / "cache3" / "bench").rglob("*.json"))
    resumed = torchrun(2, str(card), str(tmp_path / "three"), str(tmp_path / "cache3"), "20")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert rows(tmp_path / "three") == rows(tmp_path / "one")
    again = {r["rank"]: r["attacked"] for r in map(json.loads, re.findall(r'\{"rank".*?\}', resumed.stdout))}
    assert sum(again.values()) < sum(counts.values()), (again, counts)  # it resumed, not started over


def test_one_process_is_a_world_of_one():
    w = distributed.world()
    assert (w.rank, w.size, w.main) == (0, 1, True)
    assert all(w.owns(k) for k in range(5))
    assert distributed.gather({"x": 1}) == [{"x": 1}]
    two = distributed.World(rank=1, size=2)
    assert [two.owns(k) for k in range(4)] == [False, True, False, True] and not two.main


@pytest.mark.subprocess
@pytest.mark.timeout(900)  # each torchrun call has its own 600 s limit; the test makes up to three
def test_mix_under_torchrun_shares_mmaa_out_and_writes_the_one_process_card(card, tmp_path, one_thread):
    """`mixzoo mix` under torchrun: MMAA's two batches are shared out, rank 0 alone writes the card, and its
    parameters are those of the one-process fit."""
    from mixzoo.core.card import MixCard

    args = ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--n-calib", "120", "--n-iter", "8", "-O",
            "n_target_classes=2", "--batch-size", "60"]
    done = torchrun(2, *args, "--out", str(tmp_path / "two.toml"), "--cache-dir", str(tmp_path / "c2"), module=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("mix card written") == 1  # rank 0 alone prints and writes
    one = MixCard.load(card)  # conftest.FAST_DIGITS_MIX: the same settings in one process
    two = MixCard.load(tmp_path / "two.toml")
    assert {k: one.params[k] for k in ("s", "p", "c", "alpha")} == {k: two.params[k] for k in ("s", "p", "c", "alpha")}


def test_a_hand_set_world_size_without_torchrun_is_one_line(monkeypatch):
    from mixzoo.core.errors import InputError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(InputError, match="launch with torchrun, or unset WORLD_SIZE"):
        distributed.init("cpu")
    assert distributed.world().size == 1  # nothing was joined


class _LostBatchOne(distributed.World):
    """A world of one whose rank does not own batch 1: as if the rank that attacked it never delivered."""

    def owns(self, batch: int) -> bool:
        return batch != 1


def test_the_merge_refuses_a_missing_shard_and_names_it(monkeypatch, tmp_path, one_thread):
    """Per-shard outcomes are merged only when every batch is there; otherwise a one-line error names the missing
    batch and its images, and neither the merged outcome nor a cache entry for it is written."""
    from digits_models import train_digits_mlp

    from mixzoo.attacks import runner
    from mixzoo.core import cache as cache_mod
    from mixzoo.core.cache import Cache
    from mixzoo.core.errors import InputError

    model, x, y = train_digits_mlp(steps=100)
    monkeypatch.setattr(runner, "world", lambda: _LostBatchOne())
    store = Cache(tmp_path / "cache")
    with pytest.raises(InputError, match=r"1 of 3 batches are missing \(1 \(images 10-19\)\)"):
        runner.evaluate(model, x[:25], y[:25], ask(attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=10,
                                                   cache=store, key_parts={"t": 1}, label="digits",
                                                   attack_options={"n_iter": 2}, progress=False))
    assert not list((tmp_path / "cache" / "bench").glob("*.json"))  # only the finished batches' partial files
    assert len(list((tmp_path / "cache" / "bench").glob("*.partial/*.json"))) == 2
    monkeypatch.undo()
    monkeypatch.setattr(distributed, "world", lambda: _LostBatchOne())
    with pytest.raises(InputError, match="batches are missing"):
        cache_mod.batched_cached(store, "logits", "k", 25, 10, lambda a, b: {"z": torch.zeros(b - a, 2)}, {})
    assert not (tmp_path / "cache" / "logits" / "k.safetensors").exists()


@pytest.mark.subprocess
@pytest.mark.timeout(900)  # each torchrun call has its own 600 s limit; the test makes up to three
def test_a_collective_that_times_out_is_a_one_line_error_naming_the_variable(tmp_path):
    script = Path(__file__).parent / "scripts" / "torchrun_slow_rank.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MIXZOO_DIST_TIMEOUT": "3"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(script), "30"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    one_line = r"error: rank 0 waited more than 3 s for the other ranks .*set MIXZOO_DIST_TIMEOUT"
    assert re.search(one_line, done.stderr), done.stderr[-3000:]
    # with time enough, the same ranks gather
    ok = subprocess.run(cmd[:-1] + ["1"], env={**env, "MIXZOO_DIST_TIMEOUT": "120"}, capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0 and "[0, 1]" in ok.stdout, ok.stderr[-3000:]


def test_timeout_defaults_per_backend_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.delenv("MIXZOO_DIST_TIMEOUT", raising=False)
    assert distributed.timeout_s("gloo") == 86400 and distributed.timeout_s("nccl") == 1800
    monkeypatch.setenv("MIXZOO_DIST_TIMEOUT", "90")
    assert distributed.timeout_s("gloo") == 90 == distributed.timeout_s("nccl")
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv("MIXZOO_DIST_TIMEOUT", bad)
        with pytest.raises(InputError, match="MIXZOO_DIST_TIMEOUT=.*positive number of seconds"):
            distributed.timeout_s("gloo")

