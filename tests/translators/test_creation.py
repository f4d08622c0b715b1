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


# Note [Random numbers drawn by nvFuser]


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_draws_its_numbers_in_the_region(dtype):
    from helpers import assert_close, compile_fn, fused_ops

    x = (randn(64, 256, dtype=torch.float32).abs() + 0.5).to(dtype).requires_grad_()  # no zeros of its own
    compiled = compile_fn(lambda x: torch.nn.functional.dropout(x * 2, p=0.25, training=True))
    y = compiled(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    assert_close(y[kept], (x.detach() * 2 / 0.75)[kept])
    g = randn(64, 256, dtype=dtype)
    y.backward(g)
    assert_close(x.grad, g * kept * 2 / 0.75)  # the backward reads the forward's mask
    assert "aten.rand_like.default" in fused_ops()
    assert not torch.equal(compiled(x) != 0, kept)  # another call, other numbers


def test_rand_like_of_another_dtype():
    from helpers import compile_fn, fused_ops

    x = randn(128, 128, dtype=torch.bfloat16)
    out = compile_fn(lambda x: torch.rand_like(x, dtype=torch.float32) + x.float() * 0)(x)
    assert out.dtype == torch.float32 and 0 <= out.min().item() and out.max().item() < 1
    assert abs(out.mean().item() - 0.5) < 0.02
    assert "aten.rand_like.default" in fused_ops()


def test_random_numbers_are_drawn_by_pytorch_when_switched_off(monkeypatch):
    from helpers import compile_fn, fused_ops

    from nvfuser_dtensor_backend.translators import creation

    monkeypatch.setattr(creation, "RANDOM_IN_FUSIONS", False)  # NVFUSER_DTENSOR_RANDOM_IN_FUSIONS=0
    x = randn(64, 64)
    y = compile_fn(lambda x: torch.nn.functional.dropout(x * 2, p=0.5, training=True))(x)
    assert "aten.rand_like.default" not in fused_ops()
    assert 0.4 < (y != 0).float().mean().item() < 0.6


def test_dtensor_graphs_keep_random_ops_in_pytorch():
    """``partition(random_ops=False)``, as for graphs with DTensor inputs: DTensor's RNG
    tracker, not nvFuser, draws their numbers."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from nvfuser_dtensor_backend.partition import partition

    def f(x):
        return (torch.ops.aten.rand_like.default(x) > 0.5) * torch.exp(x)

    for random_ops in (True, False):
        gm = make_fx(f)(randn(8, 8))
        _, names, report = partition(gm, random_ops=random_ops)
        fused = [op for ops in report.regions for op in ops]
        assert ("aten.rand_like.default" in fused) is random_ops and "aten.exp.default" in fused
        assert any("RNG tracker" in r for r in report.unsupported) is not random_ops
