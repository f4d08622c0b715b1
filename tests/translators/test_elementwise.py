"""Parity tests for every translator in ``translators/elementwise.py``.

Two paths reach the translators:

* ``check_parity`` (torch.compile with the backend): dynamo -> AOTAutograd with the
  backend's decomposition table -> partition -> nvFuser fusion -> CPU evaluator.
* ``check_aten``: some registered overloads never survive that decomposition table
  (``rsub``, ``lerp``, ``addcmul``, the ``*_backward`` ops, ``where.Scalar*``, ...), yet
  graphs produced elsewhere (another decomposition table, a hand-written graph) carry them.
  They are traced with ``make_fx`` (no decompositions) and handed to the same
  ``compile_aten_graph`` the backend uses.

Every case names the aten ops it must fuse (``expect_ops``); ``test_every_translator_is_tested``
fails when a registered elementwise target is not named by any case.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import nvfuser_dtensor_backend as nb
from helpers import DEVICE, assert_close, check_parity, compile_fn, fused_ops, randn, set_move_kernels
from nvfuser_dtensor_backend.region import NvFuserFallbackWarning

aten = torch.ops.aten
prims = torch.ops.prims

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64]

# Every op name any case below asserts is fused (filled at import time by `_ops`).
COVERED: set[str] = set()


def _ops(*names: str) -> list[str]:
    COVERED.update(names)
    return list(names)


def check_aten(fn, *inputs, expect_ops=(), scale=1.0):
    """Record ``fn``'s aten calls as they are written (no decomposition) and run the graph
    through the backend's aten-graph compiler. ``fn`` must call ``aten.*`` overloads only."""
    from nvfuser_dtensor_backend.backend import compile_aten_graph

    expected = fn(*inputs)
    gm = torch.fx.symbolic_trace(fn)
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*inputs)  # node.meta["val"]
    nb.clear_reports()
    compiled = compile_aten_graph(gm, list(inputs), nb.Options.from_dict(None), "inference")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NvFuserFallbackWarning)
        actual = compiled(list(inputs)) if getattr(compiled, "_boxed_call", False) else compiled(*inputs)
    if isinstance(expected, torch.Tensor):
        actual = actual[0] if isinstance(actual, (list, tuple)) else actual
    else:
        actual = tuple(actual)
    assert_close(actual, expected, scale=scale)
    ops = fused_ops()
    for op in expect_ops:
        assert op in ops, f"{op} was not fused; fused ops: {ops}; reports: {[r.summary() for r in nb.reports()]}"
    return actual


def scalar(dtype=torch.float32) -> torch.Tensor:
    """A random 0-dim tensor."""
    return randn(1, dtype=dtype).reshape(()).clone()


def noncontig(t: torch.Tensor) -> torch.Tensor:
    """Same values, transposed storage: a non-contiguous view."""
    return t.t().contiguous().t() if t.dim() == 2 else t.transpose(0, -1).contiguous().transpose(0, -1)


# --- unary float math -------------------------------------------------------------------

UNARY_ANY = ["exp", "exp2", "expm1", "sin", "cos", "tan", "atan", "sinh", "cosh", "tanh", "asinh",
             "erf", "erfc", "sigmoid", "lgamma"]
UNARY_POS = ["log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal"]  # on x > 0
UNARY_UNIT = ["asin", "acos", "atanh", "erfinv"]  # on |x| < 1
UNARY_GT1 = ["acosh"]  # on x > 1
UNARY_NAMES = UNARY_ANY + UNARY_POS + UNARY_UNIT + UNARY_GT1
UNARY_OPS = _ops(*(f"aten.{n}.default" for n in UNARY_NAMES), "aten.silu.default")


def _unary_inputs(dtype, shape=(6, 16)):
    x = randn(*shape, dtype=dtype)
    pos = (torch.rand(*shape) * 3 + 0.1).to(DEVICE, dtype)
    unit = (torch.rand(*shape) * 1.8 - 0.9).to(DEVICE, dtype)
    gt1 = (torch.rand(*shape) * 3 + 1.1).to(DEVICE, dtype)
    return x, pos, unit, gt1


def _unary_fn(x, pos, unit, gt1):
    outs = [getattr(torch, n)(x) for n in UNARY_ANY]
    outs += [getattr(torch, n)(pos) for n in UNARY_POS]
    outs += [getattr(torch, n)(unit) for n in UNARY_UNIT]
    outs += [getattr(torch, n)(gt1) for n in UNARY_GT1]
    outs.append(F.silu(x))
    return tuple(outs)


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_float(dtype):
    x, pos, unit, gt1 = _unary_inputs(dtype)
    # one non-contiguous (transposed) and one strided-slice input
    x = noncontig(x)
    pos = torch.cat([pos, pos], dim=1)[:, ::2]
    check_parity(_unary_fn, x, pos, unit, gt1, expect_ops=UNARY_OPS, scale=2)


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
def test_unary_float_of_integers(dtype):
    # Integer/bool inputs compute in the default float dtype.
    a = randn(4, 8, dtype=dtype)
    pos = randn(4, 8, dtype=dtype).abs() + 1 if dtype != torch.bool else a

    def fn(a, pos):
        return torch.exp(a), torch.sin(a), torch.sigmoid(a), torch.sqrt(pos), torch.log(pos), torch.erf(a)

    check_parity(fn, a, pos, expect_ops=["aten.exp.default", "aten.sin.default", "aten.sigmoid.default",
                                          "aten.sqrt.default", "aten.log.default", "aten.erf.default"])


