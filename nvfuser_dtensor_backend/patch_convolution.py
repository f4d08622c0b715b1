"""Convolutions whose kernel tiles the image (kernel size = stride, 2 x 2 and up, no padding,
dilation or groups: a ViT's, DeiT's or Swin's patch embedding, ConvNeXt's stem and
downsampling layers) as one matrix product.

Note [Patch convolutions as matrix products]
Such a convolution reads each input pixel once: cutting the image into its patches (a
reshape, a permute and one copy) and multiplying by the weight viewed as [out, in * k * k] is
the same sum. On one H100 (session 30) ViT-S/16's patch embedding ran as cuDNN's generic
``implicit_convolve_sgemm`` for the weight gradient (0.21 ms per step, in inductor's step
too), two ``nchwToNhwc`` transposes (0.08 ms) and a 0.05 ms forward kernel, where the two
matrix products are about 4 GFLOP each. The forward and ``convolution_backward`` are both
rewritten, as decompositions (which apply below autograd, so the backward needs one of its
own). Rows of the image past the last whole patch are left out by the convolution, so they
are sliced off, and their gradient is zero. On by default since session 31: on one H100,
ViT-S/16's training kernels went from 4.86 to 4.46 ms per step (inductor's: 4.56-4.58 in
sessions 29-30), and the zoo's ViT-S/16 and ConvNeXt-T training rows were right against
eager (benchmarks/results/session31). ``NVFUSER_DTENSOR_PATCH_CONV_AS_MM=0`` leaves them to
cuDNN (an A/B switch, read at import).
"""

from __future__ import annotations

import torch

from .options import env_flag

aten = torch.ops.aten

ON = env_flag("NVFUSER_DTENSOR_PATCH_CONV_AS_MM", default=True)  # Note [Patch convolutions as matrix products]


def _patch_size(input, weight, stride, padding, dilation, transposed, output_padding, groups) -> int | None:
    """k where the convolution is a batched 2-d one with a k x k kernel at stride k, k >= 2, and
    nothing else. A 1 x 1 convolution (a CNN's pointwise one) would become an NCHW -> NHWC copy and
    a matrix product: not what was measured (Note [Patch convolutions as matrix products])."""
    if transposed or groups != 1 or weight.dim() != 4 or input.dim() != 4:
        return None
    k = weight.shape[-1]
    if (k < 2 or weight.shape[-2] != k or list(stride) != [k, k] or any(padding) or list(dilation) != [1, 1]
            or any(output_padding or [])):
        return None
    return k


def _patches(x, k: int):
    """[N, C, H, W] -> [N * Ho * Wo, C * k * k], each row one patch in the weight's order."""
    n, c, h, w = x.shape
    ho, wo = h // k, w // k
    x = x[:, :, :ho * k, :wo * k]
    return x.reshape(n, c, ho, k, wo, k).permute(0, 2, 4, 1, 3, 5).reshape(n * ho * wo, c * k * k)


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    k = _patch_size(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    if k is None:
        return NotImplemented
    n, _, h, w = input.shape
    ho, wo = h // k, w // k
    out = aten.mm.default(_patches(input, k), weight.reshape(weight.shape[0], -1).t())
    if bias is not None:
        out = out + bias
    return out.view(n, ho, wo, -1).permute(0, 3, 1, 2)


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    k = _patch_size(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    if k is None:
        return NotImplemented
    n, c, h, w = input.shape
    o, ho, wo = grad_output.shape[1], grad_output.shape[2], grad_output.shape[3]
    g = grad_output.permute(0, 2, 3, 1).reshape(n * ho * wo, o)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        rows = aten.mm.default(g, weight.reshape(o, -1))  # [N * Ho * Wo, C * k * k]
        grad_input = rows.view(n, ho, wo, c, k, k).permute(0, 3, 1, 4, 2, 5).reshape(n, c, ho * k, wo * k)
        if (ho * k, wo * k) != (h, w):
            grad_input = aten.constant_pad_nd.default(grad_input, [0, w - wo * k, 0, h - ho * k], 0.0)
    if output_mask[1]:
        grad_weight = aten.mm.default(g.t(), _patches(input, k)).view(weight.shape)
    if output_mask[2]:
        grad_bias = g.sum(0)
    return grad_input, grad_weight, grad_bias
