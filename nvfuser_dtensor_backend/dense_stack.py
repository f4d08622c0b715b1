"""A stack that is permuted and then made dense, written once in its final layout.

Note [Permuted stacks written once]
Attention with one fused qkv projection (timm's ViT: ``qkv(x).reshape(B, N, 3, H, D)
.permute(2, 0, 3, 1, 4).unbind(0)``) has in its backward
``clone(permute(view(cat([dq, dk, dv]), [3, B, H, N, D]), [1, 3, 0, 2, 4]))``: the three
gradients stacked, then copied again to the dense [B, N, 3, H, D] that the weight gradient's
GEMM reads. Neither op computes anything, so both ran in aten. On the H200 they were two
copies of the whole tensor per layer: ``cat`` took 0.36 ms and the clone 0.27 ms of ViT-S/16's
training step (12 layers; inductor's one fused kernel took 0.08 ms). So, before
partitioning, ``clone(permute(view(cat(xs, 0), [k, *S]), perm))``, where ``xs`` are ``k``
tensors of shape ``S``, becomes ``cat([unsqueeze(permute(x, perm'), p) for x in xs], p)``.
Here ``p`` is where ``perm`` puts the stacked axis and ``perm'`` is ``perm`` without it. The
values are the same and there is one copy, provided the new ``cat``'s value has the strides
the clone recorded (checked on the fake values; else the graph is left as it is).
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import call_with_val, rewritten
from .fx_nodes import val as _val

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten


def _call(node, target) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target is target


def _stack_parts(clone: fx.Node):
    """(xs, perm) when ``clone`` is ``clone(permute(view(cat(xs, 0), [k, *S]), perm))`` with
    ``k`` inputs of shape ``S``, made dense; else None."""
    if not _call(clone, aten.clone.default) or clone.kwargs.get("memory_format", torch.contiguous_format) not in (
            torch.contiguous_format, torch.preserve_format):
        return None
    permute = clone.args[0]
    if not _call(permute, aten.permute.default) or len(permute.users) != 1:
        return None
    view = permute.args[0]
    if not _call(view, aten.view.default) or len(view.users) != 1:
        return None
    cat = view.args[0]
    if not _call(cat, aten.cat.default) or (cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)) != 0:
        return None
    xs = list(cat.args[0])
    vals = [_val(x) for x in xs]
    if not all(isinstance(v, torch.Tensor) for v in vals) or len({(tuple(v.shape), v.dtype) for v in vals}) != 1:
        return None
    if list(_val(view).shape) != [len(xs), *vals[0].shape]:
        return None
    return xs, [d % _val(view).dim() for d in permute.args[1]]


def write_stacks_once(gm: fx.GraphModule) -> int:
    """Rewrites permuted stacks made dense (Note [Permuted stacks written once]); returns how many."""
    graph, done, tried = gm.graph, 0, 0
    for node in list(graph.nodes):
        parts = _stack_parts(node)
        if parts is None:
            continue
        xs, perm = parts
        fake_mode = detect_fake_mode([_val(node)])
        if fake_mode is None:
            continue
        tried += 1
        p = perm.index(0)
        inner = [d - 1 for d in perm if d != 0]
        with graph.inserting_before(node):
            pieces = [call_with_val(graph, fake_mode, aten.unsqueeze.default,
                                    [call_with_val(graph, fake_mode, aten.permute.default, [x, inner]), p]) for x in xs]
            stacked = call_with_val(graph, fake_mode, aten.cat.default, [pieces, p])
        if _val(stacked).shape != _val(node).shape or _val(stacked).stride() != _val(node).stride():
            graph.erase_node(stacked)  # not the layout the clone made: leave it (the pieces go below)
            continue
        node.replace_all_uses_with(stacked)
        graph.erase_node(node)
        done += 1
    if tried:
        rewritten(gm)
    if done:
        log.info("nvfuser_dtensor: %d permuted stack(s) written once (Note [Permuted stacks written once])", done)
    return done
