"""Note [Sums of a one-hot] (one_hot_sum.py): cross-entropy's backward sums no one-hot."""

import logging

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nvfuser_dtensor_backend.one_hot_sum import fold_one_hot_sums

from helpers import DEVICE, check_parity

aten = torch.ops.aten
F = torch.nn.functional


def _sums(gm):
    return [n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList]


def _one_hot_row_sum(x, labels, w):
    g = torch.zeros_like(x).scatter(1, labels.view(-1, 1), -1.0) * w
    return g - x.exp() * g.sum(1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_row_sum_becomes_the_weight_times_the_value(dtype):
    x = torch.randn(6, 37, dtype=dtype)
    labels = torch.randint(0, 37, (6,))
    w = torch.randn(6, 1, dtype=dtype)
    gm = make_fx(_one_hot_row_sum, tracing_mode="fake")(x, labels, w)
    assert fold_one_hot_sums(gm) == 1
    assert not _sums(gm)
    torch.testing.assert_close(gm(x, labels, w), _one_hot_row_sum(x, labels, w), rtol=0, atol=0)


def _upcast_row_sum(x, labels, w):
    # a bf16 model's cross-entropy backward: the decomposed log_softmax backward sums the
    # scaled one-hot in float32
    g = torch.zeros_like(x).scatter(1, labels.view(-1, 1), -1.0) * w
    g32 = g.float()
    return g32 - x.float().exp() * g32.sum(1, keepdim=True)


def test_a_row_sum_of_an_upcast_one_hot_is_folded_too():
    x = torch.randn(6, 37, dtype=torch.bfloat16)
    labels = torch.randint(0, 37, (6,))
    w = torch.randn(6, 1, dtype=torch.bfloat16)
    gm = make_fx(_upcast_row_sum, tracing_mode="fake")(x, labels, w)
    assert fold_one_hot_sums(gm) == 1
    assert not _sums(gm)
    torch.testing.assert_close(gm(x, labels, w), _upcast_row_sum(x, labels, w), rtol=0, atol=0)


def _log_softmax_backward(x, labels, w):
    g = torch.zeros_like(x).scatter(1, labels.view(-1, 1), -1.0) * w
    return aten._log_softmax_backward_data(g, x.log_softmax(1), 1, x.dtype)


def test_the_log_softmax_backward_of_a_one_hot_sums_no_row():
    x, labels, w = torch.randn(6, 37), torch.randint(0, 37, (6,)), torch.randn(6, 1)
    gm = make_fx(_log_softmax_backward, tracing_mode="fake")(x, labels, w)
    assert fold_one_hot_sums(gm) == 1
    assert not [n for n in gm.graph.nodes if n.target is aten._log_softmax_backward_data.default]
    torch.testing.assert_close(gm(x, labels, w), _log_softmax_backward(x, labels, w), rtol=1e-6, atol=1e-6)


def test_other_sums_stay():
    x, labels = torch.randn(6, 37), torch.randint(0, 37, (6, 2))
    w_full, w_row = torch.randn(6, 37), torch.randn(6, 1)
    cases = [
        # two indices per row: the row holds two values
        (lambda x, i, w: (torch.zeros_like(x).scatter(1, i, -1.0) * w).sum(1, keepdim=True), labels, w_row),
        # a weight that varies along the summed dim
        (lambda x, i, w: (torch.zeros_like(x).scatter(1, i, -1.0) * w).sum(1, keepdim=True), labels[:, :1], w_full),
        # scattered into values that are not zeros
        (lambda x, i, w: (x.scatter(1, i, -1.0) * w).sum(1, keepdim=True), labels[:, :1], w_row),
        # summed along the other dim
        (lambda x, i, w: (torch.zeros_like(x).scatter(1, i, -1.0) * w).sum(0, keepdim=True), labels[:, :1], w_row),
    ]
    for fn, i, w in cases:
        gm = make_fx(fn, tracing_mode="fake")(x, i, w)
        assert fold_one_hot_sums(gm) == 0
        torch.testing.assert_close(gm(x, i, w), fn(x, i, w))


@pytest.mark.parametrize("classes", [37, 8193])
def test_cross_entropy_backward_through_the_backend(classes, caplog):
    caplog.set_level(logging.INFO, logger="nvfuser_dtensor_backend")
    logits = torch.randn(3, 5, classes, dtype=torch.bfloat16, device=DEVICE).requires_grad_(True)
    labels = torch.randint(0, classes, (3, 5), device=DEVICE)
    labels[0, 1] = -100  # an ignored label: its row's gradient is 0
    check_parity(lambda x, y: F.cross_entropy(x.float().view(-1, classes), y.view(-1)), logits, labels,
                 backward=True)
    assert "1 row sum(s) of a one-hot folded" in caplog.text  # the backward's, before partitioning
