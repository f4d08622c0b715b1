"""The last retry of a region nvFuser rejects (Note [Retries at run time], region.py): its
inputs that it only permutes are handed over already permuted, as dense tensors.

ConvNeXt's channels-last LayerNorm backward permutes an NCHW-contiguous gradient to NHWC
inside the region. On the H200 nvFuser's inner-outer persistent schedule then vectorized the
channel dim of that input, which is not innermost in its memory, and lowering rejected it
(``validateAllocationVectorizedId``, validation.cpp:1266). The inputs were already
contiguous, so the contiguous retry could not help; a copy in the permuted order can.
"""

from __future__ import annotations

import copy

import torch
from torch import fx

aten = torch.ops.aten


def without_input_permutes(region: fx.GraphModule) -> tuple[fx.GraphModule, dict[int, list[int]]] | None:
    """A copy of ``region`` whose inputs used only by one ``permute`` take the permuted value
    directly, and {input index: permutation}; None if no input is used that way."""
    gm = fx.GraphModule(region, copy.deepcopy(region.graph))
    dims: dict[int, list[int]] = {}
    for i, ph in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        users = list(ph.users)
        if len(users) == 1 and users[0].op == "call_function" and users[0].target is aten.permute.default:
            permute = users[0]
            dims[i] = list(permute.args[1])
            if "val" in permute.meta:
                ph.meta["val"] = permute.meta["val"]
            permute.replace_all_uses_with(ph)
            gm.graph.erase_node(permute)
    if not dims:
        return None
    gm.graph.lint()
    gm.recompile()
    return gm, dims


class PermutedEntry:
    """Runs ``inner`` (a region without its input permutes) on dense permuted copies."""

    __slots__ = ("inner", "dims")

    def __init__(self, inner, dims: dict[int, list[int]]):
        self.inner, self.dims = inner, dims

    def __call__(self, args):
        return self.inner(*[a.permute(self.dims[i]).contiguous() if i in self.dims else a
                            for i, a in enumerate(args)])
