"""Pointwise math, comparisons, casts, where/masked_fill, clamp, activations.

Note [Pointwise promotion]
Every pointwise translator casts its tensor operands to the dtype aten computes in (the
promoted dtype of the inputs, with fp16/bf16 widened to fp32) before calling nvFuser, so
nvFuser's own promotion rules never decide a result; fusion.py then casts the result to the
node's dtype, which rounds exactly where aten rounds.
"""

from __future__ import annotations

import math

import torch
from torch import fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..options import env_flag
from ..registry import translator
from ._common import LOW_PRECISION, cast, compute_dtype, float_inputs, is_tensor, materialized, out_dtype, upcast

aten = torch.ops.aten
prims = torch.ops.prims


def _arg_meta(node: fx.Node):
    return [a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args]


def out_dtype_of(node: fx.Node) -> torch.dtype:
    v = node.meta["val"]
    return v.dtype if isinstance(v, torch.Tensor) else torch.float32


def promote(ctx, *args, dtype: torch.dtype | None = None):
    """Cast tensor args to ``dtype`` (default: aten's computation dtype for this node)."""
    if dtype is None:
        dtype = compute_dtype(torch_result_type(ctx.node))
    return [cast(ctx, a, dtype) if is_tensor(a) else a for a in args]


def torch_result_type(node: fx.Node) -> torch.dtype:
    """aten's result dtype for the node's tensor and number operands."""
    # A symbolic scalar promotes like a constant of its kind.
    symbolic = {torch.SymBool: True, torch.SymInt: 1, torch.SymFloat: 1.0}
    operands = [symbolic.get(type(v), v) for v in _arg_meta(node)]
    operands = [v for v in operands if isinstance(v, (torch.Tensor, bool, int, float))]
    if not any(isinstance(v, torch.Tensor) for v in operands):
        return out_dtype_of(node)
    _, result = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return result


def no_bool_output(node: fx.Node) -> str | None:
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor) and v.dtype == torch.bool:
        return "bool arithmetic"
    return None


# --- unary float math ----------------------------------------------------------------

_UNARY_FLOAT = {
    aten.exp.default: "exp",
    aten.exp2.default: "exp2",
    aten.expm1.default: "expm1",
    aten.log.default: "log",
    aten.log2.default: "log2",
    aten.log10.default: "log10",
    aten.log1p.default: "log1p",
    aten.sqrt.default: "sqrt",
    aten.rsqrt.default: "rsqrt",
    aten.reciprocal.default: "reciprocal",
    aten.sin.default: "sin",
    aten.cos.default: "cos",
    aten.tan.default: "tan",
    aten.asin.default: "asin",
    aten.acos.default: "acos",
    aten.atan.default: "atan",
    aten.sinh.default: "sinh",
    aten.cosh.default: "cosh",
    aten.tanh.default: "tanh",
    aten.asinh.default: "asinh",
    aten.acosh.default: "acosh",
    aten.atanh.default: "atanh",
    aten.erf.default: "erf",
    aten.erfc.default: "erfc",
    aten.erfinv.default: "erfinv",
    aten.lgamma.default: "lgamma",
    aten.sigmoid.default: "sigmoid",
    aten.silu.default: "silu",
}


def _register_unary_float(target, name):
    @translator(target)
    def unary(ctx, a):
        (a,) = promote(ctx, a, dtype=compute_dtype(out_dtype(ctx)))
        return getattr(ctx.ops, name)(a)

    unary.__name__ = name


for _target, _name in _UNARY_FLOAT.items():
    _register_unary_float(_target, _name)


# Unary ops that keep the input dtype (integers too).
_UNARY_SAME = {
    aten.abs.default: "abs",
    aten.neg.default: "neg",
    aten.relu.default: "relu",
    aten.floor.default: "floor",
    aten.ceil.default: "ceil",
    aten.round.default: "round",
    aten.trunc.default: "trunc",
    aten.frac.default: "frac",
    aten.sign.default: "sign",
    aten.bitwise_not.default: "bitwise_not",
}


