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
    assert threads.choose_threads(None, env={}, root=root, affinity=32, load=0.0).threads == 4
    assert threads.choose_threads(None, env={"OMP_NUM_THREADS": "2"}, root=root, affinity=32, load=0.0).threads == 2
    small = threads.choose_threads(None, env={}, root=root, affinity=32, parameters=20_000, load=0.0)
    assert (small.threads, small.requested) == (2, False) and "small networks" in small.reason
    big = threads.choose_threads(None, env={}, root=root, affinity=32, parameters=36_000_000, load=0.0)
    assert big.threads == 4
    env = threads.choose_threads(None, env={"MIXZOO_THREADS": "3"}, root=root, affinity=32, parameters=10)
    assert (env.threads, env.requested, env.reason) == (3, True, "MIXZOO_THREADS")
    assert threads.choose_threads(4, env={"MIXZOO_THREADS": "3"}, root=root, affinity=32).threads == 4
    with pytest.raises(InputError, match="MIXZOO_THREADS"):
        threads.choose_threads(None, env={"MIXZOO_THREADS": "many"}, root=root, affinity=32)


@pytest.mark.parametrize(("cpus", "load", "parameters", "expected"), [
    (2, 0.0, 584_618, 2),  # a quiet 2-core machine, the Fashion-MNIST pair: both cores
    (2, 0.4, 584_618, 2),  # a shell and an editor: still both
    (2, 1.0, 584_618, 1),  # one core busy: the idle one only
    (2, 6.0, 584_618, 1),  # six busy processes: one thread, never below
    (2, 6.0, 36_000_000, 1),  # a large network on a busy machine does not spin on busy cores either
    (16, 0.0, 584_618, 2),  # small networks: at most SMALL_NETWORK_THREADS on an idle machine
    (16, 0.0, 36_000_000, 16),
    (16, 5.4, 36_000_000, 11),
    (16, 40.0, 36_000_000, 1),
    (16, 0.0, None, 16),  # before any network is loaded: the idle CPUs
    (4, None, 36_000_000, 4),  # no load average (not on this system): the CPUs
])
def test_threads_for_is_the_idle_cpus(cpus, load, parameters, expected) -> None:
    n, reason = threads.threads_for(cpus, load, parameters)
    assert n == expected and 1 <= n <= cpus and reason


def test_threads_for_counts_the_load_on_its_share_of_the_machine() -> None:
    """4 usable CPUs of a 64-core node whose load is 32: half its cores busy, so half of these."""
    assert threads.threads_for(4, 32.0, 36_000_000, machine_cpus=64)[0] == 2
    assert threads.threads_for(4, 32.0, 36_000_000)[0] == 1


def test_load_is_the_average_or_the_tasks_runnable_now(tmp_path: Path) -> None:
    """Six processes that started a second ago: the average has not caught up, the runnable count has."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/loadavg").write_text("0.31 0.20 0.10 7/143 16285\n")
    assert threads.load_average(tmp_path) == 6
    (tmp_path / "proc/loadavg").write_text("4.50 3.20 1.10 1/143 16285\n")
    assert threads.load_average(tmp_path) == pytest.approx(4.5)
    assert threads.load_average(tmp_path / "nowhere") is None


def test_choose_threads_takes_the_load(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    quiet = threads.choose_threads(None, env={}, root=root, affinity=2, parameters=584_618, load=0.1)
    busy = threads.choose_threads(None, env={}, root=root, affinity=2, parameters=584_618, load=6.0)
    assert (quiet.threads, busy.threads) == (2, 1) and "load 6.00" in busy.reason


@pytest.mark.parametrize("value", ["0", "-1", "3", str(2**63 - 1), str(2**70), "two"])
def test_a_thread_count_outside_1_to_the_cpus_is_one_line(tmp_path: Path, value: str) -> None:
    root = fake_root(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    with pytest.raises(InputError, match="from 1 to 2") as exc:
        threads.choose_threads(None, env={"MIXZOO_THREADS": value}, root=root, affinity=2)
    assert "\n" not in str(exc.value)
    with pytest.raises(InputError, match="--threads"):
        threads.choose_threads(value, env={}, root=root, affinity=2)
    assert threads.choose_threads("2", env={}, root=root, affinity=2).threads == 2


def test_configure_then_small_network_one_thread(monkeypatch) -> None:
    monkeypatch.delenv("MIXZOO_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 2)
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 4)
    monkeypatch.setattr(threads, "cgroup_quota", lambda root="/": None)
    monkeypatch.setattr(threads, "load_average", lambda: 0.0)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    assert threads.configure().threads == 4 and torch.get_num_threads() == 4
    threads.fit_to_network(nn.Linear(64, 10))
    assert torch.get_num_threads() == threads.SMALL_NETWORK_THREADS
    monkeypatch.setattr(threads, "load_average", lambda: 3.0)  # later load: the choice keeps the start's
    threads.fit_to_network(nn.Linear(2000, 1001))  # a large one: the idle CPUs again
    assert torch.get_num_threads() == 4
    threads.configure(3)  # asked for: networks do not change it
    threads.fit_to_network(nn.Linear(64, 10))
    assert torch.get_num_threads() == 3


def test_report_records_threads_and_reason(monkeypatch) -> None:
    from mixzoo.core.machine import describe_machine, machine_line, run_record
    from mixzoo.zoo.models import load_model

    monkeypatch.delenv("MIXZOO_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 4)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(threads, "load_average", lambda: 0.2)
    threads.configure()
    load_model("digits-std")  # 13,706 parameters on an idle machine: SMALL_NETWORK_THREADS
    m = describe_machine()
    assert m["torch_threads"] == 2 and m["torch_threads_reason"].startswith("small networks")
    assert "2 torch threads (small networks: 13,706 parameters; 4 of 4 CPUs idle (load 0.20)" in machine_line(
        run_record())


def test_cli_threads_option(monkeypatch) -> None:
    from typer.testing import CliRunner

    from mixzoo.cli import app

    monkeypatch.delenv("MIXZOO_THREADS", raising=False)
    monkeypatch.setattr(threads, "affinity_cpus", lambda: 4)
    res = CliRunner().invoke(app, ["--threads", "3", "list", "--json"])
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 3 and threads.current().reason == "--threads"
    for value in ("5", str(2**63 - 1), str(2**70)):
        res = CliRunner().invoke(app, ["--threads", value, "list", "--json"])
        assert res.exit_code == 2 and "from 1 to 4" in res.output and "Traceback" not in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
    monkeypatch.setenv("MIXZOO_THREADS", "0")
    res = CliRunner().invoke(app, ["list", "--json"])
    assert res.exit_code == 2 and "MIXZOO_THREADS" in res.output


def test_a_command_that_imports_torch_later_still_gets_the_choice(tmp_path):
    """`mixzoo --threads 3 COMMAND` gives torch the count before the command runs, although commands import torch
    lazily (only `list`, `info` and `plugins` leave torch unimported)."""
    import subprocess
    import sys

    n = threads.affinity_cpus()  # torch's own default is every core of the machine
    code = ("import sys; from mixzoo.cli import app; assert 'torch' not in sys.modules;"
            f" app(['--threads', '{n}', 'verify', '--help'], standalone_mode=False);"
            " import torch; print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert out.stdout.strip().splitlines()[-1] == str(n)
