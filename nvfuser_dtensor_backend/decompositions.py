"""The decomposition table AOTAutograd lowers with.

Start from PyTorch's core aten decompositions, which break composite ops (rms_norm,
gelu_backward, silu_backward, linear, softmax.int, ...) into ops we translate, then keep
whole the ops listed in KEEP (one nvFuser expression each, fewer nodes and better numerics)
and add the decompositions core aten leaves out (EXTRA). Some translated ops (lerp,
addcmul, clamp_min, ...) are still decomposed here; their translators serve aten graphs
that reach the backend undecomposed, and tests/translators checks them on such graphs.
"""

from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from . import patch_convolution

aten = torch.ops.aten

# Ops that core aten would decompose but that have a translator of their own.
KEEP = [
    aten.native_layer_norm_backward.default,  # one translator, reuses the saved mean/rstd
    aten._softmax_backward_data.default,  # y * (g - sum(g * y))
    aten._log_softmax_backward_data.default,  # g - exp(y) * sum(g)
    aten.t.default,  # a permute
    aten.transpose.int,  # a permute
    aten.masked_fill.Scalar,  # a where
    aten.masked_fill.Tensor,  # a where
    aten.silu.default,  # nvFuser has silu
    aten.scaled_dot_product_attention.default,  # let dispatch pick flash attention (sdpfa_fwd)
    # Its decomposition (math attention) returns a logsumexp that the un-decomposed
    # _scaled_dot_product_flash_attention_for_cpu_backward then misreads: wrong gradients.
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    # No translator: PyTorch's own kernel (a sort and a segment sum). Decomposed, it became a
    # float32 index_put(accumulate=True), whose sort-based kernel took 47 ms of T5's training
    # step on the H200 (relative-position buckets: 32 rows hit 262144 times) and 3.1 ms of
    # RoBERTa's, where eager's whole step took 26 ms and 17 ms.
    aten.embedding_dense_backward.default,
]

# Ops core aten leaves alone that we want broken up.
EXTRA = [
    aten.native_dropout.default,  # rand_like < p, pointwise: fuses with its neighbours
    aten.native_dropout_backward.default,
]


def _over_wide_rows(decomposition, rows: int):
    """``decomposition`` applied only where its argument ``rows`` has a wide innermost dim
    along the argument after it, the dim (``decomposed_rows``: Note [Wide odd rows],
    translators/reduction.py); narrower rows keep the one translated op. Used for log_softmax
    (a vocabulary of 50257 or 32000) and its backward: as max, exp, sum and log, AOTAutograd
    saves the input and the two row statistics for the backward, which recomputes the
    result, rather than the whole result in float32 (823 MB for GPT-2's 8 x 512 tokens);
    kept whole, the backward op would have to be given the saved result."""
    def decompose(*args, **kwargs):
        from .translators.reduction import decomposed_rows

        if len(args) < rows + 2 or not decomposed_rows(args[rows], args[rows + 1]):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return decompose


def _convolution_bias_apart(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """Note [Convolution biases apart]: a convolution's bias is added by an op of its own,
    which joins the region after the convolution. PyTorch's cuDNN path adds the bias in a
    kernel of its own after the convolution anyway (22 ``add`` kernels in ConvNeXt-T's
    inference step on the H100, 0.23 ms of 2.54), and inductor takes the add into its next
    kernel the same way. The backward keeps ``convolution_backward``'s bias gradient:
    decompositions apply below autograd, which differentiates the convolution whole."""
    if bias is None:
        return NotImplemented
    out = aten.convolution.default(input, weight, None, stride, padding, dilation, transposed, output_padding,
                                   groups)
    return out + bias.view(1, -1, *([1] * (out.dim() - 2)))


def _patches_or_bias_apart(*args):
    out = patch_convolution.convolution(*args)
    return _convolution_bias_apart(*args) if out is NotImplemented else out


@functools.cache
def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    for op in KEEP:
        table.pop(op, None)
    extra = get_decompositions(EXTRA)
    table.update(extra)
    from torch._decomp import decompositions

    table[aten._log_softmax.default] = _over_wide_rows(decompositions._log_softmax, 0)  # (x, dim, ...)
    table[aten._log_softmax_backward_data.default] = _over_wide_rows(
        decompositions._log_softmax_backward_data, 1)  # (grad, output, dim, ...)
    table[aten.convolution.default] = _convolution_bias_apart
    if patch_convolution.ON:  # Note [Patch convolutions as matrix products]
        table[aten.convolution.default] = _patches_or_bias_apart
        table[aten.convolution_backward.default] = patch_convolution.convolution_backward
    return table