def _register_unary_same(target, name):
    @translator(target)
    def unary(ctx, a):
        (a,) = promote(ctx, a, dtype=compute_dtype(out_dtype(ctx)))
        if name in ("floor", "ceil", "round", "trunc") and not out_dtype(ctx).is_floating_point:
            return ctx.ops.set(a)  # identity on integers; nvFuser's integer overloads don't compile
        if name == "relu":  # where(x <= 0, 0, x) keeps NaN, as aten does
            zero = 0.0 if out_dtype(ctx).is_floating_point else 0
            return ctx.ops.where(ctx.ops.le(a, zero), zero, a)
        if name == "neg" and out_dtype(ctx) == torch.bool:
            raise NotImplementedError("neg of bool")
        return getattr(ctx.ops, name)(a)

    unary.__name__ = name


for _target, _name in _UNARY_SAME.items():
    _register_unary_same(_target, _name)


@translator(aten.logical_not.default)
def logical_not(ctx, a):
    return ctx.ops.logical_not(cast(ctx, a, torch.bool))


_PREDICATES = {
    aten.isnan.default: "isnan",
    aten.isinf.default: "isinf",
    aten.isfinite.default: "isfinite",
    aten.isneginf.default: "isneginf",
    aten.isposinf.default: "isposinf",
    aten.signbit.default: "signbit",
}


def _register_predicate(target, name):
    @translator(target, check=float_inputs)
    def predicate(ctx, a):
        # NOTE: nvFuser's isinf/isposinf/... do not compile for bf16/fp16 (H200, 0.2.36).
        return getattr(ctx.ops, name)(upcast(ctx, a))

    predicate.__name__ = name


for _target, _name in _PREDICATES.items():
    _register_predicate(_target, _name)


# --- binary arithmetic ---------------------------------------------------------------


@translator(aten.add.Tensor, aten.add.Scalar, check=no_bool_output)
def add(ctx, a, b, alpha=1):
    a, b = promote(ctx, a, b)
    if alpha != 1:
        b = ctx.ops.mul(b, alpha)
    return ctx.ops.add(a, b)


@translator(aten.sub.Tensor, aten.sub.Scalar, check=no_bool_output)
def sub(ctx, a, b, alpha=1):
    a, b = promote(ctx, a, b)
    if alpha != 1:
        b = ctx.ops.mul(b, alpha)
    return ctx.ops.sub(a, b)


@translator(aten.rsub.Tensor, aten.rsub.Scalar, check=no_bool_output)
def rsub(ctx, a, b, alpha=1):
    return sub(ctx, b, a, alpha)


@translator(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, a, b):
    if out_dtype(ctx) == torch.bool:
        return ctx.ops.logical_and(cast(ctx, a, torch.bool), cast(ctx, b, torch.bool))
    a, b = promote(ctx, a, b)
    return ctx.ops.mul(a, b)


@translator(aten.div.Tensor, aten.div.Scalar)
def div(ctx, a, b):
    # True division: integer operands divide as floats.
    dtype = compute_dtype(out_dtype(ctx))
    a, b = promote(ctx, a, b, dtype=dtype)
    if not is_tensor(a) and not is_tensor(b):
        return ctx.ops.div(float(a), b)
    a = float(a) if isinstance(a, (int, bool)) else a
    b = float(b) if isinstance(b, (int, bool)) else b
    return ctx.ops.div(a, b)


def _floor_divide_float(ctx, a, b):
    """aten's div_floor_floating: exact on the remainder, unlike floor(a / b) (1 // 0.1 is 9)."""
    ops = ctx.ops
    if not is_tensor(b) and b == 0:
        return ops.div(a, float(b))
    q = ops.div(a, b)
    mod = ops.fmod(a, b)
    div = ops.div(ops.sub(a, mod), b)
    mod_neg = ops.lt(mod, 0.0)
    if is_tensor(b):
        signs_differ = ops.ne(ops.lt(b, 0.0), mod_neg)
    else:
        signs_differ = ops.logical_not(mod_neg) if b < 0 else mod_neg
    div = ops.where(ops.logical_and(ops.ne(mod, 0.0), signs_differ), ops.sub(div, 1.0), div)
    floordiv = ops.floor(div)
    floordiv = ops.where(ops.gt(ops.sub(div, floordiv), 0.5), ops.add(floordiv, 1.0), floordiv)
    # a zero quotient keeps the sign of a / b
    out = ops.where(ops.eq(div, 0.0), ops.mul(q, 0.0), floordiv)
    if is_tensor(b):
        out = ops.where(ops.eq(b, 0.0), q, out)
    return out


