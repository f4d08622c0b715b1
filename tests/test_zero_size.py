"""Concatenations and scatters whose only other operand is empty (zero_size.py, Note [Empty
operands])."""

from __future__ import annotations

import torch

import nvfuser_dtensor_backend as nb
from helpers import assert_close, check_parity, compile_fn, randn


def _reasons() -> str:
    return "\n".join(r.summary() for r in nb.reports())


def _full_rotary(q, cos, sin):
    """HF Phi-3's apply_rotary_pos_emb with the rotary dims covering the whole head."""
    rot, keep = q[..., :16], q[..., 16:]
    half = torch.cat((-rot[..., 8:], rot[..., :8]), dim=-1)
    return torch.cat([rot * cos + half * sin, keep], dim=-1) @ q.transpose(-1, -2)


def test_full_rotary_embedding_forward_and_backward():
    q = randn(2, 4, 8, 16, requires_grad=True)
    cos, sin = randn(8, 16), randn(8, 16)
    check_parity(_full_rotary, q, cos, sin, backward=True)
    assert "zero-size" not in _reasons(), _reasons()


def test_a_graph_input_is_copied_not_aliased():
    x = randn(4, 8)
    out = compile_fn(lambda x: torch.cat([x, x[:, 8:]], dim=1))(x)
    assert_close(out, x)
    assert out.data_ptr() != x.data_ptr()


def test_strided_operand_then_a_view():
    """The remaining operand is a transpose; the cat's result was contiguous and is viewed."""
    def fn(x):
        t = (x * 2).transpose(1, 2)
        return torch.cat([t, t[..., 6:]], dim=-1).view(-1).sin()

    check_parity(fn, randn(3, 6, 5))


def test_a_cat_that_promotes_against_an_empty_operand_stays():
    def fn(x, e):
        return torch.cat([x * 2, e], dim=0)

    x, e = randn(4, 3, dtype=torch.bfloat16), randn(0, 3)
    out = compile_fn(fn)(x, e)
    assert out.dtype == torch.float32
    assert_close(out, fn(x, e))
