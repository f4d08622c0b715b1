"""Note [Convolution biases apart] (decompositions.py): a convolution's bias is an add of its
own, which joins the region after it; the backward's ``convolution_backward`` still gives the
bias gradient (decompositions apply below autograd)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import check_parity, fused_ops, randn

pytestmark = pytest.mark.usefixtures("cudnn_without_tf32")


CONVS = {
    # name: (input shape, weight shape, the convolution of (x, w, b))
    "conv2d": ((2, 6, 9, 9), (8, 6, 3, 3), lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    "depthwise": ((2, 8, 9, 9), (8, 1, 7, 7), lambda x, w, b: F.conv2d(x, w, b, padding=3, groups=8)),  # ConvNeXt's
    "patches": ((2, 3, 16, 16), (12, 3, 4, 4), lambda x, w, b: F.conv2d(x, w, b, stride=4)),  # ViT's patch embedding
    "conv1d": ((2, 6, 17), (8, 6, 3), lambda x, w, b: F.conv1d(x, w, b)),
    "transposed": ((2, 6, 5, 5), (6, 8, 2, 2), lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CONVS))
def test_the_bias_add_joins_the_region_after_the_convolution(name, dtype):
    xs, ws, conv = CONVS[name]
    channels = ws[1] if name == "transposed" else ws[0]
    x = randn(*xs, dtype=dtype, requires_grad=True)
    w = randn(*ws, dtype=dtype, requires_grad=True) * 0.2
    w = w.detach().requires_grad_()
    b = randn(channels, dtype=dtype, requires_grad=True)

    def f(x, w, b):
        return F.gelu(conv(x, w, b)) * 2

    check_parity(f, x, w, b, backward=True, expect_ops=("aten.add.Tensor", "aten.gelu.default"))


def test_a_convolution_without_a_bias_adds_nothing():
    x, w = randn(2, 6, 9, 9), randn(8, 6, 3, 3)
    check_parity(lambda x, w: F.gelu(F.conv2d(x, w, padding=1)), x, w, expect_ops=("aten.gelu.default",))
    assert "aten.add.Tensor" not in fused_ops()
