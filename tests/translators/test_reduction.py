"""Parity of the reduction translators (sum, mean, amax/amin, var, var_mean, prod, any)."""

from __future__ import annotations

import re

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nvfuser_dtensor_backend.evaluator import Evaluator
from nvfuser_dtensor_backend.fusion import TensorDesc, build_fusion

from helpers import assert_close, check_parity, randn

aten = torch.ops.aten
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def _input(shape, dtype, layout):
    """A random input of ``shape``; "t" makes it a transposed (non-contiguous) view."""
    if layout == "t":
        return randn(*reversed(shape), dtype=dtype).transpose(0, -1)
    return randn(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "shape,dim,keepdim,layout",
    [
        ((4, 6), -1, False, "c"),
        ((4, 1, 6), [0, 2], True, "c"),
        ((5, 3), 0, True, "t"),
        ((4, 1, 6), 1, False, "c"),  # reducing a size-1 (broadcast) dim only
    ],
)
def test_sum_mean(dtype, shape, dim, keepdim, layout):
    x = _input(shape, dtype, layout)
    check_parity(
        lambda a: (a.sum(dim, keepdim=keepdim), a.mean(dim, keepdim=keepdim)),
        x,
        expect_ops=["aten.sum.dim_IntList", "aten.mean.dim"],
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_sum_mean_all(dtype):
    x = randn(3, 1, 5, dtype=dtype)
    check_parity(lambda a: (a.sum(), a.mean()), x, expect_ops=["aten.mean.default"])


def test_sum_mean_dtype_kwarg():
    x = randn(4, 6, dtype=torch.bfloat16)
    check_parity(
        lambda a: (a.sum(1, dtype=torch.float32), a.mean(0, dtype=torch.float64)),
        x,
        expect_ops=["aten.sum.dim_IntList", "aten.mean.dim"],
    )


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_sum_integer_promotes_to_int64(dtype):
    x = randn(4, 6, dtype=dtype)
    out = check_parity(lambda a: a.sum(-1), x, expect_ops=["aten.sum.dim_IntList"])
    assert out.dtype == torch.int64


def test_sum_of_broadcast_operand():
    a, b = randn(4, 1, 6), randn(5, 1)
    check_parity(lambda x, y: (x + y).sum([0, -1]), a, b, expect_ops=["aten.sum.dim_IntList", "aten.add.Tensor"])


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), ([0, 1], True)])
def test_amax_amin(dtype, dim, keepdim):
    x = randn(3, 4, 5, dtype=dtype)
    check_parity(
        lambda a: (a.amax(dim, keepdim=keepdim), a.amin(dim, keepdim=keepdim)),
        x,
        expect_ops=["aten.amax.default", "aten.amin.default"],
    )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "dim,correction,keepdim,layout",
    [(-1, 1, False, "c"), ([0, 2], 0, True, "c"), (0, 1, True, "t")],
)
def test_var_var_mean(dtype, dim, correction, keepdim, layout):
    x = _input((4, 1, 6), dtype, layout)
    check_parity(
        lambda a: (
            torch.var(a, dim, correction=correction, keepdim=keepdim),
            *torch.var_mean(a, dim, correction=correction, keepdim=keepdim),
        ),
        x,
        expect_ops=["aten.var.correction", "aten.var_mean.correction"],
        scale=2,
    )


