"""mixzoo.core.distributed reads the launcher's variables once, checked: a value out of range is one line."""

from __future__ import annotations

import pytest

from mixzoo.core.distributed import MAX_TIMEOUT_S, init, rank_device, timeout_s
from mixzoo.core.errors import InputError
from mixzoo.core.options import world_size_env


@pytest.fixture()
def launcher(monkeypatch):
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MIXZOO_DIST_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_one_process_and_a_job_read_as_torchrun_sets_them(launcher) -> None:
    assert world_size_env() == (1, 0) and rank_device("cuda") == "cuda"
    launcher.setenv("WORLD_SIZE", "4")
    launcher.setenv("LOCAL_RANK", "3")
    assert world_size_env() == (4, 3) and rank_device("cuda") == "cuda:3"


@pytest.mark.parametrize(("env", "named"), [({"WORLD_SIZE": "abc"}, "WORLD_SIZE"),
                                            ({"WORLD_SIZE": "2", "LOCAL_RANK": "2"}, "LOCAL_RANK"),
                                            ({"WORLD_SIZE": "2", "LOCAL_RANK": str(2 ** 63 - 1)}, "LOCAL_RANK")])
def test_a_bad_launcher_variable_is_one_line_wherever_it_is_read(launcher, env, named) -> None:
    for key, value in env.items():
        launcher.setenv(key, value)
    for read in (world_size_env, lambda: rank_device("cuda"), lambda: init("cuda")):
        with pytest.raises(InputError, match=rf"^{named}="):
            read()


@pytest.mark.parametrize("value", ["1e400", "inf", "nan", "0", "-1", str(2 ** 70), "x", str(MAX_TIMEOUT_S + 1)])
def test_a_timeout_beyond_what_a_backend_holds_is_one_line(launcher, value) -> None:
    launcher.setenv("MIXZOO_DIST_TIMEOUT", value)
    with pytest.raises(InputError, match=r"MIXZOO_DIST_TIMEOUT=.* is not a positive number of seconds \(at") as err:
        timeout_s("gloo")
    assert "\n" not in str(err.value)
    launcher.setenv("MIXZOO_DIST_TIMEOUT", str(MAX_TIMEOUT_S))
    assert timeout_s("gloo") == MAX_TIMEOUT_S
