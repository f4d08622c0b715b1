"""Note [Patch convolutions as matrix products] (patch_convolution.py): by default (the
fixture turns it on even where NVFUSER_DTENSOR_PATCH_CONV_AS_MM=0), a convolution whose kernel
tiles the image, and its backward, run as matrix products, with eager's values; other
convolutions are left alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import nvfuser_dtensor_backend as nb
from helpers import check_parity, randn

pytestmark = pytest.mark.usefixtures("cudnn_without_tf32")  # matrix products are full float32 by default


@pytest.fixture
def patch_conv(monkeypatch):
    from nvfuser_dtensor_backend import decompositions, patch_convolution

    monkeypatch.setattr(patch_convolution, "ON", True)
    decompositions.decomposition_table.cache_clear()
    yield
    decompositions.decomposition_table.cache_clear()  # rebuilt at its next use, after monkeypatch's undo


def _unsupported_ops() -> set[str]:
    return {reason for r in nb.reports() for reason in r.partition.unsupported}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,k,bias,input_grad", [
    ((2, 3, 16, 16), 4, True, False),  # ViT's patch embedding: the image needs no gradient
    ((2, 3, 18, 17), 4, False, True),  # rows and columns past the last whole patch
    ((1, 5, 8, 12), 2, True, True),  # a stem inside a network: its input's gradient too
])
def test_patch_convolutions_are_matrix_products(patch_conv, dtype, shape, k, bias, input_grad):
    x = randn(*shape, dtype=dtype, requires_grad=input_grad)
    w = (randn(6, shape[1], k, k, dtype=dtype) * 0.2).requires_grad_()
    b = randn(6, dtype=dtype, requires_grad=True) if bias else None

    def embed(x, w, b):  # ViT's: patches, flattened to tokens, normalized
        t = F.conv2d(x, w, b, stride=k).flatten(2).transpose(1, 2)
        return F.layer_norm(t, (6,)) * 2

    check_parity(embed, x, w, b, backward=True, scale=2.0)
    reasons = _unsupported_ops()
    assert not any("convolution" in r for r in reasons), reasons
    assert any("aten.mm" in r for r in reasons), reasons


@pytest.mark.parametrize("k,stride,padding", [(3, 3, 1), (1, 1, 0)])  # padded; a CNN's pointwise 1 x 1
def test_other_convolutions_stay_convolutions(patch_conv, k, stride, padding):
    x, w = randn(2, 6, 9, 9, requires_grad=True), randn(8, 6, k, k, requires_grad=True)
    check_parity(lambda x, w: F.gelu(F.conv2d(x, w, stride=stride, padding=padding)), x, w, backward=True)
    assert any("convolution" in r for r in _unsupported_ops())
