"""Gathers of one element per row, moved before the pointwise ops that feed them.

Note [Gathers before pointwise ops]
Cross-entropy reads one log-probability per row: ``gather(log_softmax(x), dim, label)``,
with log_softmax over a wide odd vocabulary decomposed (Note [Wide odd rows]) into
``(x - max) - log(sum(exp(x - max)))``. Left as it is, the gather reads a [rows, vocabulary]
float tensor that nvFuser must first write out, since the gather's lookup tensor is a
segment input (823 MB each way for GPT-2's 8 x 512 tokens), while one element per row is
all it needs. A gather along ``dim`` with an index of extent 1 there commutes with a
pointwise op whose other operands have extent 1 along ``dim`` (the row statistics) or are
numbers: ``gather(a - m, dim, i) == gather(a, dim, i) - m``, element for element the same
arithmetic on the same values. So, before partitioning, such a gather is moved back through
pointwise ops, dtype casts and views that only merge the dims before the gathered last one
(the index viewed alike) until it reads a value that is none of these (the logits), and the
loss region reads one element per row of them. The rows' statistics are still computed from
the whole rows (their reductions read the logits); the full log-probabilities are no longer
made in the forward. Other gathers are left alone.
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import RESHAPES, call_with_val, is_dtype_cast, one_per_row, rewritten
from .fx_nodes import val as _val

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten


def _movable(node: fx.Node, dim: int, index) -> int | None:
    """For a pointwise ``node`` that a gather along ``dim`` with ``index`` may move before:
    the position of the one operand with the full extent along ``dim`` (the others have
    extent 1 there, broadcast against the index's shape, or are numbers); else None."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    val = _val(node)
    if not isinstance(val, torch.Tensor) or val.dim() != index.dim():
        return None
    cast = is_dtype_cast(node)
    if not cast and torch.Tag.pointwise not in node.target.tags:
        return None
    full = None
    for pos, a in enumerate(node.args):
        v = _val(a)
        if isinstance(a, fx.Node) and not isinstance(v, torch.Tensor):
            return None
        if not isinstance(v, torch.Tensor):
            continue  # a number
        if v.dim() == val.dim() and v.shape == val.shape and v.shape[dim] != 1:
            if full is not None:
                return None  # two full operands: both would need the gather
            full = pos
        elif v.dim() > val.dim() or (v.dim() == val.dim() and v.shape[dim] != 1) or \
                torch.broadcast_shapes(v.shape, index.shape) != index.shape:
            return None
    return full


def _view_keeps_last(node: fx.Node, dim: int) -> bool:
    """``node`` reshapes the dims before ``dim``, its last, and keeps that one's extent (GPT-2's
    logits, [batch, tokens, vocabulary] viewed as [batch * tokens, vocabulary])."""
    if node.op != "call_function" or node.target not in RESHAPES:
        return False
    out, src = _val(node), _val(node.args[0])
    return (isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and dim == out.dim() - 1
            and src.dim() >= 1 and src.shape[-1] == out.shape[-1]
            and all(isinstance(s, int) for s in (*src.shape, *out.shape)))  # views of static shapes only


class _Mover:
    def __init__(self, graph: fx.Graph, fake_mode):
        self.graph, self.fake_mode, self.steps = graph, fake_mode, 0

    def call(self, target, args, kwargs=None) -> fx.Node:
        return call_with_val(self.graph, self.fake_mode, target, args, kwargs)

    def gathered(self, source: fx.Node, dim: int, index: fx.Node, rest: tuple) -> fx.Node:
        """A node equal to ``gather(source, dim, index)``, the gather moved as early as it goes."""
        vidx = _val(index)
        pos = _movable(source, dim, vidx)
        if pos is not None:
            self.steps += 1
            args = list(source.args)
            args[pos] = self.gathered(source.args[pos], dim, index, rest)
            return self.call(source.target, args, dict(source.kwargs))
        if _view_keeps_last(source, dim) and vidx.is_contiguous():  # the index is viewed alike
            self.steps += 1
            inner = source.args[0]
            shape = list(_val(inner).shape)
            index2 = self.call(aten.view.default, [index, shape[:-1] + [1]])
            picked = self.gathered(inner, len(shape) - 1, index2, rest)
            return self.call(aten.view.default, [picked, list(vidx.shape)])
        return self.call(aten.gather.default, [source, dim, index, *rest])


def gather_early(gm: fx.GraphModule) -> int:
    """Moves one-per-row gathers before pointwise ops (Note [Gathers before pointwise ops]);
    returns how many gathers moved."""
    graph, moved = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.gather.default or len(node.args) < 3:
            continue
        source, dim, index = node.args[:3]
        vsrc, vidx = _val(source), _val(index)
        if (not isinstance(source, fx.Node) or not isinstance(index, fx.Node) or not isinstance(dim, int)
                or not isinstance(vsrc, torch.Tensor) or vsrc.dim() == 0
                or not one_per_row(vidx, vsrc, dim % vsrc.dim())):
            continue
        fake_mode = detect_fake_mode([vsrc])
        if fake_mode is None:
            continue
        mover = _Mover(graph, fake_mode)
        with graph.inserting_before(node):
            picked = mover.gathered(source, dim % vsrc.dim(), index, tuple(node.args[3:]))
        node.replace_all_uses_with(picked)
        graph.erase_node(node)
        moved += mover.steps > 0
    if moved:
        rewritten(gm)
        log.info("nvfuser_dtensor: %d gather(s) moved before pointwise ops (Note [Gathers before pointwise ops])", moved)
    return moved
