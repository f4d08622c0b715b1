"""A torch evaluator of nvFuser's op set, which stands in for the GPU on CPU tensors.

It runs the canonical text nvFuser prints for a built fusion (``repr(fd)``: a Python
function over ``fd.define_tensor`` / ``fd.ops.*`` / ``fd.add_output``), so what is checked
on CPU is the fusion nvFuser actually built, after its own canonicalisation.
Floats in that text carry 6 significant digits; :class:`BuiltFusion.constants` maps the
printed text back to the exact values the translators used.

Semantics follow nvFuser, not aten, where they differ: integer ``div`` truncates, the
dtype of every op is the one nvFuser chose (the text carries its casts), random ops
draw from torch's generator (compare them statistically).
"""

from __future__ import annotations

import logging
import math
import operator
import re
from typing import Any

import torch

from ._nvfuser import nvfuser, to_torch_dtype

log = logging.getLogger(__name__)

_FLOAT_LITERAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[+-]\d+)?(?![\w.])")


def _is_scalar(x) -> bool:
    return not isinstance(x, torch.Tensor)


def _dt(dtype):
    return None if dtype is None else to_torch_dtype(dtype)


def _scalar_dtype_cast(x, dtype):
    if dtype in (nvfuser().DataType.Index, nvfuser().DataType.UInt64):  # extents, no torch dtype
        return int(x)
    t = _dt(dtype)
    if t is torch.bool:
        return bool(x)
    if t in (torch.int64, torch.int32):
        return int(x)
    if t.is_complex:
        return complex(x)
    return float(x)


def _unary(fn_t, fn_s=None):
    def op(x):
        if _is_scalar(x):
            if fn_s is None:
                return fn_t(torch.tensor(x)).item()
            return fn_s(x)
        return fn_t(x)

    return op


def _binary(fn, wrap_scalars=False):
    """``wrap_scalars``: the torch function takes tensors only (logical_and, bitwise_*,
    atan2, ...); a Python operand becomes a 0-dim tensor, which, like an nvFuser scalar,
    does not change the result dtype within its category."""

    def op(a, b):
        if _is_scalar(a) and _is_scalar(b):
            r = fn(torch.tensor(a), torch.tensor(b))
            return r.item()
        if wrap_scalars:
            if _is_scalar(a):
                a = torch.tensor(a, device=b.device)
            if _is_scalar(b):
                b = torch.tensor(b, device=a.device)
        return fn(a, b)

    return op


def _div(a, b):
    if _is_scalar(a) and _is_scalar(b):
        if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
            return int(a / b) if b != 0 else 0
        return a / b if b != 0 else (math.copysign(math.inf, a) if a != 0 else math.nan)
    dt = (a if isinstance(a, torch.Tensor) else b).dtype
    if not dt.is_floating_point and not dt.is_complex:
        return torch.div(a, b, rounding_mode="trunc")
    return torch.true_divide(a, b)


def _reduce_dims(dims, ndim):
    return [d % ndim for d in dims] if ndim else []


