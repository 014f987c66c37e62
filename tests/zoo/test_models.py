"""The model wrapper (mixzoo/zoo/models.py): per-channel normalisation, the weight hash, the input checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.zoo.models import Normalize, check_images, check_labels, weight_hash


# ------------------------------------------------------------------------------------------------ models
def test_normalize_is_per_channel_standardization():
    mean, std = [0.3, 0.5, 0.1], [0.4, 0.2, 0.25]
    x = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    expected = torch.stack([(x[:, i] - mean[i]) / std[i] for i in range(3)], dim=1)
    torch.testing.assert_close(Normalize(mean, std)(x), expected)


class _Holder(nn.Module):
    def __init__(self, tensors: dict[str, torch.Tensor]):
        super().__init__()
        self._tensors = tensors

    def state_dict(self, *args, **kwargs):  # noqa: ARG002 - mirrors nn.Module.state_dict
        return self._tensors


def test_weight_hash_covers_names_shapes_and_bytes():
    w = torch.arange(6, dtype=torch.float32)
    base = weight_hash(_Holder({"a": w}))
    assert len(base) == 16 and int(base, 16) >= 0
    assert weight_hash(_Holder({"a": w.clone()})) == base
    assert weight_hash(_Holder({"b": w})) != base  # same bytes, other name
    assert weight_hash(_Holder({"a": w.view(2, 3)})) != base  # same bytes and name, other shape
    assert weight_hash(_Holder({"a": w + 1})) != base


def test_check_images_and_labels_boundaries():
    ok = torch.rand(2, 1, 8, 8)
    check_images(ok, (1, 8, 8))
    check_images(torch.zeros(2, 1, 8, 8))  # 0 and 1 are in [0, 1]
    check_images(torch.ones(2, 1, 8, 8))
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        check_images(ok - 0.5)
    with pytest.raises(InputError, match="the model expects"):
        check_images(ok, (1, 28, 28))
    check_labels(torch.tensor([0, 9]), 2, 10)
    with pytest.raises(InputError, match=r"must lie in \[0, 10\)"):
        check_labels(torch.tensor([0, 10]), 2, 10)
    with pytest.raises(InputError, match="entries for"):
        check_labels(torch.tensor([0, 1, 2]), 2, 10)