def _floor_divide(ctx, a, b):
    if out_dtype(ctx).is_floating_point:
        return _floor_divide_float(ctx, a, b)
    # Integers: nvFuser's div truncates; step down where the signs differ and it was inexact.
    q = ctx.ops.div(a, b)
    r = ctx.ops.fmod(a, b)
    inexact = ctx.ops.ne(r, 0)
    signs_differ = ctx.ops.ne(ctx.ops.lt(a, 0), ctx.ops.lt(b, 0))
    return ctx.ops.where(ctx.ops.logical_and(inexact, signs_differ), ctx.ops.sub(q, 1), q)


def _floating_only(node: fx.Node) -> str | None:
    return None if out_dtype_of(node).is_floating_point else "needs a floating-point result"


@translator(aten.round.decimals, check=_floating_only)
def round_decimals(ctx, a, *, decimals=0):
    """ATen's round_decimals: nearbyint(a * 10^d) / 10^d, or nearbyint(a / 10^-d) * 10^-d for
    d <= 0, computed in fp32 for fp16/bf16 (checked against eager: no rounding in between)."""
    (a,) = promote(ctx, a, dtype=compute_dtype(out_dtype(ctx)))
    ops = ctx.ops
    scale = 10.0 ** abs(decimals)
    if decimals > 0:
        return ops.div(ops.round(ops.mul(a, scale)), scale)
    return ops.mul(ops.round(ops.div(a, scale)), scale)


@translator(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, a, b, rounding_mode=None):
    if rounding_mode is None:
        return div(ctx, a, b)
    a, b = promote(ctx, a, b)
    if rounding_mode == "trunc":
        q = ctx.ops.div(a, b)
        dtype = out_dtype(ctx)
        if dtype in (torch.bfloat16, torch.float16):
            # ATen computes trunc(a / b) with a / b in the half type (c10's BFloat16/Half
            # operators round), so 2.996 becomes 3 before the trunc; so do we.
            q = cast(ctx, cast(ctx, q, dtype), torch.float32)
        return ctx.ops.trunc(q) if dtype.is_floating_point else q
    return _floor_divide(ctx, a, b)


@translator(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx, a, b):
    a, b = promote(ctx, a, b)
    return _floor_divide(ctx, a, b)


def _nonzero_divisor(node: fx.Node) -> str | None:
    if not out_dtype_of(node).is_floating_point:
        return "integer remainder (division by zero is undefined in nvFuser)"
    return None


@translator(aten.remainder.Tensor, aten.remainder.Scalar, check=_nonzero_divisor)
def remainder(ctx, a, b):
    a, b = promote(ctx, a, b)
    return ctx.ops.remainder(a, b)


@translator(aten.fmod.Tensor, aten.fmod.Scalar, check=_nonzero_divisor)
def fmod(ctx, a, b):
    a, b = promote(ctx, a, b)
    return ctx.ops.fmod(a, b)


@translator(aten.atan2.default)
def atan2(ctx, a, b):
    # integer inputs divide as floats (the result is the default float dtype)
    a, b = promote(ctx, a, b, dtype=compute_dtype(out_dtype(ctx)))
    return ctx.ops.atan2(a, b)


@translator(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar, check=no_bool_output)
def pow(ctx, a, b):
    a, b = promote(ctx, a, b)
    if isinstance(b, (int, float)) and not isinstance(b, bool) and is_tensor(a):
        if b == 2:
            return ctx.ops.mul(a, a)
        if b == 0.5 and out_dtype(ctx).is_floating_point:
            return ctx.ops.sqrt(a)
        if b == 1:
            return ctx.ops.set(a)
    return ctx.ops.pow(a, b)


@translator(aten.maximum.default)
def maximum(ctx, a, b):
    a, b = promote(ctx, a, b)
    return _propagate_nan(ctx, ctx.ops.maximum(a, b), a, b)


@translator(aten.minimum.default)
def minimum(ctx, a, b):
    a, b = promote(ctx, a, b)
    return _propagate_nan(ctx, ctx.ops.minimum(a, b), a, b)


def _propagate_nan(ctx, out, *operands):
    # NOTE: aten's maximum/minimum/relu return NaN for a NaN operand; do not rely on the
    # device's fmax/fmin semantics for that.
    if not out_dtype(ctx).is_floating_point:
        return out
    for x in reversed(operands):
        if is_tensor(x):
            out = ctx.ops.where(ctx.ops.isnan(x), x, out)
    return out