class _Ops:
    """``fd.ops`` for the evaluator: one torch implementation per nvFuser op name."""

    def __init__(self, evaluator: "_FakeFusion"):
        self._fd = evaluator

    def __getattr__(self, name):
        raise NotImplementedError(f"the CPU evaluator has no implementation of nvFuser op '{name}'")

    # --- pointwise -----------------------------------------------------------------
    abs = staticmethod(_unary(torch.abs, abs))
    neg = staticmethod(_unary(torch.neg, operator.neg))
    exp = staticmethod(_unary(torch.exp, math.exp))
    exp2 = staticmethod(_unary(torch.exp2))
    expm1 = staticmethod(_unary(torch.expm1, math.expm1))
    log = staticmethod(_unary(torch.log))
    log2 = staticmethod(_unary(torch.log2))
    log10 = staticmethod(_unary(torch.log10))
    log1p = staticmethod(_unary(torch.log1p))
    sqrt = staticmethod(_unary(torch.sqrt))
    rsqrt = staticmethod(_unary(torch.rsqrt))
    reciprocal = staticmethod(_unary(torch.reciprocal))
    sin = staticmethod(_unary(torch.sin))
    cos = staticmethod(_unary(torch.cos))
    tan = staticmethod(_unary(torch.tan))
    asin = staticmethod(_unary(torch.asin))
    acos = staticmethod(_unary(torch.acos))
    atan = staticmethod(_unary(torch.atan))
    sinh = staticmethod(_unary(torch.sinh))
    cosh = staticmethod(_unary(torch.cosh))
    tanh = staticmethod(_unary(torch.tanh))
    asinh = staticmethod(_unary(torch.asinh))
    acosh = staticmethod(_unary(torch.acosh))
    atanh = staticmethod(_unary(torch.atanh))
    erf = staticmethod(_unary(torch.erf))
    erfc = staticmethod(_unary(torch.erfc))
    erfinv = staticmethod(_unary(torch.erfinv))
    lgamma = staticmethod(_unary(torch.lgamma))
    sigmoid = staticmethod(_unary(torch.sigmoid))
    silu = staticmethod(_unary(torch.nn.functional.silu))
    relu = staticmethod(_unary(torch.relu))
    floor = staticmethod(_unary(torch.floor))
    ceil = staticmethod(_unary(torch.ceil))
    round = staticmethod(_unary(torch.round))
    trunc = staticmethod(_unary(torch.trunc))
    frac = staticmethod(_unary(torch.frac))
    sign = staticmethod(_unary(torch.sign))
    signbit = staticmethod(_unary(torch.signbit))
    isfinite = staticmethod(_unary(torch.isfinite))
    isinf = staticmethod(_unary(torch.isinf))
    isnan = staticmethod(_unary(torch.isnan))
    isneginf = staticmethod(_unary(torch.isneginf))
    isposinf = staticmethod(_unary(torch.isposinf))
    logical_not = staticmethod(_unary(torch.logical_not, operator.not_))
    bitwise_not = staticmethod(_unary(torch.bitwise_not))

    add = staticmethod(_binary(torch.add))
    sub = staticmethod(_binary(torch.sub))
    mul = staticmethod(_binary(torch.mul))
    div = staticmethod(_div)
    truediv = staticmethod(_binary(torch.true_divide))
    pow = staticmethod(_binary(torch.pow))
    fmod = staticmethod(_binary(torch.fmod))
    remainder = staticmethod(_binary(torch.remainder))
    mod = staticmethod(_binary(torch.fmod))
    atan2 = staticmethod(_binary(torch.atan2, wrap_scalars=True))
    eq = staticmethod(_binary(torch.eq))
    ne = staticmethod(_binary(torch.ne))
    lt = staticmethod(_binary(torch.lt))
    le = staticmethod(_binary(torch.le))
    gt = staticmethod(_binary(torch.gt))
    ge = staticmethod(_binary(torch.ge))
    logical_and = staticmethod(_binary(torch.logical_and, wrap_scalars=True))
    logical_or = staticmethod(_binary(torch.logical_or, wrap_scalars=True))
    bitwise_and = staticmethod(_binary(torch.bitwise_and, wrap_scalars=True))
    bitwise_or = staticmethod(_binary(torch.bitwise_or, wrap_scalars=True))
    bitwise_xor = staticmethod(_binary(torch.bitwise_xor, wrap_scalars=True))
    bitwise_left_shift = staticmethod(_binary(torch.bitwise_left_shift, wrap_scalars=True))
    bitwise_right_shift = staticmethod(_binary(torch.bitwise_right_shift, wrap_scalars=True))
    nextafter = staticmethod(_binary(torch.nextafter, wrap_scalars=True))

    @staticmethod
    def maximum(a, b):  # scalar arithmetic on extents uses Python ints
        if _is_scalar(a) and _is_scalar(b):
            return max(a, b)
        return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))

    @staticmethod
    def minimum(a, b):
        if _is_scalar(a) and _is_scalar(b):
            return min(a, b)
        return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))

    @staticmethod
    def where(c, a, b):
        if _is_scalar(c) and _is_scalar(a) and _is_scalar(b):
            return a if c else b
        return torch.where(torch.as_tensor(c), a, b)

    @staticmethod
    def clamp(x, min=None, max=None):
        return torch.clamp(x, min, max)

    @staticmethod
    def threshold(x, threshold, value):
        return torch.threshold(x, threshold, value)

    @staticmethod
    def lerp(a, b, w):
        return torch.lerp(a, b, w)

    @staticmethod
    def addcmul(a, b, c, value=1.0):
        return torch.addcmul(a, b, c, value=value)

    @staticmethod
    def cast(x, dtype):
        if _is_scalar(x):
            return _scalar_dtype_cast(x, dtype)
        return x.to(_dt(dtype))

    @staticmethod
    def set(x):
        return x.clone() if isinstance(x, torch.Tensor) else x

    segment_set = set

    @staticmethod
    def stride_order(x, stride_order):
        """A copy laid out as ``stride_order`` says (nvFuser's order: larger = outer); an
        empty order is the printed form of the row-major one (Note [Output layout contract])."""
        n = x.dim()
        order = list(stride_order) or list(range(n - 1, -1, -1))
        outer_first = sorted(range(n), key=lambda d: -order[d])
        strides, step = [0] * n, 1
        for d in reversed(outer_first):
            strides[d] = step
            step *= max(int(x.shape[d]), 1)
        out = torch.empty_strided(x.shape, strides, dtype=x.dtype, device=x.device)
        out.copy_(x)
        out._nvfuser_layout = True  # keep this layout as a fusion output
        return out

    # --- shapes --------------------------------------------------------------------
    @staticmethod
    def size(x, dim):
        return int(x.shape[dim])

    @staticmethod
    def shape(x):
        return list(x.shape)

    @staticmethod
    def broadcast(x, is_broadcast_dim):
        if _is_scalar(x):
            x = torch.tensor(x)
        shape, it = [], iter(x.shape)
        for b in is_broadcast_dim:
            shape.append(1 if b else next(it))
        return x.reshape(shape)

    @staticmethod
    def broadcast_in_dim(x, shape, broadcast_dims):
        if _is_scalar(x):
            x = torch.tensor(x)
        view = [1] * len(shape)
        for src, dst in enumerate(broadcast_dims):
            view[dst] = x.shape[src]
        return x.reshape(view).expand([int(s) for s in shape])

    @staticmethod
    def expand(x, shape):
        return x.expand([int(s) for s in shape])

    @staticmethod
    def reshape(x, new_shape):
        return x.reshape([int(s) for s in new_shape])

    @staticmethod
    def permute(x, dims):
        return x.permute(dims)

    @staticmethod
    def squeeze(x, dims, squeeze_expanded=False):
        for d in sorted((d % x.dim() for d in dims), reverse=True):
            # squeeze_expanded drops an expanded broadcast dim (all its entries are one value)
            x = x.select(d, 0) if squeeze_expanded and x.shape[d] != 1 else x.squeeze(d)
        return x

    @staticmethod
    def slice(x, start_indices, end_indices, strides=None, manual_normalization=False):
        strides = strides or [1] * x.dim()
        index = tuple(slice(int(s), int(e), int(st)) for s, e, st in zip(start_indices, end_indices, strides))
        return x[index]

    def pad(self, x, pad_widths, value=None):
        widths = [int(w) for w in pad_widths]
        out = torch.nn.functional.pad(x, widths, value=0 if value is None else value)
        self._fd.padded[id(out)] = (x, widths, out)
        return out

    def cat(self, tensors, dim, manual_padding=False):
        if manual_padding:
            # Each input was padded to the full size (see pad): take back the originals.
            originals = []
            for t in tensors:
                orig, _, kept = self._fd.padded[id(t)]
                assert kept is t
                originals.append(orig)
            tensors = originals
        return torch.cat(tensors, dim)

    @staticmethod
    def select(x, index, dim):
        return x.select(dim, int(index))

    @staticmethod
    def index_select(x, index, dim):  # nvFuser's argument order: index_select(arg, index, dim)
        # nvFuser's canonical text broadcasts the 1-D index to the rank of x (size 1 elsewhere).
        return torch.index_select(x, dim, index.reshape(-1))

    @staticmethod
    def gather(x, index, dim):  # nvFuser's argument order: gather(arg, index, dim)
        return torch.gather(x, dim, index)

    @staticmethod
    def scatter(x, index, src, dim):
        return torch.scatter(x, dim, index, src)

    @staticmethod
    def take_along_axis(x, index, dim):
        return torch.take_along_dim(x, index, dim)

    @staticmethod
    def triu(x, diagonal=0):
        return torch.triu(x, diagonal)

    # --- creation ------------------------------------------------------------------
    def full(self, shape, fill_value, dtype):
        return torch.full([int(s) for s in shape], fill_value, dtype=_dt(dtype), device=self._fd.device)

    def iota(self, length, start=None, step=None, dtype=None):
        start = 0 if start is None else start
        step = 1 if step is None else step
        dt = _dt(dtype) if dtype is not None else (torch.int64 if isinstance(start, int) else torch.float32)
        return (torch.arange(int(length), device=self._fd.device, dtype=torch.float64) * step + start).to(dt)

    def uniform(self, minval, maxval, shape, dtype=None, rng_seed=None, rng_offset=None):
        dt = _dt(dtype) if dtype is not None else torch.float32
        u = torch.rand([int(s) for s in shape], device=self._fd.device, dtype=torch.float64)
        return (u * (maxval - minval) + minval).to(dt)

    def normal(self, mean, std, shape, dtype=None, rng_seed=None, rng_offset=None):
        dt = _dt(dtype) if dtype is not None else torch.float32
        n = torch.randn([int(s) for s in shape], device=self._fd.device, dtype=torch.float64)
        return (n * std + mean).to(dt)

    @staticmethod
    def rand_like(x, rng_seed=None, rng_offset=None):
        return torch.rand_like(x)

    @staticmethod
    def randn_like(x, rng_seed=None, rng_offset=None):
        return torch.randn_like(x)

    # --- reductions ----------------------------------------------------------------
    @staticmethod
    def _reduction(fn, x, dims, keepdim=False, dtype=None):
        if _is_scalar(x):
            return x
        dims = _reduce_dims(dims, x.dim())
        if dtype is not None:
            x = x.to(_dt(dtype))
        if not dims:
            return x
        return fn(x, dims, keepdim)

    @staticmethod
    def sum(x, dims, keepdim=False, dtype=None):
        return _Ops._reduction(lambda t, d, k: torch.sum(t, d, keepdim=k), x, dims, keepdim, dtype)

    @staticmethod
    def prod(x, dims, keepdim=False, dtype=None):
        def fn(t, d, k):
            for dim in sorted(d, reverse=True):
                t = torch.prod(t, dim, keepdim=k)
            return t

        return _Ops._reduction(fn, x, dims, keepdim, dtype)

    @staticmethod
    def max(x, dims, keepdim=False, dtype=None):
        return _Ops._reduction(lambda t, d, k: torch.amax(t, d, keepdim=k), x, dims, keepdim, dtype)

    @staticmethod
    def min(x, dims, keepdim=False, dtype=None):
        return _Ops._reduction(lambda t, d, k: torch.amin(t, d, keepdim=k), x, dims, keepdim, dtype)

    @staticmethod
    def var(x, dims, correction=1, keepdim=False):
        return torch.var(x, _reduce_dims(dims, x.dim()), correction=correction, keepdim=keepdim)

    @staticmethod
    def var_mean(x, dims, correction=1, keepdim=False):
        return torch.var_mean(x, _reduce_dims(dims, x.dim()), correction=correction, keepdim=keepdim)

    @staticmethod
    def welford(x, dims):
        dims = _reduce_dims(dims, x.dim())
        mean = torch.mean(x, dims)
        m2 = torch.sum((x - torch.mean(x, dims, keepdim=True)) ** 2, dims)
        n = 1
        for d in dims:
            n *= x.shape[d]
        return mean, m2, torch.full_like(mean, n, dtype=torch.int64)

    @staticmethod
    def cumsum(x, dim):
        return torch.cumsum(x, dim)

    # --- compute in ATen on the GPU ------------------------------------------------
    @staticmethod
    def linear(x, w, bias=None):
        return torch.nn.functional.linear(x, w, bias)

    @staticmethod
    def matmul(a, b):
        return torch.matmul(a, b)

    @staticmethod
    def embedding_fwd(indices, weight, padding_idx=None, max_norm=None, norm_type=None,
                      scale_grad_by_freq=None, sparse=None):
        return torch.nn.functional.embedding(indices, weight)

    def sdpfa_fwd(self, q, k, v, bias=None, mask=None, dropout_p=None, is_causal=None, scale=None):
        if (dropout_p or 0.0) != 0.0:
            raise NotImplementedError("the CPU evaluator runs sdpfa_fwd without dropout only")
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, bool(is_causal), attn_mask=None, scale=scale
        )
        seed = torch.zeros((), dtype=torch.int64)
        return out, lse.to(torch.float32), seed, seed.clone()

    def sdpfa_bwd(self, grad_out, q, k, v, out, lse, dropout_p=None, is_causal=None,
                  philox_seed=None, philox_offset=None, scale=None):
        gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, bool(is_causal), attn_mask=None, scale=scale
        )
        return gq, gk, gv


