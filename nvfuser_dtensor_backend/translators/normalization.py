"""layer_norm forward/backward, batch_norm forward (training and evaluation), group_norm forward,
softmax and log_softmax forward/backward.

Everything computes in fp32 for fp16/bf16 inputs (``upcast``); fusion.py rounds each
result to the node's dtype. Reduced extents come from ``size`` (symbolic), never from meta.
"""

from __future__ import annotations

import operator
import os

import torch

from ..registry import translator, values_reason
from ._common import canonical_dim, upcast
from .reduction import max_of, numel, row_stat, sum_of, wide_odd

aten = torch.ops.aten


def _layer_norm_axes(x, normalized_shape) -> tuple[list[int], list[int]]:
    """(outer dims, inner = normalized dims) of ``x``."""
    axis = x.ndim - len(normalized_shape)
    return list(range(axis)), list(range(axis, x.ndim))


def _bcast_inner(ctx, t, ndim):
    """A tensor of the normalized shape (weight/bias) -> the input's rank."""
    if t.ndim == ndim:
        return t
    return ctx.ops.broadcast(t, is_broadcast_dim=[True] * (ndim - t.ndim) + [False] * t.ndim)


def _statistics(ctx, x, dims, eps, keepdim: bool):
    """The biased variance, the mean and ``rsqrt(var + eps)`` of ``x`` over ``dims``, as every
    norm here computes them."""
    var, mean = ctx.ops.var_mean(x, dims=dims, correction=0, keepdim=keepdim)
    return var, mean, ctx.ops.rsqrt(ctx.ops.add(var, float(eps)))


@translator(aten.native_layer_norm.default)
def native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    x = upcast(ctx, x)
    _, inner = _layer_norm_axes(x, normalized_shape)
    _, mean, rstd = _statistics(ctx, x, inner, eps, keepdim=True)
    out = ctx.ops.mul(ctx.ops.sub(x, mean), rstd)
    if weight is not None:
        out = ctx.ops.mul(out, _bcast_inner(ctx, upcast(ctx, weight), x.ndim))
    if bias is not None:
        out = ctx.ops.add(out, _bcast_inner(ctx, upcast(ctx, bias), x.ndim))
    return out, mean, rstd


# Note [LayerNorm backward in two kernels]
# nvFuser schedules layer_norm's backward (the input gradient's row reductions next to the
# weight and bias gradients' column sums) as one inner-outer persistent kernel. On the H200 that
# kernel took 34 us per call on ViT-S/16's [6304, 384] and 29 us on GPT-2's [4096, 768], where
# inductor's kernels for the same work took about 14 us and 20 us (scripts/gpu_top_kernels.py,
# benchmarks/results/h200_profiles_vit). So the column sums read their inputs through
# ``segment_set``: nvFuser makes them a reduction kernel of their own, next to the input
# gradient's kernel. Measured on the H200 (one model at a time, kernels per training step):
# ViT-S/16 4.75 ms against 5.04 ms with the single kernel, GPT-2 5.80 ms against 5.87 ms
# (benchmarks/results/h200_profiles_ln_backward). NVFUSER_DTENSOR_LN_BACKWARD=whole brings
# the single kernel back for A/B runs; it is not a user setting. Summing the columns in two
# stages instead (the sequence first, then the batch) gained nothing on one H100 in session 30:
# ViT-S/16 4.91 ms against 4.89 (a 0.26 ms first stage and two 0.04 ms second stages for 25
# calls, against 0.32 ms for the single column sums; benchmarks/results/session30).
LN_BACKWARD = os.environ.get("NVFUSER_DTENSOR_LN_BACKWARD", "split")