_COMPARISONS = {
    "eq": (aten.eq.Tensor, aten.eq.Scalar),
    "ne": (aten.ne.Tensor, aten.ne.Scalar),
    "lt": (aten.lt.Tensor, aten.lt.Scalar),
    "le": (aten.le.Tensor, aten.le.Scalar),
    "gt": (aten.gt.Tensor, aten.gt.Scalar),
    "ge": (aten.ge.Tensor, aten.ge.Scalar),
}


def _round_to(value, dtype: torch.dtype):
    """A Python number as the nearest value of ``dtype`` (aten converts scalars to the
    common dtype before comparing: fp16 ``x == 0.1`` compares against fp16(0.1))."""
    if isinstance(value, float) and dtype in LOW_PRECISION:
        return float(torch.tensor(value, dtype=dtype).item())
    return value


def _register_comparison(name, targets):
    @translator(*targets)
    def compare(ctx, a, b):
        # Compare in the promoted dtype itself (not fp32): a 0-dim fp32 tensor or a Python
        # float compared with an fp16 tensor is rounded to fp16 first, as aten does.
        dtype = torch_result_type(ctx.node)
        a, b = promote(ctx, a, b, dtype=dtype)
        a, b = _round_to(a, dtype), _round_to(b, dtype)
        return getattr(ctx.ops, name)(a, b)

    compare.__name__ = name


for _name, _targets in _COMPARISONS.items():
    _register_comparison(_name, _targets)


_LOGICAL = {
    "logical_and": aten.logical_and.default,
    "logical_or": aten.logical_or.default,
}


def _register_logical(name, target):
    @translator(target)
    def logical(ctx, a, b):
        return getattr(ctx.ops, name)(cast(ctx, a, torch.bool), cast(ctx, b, torch.bool))

    logical.__name__ = name


for _name, _target in _LOGICAL.items():
    _register_logical(_name, _target)


@translator(aten.logical_xor.default)
def logical_xor(ctx, a, b):
    return ctx.ops.ne(cast(ctx, a, torch.bool), cast(ctx, b, torch.bool))


def _integer_inputs(node: fx.Node) -> str | None:
    for a in node.all_input_nodes:
        v = a.meta.get("val")
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
            return "bitwise op on floats"
    return None


_BITWISE = {
    "bitwise_and": (aten.bitwise_and.Tensor, aten.bitwise_and.Scalar),
    "bitwise_or": (aten.bitwise_or.Tensor, aten.bitwise_or.Scalar),
    "bitwise_xor": (aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar),
}


def _register_bitwise(name, targets):
    @translator(*targets, check=_integer_inputs)
    def bitwise(ctx, a, b):
        a, b = promote(ctx, a, b)
        if out_dtype(ctx) == torch.bool:
            return getattr(ctx.ops, name.replace("bitwise", "logical") if name != "bitwise_xor" else "ne")(a, b)
        return getattr(ctx.ops, name)(a, b)

    bitwise.__name__ = name


for _name, _targets in _BITWISE.items():
    _register_bitwise(_name, _targets)


# --- where, clamp, casts ---------------------------------------------------------------


@translator(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, cond, a, b):
    dtype = out_dtype(ctx)
    cond = cast(ctx, cond, torch.bool)
    a, b = promote(ctx, a, b, dtype=dtype)
    return ctx.ops.where(cond, a, b)


@translator(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, a, mask, value):
    dtype = out_dtype(ctx)
    if is_tensor(value):
        value = cast(ctx, value, dtype)
    elif dtype.is_floating_point:
        value = float(value)
    elif dtype == torch.bool:
        value = bool(value)
    else:
        value = int(value)
    return ctx.ops.where(cast(ctx, mask, torch.bool), value, a)


def _clamp_bound(ctx, bound, dtype):
    if bound is None:
        return None
    if is_tensor(bound):
        return cast(ctx, bound, dtype)
    return float(bound) if dtype.is_floating_point else int(bound)


