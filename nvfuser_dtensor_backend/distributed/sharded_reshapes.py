"""Reshapes that would put a device split on an inner split: kept out of the fusions.

Note [Sharded reshapes stay out of fusions]
In a global-view fusion, ``Shard(d)`` on a mesh dim of size D is ``outer_split(d, D)`` with
the outer part on a device axis (Note [Global view]). nvFuser 0.2.36 carries that split
through a reshape only where it stays the outermost part of a dim; otherwise it stops at
run time with "we don't support DID on inner splits" (``multidevice/utils.cpp:164``,
``getShardedLogicalAxis``).

The sequence-parallel block with ``fuse_matmul=True`` hit it on the H200 at batch 4 and 8,
not at batch 1: its row-parallel projection is ``view(addmm(...), [B, S, E])`` followed by
a relayout to ``Shard(1)`` (a reduce-scatter over the sequence). The relayout shards S,
and in the reshape's input ``[B*S, E]`` S is the inner part of ``B*S``: the device split
would sit inside it. With B = 1 it is outermost, which is why batch 1 ran.

The backward of the same block hit it too, with pointwise ops in between: the input
gradient is ``add(view(mm(...)), view(mm(...)))`` relaid out to ``Shard(1)``, and nvFuser
propagates the relayout's sharding back through the adds onto the views. So a reshape
counts when the relayout reads it directly or through pointwise ops of the relayout's shape.

Such a reshape (one whose output dim, sharded by the relayout that reads it, has a dim of
size > 1 in front of it from the same input dim) stays out of the regions: it is marked on
the node (``registry.KEEP_OUT``, which ``lookup`` reads) and runs between them, on local
tensors (Note [Local execution of the global view]). The relayout then starts the next
fusion from a region input. DTensor already refuses the mirror case, a view that merges a
sharded dim behind another, so no graph on the global view holds one.
"""

from __future__ import annotations

import torch
from torch import fx

from ..fx_nodes import RESHAPES
from ..registry import KEEP_OUT
from .tp_conversions import layout, run_relayout

aten = torch.ops.aten


def _groups(a: list[int], b: list[int]) -> list[tuple[list[int], list[int]]]:
    """Input and output dims of a reshape ``a -> b`` in the smallest runs of equal
    products; [] where the sizes do not describe a reshape."""
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        gi, gj, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                gi.append(i)
                pa *= a[i]
                i += 1
            elif pb < pa and j < len(b):
                gj.append(j)
                pb *= b[j]
                j += 1
            else:
                return []
        groups.append((gi, gj))
    return groups


def inner_split_reason(in_shape, out_shape, sharded_out_dim: int) -> str | None:
    """Why sharding output dim ``sharded_out_dim`` of the reshape ``in_shape -> out_shape``
    needs a device split inside an input dim, or None."""
    a, b = [int(s) for s in in_shape], [int(s) for s in out_shape]
    for gi, gj in _groups(a, b):
        if sharded_out_dim in gj:
            before = [y for y in gj if y < sharded_out_dim and b[y] != 1]
            if before:
                return (f"the reshape {a} -> {b} puts sharded dim {sharded_out_dim} behind dim {before[0]} "
                        "inside one input dim (DID on inner splits, Note [Sharded reshapes stay out of fusions])")
    return None


def keep_inner_sharded_reshapes_out(graph: fx.Graph) -> int:
    """Mark the reshapes of the Note with ``KEEP_OUT``; returns how many."""
    from torch.distributed.tensor.placement_types import Shard

    marked = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not run_relayout:
            continue
        _, placements = layout(node.args[1])
        dims = [p.dim for p in placements if type(p) is Shard]
        for src in _reshapes_feeding(node.args[0]) if dims else ():
            before, after = src.args[0].meta["val"], src.meta["val"]
            reason = next(filter(None, (inner_split_reason(before.shape, after.shape, d % after.dim()) for d in dims)),
                          None)
            if reason and KEEP_OUT not in src.meta:
                src.meta[KEEP_OUT] = reason
                marked += 1
    return marked


def _reshapes_feeding(node) -> list[fx.Node]:
    """The reshapes ``node`` is, or is computed from through pointwise ops of its shape."""
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return []
    found, todo, seen = [], [node], set()
    while todo:
        n = todo.pop()
        v = n.meta.get("val")
        if n in seen or n.op != "call_function" or not isinstance(v, torch.Tensor) or v.shape != value.shape:
            continue
        seen.add(n)
        if n.target in RESHAPES:
            if isinstance(n.args[0].meta.get("val"), torch.Tensor):
                found.append(n)
        elif isinstance(n.target, torch._ops.OpOverload) and torch.Tag.pointwise in n.target.tags:
            todo.extend(n.all_input_nodes)
    return found
