"""Note [Gathers before pointwise ops] (early_gather.py): one-per-row gathers read the logits."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nvfuser_dtensor_backend.early_gather import gather_early

from helpers import check_parity, fused_ops

aten = torch.ops.aten
F = torch.nn.functional


def _traced(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return gm


def _gather_sources(gm):
    return [n.args[0] for n in gm.graph.nodes if n.target is aten.gather.default]


def _log_probs_at(x, labels):
    flat = x.float().view(-1, x.shape[-1]) * 2
    m = flat.amax(-1, keepdim=True)
    lse = (flat - m).exp().sum(-1, keepdim=True).log()
    return torch.gather(flat - m - lse, 1, labels.view(-1, 1))


def test_the_gather_reads_the_logits_and_the_values_stay():
    x = torch.randn(2, 3, 11, dtype=torch.bfloat16)
    labels = torch.randint(0, 11, (2, 3))
    gm = _traced(_log_probs_at, x, labels)
    assert gather_early(gm) == 1
    (source,) = _gather_sources(gm)
    assert source.op == "placeholder"  # the bf16 logits, not a float [6, 11] row tensor
    torch.testing.assert_close(gm(x, labels), _log_probs_at(x, labels), rtol=0, atol=0)


def test_gathers_of_several_elements_per_row_or_of_two_full_operands_stay():
    x, y = torch.randn(4, 9), torch.randn(4, 9)
    idx = torch.randint(0, 9, (4, 2))
    gm = _traced(lambda x, i: torch.gather(x * 2, 1, i), x, idx)
    assert gather_early(gm) == 0
    gm = _traced(lambda x, y, i: torch.gather(x + y, 1, i), x, y, idx[:, :1])
    assert gather_early(gm) == 0
    # a row statistic broadcast along the gathered dim commutes; the full operand is followed
    gm = _traced(lambda x, y, i: torch.gather((x + y) - x.amax(1, keepdim=True), 1, i), x, y, idx[:, :1])
    assert gather_early(gm) == 1
    (source,) = _gather_sources(gm)
    assert source.target is aten.add.Tensor
    torch.testing.assert_close(gm(x, y, idx[:, :1]), torch.gather((x + y) - x.amax(1, keepdim=True), 1, idx[:, :1]))


def test_cross_entropy_through_the_backend():
    logits = torch.randn(2, 5, 8193, dtype=torch.bfloat16)
    logits = logits.to("cuda" if torch.cuda.is_available() else "cpu").requires_grad_(True)
    labels = torch.randint(0, 8193, (2, 5), device=logits.device)
    check_parity(lambda x, y: F.cross_entropy(x.float().view(-1, 8193), y.view(-1)), logits, labels,
                 backward=True, expect_ops=["aten.gather.default", "aten.amax.default"])
    assert "aten.gather.default" in fused_ops()