class _FakeFusion:
    """The ``fd`` argument the canonical fusion text is run with."""

    def __init__(self, inputs, device):
        self._inputs = iter(inputs)
        self.device = device
        self.outputs: list[torch.Tensor] = []
        self.padded: dict[int, Any] = {}
        self.ops = _Ops(self)

    def define_tensor(self, shape=None, contiguity=None, dtype=None, is_cpu=False, stride_order=None, **_):
        t = next(self._inputs)
        if not isinstance(t, torch.Tensor):
            raise TypeError("fusion expects a tensor input")
        return t

    def define_scalar(self, value=None, dtype=None):
        if value is None:
            v = next(self._inputs)
            return v.item() if isinstance(v, torch.Tensor) else v
        return _scalar_dtype_cast(value, dtype) if dtype is not None else value

    def define_vector(self, values, dtype=None):
        return list(values)

    def add_output(self, t, alias_input=None):
        if _is_scalar(t):
            t = torch.tensor(t, device=self.device)
        self.outputs.append(t)


class Evaluator:
    """Compile the canonical text of a fusion once; evaluate it on CPU tensors."""

    def __init__(self, fd, constants: dict[str, float]):
        text = repr(fd)

        def exact(match):
            literal = match.group(0)
            key = literal.lstrip("-")
            if key in constants:
                value = constants[key]
                if math.isnan(value) and key != "nan":
                    raise ValueError(f"two constants of the fusion print as {key}; cannot evaluate it exactly")
                value = -value if literal.startswith("-") else value
                return repr(float(value))
            return literal

        text = _FLOAT_LITERAL.sub(exact, text)
        namespace = {"DataType": nvfuser().DataType, "FusionDefinition": object, "inf": math.inf, "nan": math.nan}
        exec(compile(text, "<nvfuser fusion>", "exec"), namespace)  # noqa: S102 - text nvFuser printed
        self.text = text
        self._fn = namespace["nvfuser_fusion"]

    def __call__(self, inputs) -> list[torch.Tensor]:
        device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
        fake = _FakeFusion(inputs, device)
        try:
            with torch.no_grad():
                self._fn(fake)
        finally:
            # fd and fd.ops refer to each other: without this the inputs would live on
            # until the next garbage collection (which CUDA-graph liveness checks would see)
            fake._inputs = fake.ops = None
        # Outputs that the definition lays out (stride_order) keep that layout; nvFuser's
        # own choice for the others is not modelled here, they come back row-major.
        return [t if getattr(t, "_nvfuser_layout", False) or not t.dim() or t.is_contiguous() else t.contiguous()
                for t in fake.outputs]
