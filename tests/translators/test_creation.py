import pytest
import torch

from helpers import DEVICE, check_parity, randn

FLOATS = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", FLOATS)
def test_full_zeros_ones(dtype):
    x = randn(4, 6, dtype=dtype)

    def fn(x):
        a = torch.full((4, 6), 2.5, dtype=dtype, device=x.device)
        b = torch.zeros(6, dtype=dtype, device=x.device)
        c = torch.ones(4, 1, dtype=dtype, device=x.device)
        return x * a + b - c

    check_parity(fn, x, expect_ops=["aten.full.default", "aten.mul.Tensor"])


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_full_int_bool(dtype):
    x = randn(3, 5, dtype=dtype)
    fill = True if dtype == torch.bool else 7
    check_parity(lambda x: x == torch.full((3, 5), fill, dtype=dtype, device=x.device), x,
                 expect_ops=["aten.full.default"])


@pytest.mark.parametrize("dtype", FLOATS)
def test_like(dtype):
    x = randn(5, 3, dtype=dtype).t()  # non-contiguous
    check_parity(lambda x: (torch.full_like(x, 3.0) * x + torch.zeros_like(x) - torch.ones_like(x)).exp(), x,
                 expect_ops=["aten.full_like.default", "aten.exp.default"])


def test_scalar_tensor():
    x = randn(4)
    check_parity(lambda x: torch.where(x > 0, x, torch.scalar_tensor(-1.0, device=x.device)), x,
                 expect_ops=["aten.scalar_tensor.default"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_arange(dtype):
    x = randn(7, dtype=dtype)

    def fn(x):
        return x * torch.arange(7, dtype=dtype, device=x.device) + torch.arange(2, 16, 2, dtype=dtype, device=x.device)

    check_parity(fn, x, expect_ops=["aten.arange.start_step", "aten.mul.Tensor"])


def test_arange_float_step():
    x = randn(10)
    check_parity(lambda x: x + torch.arange(-1.0, 1.5, 0.25, device=x.device), x,
                 expect_ops=["aten.arange.start_step"])


def test_creation_alone_not_fused():
    from helpers import fused_ops
    check_parity(lambda x: (x, torch.zeros(3, 4, device=DEVICE)), randn(2), fused=False)
    assert "aten.full.default" not in fused_ops() and "aten.zeros.default" not in fused_ops()