def test_unary_float_0dim_and_size1():
    x = randn(1, 5, 1)
    s = scalar()

    def fn(x, s):
        return torch.exp(x) + torch.tanh(s), torch.rsqrt(s.abs() + 0.5), torch.log1p(x.abs())

    check_parity(fn, x, s, expect_ops=["aten.exp.default", "aten.tanh.default", "aten.rsqrt.default",
                                       "aten.log1p.default", "aten.abs.default"])


# --- unary ops that keep the dtype ----------------------------------------------------

ROUNDING = _ops("aten.floor.default", "aten.ceil.default", "aten.round.default", "aten.trunc.default")
SAME_FLOAT = _ops("aten.abs.default", "aten.neg.default", "aten.relu.default", "aten.sign.default") + ROUNDING


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_same_float(dtype):
    x = randn(5, 8, dtype=dtype) * 3
    x[0, :4] = torch.tensor([0.5, -0.5, 1.5, -2.5])  # round half to even
    x[1, 0] = 0

    def fn(x):
        return (torch.abs(x), torch.neg(x), torch.relu(x), torch.sign(x), torch.floor(x), torch.ceil(x),
                torch.round(x), torch.trunc(x))

    check_parity(fn, noncontig(x), expect_ops=SAME_FLOAT)


@pytest.mark.parametrize("dtype", INTS)
def test_unary_same_int(dtype):
    x = randn(5, 8, dtype=dtype)
    x[0, 0] = 0

    def fn(x):
        return (torch.abs(x), torch.neg(x), torch.relu(x), torch.sign(x), torch.bitwise_not(x), torch.floor(x),
                torch.ceil(x), torch.round(x), torch.trunc(x))

    check_parity(fn, x[:, ::2], expect_ops=_ops("aten.abs.default", "aten.neg.default", "aten.relu.default",
                                                 "aten.sign.default", "aten.bitwise_not.default",
                                                 "aten.floor.default", "aten.trunc.default"))


def test_unary_bool():
    b = randn(4, 8, dtype=torch.bool)

    def fn(b):
        return torch.bitwise_not(b), torch.logical_not(b), ~b & torch.logical_not(b)

    check_parity(fn, b, expect_ops=["aten.bitwise_not.default", "aten.logical_not.default"])


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32])
def test_logical_not(dtype):
    x = randn(4, 8, dtype=dtype)
    x[0, :3] = 0
    check_parity(lambda x: torch.logical_not(x), x, expect_ops=_ops("aten.logical_not.default"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_frac(dtype):
    x = randn(4, 8, dtype=dtype) * 4
    # core aten decomposes frac; reachable from an undecomposed graph
    check_aten(lambda x: aten.frac.default(x), x, expect_ops=_ops("aten.frac.default"))


# --- predicates -----------------------------------------------------------------------

PREDICATES = ["isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit"]


def _special(dtype):
    x = randn(4, 8, dtype=dtype)
    x[0, :6] = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0])
    return x


@pytest.mark.parametrize("dtype", FLOATS)
def test_predicates(dtype):
    x = _special(dtype)

    def fn(x):
        return tuple(getattr(aten, n).default(x) for n in PREDICATES)

    check_aten(fn, x, expect_ops=_ops(*(f"aten.{n}.default" for n in PREDICATES)))
    # through torch.compile (isneginf/isposinf decompose there)
    check_parity(lambda x: (torch.isnan(x), torch.isinf(x), torch.isfinite(x), torch.signbit(x)), x,
                 expect_ops=["aten.isnan.default", "aten.isinf.default", "aten.signbit.default"])


def test_predicates_on_integers_fall_back():
    i = randn(4, 8, dtype=torch.int32)
    check_aten(lambda i: (aten.isnan.default(i), aten.isinf.default(i), aten.abs.default(i)), i,
               expect_ops=["aten.abs.default"])
    assert "aten.isnan.default" not in fused_ops()


# --- binary arithmetic ----------------------------------------------------------------

ARITH = _ops("aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor")


@pytest.mark.parametrize("dtype", FLOATS)
def test_arith_float_broadcast(dtype):
    a = randn(4, 1, 8, dtype=dtype)
    b = randn(8, dtype=dtype)
    s = scalar(dtype)  # 0-dim
    c = randn(8, 4, dtype=dtype).t()  # non-contiguous [4, 8]

    def fn(a, b, s, c):
        return (a + b, a - b, a * b, a / (b.abs() + 0.5), torch.add(a, b, alpha=2), torch.sub(a, b, alpha=0.5),
                a + s, s * b, c + b, c * 2.5, 3 - c, c / 3, 1.5 / (c.abs() + 0.5), s - 1)

    check_parity(fn, a, b, s, c, expect_ops=ARITH)