def test_var_all_dims():
    x = randn(3, 5)
    check_parity(lambda a: (a.var(), torch.var_mean(a)), x, expect_ops=["aten.var.correction"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_prod(dtype):
    x = randn(3, 4, dtype=dtype)
    if dtype.is_floating_point:
        x = (x.float().abs() * 0.5 + 0.75).to(dtype)  # keep the product well scaled
    check_parity(lambda a: (a.prod(-1), a.prod(0, keepdim=True)), x, expect_ops=["aten.prod.dim_int"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int64])
def test_any_all(dtype):
    x = randn(3, 4, dtype=dtype)
    if dtype == torch.float32:
        x[0] = 0.0
    check_parity(
        lambda a: (a.any(1), a.any(0, keepdim=True), a.any(), a.all(-1)),
        x,
        expect_ops=["aten.any.dim"],
    )


def test_reductions_backward():
    x = randn(4, 6, requires_grad=True)
    check_parity(
        lambda a: a.sum(-1) + a.mean(-1) + a.var(-1) + a.amax(-1),
        x,
        expect_ops=["aten.sum.dim_IntList", "aten.amax.default"],
        backward=True,
    )


@pytest.mark.parametrize("op", ["mean", "var_mean"])
def test_extents_are_symbolic(op):
    """A fusion built for one size class must still be right for other sizes."""
    if op == "mean":
        fn, ref = (lambda x: aten.mean.dim(x, [0, 2])), (lambda y: y.mean([0, 2]))
    else:
        fn, ref = (lambda x: aten.var_mean.correction(x, [1], correction=1)), (lambda y: torch.var_mean(y, 1))
    gm = make_fx(fn)(torch.randn(3, 5, 2))
    built = build_fusion(gm, [TensorDesc.of(torch.randn(3, 5, 2))])
    y = torch.randn(6, 7, 4)
    outs = Evaluator(built.fd, built.constants)([y])
    outs = [outs[i] for i in built.output_index]
    expected = ref(y)
    assert_close(tuple(outs) if isinstance(expected, tuple) else outs[0], expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_multidevice_fusions_reduce_one_axis_at_a_time(dtype, keepdim):
    """Note [One-axis reductions]: in a multidevice (global-view) fusion, a sum/amax over
    several dims is a chain of one-dim reductions (nvFuser lowers a sharded axis to an
    all-reduce only alone); values match aten, half-type sums round once."""
    fn = lambda a: (a.sum([0, 2], keepdim=keepdim), a.amax([0, 1], keepdim=keepdim))  # noqa: E731
    x = randn(6, 5, 8, dtype=dtype)
    gm = make_fx(fn)(x)
    single = build_fusion(gm, [TensorDesc.of(x)])
    multi = build_fusion(gm, [TensorDesc.of(x, static=True)], schedule=lambda fusion, inputs, layouts: None)
    count = lambda fd: sum(repr(fd).count(f"fd.ops.{op}(") for op in ("sum", "max"))  # noqa: E731
    assert count(single.fd) == 2 and count(multi.fd) == 4, repr(multi.fd)
    for built in (single, multi):
        outs = Evaluator(built.fd, built.constants)([x])
        outs = tuple(outs[i] for i in built.output_index)
        assert_close(outs, fn(x), dtype)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("correction", [0, 1])
def test_multidevice_var_mean_prod_any_reduce_one_axis_at_a_time(keepdim, correction):
    """Note [One-axis reductions] for var/var_mean (two passes of one-axis sums), prod and any."""
    def fn(a):
        v, m = torch.var_mean(a, [0, 2], correction=correction, keepdim=keepdim)
        return (v, m, torch.var(a, [1, 2], correction=correction, keepdim=keepdim),
                aten.prod.dim_int(aten.prod.dim_int(a, 2, keepdim), 0, keepdim), (a > 1.5).any(dim=(0, 1)))

    x = randn(6, 5, 8) + 1  # products of values near 1 stay finite
    gm = make_fx(fn)(x)
    multi = build_fusion(gm, [TensorDesc.of(x, static=True)], schedule=lambda fusion, inputs, layouts: None)
    text = repr(multi.fd)
    assert "var_mean(" not in text and "fd.ops.var(" not in text, text
    for built in (build_fusion(gm, [TensorDesc.of(x)]), multi):
        outs = Evaluator(built.fd, built.constants)([x])
        assert_close(tuple(outs[i] for i in built.output_index), fn(x))
    assert not re.search(r"fd\.ops\.(sum|max|prod)\([^)]*dims=\[\d+, \d", text), text  # one dim per reduction
