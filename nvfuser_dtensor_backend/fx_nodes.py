"""What the graph rewrites before partitioning (pad_matmul.py, early_gather.py,
one_hot_sum.py, cpu_constants.py) share: a node's recorded value, a new node recorded with
its own, and the tidy-up after a rewrite."""

from __future__ import annotations

from torch import fx


def val(node):
    """The value aten recorded for ``node`` (``meta["val"]``: a fake tensor), None for
    anything else."""
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def call_with_val(graph: fx.Graph, fake_mode, target, args, kwargs=None) -> fx.Node:
    """A ``call_function`` node of ``target`` at the graph's insertion point, its value
    computed from its arguments' values under ``fake_mode``."""
    args, kwargs = tuple(args), kwargs or {}
    node = graph.call_function(target, args, kwargs)
    vals = fx.node.map_arg((args, kwargs), val)
    with fake_mode:
        node.meta["val"] = target(*vals[0], **vals[1])
    return node


def rewritten(gm: fx.GraphModule) -> None:
    """After a rewrite of ``gm``'s graph: drop the nodes nothing uses any more (the old ones),
    check the graph and regenerate its code."""
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