@pytest.mark.parametrize("dtype", INTS)
def test_arith_int(dtype):
    a = randn(4, 1, 8, dtype=dtype)
    b = randn(8, dtype=dtype)
    s = torch.tensor(3, dtype=torch.int64)  # 0-dim int64 does not promote an int32 tensor

    def fn(a, b, s):
        return a + b, a - b, a * b, torch.add(a, b, alpha=3), torch.sub(a, b, alpha=-2), a * 7, a + s, a * s, b - 2

    check_parity(fn, a, b, s, expect_ops=["aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor"])


def test_arith_mixed_dtypes():
    h = randn(4, 8, dtype=torch.float16)
    bf = randn(4, 8, dtype=torch.bfloat16)
    f = randn(8)
    i = randn(4, 8, dtype=torch.int32)
    l = randn(8, dtype=torch.int64)
    fs = scalar(torch.float32)  # 0-dim fp32 does not promote fp16
    b = randn(4, 8, dtype=torch.bool)

    def fn(h, bf, f, i, l, fs, b):
        return (h + f, bf * f, h + bf, i + h, i * 1.5, i + l, l * h, h * fs, i + fs, b + i, b * h, b + 1.5,
                i - fs, h / i.abs().add(1), i * True)

    check_parity(fn, h, bf, f, i, l, fs, b, expect_ops=["aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor",
                                                          "aten.div.Tensor"])


def test_mul_bool():
    a, b = randn(4, 8, dtype=torch.bool), randn(8, dtype=torch.bool)
    check_parity(lambda a, b: a * b, a, b, expect_ops=["aten.mul.Tensor"])


