"""Note [Column sums in two stages] (staged_column_sums.py): with the switch on (the fixture
turns it on even where NVFUSER_DTENSOR_STAGED_COLUMN_SUMS is unset), a sum over the leading
dims of a tall contiguous tensor runs as partial sums over row blocks, then their sum, with
eager's values; other sums are left alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import check_parity, fused_ops, randn


@pytest.fixture
def staged(monkeypatch):
    from nvfuser_dtensor_backend import staged_column_sums

    monkeypatch.setattr(staged_column_sums, "ON", True)


def _sums() -> int:
    return fused_ops().count("aten.sum.dim_IntList")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,dims,keepdim", [
    ((4096, 96), [0], False),  # a bias gradient: 64 blocks of 64 rows
    ((6304, 40), [0], True),  # ViT-S/16's 32 x 197 tokens: 32 blocks
    ((8, 512, 24), [0, 1], False),  # a 3-D activation's bias gradient
    ((3, 700, 5, 4), [1, 0], True),  # two leading dims given out of order, two kept
])
def test_column_sums_are_staged(staged, dtype, shape, dims, keepdim):
    x = randn(*shape, dtype=dtype)
    check_parity(lambda x: x.sum(dims, keepdim=keepdim) * 2, x, scale=4.0)
    assert _sums() == 2  # partial sums, then their sum


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_linear_layers_bias_gradient_is_staged(staged, dtype):
    x = randn(16, 128, 32, dtype=dtype, requires_grad=True)
    w, b = randn(48, 32, dtype=dtype, requires_grad=True), randn(48, dtype=dtype, requires_grad=True)
    check_parity(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b, backward=True, scale=4.0)
    assert _sums() >= 2


@pytest.mark.parametrize("make", [
    lambda: randn(512, 64),  # too few rows
    lambda: randn(2053, 8),  # a prime count of rows: no block count
    lambda: randn(64, 4096).t(),  # not contiguous
    lambda: randn(4096, 16, dtype=torch.float64),  # float64 keeps its own accumulation
])
def test_other_sums_stay_single(staged, make):
    x = make()
    check_parity(lambda x: x.sum(0) * 2, x)
    assert _sums() == 1


def test_inner_sums_stay_single(staged):
    check_parity(lambda x: x.sum(1) * 2, randn(4096, 64))
    assert _sums() == 1


def test_row_blocks():
    from nvfuser_dtensor_backend.staged_column_sums import row_blocks

    assert row_blocks(4096) == 64
    assert row_blocks(6304) == 32  # 2^5 x 197
    assert row_blocks(2053) is None
    assert row_blocks(3 * 700) == 60
