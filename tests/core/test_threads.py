"""Threads chosen for the machine and the work (mixzoo.core.threads): real parsing of fake /proc and cgroup files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mixzoo.core import threads
from mixzoo.core.errors import InputError


def fake_root(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for rel, text in files.items():
        p = tmp_path / "sys/fs/cgroup" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


@pytest.fixture(autouse=True)
def keep_threads():
    before = torch.get_num_threads()
    threads.reset()
    yield
    threads.reset()
    torch.set_num_threads(before)


def test_cgroup_v2_quota_smallest_along_the_path(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/job/step\n", {"job/step/cpu.max": "max 100000\n", "job/cpu.max": "150000 100000\n",
                                                  "cpu.max": "max 100000\n"})
    assert threads.cgroup_quota(root) == pytest.approx(1.5)
    assert threads.available_cpus(root=root, affinity=16) == (2, "cgroup CPU quota 1.5")


def test_cgroup_v2_unlimited_and_missing(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert threads.cgroup_quota(root) is None
    assert threads.available_cpus(root=root, affinity=6) == (6, "6 CPUs in the affinity mask")
    assert threads.cgroup_quota(tmp_path / "nowhere") is None


def test_cgroup_v1_cfs_quota(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
                     {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
                      "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
                      "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert threads.cgroup_quota(root) == pytest.approx(3.0)
    assert threads.available_cpus(root=root, affinity=64)[0] == 3


def test_affinity_smaller_than_quota(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/\n", {"cpu.max": "800000 100000\n"})
    assert threads.available_cpus(root=root, affinity=2) == (2, "2 CPUs in the affinity mask")


def test_choice_order(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/\n", {"cpu.max": "400000 100000\n"})
    assert threads.choose_threads(None, env={}, root=root, affinity=32).threads == 4
    assert threads.choose_threads(None, env={"OMP_NUM_THREADS": "2"}, root=root, affinity=32).threads == 2
    small = threads.choose_threads(None, env={}, root=root, affinity=32, parameters=20_000)
    assert (small.threads, small.requested) == (1, False) and "small networks" in small.reason
    big = threads.choose_threads(None, env={}, root=root, affinity=32, parameters=36_000_000)
    assert big.threads == 4
    env = threads.choose_threads(None, env={"MIXZOO_THREADS": "3"}, root=root, affinity=32, parameters=10)
    assert (env.threads, env.requested, env.reason) == (3, True, "MIXZOO_THREADS")
    assert threads.choose_threads(5, env={"MIXZOO_THREADS": "3"}, root=root, affinity=32).threads == 5
    with pytest.raises(InputError, match="MIXZOO_THREADS"):
        threads.choose_threads(None, env={"MIXZOO_THREADS": "many"}, root=root, affinity=32)


def test_configure_then_small_network_one_thread(monkeypatch) -> None:
    monkeypatch.delenv("MIXZOO_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 2)
    monkeypatch.setattr(threads, "cgroup_quota", lambda root="/": None)
    assert threads.configure().threads == 2 and torch.get_num_threads() == 2
    threads.fit_to_network(nn.Linear(64, 10))
    assert torch.get_num_threads() == 1
    threads.fit_to_network(nn.Linear(2000, 1001))  # a large one: the machine's count again
    assert torch.get_num_threads() == 2
    threads.configure(3)  # asked for: networks do not change it
    threads.fit_to_network(nn.Linear(64, 10))
    assert torch.get_num_threads() == 3


def test_report_records_threads_and_reason(monkeypatch) -> None:
    from mixzoo.core.machine import describe_machine, machine_line, run_record
    from mixzoo.zoo.models import load_model

    monkeypatch.delenv("MIXZOO_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 2)
    threads.configure()
    load_model("digits-std")  # 13,706 parameters: one thread
    m = describe_machine()
    assert m["torch_threads"] == 1 and m["torch_threads_reason"].startswith("small networks")
    assert "1 torch threads (small networks: 13,706 parameters)" in machine_line(run_record())


def test_cli_threads_option(monkeypatch) -> None:
    from typer.testing import CliRunner

    from mixzoo.cli import app

    monkeypatch.delenv("MIXZOO_THREADS", raising=False)
    res = CliRunner().invoke(app, ["--threads", "3", "list", "--json"])
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 3 and threads.current().reason == "--threads"
    monkeypatch.setenv("MIXZOO_THREADS", "0")
    res = CliRunner().invoke(app, ["list", "--json"])
    assert res.exit_code == 2 and "MIXZOO_THREADS" in res.output


def test_a_command_that_imports_torch_later_still_gets_the_choice(tmp_path):
    """`mixzoo --threads 3 COMMAND` gives torch the count before the command runs, although commands import torch
    lazily (only `list`, `info` and `plugins` leave torch unimported)."""
    import subprocess
    import sys

    code = ("import sys; from mixzoo.cli import app; assert 'torch' not in sys.modules;"
            " app(['--threads', '3', 'verify', '--help'], standalone_mode=False);"
            " import torch; print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.stdout.strip().splitlines()[-1] == "3"
