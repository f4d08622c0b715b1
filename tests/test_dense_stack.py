"""Note [Permuted stacks written once] (dense_stack.py): a permuted stack made dense is one cat."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nvfuser_dtensor_backend.dense_stack import write_stacks_once

from helpers import DEVICE, randn

aten = torch.ops.aten


def _qkv_grad(dq, dk, dv):
    # timm's Attention backward: unbind's gradient stacked, then the reshape's permute undone
    return torch.stack([dq, dk, dv]).permute(1, 3, 0, 2, 4).reshape(dq.shape[0], dq.shape[2], -1) * 1


def _ops(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bshd", [False, True])  # the gradients as cuDNN's attention writes them
def test_stack_permute_clone_is_one_cat(dtype, bshd):
    b, h, n, d = 2, 3, 5, 4
    make = (lambda: randn(b, n, h, d, dtype=dtype).transpose(1, 2)) if bshd else (lambda: randn(b, h, n, d, dtype=dtype))
    grads = [make() for _ in range(3)]
    gm = make_fx(lambda *g: torch.ops.aten.clone(torch.ops.aten.permute(
        torch.ops.aten.cat(list(g)).view(3, b, h, n, d), [1, 3, 0, 2, 4]), memory_format=torch.contiguous_format),
        tracing_mode="fake")(*grads)
    expected = gm(*grads)
    assert write_stacks_once(gm) == 1
    ops = _ops(gm)
    assert aten.clone.default not in ops and ops.count(aten.cat.default) == 1, ops
    out = gm(*grads)
    assert out.is_contiguous() and out.shape == (b, n, 3, h, d)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_stacks_that_are_not_that_pattern_stay():
    x, y = randn(2, 3, 4), randn(2, 3, 4)
    cases = [
        lambda x, y: torch.cat([x, y]).view(2, 2, 3, 4).permute(1, 0, 2, 3) * 2,  # no copy to remove
        lambda x, y: torch.cat([x, y], 1).view(2, 2, 3, 4).permute(1, 0, 2, 3).contiguous(),  # cat along dim 1
        lambda x, y: torch.cat([x, y[:1]]).view(3, 3, 4).permute(1, 0, 2).contiguous(),  # unequal parts
    ]
    for f in cases:
        gm = make_fx(f, tracing_mode="fake")(x, y)
        assert write_stacks_once(gm) == 0


def test_vit_attention_backward_end_to_end(caplog):
    timm = pytest.importorskip("timm")
    import copy
    import logging

    torch.manual_seed(0)
    attn = timm.layers.Attention(32, num_heads=4, qkv_bias=True).to(DEVICE)
    ours = copy.deepcopy(attn)
    x = randn(2, 7, 32)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(ours, backend="nvfuser_dtensor")
    with caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        out = compiled(xc)
        expected = attn(xe)
        g = torch.randn_like(expected)
        expected.backward(g)
        out.backward(g)
    assert any("permuted stack(s) written once" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(attn.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-5, msg=name)