@translator(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(ctx, grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    wants_sums = (output_mask[1] and weight is not None) or (output_mask[2] and bias is not None)
    if LN_BACKWARD == "split" and output_mask[0] and wants_sums:
        sums_in = [upcast(ctx, ctx.ops.segment_set(t)) for t in (grad_out, x, mean, rstd)]
    else:
        sums_in = None
    grad_out, x, mean, rstd = (upcast(ctx, t) for t in (grad_out, x, mean, rstd))
    outer, inner = _layer_norm_axes(x, normalized_shape)
    x_hat = ctx.ops.mul(ctx.ops.sub(x, mean), rstd)
    grad_x_hat = grad_out
    if weight is not None:
        grad_x_hat = ctx.ops.mul(grad_out, _bcast_inner(ctx, upcast(ctx, weight), x.ndim))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        n = numel(ctx, x, inner)
        a = ctx.ops.mul(grad_x_hat, n)
        b = sum_of(ctx, grad_x_hat, inner, keepdim=True)
        c = ctx.ops.mul(x_hat, sum_of(ctx, ctx.ops.mul(x_hat, grad_x_hat), inner, keepdim=True))
        inner_grad = ctx.ops.sub(ctx.ops.sub(a, b), c)
        grad_input = ctx.ops.mul(ctx.ops.div(rstd, n), inner_grad)
    if sums_in is not None:  # Note [LayerNorm backward in two kernels]
        grad_out, x, mean, rstd = sums_in
        x_hat = ctx.ops.mul(ctx.ops.sub(x, mean), rstd)
    # NOTE: like aten's decomposition, no weight/bias gradient when weight/bias is None.
    if output_mask[1] and weight is not None:
        grad_weight = sum_of(ctx, ctx.ops.mul(grad_out, x_hat), outer)
    if output_mask[2] and bias is not None:
        grad_bias = sum_of(ctx, grad_out, outer)
    return grad_input, grad_weight, grad_bias


def _per_channel(ctx, t, ndim):
    """A per-channel vector broadcast along dim 1 of a rank-``ndim`` tensor."""
    return ctx.ops.broadcast(t, is_broadcast_dim=[d != 1 for d in range(ndim)])


def _channel_affine(ctx, out, weight, bias):
    """``out * weight + bias``, the per-channel parameters (when given) broadcast along dim 1."""
    if weight is not None:
        out = ctx.ops.mul(out, _per_channel(ctx, upcast(ctx, weight), out.ndim))
    if bias is not None:
        out = ctx.ops.add(out, _per_channel(ctx, upcast(ctx, bias), out.ndim))
    return out


def _normalized_per_channel(ctx, x, mean, rstd, weight, bias):
    """``(x - mean) * rstd * weight + bias``, the per-channel vectors broadcast along dim 1."""
    out = ctx.ops.mul(ctx.ops.sub(x, _per_channel(ctx, mean, x.ndim)), _per_channel(ctx, rstd, x.ndim))
    return _channel_affine(ctx, out, weight, bias)


def _check_training_batch_norm(training_arg: int):
    def check(node) -> str | None:
        x, training = node.args[0].meta["val"], node.args[training_arg]
        if training is not True:
            return "batch_norm with running statistics (evaluation)"
        if x.dim() < 2:
            return f"batch_norm of a rank-{x.dim()} input"
        return None

    return check


def _batch_statistics(ctx, x, eps):
    """Training-mode batch norm's statistics as aten's decomposition computes them
    (``native_batch_norm_helper``): over every dim but the channels (1), in fp32."""
    dims = [0] + list(range(2, x.ndim))
    return (dims, *_statistics(ctx, x, dims, eps, keepdim=False))


@translator(aten._native_batch_norm_legit_functional.default, check=_check_training_batch_norm(5))
def native_batch_norm_legit_functional(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Training-mode batch norm; the running statistics come back updated (``momentum *
    batch + (1 - momentum) * running``, the variance unbiased)."""
    x = upcast(ctx, x)
    dims, var, mean, rstd = _batch_statistics(ctx, x, eps)
    out = _normalized_per_channel(ctx, x, mean, rstd, weight, bias)
    n = numel(ctx, x, dims)
    unbiased = ctx.ops.div(ctx.ops.mul(var, n), ctx.ops.sub(n, 1))
    momentum = float(momentum)

    def updated(running, batch):
        return ctx.ops.add(ctx.ops.mul(batch, momentum), ctx.ops.mul(upcast(ctx, running), 1.0 - momentum))

    return out, mean, rstd, updated(running_mean, mean), updated(running_var, unbiased)


@translator(aten._native_batch_norm_legit.no_stats, check=_check_training_batch_norm(3))
def native_batch_norm_legit_no_stats(ctx, x, weight, bias, training, momentum, eps):
    """Batch norm without running statistics: InstanceNorm's (``F.instance_norm`` normalizes
    its input viewed as ``[1, N * C, ...]``, with the affine parameters repeated N times)."""
    x = upcast(ctx, x)
    _, _, mean, rstd = _batch_statistics(ctx, x, eps)
    return _normalized_per_channel(ctx, x, mean, rstd, weight, bias), mean, rstd


def _check_batch_norm_no_training(node) -> str | None:
    """The generic rule on the inputs and the output only: on the CPU aten records the saved
    statistics as empty tensors, which the generic rule refuses; they are refused here only
    when something reads them."""
    x = node.args[0].meta["val"]
    stats = node.meta["val"][1:]
    used = {u.args[1] for u in node.users if u.target is operator.getitem and u.users}
    if any(i in used and stats[i - 1].numel() == 0 for i in (1, 2)):
        return "batch_norm's empty saved statistics (the CPU kernel's) are used"
    reason = values_reason([node.meta["val"][0], *(a.meta.get("val") for a in node.all_input_nodes)])
    if reason:
        return reason
    if x.dim() < 2:
        return f"batch_norm of a rank-{x.dim()} input"
    return None


@translator(aten._native_batch_norm_legit_no_training.default, check=_check_batch_norm_no_training,
            generic_check=False)
def native_batch_norm_legit_no_training(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    """Evaluation-mode batch norm (inference of CNNs) as aten's decomposition computes it
    (``native_batch_norm_helper``, ``training=False``): the running statistics normalize, in
    fp32; the saved statistics are the running mean and ``1 / sqrt(running_var + eps)`` (what
    the CUDA kernel returns; the CPU kernel's empty ones are refused by the check when used)."""
    mean = upcast(ctx, running_mean)
    invstd = ctx.ops.reciprocal(ctx.ops.sqrt(ctx.ops.add(upcast(ctx, running_var), float(eps))))
    return _normalized_per_channel(ctx, upcast(ctx, x), mean, invstd, weight, bias), mean, invstd


def _check_group_norm(node) -> str | None:
    x = node.args[0].meta["val"]
    if x.dim() < 2:
        return f"group_norm of a rank-{x.dim()} input"
    return None


@translator(aten.native_group_norm.default, check=_check_group_norm)
def native_group_norm(ctx, x, weight, bias, n, c, hxw, group, eps):
    """GroupNorm (diffusion UNets, timm's ``*_gn`` models) as aten's decomposition computes it
    (``native_group_norm``): statistics in fp32 over each sample's ``group`` groups of
    ``C / group`` channels and every spatial position, then the per-channel affine; the saved
    mean and rstd are ``[N, group]``. ``n`` and ``group`` are the graph's own literals; the
    input's other extents stay symbolic (Note [Shapes stay symbolic])."""
    x = upcast(ctx, x)
    grouped = ctx.ops.reshape(x, [n, group, -1])
    _, mean, rstd = _statistics(ctx, grouped, [2], eps, keepdim=True)
    normed = ctx.ops.mul(ctx.ops.sub(grouped, mean), rstd)
    out = ctx.ops.reshape(normed, [ctx.ops.size(x, d) for d in range(x.ndim)])
    return _channel_affine(ctx, out, weight, bias), ctx.ops.squeeze(mean, [2]), ctx.ops.squeeze(rstd, [2])


def _softmax_dim(x, dim) -> list[int]:
    return [canonical_dim(dim, x.ndim)] if x.ndim else []


def _shifted(ctx, x, dim):
    """(x - max(x, dim), dims): the numerically safe exponent."""
    x = upcast(ctx, x)
    dims = _softmax_dim(x, dim)
    return ctx.ops.sub(x, max_of(ctx, x, dims, keepdim=True)), dims


@translator(aten._softmax.default)
def _softmax(ctx, x, dim, half_to_float):
    if wide_odd(ctx.node.args[0].meta["val"], dim):  # Note [Wide odd rows] (reduction.py)
        x, dims = upcast(ctx, x), _softmax_dim(x, dim)
        m = row_stat(ctx, max_of, x, dims)
        total = row_stat(ctx, sum_of, ctx.ops.exp(ctx.ops.sub(x, m)), dims)
        return ctx.ops.div(ctx.ops.exp(ctx.ops.sub(x, m)), total)
    shifted, dims = _shifted(ctx, x, dim)
    e = ctx.ops.exp(shifted)
    return ctx.ops.div(e, sum_of(ctx, e, dims, keepdim=True))


@translator(aten._log_softmax.default)
def _log_softmax(ctx, x, dim, half_to_float):
    if wide_odd(ctx.node.args[0].meta["val"], dim):  # Note [Wide odd rows] (reduction.py)
        x, dims = upcast(ctx, x), _softmax_dim(x, dim)
        m = row_stat(ctx, max_of, x, dims)
        lse = ctx.ops.log(row_stat(ctx, sum_of, ctx.ops.exp(ctx.ops.sub(x, m)), dims))
        return ctx.ops.sub(ctx.ops.sub(x, m), lse)
    shifted, dims = _shifted(ctx, x, dim)
    lse = ctx.ops.log(sum_of(ctx, ctx.ops.exp(shifted), dims, keepdim=True))
    return ctx.ops.sub(shifted, lse)


@translator(aten._softmax_backward_data.default)
def _softmax_backward_data(ctx, grad_output, output, dim, input_dtype):
    g, y = upcast(ctx, grad_output), upcast(ctx, output)
    dims = _softmax_dim(y, dim)
    if wide_odd(ctx.node.args[1].meta["val"], dim):  # Note [Wide odd rows] (reduction.py)
        return ctx.ops.mul(y, ctx.ops.sub(g, row_stat(ctx, sum_of, ctx.ops.mul(g, y), dims)))
    return ctx.ops.mul(y, ctx.ops.sub(g, sum_of(ctx, ctx.ops.mul(g, y), dims, keepdim=True)))


def _check_log_softmax_backward(node) -> str | None:
    from .shape import MAX_VERIFIED_CLASSES

    val = node.args[1].meta["val"]
    width = val.shape[node.args[2]] if val.dim() else 1
    if not isinstance(width, int) or width > MAX_VERIFIED_CLASSES:
        return (f"log_softmax backward over {width} classes: above {MAX_VERIFIED_CLASSES}, unverified on the GPU "
                "(Note [One-hot scatter] in translators/shape.py)")
    return None


@translator(aten._log_softmax_backward_data.default, check=_check_log_softmax_backward)
def _log_softmax_backward_data(ctx, grad_output, output, dim, input_dtype):
    g, y = upcast(ctx, grad_output), upcast(ctx, output)
    dims = _softmax_dim(y, dim)
    if wide_odd(ctx.node.args[1].meta["val"], dim):  # Note [Wide odd rows] (reduction.py)
        return ctx.ops.sub(g, ctx.ops.mul(ctx.ops.exp(y), row_stat(ctx, sum_of, g, dims)))
    return ctx.ops.sub(g, ctx.ops.mul(ctx.ops.exp(y), sum_of(ctx, g, dims, keepdim=True)))
