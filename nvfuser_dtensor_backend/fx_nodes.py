"""What the graph rewrites before partitioning (pad_matmul.py, early_gather.py,
one_hot_sum.py, dense_stack.py, padded_rows.py, cpu_constants.py) share: a node's
recorded value, a new node recorded with its own, the random-op test (partition.py and
cuda_graphs.py use it too), the one-index-per-row test of a gather or scatter, the
dtype-only cast test, the reshape ops, and the tidy-up after a rewrite."""

from __future__ import annotations

import torch
from torch import fx

aten = torch.ops.aten

# The reshape ops of aten graphs (the graph rewrites and the sharded-reshape rule test for them)
RESHAPES = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})


def val(node):
    """The value aten recorded for ``node`` (``meta["val"]``: a fake tensor), None for
    anything else."""
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def is_dtype_cast(node, named_device: bool = False) -> bool:
    """``node`` is ``_to_copy(x)`` changing at most the dtype: no device, layout or memory
    format of its own. With ``named_device`` it may also name a device and a strided layout,
    as AOTAutograd's backward casts do (whether the device is the input's is for the caller to
    check on the values)."""
    named = {"dtype", "layout", "device"} if named_device else {"dtype"}
    return (isinstance(node, fx.Node) and node.op == "call_function" and node.target is aten._to_copy.default
            and len(node.args) == 1 and set(node.kwargs) <= named
            and node.kwargs.get("layout") in (None, torch.strided))


def is_random_op(target) -> bool:
    """``target`` draws random numbers: an aten op tagged ``nondeterministic_seeded``
    (``rand_like``, ``native_dropout``, attention with dropout, ...)."""
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


def call_with_val(graph: fx.Graph, fake_mode, target, args, kwargs=None) -> fx.Node:
    """A ``call_function`` node of ``target`` at the graph's insertion point, its value
    computed from its arguments' values under ``fake_mode``."""
    args, kwargs = tuple(args), kwargs or {}
    node = graph.call_function(target, args, kwargs)
    vals = fx.node.map_arg((args, kwargs), val)
    with fake_mode:
        node.meta["val"] = target(*vals[0], **vals[1])
    return node


def one_per_row(index, source, dim: int) -> bool:
    """``index`` (a value) picks one element per row of ``source`` along ``dim``: extent 1
    there, the source's extents elsewhere."""
    if not isinstance(index, torch.Tensor) or not isinstance(source, torch.Tensor) or index.dim() != source.dim():
        return False
    return index.shape[dim] == 1 and all(i == s for d, (i, s) in enumerate(zip(index.shape, source.shape)) if d != dim)


def rewritten(gm: fx.GraphModule) -> None:
    """After a rewrite of ``gm``'s graph: drop the nodes nothing uses any more (the old ones),
    check the graph and regenerate its code."""
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