@translator(aten.clamp.default, aten.clamp.Tensor, check=no_bool_output)
def clamp(ctx, a, min=None, max=None):
    dtype = compute_dtype(out_dtype(ctx))
    a = cast(ctx, a, dtype)
    lo, hi = _clamp_bound(ctx, min, dtype), _clamp_bound(ctx, max, dtype)
    # aten: min is applied before max; NaN in the input propagates, and so does NaN in a
    # tensor bound (maximum/minimum propagate NaN). A NaN Python bound is ignored when it is
    # the only bound and makes everything NaN when both are given.
    if lo is not None and hi is not None and any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
        return ctx.ops.mul(a, math.nan)
    if lo is not None:
        a = ctx.ops.maximum(a, lo) if is_tensor(lo) else ctx.ops.where(ctx.ops.lt(a, lo), lo, a)
    if hi is not None:
        a = ctx.ops.minimum(a, hi) if is_tensor(hi) else ctx.ops.where(ctx.ops.gt(a, hi), hi, a)
    return a


@translator(aten.clamp_min.default, aten.clamp_min.Tensor, check=no_bool_output)
def clamp_min(ctx, a, min):
    return clamp(ctx, a, min, None)


@translator(aten.clamp_max.default, aten.clamp_max.Tensor, check=no_bool_output)
def clamp_max(ctx, a, max):
    return clamp(ctx, a, None, max)


@translator(aten.hardtanh.default, check=no_bool_output)
def hardtanh(ctx, a, min_val=-1.0, max_val=1.0):
    """ReLU6 is hardtanh(x, 0, 6) (MobileNetV2: 35 in its forward); aten computes it as clamp."""
    return clamp(ctx, a, min_val, max_val)


def _no_layout_change(node: fx.Node) -> str | None:
    kw = node.kwargs
    if kw.get("layout") not in (None, torch.strided):
        return f"layout {kw.get('layout')}"
    if kw.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        return f"memory_format {kw.get('memory_format')}"
    src = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
    dst = node.meta.get("val")
    if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device != dst.device:
        return "device transfer"
    return None


# Note [Casts without a set]
# ``_to_copy`` copies its input with ``set`` before casting it, so that a copy to the same dtype
# is a new tensor, never the input itself. Before a real cast that set is not needed, and it
# costs GPT-2's loss a float32 [tokens, vocabulary] tensor between nvFuser's segments (786 MB
# at 8 x 512 tokens; H100, session 41, NVFUSER_DUMP=segmented_fusion): nvFuser recomputes an
# upcast of a fusion input in each segment that reads it (it privatizes upcasts with several
# uses, fusion_segmenter.cpp privatizeUpCastOrSqueezeOp), but here the upcast reads the set's
# output, so the max's segment took the set and the cast and wrote the float rows out for
# the next segment. With ``NVFUSER_DTENSOR_CAST_WITHOUT_SET=1`` (an A/B switch, off until a
# GPU says) a cast to another dtype reads the input directly; a copy to the same dtype keeps
# its set.
CAST_WITHOUT_SET = env_flag("NVFUSER_DTENSOR_CAST_WITHOUT_SET")


