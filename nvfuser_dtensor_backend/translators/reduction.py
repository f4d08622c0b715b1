"""Reductions: sum, mean, amax/amin, var/var_mean, prod, any.

Note [Reduction dtypes]
A reduction accumulates in ``compute_dtype`` of the node's result dtype (fp16/bf16 in
fp32, integers and bool as aten's result, int64 for sum/prod), so the input is cast first
and nvFuser's reduction is asked for that dtype; fusion.py rounds the result to the node's
dtype afterwards. Extents (for mean) are read with ``size`` so the definition stays valid
for every size of a cached input layout.
"""

from __future__ import annotations

import os

import torch
from torch import fx

from .._nvfuser import nvfuser, to_nv_dtype
from ..registry import translator
from ._common import canonical_dims, cast, compute_dtype, float_output, is_tensor, out_dtype, torch_dtype, upcast

aten = torch.ops.aten


def _rank(x) -> int:
    return x.ndim if is_tensor(x) else 0


def reduce_dims(x, dims) -> list[int]:
    """aten dims (None, [], int, negative) -> sorted non-negative dims; [] for a 0-d tensor."""
    if _rank(x) == 0:
        return []
    return canonical_dims(dims, _rank(x))


def numel(ctx, x, dims):
    """Product of the extents of ``dims``, as a symbolic nvFuser scalar (1 when empty)."""
    n = None
    for d in dims:
        size = ctx.ops.size(x, d)
        n = size if n is None else ctx.ops.mul(n, size)
    return 1 if n is None else n


# Note [One-axis reductions]
# nvFuser 0.2.36 lowers a reduction over a device-sharded axis to a local reduction plus an
# all-reduce only when the sharded axis is the one axis reduced by its op (preseg pass
# decompose_reshardings: rFactorLoopSplits keeps the other logical reduction axes in the
# communication's op, isLowerableToCommunication then refuses it). A sum over (batch,
# sequence) of a sequence-parallel tensor (LayerNorm's weight gradient) then hit an
# INTERNAL ASSERT at post_communication.cpp:74 on the H200. In multidevice fusions
# (``ctx.multidevice``) sums, maxima, minima, products and ``any`` therefore reduce one axis
# at a time, and a variance over several axes is its two-pass formula of such sums
# (``_var_mean_by_sums``) rather than nvFuser's Welford ``var_mean`` over them all.
def _one_axis_at_a_time(ctx, reduce, x, dims):
    """``reduce(x, dims)``; in a multidevice fusion one dim after the other, the highest first
    (without keepdim the lower dims then keep their index)."""
    if not ctx.multidevice or len(dims) < 2:
        return reduce(x, dims)
    for d in sorted(dims, reverse=True):
        x = reduce(x, [d])
    return x


def sum_of(ctx, x, dims, keepdim=False, dtype=None):
    """nvFuser sum in ``dtype`` (default: x's dtype); a cast alone for a 0-d tensor."""
    dtype = dtype or torch_dtype(x)
    x = cast(ctx, x, dtype)
    if not dims:
        return x
    # One axis at a time: the partial sums stay in fp32 (one rounding to a half type, as aten).
    acc = compute_dtype(dtype) if ctx.multidevice and len(dims) > 1 else dtype
    total = _one_axis_at_a_time(
        ctx, lambda t, ds: ctx.ops.sum(t, dims=ds, keepdim=keepdim, dtype=to_nv_dtype(acc)), x, dims)
    return cast(ctx, total, dtype)


# NOTE: on the H200 (nvFuser 0.2.36) a max/min reduction of a bf16/fp16 tensor fails to
# compile, and two reductions with different init values (sum and max, max and min) of the
# same tensor hit "Inconsistent setting of initialization value". So max/min reduce an fp32
# copy of their own (exact for every low-precision value).
def _own_copy(ctx, x):
    return ctx.ops.set(upcast(ctx, x)) if torch_dtype(x) != torch.bool else x


def _extremum(ctx, op, x, dims, keepdim):
    if not dims:
        return x
    return _one_axis_at_a_time(ctx, lambda t, ds: op(t, dims=ds, keepdim=keepdim), _own_copy(ctx, x), dims)


def max_of(ctx, x, dims, keepdim=False):
    return _extremum(ctx, ctx.ops.max, x, dims, keepdim)


def min_of(ctx, x, dims, keepdim=False):
    return _extremum(ctx, ctx.ops.min, x, dims, keepdim)


