"""A graph's updates of its inputs, applied by one ``_foreach_copy_`` per dtype.

Note [Input updates in one launch]
AOTAutograd applies a graph's mutations of its inputs as ``copy_(input, new_value)`` nodes at
the graph's end (``keep_inference_input_mutations``): batch norm's running mean, running
variance and batch counter, three per layer, 60 in ResNet-18's forward. Each is a kernel
launch of a few hundred bytes, in PyTorch, after the regions that computed the new values.
Inductor writes them from its fused kernels. Here, each run of consecutive such copies (no
other node between them, so no reader sees an input half updated) becomes one
``aten._foreach_copy_`` per device and dtype: on CUDA one multi-tensor kernel (ResNet-18: a
float one and an int64 one), on the CPU a loop of copies. Only plain copies join: into a
placeholder, of a value of the same shape and dtype, the copy's result unused, each input
once per group; others stay as they are.

The CUDA-graph plan (cuda_graphs.py) reads the graph's mutations before this rewrite, and a
captured ``_foreach_copy_`` writes the same memory as the copies it replaces.
"""

from __future__ import annotations

import torch
from torch import fx

from .fx_nodes import val
from .registry import KEEP_OUT

aten = torch.ops.aten


def _plain_input_copy(node: fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.copy_.default or node.kwargs or len(node.args) != 2:
        return False
    dst, src = node.args
    d, s = val(dst), val(src)
    return (isinstance(dst, fx.Node) and dst.op == "placeholder" and not node.users
            and isinstance(d, torch.Tensor) and isinstance(s, torch.Tensor)
            and d.shape == s.shape and d.dtype == s.dtype and d.device == s.device)


def group_input_copies(gm: fx.GraphModule) -> int:
    """Replace runs of input updates in ``gm`` by ``_foreach_copy_`` calls (Note [Input
    updates in one launch]); returns how many copies were grouped."""
    runs: list[list[fx.Node]] = [[]]
    for node in gm.graph.nodes:
        if _plain_input_copy(node):
            runs[-1].append(node)
        elif runs[-1]:
            runs.append([])
    grouped = 0
    for run in filter(None, runs):
        after = run[-1].next  # not a copy of the run: it stays
        groups: dict[tuple, list[fx.Node]] = {}
        for copy in run:
            d = val(copy.args[0])
            group = groups.setdefault((d.device, d.dtype), [])
            if all(c.args[0] is not copy.args[0] for c in group):
                group.append(copy)
        for group in groups.values():
            if len(group) < 2:
                continue
            with gm.graph.inserting_before(after):
                node = gm.graph.call_function(aten._foreach_copy_.default,
                                              ([c.args[0] for c in group], [c.args[1] for c in group]))
            node.meta[KEEP_OUT] = f"{len(group)} input updates in one launch (Note [Input updates in one launch])"
            for copy in group:
                gm.graph.erase_node(copy)
            grouped += len(group)
    if grouped:
        gm.graph.lint()
        gm.recompile()
    return grouped