@translator(aten._to_copy.default, check=_no_layout_change, compute=False)
def _to_copy(ctx, a, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if CAST_WITHOUT_SET:
        casted = cast(ctx, a, out_dtype(ctx))
        return casted if casted is not a else ctx.ops.set(a)
    return cast(ctx, ctx.ops.set(a), out_dtype(ctx))


@translator(prims.convert_element_type.default)
def convert_element_type(ctx, a, dtype):
    return cast(ctx, a, dtype)


@translator(aten.clone.default, check=_no_layout_change, compute=False)
def clone(ctx, a, memory_format=None):
    # aten's clone of an expanded tensor is dense: Note [Expanded broadcasts are materialized]
    return ctx.ops.set(materialized(ctx, a))


@translator(aten.alias.default, aten.lift_fresh_copy.default, compute=False)
def alias(ctx, a):
    return ctx.ops.set(a)


# --- activations and their gradients ----------------------------------------------------


@translator(aten.gelu.default, check=float_inputs)
def gelu(ctx, a, approximate="none"):
    (x,) = promote(ctx, a, dtype=compute_dtype(out_dtype(ctx)))
    if approximate == "tanh":
        inner = ctx.ops.mul(math.sqrt(2.0 / math.pi), ctx.ops.add(x, ctx.ops.mul(0.044715, ctx.ops.mul(x, ctx.ops.mul(x, x)))))
        return ctx.ops.mul(ctx.ops.mul(0.5, x), ctx.ops.add(1.0, ctx.ops.tanh(inner)))
    return ctx.ops.mul(ctx.ops.mul(0.5, x), ctx.ops.add(1.0, ctx.ops.erf(ctx.ops.mul(x, math.sqrt(0.5)))))


@translator(aten.gelu_backward.default, check=float_inputs)
def gelu_backward(ctx, grad, a, approximate="none"):
    g, x = promote(ctx, grad, a, dtype=compute_dtype(out_dtype(ctx)))
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        x2 = ctx.ops.mul(x, x)
        inner = ctx.ops.mul(k, ctx.ops.add(x, ctx.ops.mul(0.044715, ctx.ops.mul(x, x2))))
        t = ctx.ops.tanh(inner)
        left = ctx.ops.mul(0.5, ctx.ops.add(1.0, t))
        dinner = ctx.ops.mul(k, ctx.ops.add(1.0, ctx.ops.mul(3 * 0.044715, x2)))
        right = ctx.ops.mul(ctx.ops.mul(ctx.ops.mul(0.5, x), ctx.ops.sub(1.0, ctx.ops.mul(t, t))), dinner)
        return ctx.ops.mul(g, ctx.ops.add(left, right))
    cdf = ctx.ops.mul(0.5, ctx.ops.add(1.0, ctx.ops.erf(ctx.ops.mul(x, math.sqrt(0.5)))))
    pdf = ctx.ops.mul(1.0 / math.sqrt(2.0 * math.pi), ctx.ops.exp(ctx.ops.mul(-0.5, ctx.ops.mul(x, x))))
    return ctx.ops.mul(g, ctx.ops.add(cdf, ctx.ops.mul(x, pdf)))


@translator(aten.silu_backward.default, check=float_inputs)
def silu_backward(ctx, grad, a):
    g, x = promote(ctx, grad, a, dtype=compute_dtype(out_dtype(ctx)))
    s = ctx.ops.sigmoid(x)
    return ctx.ops.mul(g, ctx.ops.mul(s, ctx.ops.add(1.0, ctx.ops.mul(x, ctx.ops.sub(1.0, s)))))


@translator(aten.sigmoid_backward.default, check=float_inputs)
def sigmoid_backward(ctx, grad, y):
    g, y = promote(ctx, grad, y, dtype=compute_dtype(out_dtype(ctx)))
    return ctx.ops.mul(g, ctx.ops.mul(y, ctx.ops.sub(1.0, y)))


@translator(aten.tanh_backward.default, check=float_inputs)
def tanh_backward(ctx, grad, y):
    g, y = promote(ctx, grad, y, dtype=compute_dtype(out_dtype(ctx)))
    return ctx.ops.mul(g, ctx.ops.sub(1.0, ctx.ops.mul(y, y)))


@translator(aten.threshold_backward.default)
def threshold_backward(ctx, grad, a, threshold):
    g, x = promote(ctx, grad, a, dtype=compute_dtype(out_dtype(ctx)))
    return ctx.ops.where(ctx.ops.le(x, threshold), 0.0 if out_dtype(ctx).is_floating_point else 0, g)


@translator(aten.leaky_relu.default, check=float_inputs)
def leaky_relu(ctx, a, negative_slope=0.01):
    (x,) = promote(ctx, a, dtype=compute_dtype(out_dtype(ctx)))
    return ctx.ops.where(ctx.ops.gt(x, 0.0), x, ctx.ops.mul(x, negative_slope))


@translator(aten.lerp.Scalar, aten.lerp.Tensor, check=float_inputs)
def lerp(ctx, a, b, weight):
    a, b, weight = promote(ctx, a, b, weight, dtype=compute_dtype(out_dtype(ctx)))
    # aten's formula: a + w * (b - a) for |w| < 0.5, b - (b - a) * (1 - w) otherwise (exact at w = 1)
    ops = ctx.ops
    diff = ops.sub(b, a)
    if not is_tensor(weight):
        if abs(weight) < 0.5:
            return ops.add(a, ops.mul(weight, diff))
        return ops.sub(b, ops.mul(diff, 1.0 - weight))
    low = ops.add(a, ops.mul(weight, diff))
    high = ops.sub(b, ops.mul(diff, ops.sub(1.0, weight)))
    return ops.where(ops.lt(ops.abs(weight), 0.5), low, high)


@translator(aten.addcmul.default, check=float_inputs)
def addcmul(ctx, a, b, c, value=1):
    a, b, c = promote(ctx, a, b, c, dtype=compute_dtype(out_dtype(ctx)))
    return ctx.ops.add(a, ctx.ops.mul(value, ctx.ops.mul(b, c)))