# Note [Wide odd rows]
# nvFuser 0.2.36 schedules a softmax whose rows do not fit in one SM's registers (a language
# model's loss over its vocabulary) as an inner persistent kernel spread over a cluster of
# blocks (Hopper; normalization_inner_non_tma.cpp, innerPersistentHeuristicCluster). That
# schedule marks the innermost split of the reduction as vectorized whatever the
# vectorization factor (reduction_utils.cpp, scheduleReductionTV, cross_cluster_reduction);
# with rows of odd width the factor is 1, nothing clears the mark from the reduction's own
# tensors, and lowering stops at validation.cpp:1559 ("Vectorized accesses cannot be inline
# with computation"). That is why GPT-2's, RoBERTa's and BART's loss regions (vocabularies
# of 50257 and 50265) fell back on the H200, forward and backward (docs/nvfuser_faults.md
# item 7). So a reduction over a wide odd innermost dim (sum, amax, and the row statistics
# of the softmax translators) is cut out with ``segment_set``: no segment keeps a row across
# its own reduction, each statistic is a reduction kernel, and what reads the row after it
# is another kernel. The softmax translators write ``x - max`` twice on purpose, so that the
# shifted row is recomputed from the input there rather than materialized between segments;
# decompositions.py breaks such a log_softmax into these ops, so that AOTAutograd saves its
# row statistics for the backward instead of the whole float result.
ODD_WIDE_ROW = 8192  # wider rows of odd width are cut; narrower ones fit a register-persistent kernel
# Rows of even width above ODD_WIDE_ROW (a vocabulary of 32000) are not cut, but log_softmax
# and its backward over them are decomposed as over odd rows (decompositions.py): the forward
# then saves the bf16 logits and two row statistics instead of writing the float
# log-probabilities. On the H200 (scripts/gpu_top_kernels.py llama --regions, 2026-12-04)
# Llama's training step took 4.04 ms of kernels, against 4.35 ms with one log_softmax op
# (its loss forward region: 0.16 ms against 0.43 ms) and 4.23 ms with even rows cut too.
# NVFUSER_DTENSOR_WIDE_ROWS chooses for A/B runs (not a user setting): "odd" (even rows left
# whole), "decompose" (the default) or "cut".
WIDE_ROWS = os.environ.get("NVFUSER_DTENSOR_WIDE_ROWS", "decompose")


def _wide(val, dims, parities: tuple[int, ...]) -> bool:
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        return False
    dims = canonical_dims(dims if isinstance(dims, (list, tuple)) else [dims], val.dim())
    width = val.shape[-1]
    return val.dim() - 1 in dims and isinstance(width, int) and width % 2 in parities and width > ODD_WIDE_ROW


def wide_odd(val, dims) -> bool:
    """Whether ``dims`` (an int or a list) of the aten value ``val`` hold its innermost dim, of
    a width above ``ODD_WIDE_ROW`` to cut (Note [Wide odd rows]): odd, or any with
    ``WIDE_ROWS == "cut"``."""
    return _wide(val, dims, (0, 1) if WIDE_ROWS == "cut" else (1,))


def decomposed_rows(val, dim) -> bool:
    """Whether log_softmax over ``dim`` of ``val`` is decomposed (decompositions.py): rows cut
    by ``wide_odd``, and wide even ones too unless ``WIDE_ROWS == "odd"``."""
    return _wide(val, dim, (1,) if WIDE_ROWS == "odd" else (0, 1))


def row_stat(ctx, reduce, x, dims, keepdim=True):
    """``reduce(ctx, x, dims)`` cut into a segment of its own (Note [Wide odd rows]),
    broadcast back to x's rank when ``keepdim``."""
    stat = ctx.ops.segment_set(reduce(ctx, x, dims))
    return ctx.ops.broadcast(stat, is_broadcast_dim=[d in dims for d in range(x.ndim)]) if keepdim else stat


# --- checks ----------------------------------------------------------------------------


def _int_correction(node: fx.Node) -> str | None:
    reason = float_output(node)
    if reason:
        return reason
    c = node.kwargs.get("correction")
    if c is not None and (not isinstance(c, (int, float)) or float(c) != int(c)):
        return f"non-integer correction {c!r}"
    return None


# --- translators ---------------------------------------------------------------------


@translator(aten.sum.dim_IntList)
def sum(ctx, x, dim=None, keepdim=False, *, dtype=None):
    dims, acc = reduce_dims(x, dim), compute_dtype(out_dtype(ctx))
    if wide_odd(ctx.node.args[0].meta.get("val"), dims):  # Note [Wide odd rows]
        return row_stat(ctx, lambda c, t, ds: sum_of(c, t, ds, False, acc), x, dims, keepdim)
    return sum_of(ctx, x, dims, keepdim, acc)


