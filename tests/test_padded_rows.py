"""Note [Reductions over padded rows] (padded_rows.py): row reductions read whole padded rows, masked."""

import logging
import re

import pytest
import torch
import torch.nn.functional as F

import nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend.padded_rows import rows_widened

from helpers import DEVICE, assert_close, assert_gpt2_step_right, assert_no_worse_than_eager, check_parity, compile_fn, randn, tiny_bf16_gpt2

LOGGER = "nvfuser_dtensor_backend"


def _logsumexp(x):
    m = x.float().amax(-1, keepdim=True)
    return m + (x.float() - m).exp().sum(-1, keepdim=True).log()


def _rewrites(caplog) -> int:
    """Row reductions rewritten, from the pass's log lines."""
    found = (re.match(r"nvfuser_dtensor: (\d+) row reduction", r.getMessage()) for r in caplog.records)
    return sum(int(m.group(1)) for m in found if m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_input_in_padded_rows_is_reduced_over_them(dtype, caplog):
    rows, width, stride = 12, 1027, 1032
    big = randn(rows, stride, dtype=dtype)
    big[:, width:] = float("nan")  # the padding is never read unmasked
    x = big[:, :width]
    compiled = compile_fn(_logsumexp)  # (check_parity would clone the input to a dense one)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert_close(compiled(x), _logsumexp(x))
    assert _rewrites(caplog) == 2  # amax and sum


def test_rows_widened_views_when_the_storage_holds_the_padding_and_copies_otherwise():
    big = randn(4, 16)
    x = big[:, :13]
    wide = rows_widened(x, 16)
    assert wide.shape == (4, 16) and wide.data_ptr() == x.data_ptr() and torch.equal(wide[:, :13], x)
    tight = torch.as_strided(torch.randn(3 * 16 + 13, device=x.device), (4, 13), (16, 1))  # no tail after the last row
    wide = rows_widened(tight, 16)
    assert wide.shape == (4, 16) and wide.data_ptr() != tight.data_ptr() and torch.equal(wide[:, :13], tight)
    same = rows_widened(randn(4, 13), 16)  # not in padded rows at all: a padded copy
    assert same.shape == (4, 16)


def test_a_tight_input_with_the_same_strides_is_still_right(caplog):
    # dynamo guards on strides, not on the storage: the compiled graph meets an input whose
    # storage ends after the last row's elements, and rows_widened pads a copy
    rows, width, stride = 6, 1027, 1032
    compiled = compile_fn(_logsumexp)
    x = randn(rows, stride)[:, :width]
    assert_close(compiled(x), _logsumexp(x))
    tight = torch.as_strided(randn((rows - 1) * stride + width), (rows, width), (stride, 1))
    assert_close(compiled(tight), _logsumexp(tight))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cross_entropy_over_a_padded_lm_head(dtype, caplog):
    # the padded product's slice (Note [Padded matmuls]) in the same graph: the loss's row
    # statistics read the padded product, masked; a vocabulary above 8192 and odd is decomposed
    vocab, d = 8201, 32
    x = randn(16, d, dtype=dtype, requires_grad=True)
    w = randn(vocab, d, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, vocab, (16,), device=x.device)
    labels[3] = -100
    nb.clear_cache()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        check_parity(lambda x, w, y: F.cross_entropy(F.linear(x, w).float(), y), x, w, labels,
                     backward=True, pad_matmuls=True)
    assert _rewrites(caplog) >= 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias_shape", [(1, 8201), (8201,)])
def test_cross_entropy_over_a_padded_lm_head_plus_a_bias(dtype, bias_shape, caplog):
    # BART's ``lm_head(x) + final_logits_bias``: the bias is added by the padded product
    # (Note [Padded matmuls]), so the sum is padded rows too and the loss's statistics read
    # them. The product and the bias are rounded once, where eager rounds twice: judged
    # against float64, as the zoo does.
    vocab, d = 8201, 32
    x = randn(2, 8, d, dtype=dtype, requires_grad=True)
    w = randn(vocab, d, dtype=dtype, requires_grad=True)
    b = randn(*bias_shape, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, vocab, (16,), device=x.device)
    labels[5] = -100

    def loss(x, w, b):  # the logits are an output too, as a model's are
        logits = F.linear(x, w) + b
        return F.cross_entropy(logits.view(-1, vocab).float(), labels), logits

    nb.clear_cache()
    runs = {}
    for name, fn, cast in (("ours", compile_fn(loss, pad_matmuls=True), dtype),
                           ("eager", loss, dtype), ("exact", loss, torch.float64)):
        inputs = [t.detach().to(cast).requires_grad_() for t in (x, w, b)]
        with caplog.at_level(logging.INFO, logger=LOGGER):
            value, logits = fn(*inputs)
        value.backward()
        runs[name] = [value.detach(), logits.detach(), *(t.grad for t in inputs)]
    assert _rewrites(caplog) >= 2
    # The loss is one scalar: its error from the exact one is the bf16 rounding of the logits,
    # a random walk that made ours 3x eager's on the H100 (0.016 against 0.0048 at 20.6), so
    # it is judged against the float64 loss of our own logits (the padded rows' statistics are
    # what it checks); the logits and gradients are judged against eager's error.
    ours_loss, ours_logits = runs["ours"][:2]
    torch.testing.assert_close(ours_loss.double(), F.cross_entropy(ours_logits.view(-1, vocab).double(), labels),
                               rtol=1e-5, atol=1e-5)
    for ours, eager, exact in list(zip(runs["ours"], runs["eager"], runs["exact"]))[1:]:
        assert_no_worse_than_eager(ours, eager, exact, slack=1e-4 * exact.abs().max().item())


def test_gpt2_loss_across_its_graph_break(caplog):
    # HF GPT-2: the loss is a graph of its own whose input is the logits, a view of the padded
    # product (rows 8208 apart): its statistics read the padded rows. A bf16 model: judged
    # against float64, as the zoo does (eager's own bf16 error on the tied embedding is 0.1)
    model, ours, ref, ids = tiny_bf16_gpt2()
    compiled = torch.compile(ours, backend="nvfuser_dtensor", options={"pad_matmuls": True})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        got = compiled(input_ids=ids, labels=ids)
    assert _rewrites(caplog) == 2  # the loss graph's amax and sum
    assert_gpt2_step_right(got, model, ours, ref, ids)


def test_rows_widened_over_several_leading_dims():
    big = randn(2, 4, 16)
    wide = rows_widened(big[:, :, :13], 16)  # [batch, seq, vocab]: the leading dims dense over the rows
    assert wide.data_ptr() == big.data_ptr() and torch.equal(wide, big)
    gappy = big[:, ::2, :13]  # every other row: not rows 16 apart everywhere, so a padded copy
    wide = rows_widened(gappy, 16)
    assert wide.data_ptr() != big.data_ptr() and torch.equal(wide[..., :13], gappy)


def _pads(caplog) -> int:
    """Pads computed on padded rows, from the pass's log lines (Note [Pads computed on padded rows])."""
    found = (re.match(r"nvfuser_dtensor: (\d+) pad\(s\) computed", r.getMessage()) for r in caplog.records)
    return sum(int(m.group(1)) for m in found if m)


@pytest.mark.parametrize("value", [0.0, 1.5])
@pytest.mark.parametrize("in_padded_rows", [True, False])
def test_a_pad_of_a_row_wise_value_is_computed_on_padded_rows(value, in_padded_rows, caplog):
    rows, width, stride = 6, 1027, 1032
    big = randn(rows, stride)
    big[:, width:] = float("nan")  # the padding is never read unmasked
    x = big[:, :width] if in_padded_rows else randn(rows, width)  # a dense input is padded by a copy

    def f(x):
        return F.pad((x * 0.5).exp() - 1, (0, stride - width), value=value)

    compiled = compile_fn(f)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        got = compiled(x)
    assert _pads(caplog) == 1
    assert_close(got, f(x))
    assert torch.equal(got[:, width:], torch.full_like(got[:, width:], value))


def test_a_pad_of_a_value_that_mixes_columns_stays(caplog):
    rows, width, stride = 4, 1027, 1032
    x = randn(rows, stride)[:, :width]

    def f(x):
        return F.pad(torch.cumsum(x, -1) * 2, (0, stride - width))

    with caplog.at_level(logging.INFO, logger=LOGGER):
        check_parity(f, x, fused=False)
    assert _pads(caplog) == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_lm_head_gradient_is_computed_on_padded_rows(dtype, caplog):
    # RoBERTa's and BART's loss takes the 16-bit logits, which the model returns too: the
    # logits' gradient (their tangent plus the loss's) is padded for the LM head's GEMMs
    # (Note [Padded matmuls]) and is computed on the padded rows of the saved logits and of
    # the tangent instead. The tangent is random here, not autograd's zeros. Judged against
    # float64, as the zoo does.
    vocab, d = 8201, 32
    x = randn(2, 8, d, dtype=dtype, requires_grad=True)
    w = randn(vocab, d, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, vocab, (16,), device=x.device)
    labels[5] = -100
    tangent = randn(2, 8, vocab, dtype=torch.float64) * 1e-3

    def loss(x, w):
        logits = F.linear(x, w)
        return F.cross_entropy(logits.view(-1, vocab), labels), logits

    nb.clear_cache()
    runs = {}
    for name, fn, cast in (("ours", compile_fn(loss, pad_matmuls=True), dtype),
                           ("eager", loss, dtype), ("exact", loss, torch.float64)):
        inputs = [t.detach().to(cast).requires_grad_() for t in (x, w)]
        with caplog.at_level(logging.INFO, logger=LOGGER):
            value, logits = fn(*inputs)
            (value + (logits * tangent.to(cast)).sum()).backward()
        runs[name] = [value.detach(), *(t.grad for t in inputs)]
    assert _pads(caplog) == 1  # the logits' gradient; the weight's pad is along its rows
    for ours, eager, exact in zip(runs["ours"], runs["eager"], runs["exact"]):
        assert_no_worse_than_eager(ours, eager, exact, slack=1e-3 * exact.abs().max().item())
