"""Concatenations and scatters whose only other operand is empty, taken out before partitioning.

Note [Empty operands]
Phi-3's rotary embedding covers the whole head (``partial_rotary_factor=1.0``), yet HF still
splits ``q[..., :rotary_dim]`` from the empty ``q[..., rotary_dim:]`` and concatenates them
again: ``cat([q_rot * cos + rotate_half(q_rot) * sin, q_pass], -1)``. nvFuser takes no
zero-size tensor, so each such ``cat`` stayed in PyTorch: a copy of q and of k per layer,
which also kept the rotary region from handing its result straight to attention. The backward
has the mirror image, a ``slice_scatter`` of the empty slice's gradient. Both are their one
non-empty operand: the node's uses take that operand itself when it has the node's dtype and
strides and is not a graph input (an output must not alias an input), else a contiguous
``clone`` of it, which a region can absorb. The empty slices are then dead code.
"""

from __future__ import annotations

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import call_with_val, rewritten
from .fx_nodes import val as _val

aten = torch.ops.aten


def _empty(node) -> bool:
    v = _val(node)
    return isinstance(v, torch.Tensor) and v.numel() == 0


def _the_operand(node: fx.Node) -> fx.Node | None:
    """The one operand ``node`` equals, or None: a cat of one non-empty tensor (the others
    empty), a slice_scatter of an empty source."""
    if node.target is aten.cat.default:
        tensors = node.args[0]
        full = [t for t in tensors if not _empty(t)]
        if len(full) == 1 and len(tensors) > 1 and isinstance(full[0], fx.Node):
            return full[0]
    elif node.target is aten.slice_scatter.default and _empty(node.args[1]) and isinstance(node.args[0], fx.Node):
        return node.args[0]
    return None


def drop_empty_operands(gm: fx.GraphModule) -> int:
    """Apply Note [Empty operands] to ``gm``; returns how many nodes were replaced."""
    fake_mode = None
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        operand = _the_operand(node)
        out, v = _val(node), _val(operand)
        if operand is None or not isinstance(out, torch.Tensor) or not isinstance(v, torch.Tensor):
            continue
        if v.shape != out.shape or v.dtype != out.dtype:
            continue  # a cat that type-promotes against an empty operand of another dtype
        if v.stride() == out.stride() and operand.op != "placeholder":
            node.replace_all_uses_with(operand)
        elif out.is_contiguous():
            fake_mode = fake_mode or detect_fake_mode([v])
            if fake_mode is None:
                continue
            with gm.graph.inserting_before(node):
                copy = call_with_val(gm.graph, fake_mode, aten.clone.default, (operand,),
                                     {"memory_format": torch.contiguous_format})
            node.replace_all_uses_with(copy)
        else:
            continue
        replaced += 1
    if replaced:
        rewritten(gm)
    return replaced