@translator(aten.sum.default)
def sum_default(ctx, x, *, dtype=None):
    return sum_of(ctx, x, reduce_dims(x, None), False, compute_dtype(out_dtype(ctx)))


@translator(aten.mean.dim, aten.mean.default, check=float_output)
def mean(ctx, x, dim=None, keepdim=False, *, dtype=None):
    dims = reduce_dims(x, dim)
    total = sum_of(ctx, x, dims, keepdim, compute_dtype(out_dtype(ctx)))
    if not dims:
        return total
    return ctx.ops.div(total, numel(ctx, x, dims))


@translator(aten.amax.default)
def amax(ctx, x, dim=(), keepdim=False):
    dims = reduce_dims(x, dim)
    if wide_odd(ctx.node.args[0].meta.get("val"), dims):  # Note [Wide odd rows]
        return row_stat(ctx, max_of, x, dims, keepdim)
    return max_of(ctx, x, dims, keepdim)


@translator(aten.amin.default)
def amin(ctx, x, dim=(), keepdim=False):
    return min_of(ctx, x, reduce_dims(x, dim), keepdim)


def _var_args(ctx, x, dim, correction):
    x = cast(ctx, x, compute_dtype(out_dtype(ctx)))
    return x, reduce_dims(x, dim), 1 if correction is None else int(correction)


def _var_0d(ctx, x, correction):
    """Variance of one element: 0, or nan once the correction leaves no degrees of freedom."""
    zero = ctx.ops.mul(x, 0.0)
    return ctx.ops.div(zero, 0.0) if correction >= 1 else zero


def _var_mean_by_sums(ctx, x, dims, correction, keepdim):
    """(var, mean) over several dims of a multidevice fusion as sums of one axis at a time
    (Note [One-axis reductions]): mean = sum(x) / n, var = sum((x - mean)**2) / (n - correction)."""
    n = numel(ctx, x, dims)
    mean = ctx.ops.div(sum_of(ctx, x, dims, keepdim=True), n)
    centered = ctx.ops.sub(x, mean)
    var = ctx.ops.div(sum_of(ctx, ctx.ops.mul(centered, centered), dims, keepdim=keepdim), ctx.ops.sub(n, correction))
    if not keepdim:
        mean = ctx.ops.squeeze(mean, dims=sorted(dims))
    return var, mean


@translator(aten.var.correction, check=_int_correction)
def var(ctx, x, dim=None, *, correction=None, keepdim=False):
    x, dims, correction = _var_args(ctx, x, dim, correction)
    if not dims:
        return _var_0d(ctx, x, correction)
    if ctx.multidevice and len(dims) > 1:
        return _var_mean_by_sums(ctx, x, dims, correction, keepdim)[0]
    return ctx.ops.var(x, dims=dims, correction=correction, keepdim=keepdim)


@translator(aten.var_mean.correction, check=_int_correction)
def var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    x, dims, correction = _var_args(ctx, x, dim, correction)
    if not dims:
        return _var_0d(ctx, x, correction), x
    if ctx.multidevice and len(dims) > 1:
        return _var_mean_by_sums(ctx, x, dims, correction, keepdim)
    v, m = ctx.ops.var_mean(x, dims=dims, correction=correction, keepdim=keepdim)
    return v, m


@translator(aten.prod.dim_int)
def prod(ctx, x, dim, keepdim=False, *, dtype=None):
    dims = reduce_dims(x, dim)
    acc = compute_dtype(out_dtype(ctx))
    x = cast(ctx, x, acc)
    if not dims:
        return x
    return _one_axis_at_a_time(ctx, lambda t, ds: ctx.ops.prod(t, dims=ds, keepdim=keepdim, dtype=to_nv_dtype(acc)),
                               x, dims)


@translator(aten.prod.default)
def prod_default(ctx, x, *, dtype=None):
    return prod(ctx, x, None, False)


@translator(aten.any.dim, aten.any.dims, aten.any.default)
def any(ctx, x, dim=None, keepdim=False):
    dims = reduce_dims(x, dim)
    nonzero = x if torch_dtype(x) == torch.bool else ctx.ops.ne(x, 0)
    if not dims:
        return nonzero
    # NOTE: reduce as Int32 (max of 0/1) rather than relying on a bool max reduction.
    as_int = ctx.ops.cast(nonzero, dtype=nvfuser().DataType.Int32)
    return ctx.ops.ne(_one_axis_at_a_time(ctx, lambda t, ds: ctx.ops.max(t, dims=ds, keepdim=keepdim), as_int, dims), 0)
