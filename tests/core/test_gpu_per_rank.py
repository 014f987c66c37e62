"""NCCL needs one GPU per rank: a rank without a GPU of its own gets a one-line error naming the fix."""

import pytest

from mixzoo.core.distributed import check_gpu_per_rank
from mixzoo.core.errors import InputError


@pytest.mark.parametrize(("local_rank", "gpus"), [(0, 1), (1, 2), (7, 8)])
def test_a_rank_with_its_own_gpu_passes(local_rank: int, gpus: int) -> None:
    check_gpu_per_rank(local_rank, gpus)


@pytest.mark.parametrize(("local_rank", "gpus", "most"), [(1, 1, 1), (2, 2, 2), (0, 0, 1)])
def test_a_rank_without_a_gpu_is_refused_with_the_fix(local_rank: int, gpus: int, most: int) -> None:
    with pytest.raises(InputError) as err:
        check_gpu_per_rank(local_rank, gpus)
    message = str(err.value)
    assert "\n" not in message
    assert f"--nproc-per-node {most} or fewer" in message and "--device cpu" in message