def test_scalar_overloads():
    x = randn(4, 8)
    i = randn(4, 8, dtype=torch.int32)

    def fn(x, i):
        return (aten.add.Scalar(x, 2), aten.sub.Scalar(x, 2.5), aten.mul.Scalar(x, 3), aten.div.Scalar(x, 3),
                aten.add.Scalar(i, 2), aten.mul.Scalar(i, 3), aten.sub.Scalar(i, 5), aten.div.Scalar(i, 4),
                aten.add.Scalar(i, 0.5), aten.mul.Scalar(i, 1.5))

    check_parity(fn, x, i, expect_ops=_ops("aten.add.Scalar", "aten.sub.Scalar", "aten.mul.Scalar",
                                           "aten.div.Scalar"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_rsub(dtype):
    a, b = randn(4, 1, 8, dtype=dtype), randn(8, dtype=dtype)

    def fn(a, b):
        return aten.rsub.Tensor(a, b), aten.rsub.Tensor(a, b, alpha=2), aten.rsub.Scalar(a, 3), aten.rsub.Scalar(a, 5, 2)

    check_aten(fn, a, b, expect_ops=_ops("aten.rsub.Tensor", "aten.rsub.Scalar"))


# --- division with rounding modes -----------------------------------------------------


def _nonzero(*shape, dtype):
    t = randn(*shape, dtype=dtype)
    return torch.where(t == 0, torch.ones_like(t), t)


@pytest.mark.parametrize("dtype", INTS)
def test_int_division(dtype):
    a = randn(4, 1, 8, dtype=dtype) * 3
    b = _nonzero(8, dtype=dtype)
    a[0, 0, :4] = torch.tensor([-7, 7, -8, 0])

    def fn(a, b):
        return (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"), a // b,
                a / b, torch.div(a, b), a // 3, a // -3, torch.div(a, -3, rounding_mode="trunc"), a / 4,
                torch.div(a, 2, rounding_mode="floor"))

    check_parity(fn, a, b, expect_ops=_ops("aten.div.Tensor_mode", "aten.div.Tensor"))


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_division_modes(dtype):
    if dtype == torch.float32:
        a = randn(4, 1, 8) * 5
        b = randn(8)
        b = torch.where(b.abs() < 0.25, torch.full_like(b, 0.5), b)
        # aten's floor division is exact on the remainder: 1 // 0.1 == 9, not floor(1 / 0.1) == 10
        a[0, 0, :5] = torch.tensor([1.0, -1.0, 0.3, 7.0, 0.0])
        b[:5] = torch.tensor([0.1, 0.1, -0.1, 0.7, -3.0])
    else:
        # fp16/bf16: aten's own kernels disagree (CPU vectorized vs scalar loop, CUDA) on whether
        # the quotient is rounded to the low-precision dtype before floor/trunc, so use inputs
        # whose quotients are never within rounding distance of an integer without being one.
        a = torch.randint(-20, 21, (4, 1, 8)).to(DEVICE, dtype)
        b = torch.tensor([0.5, -0.5, 1, -1, 2, -3, 3, -4]).to(DEVICE, dtype)
    z = torch.tensor([0.0, 2.0, -0.0, 1.0, 0.0, 3.0, -2.0, 0.0]).to(DEVICE, dtype)  # division by zero
    a[1, 0, :] = torch.tensor([0.0, -0.0, 1.0, -1.0, 5.0, 0.0, 3.0, -2.0]).to(dtype)  # 0 / 0, x / 0

    def fn(a, b, z):
        out = (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"), a // b,
               a // 0.75, a // -1.5, torch.div(a, -1.5, rounding_mode="trunc"), a // z, a // 0.0,
               torch.div(a, z, rounding_mode="trunc"))
        if a.dtype == torch.float32:
            out += (a // 0.1, a // -0.1)
        return out

    check_parity(fn, a, b, z, expect_ops=["aten.div.Tensor_mode"])


def test_floor_divide_overloads():
    a = randn(4, 8, dtype=torch.int64) * 3
    b = _nonzero(4, 8, dtype=torch.int64)
    x = randn(4, 8) * 4

    def fn(a, b, x):
        return (aten.floor_divide.default(a, b), aten.floor_divide.Scalar(a, -3), aten.floor_divide.Scalar(x, 0.7),
                aten.div.Tensor_mode(a, b, rounding_mode=None), aten.div.Scalar_mode(a, 2, rounding_mode=None),
                aten.div.Scalar_mode(a, -3, rounding_mode="floor"), aten.div.Scalar_mode(a, -3, rounding_mode="trunc"),
                aten.div.Scalar_mode(x, 0.7, rounding_mode="floor"), aten.div.Scalar(a, 3))

    check_aten(fn, a, b, x, expect_ops=_ops("aten.floor_divide.default", "aten.floor_divide.Scalar",
                                            "aten.div.Scalar_mode"))


@pytest.mark.parametrize("dtype", FLOATS)
def test_remainder_fmod_atan2(dtype):
    a = randn(4, 1, 8, dtype=dtype) * 5
    b = randn(8, dtype=dtype)
    b = torch.where(b.abs() < 0.25, torch.full_like(b, 0.5), b)

    def fn(a, b):
        return (torch.remainder(a, b), torch.fmod(a, b), torch.remainder(a, 1.5), torch.fmod(a, -1.5),
                torch.atan2(a, b), torch.remainder(a, -2))

    check_parity(fn, a, b, expect_ops=_ops("aten.remainder.Tensor", "aten.fmod.Tensor", "aten.remainder.Scalar",
                                           "aten.fmod.Scalar", "aten.atan2.default"), scale=2)


@pytest.mark.parametrize("dtype", INTS)
def test_atan2_integers(dtype):
    a, b = randn(4, 1, 8, dtype=dtype), randn(8, dtype=dtype)
    check_parity(lambda a, b: torch.atan2(a, b), a, b, expect_ops=["aten.atan2.default"])


def test_integer_remainder_falls_back():
    a = randn(4, 8, dtype=torch.int32)
    b = _nonzero(4, 8, dtype=torch.int32)
    check_aten(lambda a, b: (aten.remainder.Tensor(a, b), aten.fmod.Tensor(a, b), aten.neg.default(a)), a, b,
               expect_ops=["aten.neg.default"])
    ops = fused_ops()
    assert "aten.remainder.Tensor" not in ops and "aten.fmod.Tensor" not in ops


# --- pow ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_float(dtype):
    x = randn(4, 1, 8, dtype=dtype)
    pos = (torch.rand(8) * 2 + 0.2).to(DEVICE, dtype)

    def fn(x, pos):
        return (x ** 2, x ** 3, pos ** 0.5, pos ** 1.5, pos ** -1, pos ** -0.5, x ** 1, x ** 0, pos ** x,
                2.0 ** x, torch.pow(pos, 2.5), 3 ** x)

    check_parity(fn, x, pos, expect_ops=_ops("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar"),
                 scale=2)


@pytest.mark.parametrize("dtype", INTS)
def test_pow_int(dtype):
    x = randn(4, 8, dtype=dtype)
    e = randn(4, 8, dtype=dtype).abs() % 4

    def fn(x, e):
        return x ** 2, x ** 3, x ** e, x ** 0, 2 ** e, x ** 1, x.float() ** 2, x.float() ** e, 1.5 ** e

    check_parity(fn, x, e, expect_ops=["aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"])


def test_pow_int_float_exponent():
    # int tensor ** float -> float result
    x = randn(4, 8, dtype=torch.int32).abs() + 1
    check_parity(lambda x: (x ** 0.5, x ** 1.5, x ** 2.0), x, expect_ops=["aten.pow.Tensor_Scalar"])


# --- maximum / minimum / comparisons --------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_maximum_minimum(dtype):
    a = randn(4, 1, 8, dtype=dtype)
    b = randn(8, dtype=dtype)
    if dtype.is_floating_point:
        a[0, 0, :3] = torch.tensor([math.nan, math.inf, -math.inf])
        b[4] = math.nan

    def fn(a, b):
        return torch.maximum(a, b), torch.minimum(a, b), torch.maximum(a, b.t() if b.dim() == 2 else b).neg()

    check_parity(fn, a, b, expect_ops=_ops("aten.maximum.default", "aten.minimum.default"))


def test_maximum_mixed_dtypes():
    h, f, i = randn(4, 8, dtype=torch.float16), randn(8), randn(4, 8, dtype=torch.int32)
    check_parity(lambda h, f, i: (torch.maximum(h, f), torch.minimum(i, h), torch.maximum(i, f)), h, f, i,
                 expect_ops=["aten.maximum.default", "aten.minimum.default"])


CMP = ["eq", "ne", "lt", "le", "gt", "ge"]
CMP_OPS = _ops(*(f"aten.{n}.Tensor" for n in CMP), *(f"aten.{n}.Scalar" for n in CMP))


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_comparisons(dtype):
    a = randn(4, 1, 8, dtype=dtype)
    b = randn(8, dtype=dtype)
    a[0, 0, :8] = b  # some equal elements

    def fn(a, b):
        return tuple(getattr(torch, n)(a, b) for n in CMP) + tuple(getattr(torch, n)(a, 1) for n in CMP)

    check_parity(fn, a, b, expect_ops=CMP_OPS)


def test_comparisons_mixed_and_nan():
    i = randn(4, 8, dtype=torch.int32)
    h = _special(torch.float16)
    f = randn(8)
    s = scalar(torch.float64)

    h[1, :3] = 0.1  # fp16(0.1) == 0.0999755859375: aten rounds the scalar 0.1 to fp16 too
    bf = torch.full((4, 8), 0.1, dtype=torch.bfloat16, device=DEVICE)
    s32 = torch.tensor(0.1, device=DEVICE)

    def fn(i, h, f, s, bf, s32):
        return (i < 0.5, i == 2.0, i > h, h == f, h != h, h < s, i >= f, i <= s, h > 0.1, h == 0.1, h >= 0.1,
                bf == 0.1, bf < 0.1, h == s32, bf <= s32, h.eq(s32), i == s32)

    check_parity(fn, i, h, f, s, bf, s32, expect_ops=["aten.lt.Scalar", "aten.eq.Scalar", "aten.gt.Tensor", "aten.ne.Tensor"])


# --- logical and bitwise -------------------------------------------------------------

LOGICAL = _ops("aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default")


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.float32, torch.bfloat16])
def test_logical(dtype):
    a, b = randn(4, 1, 8, dtype=dtype), randn(8, dtype=dtype)
    if dtype != torch.bool:
        a = a * (randn(4, 1, 8, dtype=torch.bool)).to(dtype)  # zeros

    def fn(a, b):
        return torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_xor(a, b)

    check_parity(fn, a, b, expect_ops=LOGICAL)


BITWISE = ["bitwise_and", "bitwise_or", "bitwise_xor"]
BITWISE_OPS = _ops(*(f"aten.{n}.Tensor" for n in BITWISE), *(f"aten.{n}.Scalar" for n in BITWISE))


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
def test_bitwise(dtype):
    a, b = randn(4, 1, 8, dtype=dtype), randn(8, dtype=dtype)
    k = True if dtype == torch.bool else 5

    def fn(a, b):
        return (a & b, a | b, a ^ b, ~a) + tuple(getattr(aten, n).Scalar(a, k) for n in BITWISE)

    check_parity(fn, a, b, expect_ops=BITWISE_OPS + ["aten.bitwise_not.default"])


def test_bitwise_mixed_int_widths():
    a, b = randn(4, 8, dtype=torch.int32), randn(8, dtype=torch.int64)
    c = randn(4, 8, dtype=torch.bool)
    check_parity(lambda a, b, c: (a & b, a | c, b ^ c, a ^ -1), a, b, c,
                 expect_ops=["aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor"])


# --- where / masked_fill / clamp ----------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.bool])
def test_where(dtype):
    c = randn(4, 1, 8, dtype=torch.bool)
    a, b = randn(4, 1, 8, dtype=dtype), randn(8, dtype=dtype)
    if dtype.is_floating_point:
        a[0, 0, 0] = math.nan
        b[1] = math.inf
    s = scalar(dtype)
    fill = True if dtype == torch.bool else 2

    def fn(c, a, b, s):
        return (torch.where(c, a, b), torch.where(c, a, fill), torch.where(c, fill, b), torch.where(c, s, a),
                a.masked_fill(c, fill), a.masked_fill(c, s), torch.where(c, a.t() if a.dim() == 2 else a, b))

    check_parity(fn, c, a, b, s, expect_ops=_ops("aten.where.self", "aten.masked_fill.Scalar",
                                                 "aten.masked_fill.Tensor"))


def test_where_promotion():
    c = randn(4, 8, dtype=torch.bool)
    h, f, i = randn(4, 8, dtype=torch.float16), randn(8), randn(4, 8, dtype=torch.int32)
    cf = randn(4, 8)  # non-bool condition is not allowed by torch.where; masked_fill with float value

    def fn(c, h, f, i, cf):
        return (torch.where(c, h, f), torch.where(c, i, h), torch.where(c, i, 0.5), torch.where(c, 1.5, i),
                i.masked_fill(c, 3), h.masked_fill(c, -math.inf), torch.where(cf > 0, cf, math.nan))

    check_parity(fn, c, h, f, i, cf, expect_ops=["aten.where.self", "aten.masked_fill.Scalar"])


def test_where_scalar_overloads():
    c = randn(4, 8, dtype=torch.bool)
    x = randn(4, 8, dtype=torch.float16)
    i = randn(4, 8, dtype=torch.int64)

    def fn(c, x, i):
        return (aten.where.ScalarSelf(c, 1.5, x), aten.where.ScalarOther(c, x, -2.0), aten.where.Scalar(c, 1.0, 2.0),
                aten.where.ScalarOther(c, i, 3), aten.where.Scalar(c, 1, 2), aten.where.ScalarSelf(c, 0.5, i))

    check_aten(fn, c, x, i, expect_ops=_ops("aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar"))


@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp(dtype):
    x = _special(dtype)
    lo, hi = randn(8, dtype=dtype) - 0.5, randn(8, dtype=dtype) + 0.5

    def fn(x, lo, hi):
        return (torch.clamp(x, -0.5, 0.5), torch.clamp(x, min=0.1), torch.clamp(x, max=-0.1), torch.clamp(x, lo, hi),
                torch.clamp(x, min=lo), torch.clamp(x, max=hi), torch.clamp(x, 1.0, -1.0), x.clamp_min(0.0),
                x.clamp_max(0.0))

    check_parity(fn, x, lo, hi, expect_ops=_ops("aten.clamp.default", "aten.clamp.Tensor"))


def test_clamp_nan_bounds():
    x = randn(4, 8)
    lo, hi = randn(8) - 1, randn(8) + 1
    lo[2] = math.nan
    hi[5] = math.nan

    def fn(x, lo, hi):
        return torch.clamp(x, lo, hi), torch.clamp(x, min=lo), torch.clamp(x, max=hi), torch.clamp(x, math.nan, 1.0)

    check_parity(fn, x, lo, hi, expect_ops=["aten.clamp.Tensor", "aten.clamp.default"])


@pytest.mark.parametrize("dtype", INTS)
def test_clamp_int(dtype):
    x, lo = randn(4, 8, dtype=dtype), randn(8, dtype=dtype) - 2

    def fn(x, lo):
        return torch.clamp(x, -3, 4), torch.clamp(x, min=lo), torch.clamp(x, max=2), torch.clamp(x, 0.5, 2.5)

    check_parity(fn, x, lo, expect_ops=["aten.clamp.default", "aten.clamp.Tensor"])


def test_clamp_min_max_overloads():
    x, lo, hi = _special(torch.float32), randn(8) - 0.5, randn(8) + 0.5
    lo[3], hi[6] = math.nan, math.nan  # NaN in a tensor bound propagates
    i = randn(4, 8, dtype=torch.int32)

    def fn(x, lo, hi, i):
        return (aten.clamp_min.default(x, 0.2), aten.clamp_max.default(x, -0.2), aten.clamp_min.Tensor(x, lo),
                aten.clamp_max.Tensor(x, hi), aten.clamp_min.default(i, -2), aten.clamp_max.default(i, 3))

    check_aten(fn, x, lo, hi, i, expect_ops=_ops("aten.clamp_min.default", "aten.clamp_max.default",
                                                 "aten.clamp_min.Tensor", "aten.clamp_max.Tensor"))


@pytest.mark.parametrize("dtype", FLOATS)
def test_hardtanh_and_relu6(dtype):
    x = _special(dtype) * 4

    def fn(x):
        return F.hardtanh(x), F.relu6(x), F.hardtanh(x, -0.25, 2.5)

    check_parity(fn, x, expect_ops=_ops("aten.hardtanh.default"))


def test_relu6_backward():
    x = (randn(6, 16) * 4).requires_grad_()
    check_parity(lambda x: F.relu6(x * 1.5) * x, x, expect_ops=["aten.hardtanh.default"], backward=True)


# --- casts and copies -----------------------------------------------------------------


def test_casts():
    x = randn(4, 8) * 5
    x[0, :4] = torch.tensor([-2.7, 2.7, -0.5, 0.0])
    i = randn(4, 8, dtype=torch.int32)
    b = randn(4, 8, dtype=torch.bool)

    def fn(x, i, b):
        return (x.to(torch.float16) * 2, x.to(torch.bfloat16) + 1, x.to(torch.int32) + 1, x.to(torch.int64) * 2,
                x.to(torch.bool) | b, i.to(torch.float16) * 0.5, i.to(torch.int64) * 3, b.to(torch.float32) + x,
                i.to(torch.bool) & b, x.half().to(torch.bfloat16) * 3, x.clone() * 2)

    check_parity(fn, x, i, b, expect_ops=["aten._to_copy.default", "aten.clone.default"])


def test_copy_ops():
    x = randn(4, 8)

    def fn(x):
        return (aten.mul.Tensor(aten._to_copy.default(x, dtype=torch.float16), 2),
                aten.add.Tensor(aten._to_copy.default(x), 1), aten.mul.Tensor(aten.alias.default(x), 3),
                aten.sub.Tensor(aten.lift_fresh_copy.default(x), 1), aten.mul.Tensor(aten.clone.default(x), 4),
                aten.mul.Tensor(prims.convert_element_type.default(x, torch.bfloat16), 5),
                aten.add.Tensor(prims.convert_element_type.default(x, torch.int32), 1))

    check_aten(fn, x, expect_ops=_ops("aten._to_copy.default", "aten.alias.default", "aten.lift_fresh_copy.default",
                                      "aten.clone.default", "prims.convert_element_type.default"))


@pytest.mark.parametrize("move_kernels", ["", "cat,_to_copy"])
def test_copies_alone_run_in_nvfuser_only_when_counted_as_compute(move_kernels, monkeypatch):
    # a clone alone is never compute; a cast is when ``_to_copy`` is in partition.MOVE_KERNELS
    # (the default, Note [Data movement counted as compute]), and the clone beside it joins
    # its region; the values are the same either way
    set_move_kernels(monkeypatch, move_kernels)
    x = randn(4, 8)
    check_aten(lambda x: (aten.clone.default(x), aten._to_copy.default(x, dtype=torch.float16)), x)
    assert fused_ops() == (["aten.clone.default", "aten._to_copy.default"] if move_kernels else [])
    check_aten(lambda x: aten.clone.default(x), x)
    assert fused_ops() == []


# --- activations ------------------------------------------------------------------------

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
}
ACTIVATION_FWD_OPS = {
    "gelu": ["aten.gelu.default"],
    "gelu_tanh": ["aten.gelu.default"],
    "silu": ["aten.silu.default"],
    "sigmoid": ["aten.sigmoid.default"],
    "tanh": ["aten.tanh.default"],
    "relu": ["aten.relu.default"],
    "leaky_relu": ["aten.leaky_relu.default"],
}
_ops(*(op for ops in ACTIVATION_FWD_OPS.values() for op in ops))
ACTIVATION_BWD_OPS = {
    "gelu": ["aten.erf.default", "aten.exp.default", "aten.mul.Tensor"],
    "gelu_tanh": ["aten.tanh.default", "aten.sub.Tensor", "aten.mul.Tensor"],
    "silu": ["aten.exp.default", "aten.reciprocal.default", "aten.mul.Tensor"],
    "sigmoid": ["aten.sub.Tensor", "aten.mul.Tensor"],
    "tanh": ["aten.sub.Tensor", "aten.mul.Tensor"],
    "relu": ["aten.where.self"],
    "leaky_relu": ["aten.where.self", "aten.mul.Tensor"],
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_fwd_bwd(name, dtype):
    x = randn(4, 16, dtype=dtype, requires_grad=True)
    f = ACTIVATIONS[name]
    check_parity(lambda x: f(x) * 2, x, expect_ops=ACTIVATION_FWD_OPS[name], backward=True)
    # core aten decomposes the *_backward ops, so the backward regions hold their pieces
    bwd = {op for r in nb.reports() if r.kind == "backward" for ops in r.partition.regions for op in ops}
    missing = set(ACTIVATION_BWD_OPS[name]) - bwd
    assert not missing, f"backward ops not fused: {missing}; reports: {[r.summary() for r in nb.reports()]}"


BACKWARD_OPS = _ops("aten.gelu_backward.default", "aten.silu_backward.default", "aten.sigmoid_backward.default",
                    "aten.tanh_backward.default", "aten.threshold_backward.default")


@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_backward_ops(dtype):
    # core aten decomposes these; graphs from other tables keep them
    g, x = randn(4, 16, dtype=dtype), randn(4, 16, dtype=dtype) * 2
    y = torch.sigmoid(x)

    def fn(g, x, y):
        return (aten.gelu_backward.default(g, x), aten.gelu_backward.default(g, x, approximate="tanh"),
                aten.silu_backward.default(g, x), aten.sigmoid_backward.default(g, y),
                aten.tanh_backward.default(g, y), aten.threshold_backward.default(g, x, 0.0),
                aten.threshold_backward.default(g, x, 0.5))

    check_aten(fn, g, x, y, expect_ops=BACKWARD_OPS, scale=2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_addcmul(dtype):
    a, b, w = randn(4, 1, 8, dtype=dtype), randn(8, dtype=dtype), torch.rand(4, 1, 8).to(DEVICE, dtype)
    a[0] = a[0] + 1000  # a + 1 * (b - a) would lose b's low bits; aten's lerp returns b exactly at w = 1
    w[0, 0, :4] = torch.tensor([1.0, 0.5, -0.6, 0.0])
    c = randn(4, 8, dtype=dtype)

    def fn(a, b, w, c):
        return (aten.lerp.Scalar(a, b, 0.3), aten.lerp.Scalar(a, b, 0.8), aten.lerp.Scalar(a, b, 1.0),
                aten.lerp.Scalar(a, b, -0.7), aten.lerp.Tensor(a, b, w),
                aten.addcmul.default(a, b, c), aten.addcmul.default(a, b, c, value=-0.5))

    check_aten(fn, a, b, w, c, expect_ops=_ops("aten.lerp.Scalar", "aten.lerp.Tensor", "aten.addcmul.default"),
               scale=2)


def test_lerp_addcmul_compiled():
    a, b, w = randn(4, 8), randn(8), torch.rand(4, 8, device=DEVICE)
    check_parity(lambda a, b, w: (torch.lerp(a, b, 0.3), torch.lerp(a, b, w), torch.addcmul(a, b, w, value=2)),
                 a, b, w, expect_ops=["aten.mul.Tensor"])


# --- NaN / Inf propagation --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_inf_propagation(dtype):
    x = _special(dtype)
    y = _special(dtype).flip(1)
    c = randn(4, 8, dtype=torch.bool)

    def fn(x, y, c):
        return (torch.clamp(x, -1, 1), torch.maximum(x, y), torch.minimum(x, y), torch.where(c, x, y),
                torch.maximum(x, torch.zeros_like(x)), F.relu(x), x.clamp_min(0), torch.clamp(x, min=y))

    check_parity(fn, x, y, c, expect_ops=["aten.clamp.default", "aten.maximum.default", "aten.minimum.default",
                                          "aten.where.self", "aten.relu.default"])


# --- coverage -------------------------------------------------------------------------


def test_every_translator_is_tested():
    from nvfuser_dtensor_backend import fusion  # noqa: F401  (registers every translator)
    from nvfuser_dtensor_backend.registry import TRANSLATORS

    registered = {str(t) for t, e in TRANSLATORS.items() if e.fn.__module__.endswith("translators.elementwise")}
    assert registered, "no elementwise translators found"
    missing = sorted(registered - COVERED)
    assert not missing, f"elementwise translators without a parity test: {missing}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_trunc_division_of_half_types_rounds_the_quotient_like_aten(dtype):
    """Regression (OpInfo sweep): ATen computes trunc(a / b) with a / b rounded to the half
    type (c10's BFloat16/Half operators), so 2.996 becomes 3 before the trunc."""
    torch.manual_seed(0)
    a = (torch.randn(4096) * 20).to(dtype)
    b = (torch.randn(4096) + 0.1).to(dtype)
    fn = lambda a, b: torch.div(a, b, rounding_mode="trunc") * 2  # noqa: E731
    assert torch.equal(torch.compile(fn, backend="nvfuser_dtensor")(a, b), fn(a, b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_floor_division_of_half_types_is_exact(dtype):
    """floor(a / b) of half inputs equals the float64 answer. (Eager on CPU is off by one on
    some of these, e.g. -8.375 // 0.0491 gives -170, not -171: not a reference here.)"""
    torch.manual_seed(0)
    a = (torch.randn(4096) * 20).to(dtype)
    b = (torch.randn(4096) + 0.1).to(dtype)
    got = torch.compile(lambda a, b: torch.div(a, b, rounding_mode="floor"), backend="nvfuser_dtensor")(a, b)
    exact = torch.div(a.double(), b.double(), rounding_mode="floor").to(dtype)
    assert torch.equal(got, exact)


ROUND_DECIMALS = _ops("aten.round.decimals")


@pytest.mark.parametrize("decimals", [0, 2, 3, -1, -3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_round_decimals_matches_aten(decimals, dtype):
    torch.manual_seed(0)
    x = (torch.randn(2048) * 300).to(dtype)
    fn = lambda x: torch.round(x, decimals=decimals) + 1  # noqa: E731
    got = torch.compile(fn, backend="nvfuser_dtensor")(x)
    fused = {op for r in nb.reports() for region in r.partition.regions for op in region}
    assert set(ROUND_DECIMALS) <= fused, fused
    assert torch.equal(got, fn(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_to_copy_without_a_set(monkeypatch, tmp_path, dtype):
    """Note [Casts without a set]: with CAST_WITHOUT_SET a cast to another dtype reads its input
    directly (the definition casts ``tv0`` itself to it), and a copy to the same dtype is still
    a new tensor; values are eager's."""
    from nvfuser_dtensor_backend.translators import elementwise

    monkeypatch.setattr(elementwise, "CAST_WITHOUT_SET", True)
    other, name = (torch.float64, "Double") if dtype == torch.float32 else (torch.float32, "Float")

    def f(x):
        return x.to(other) * 2, x.to(dtype, copy=True), torch.ops.aten._to_copy(x)

    x = randn(6, 16, dtype=dtype)
    nb.clear_cache()
    got = compile_fn(f, dump_dir=str(tmp_path))(x)
    (definition,) = [p.read_text().split("# nvFuser IR:")[0] for p in tmp_path.glob("*.py")]
    assert f"fd.ops.cast(tv0, dtype=DataType.{name})" in definition, definition
    for g, e in zip(got, f(x)):
        assert g.dtype == e.dtype
        assert_close(g, e)
    assert all(g.data_ptr() != x.data_ptr() for g in got[1:])
