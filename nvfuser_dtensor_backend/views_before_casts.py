"""A view of a dtype cast becomes the cast of the view, so that the view reads the cast's input.

Note [Views before casts]
Hugging Face's causal LM loss upcasts the logits, then views them as rows:
``view(_to_copy(logits, float32), [-1, vocab])``. In its region nvFuser got the reshape of the
upcast input, which its segmenter passes between the loss's segments as a float32
[tokens, vocabulary] tensor (Note [Views of region inputs stay out] in partition.py). A cast
is elementwise, so ``view(cast(x))`` is ``cast(view(x))``: with the view first, it reads a
value from outside the region and is left to PyTorch, and the region's first op is the cast
of its input, which nvFuser recomputes in each segment that reads it. Rewritten, with
``NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1`` (partition.INPUT_VIEWS_OUT), before partitioning, for a
``view``/``_unsafe_view`` of a dtype-only *upcast* that nothing else reads, where the
input can be viewed so (checked on its recorded value: a view of a padded or transposed
tensor may not be possible) and the cast of the view gets the strides aten recorded for the
view (Note [Output layout contract] in fusion.py). Chains of casts are walked one at a time.
Only upcasts: a region's downcast before its output's view (ViT's GELU backward, bf16) would
otherwise take that view in, a reshape nvFuser must then make, where it stayed out as a
trailing view (Note [Region outputs are not views] in partition.py) and cost nothing.
"""

from __future__ import annotations

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import is_dtype_cast, rewritten
from .fx_nodes import val as _val
from .partition import VIEWS_OF_INPUTS  # the views that then leave their regions

aten = torch.ops.aten


def _swap(graph: fx.Graph, fake_mode, view: fx.Node) -> fx.Node | None:
    """``view(cast(x))`` replaced by ``cast(view(x))`` when exact and the layouts agree;
    returns the new view, or None."""
    cast = view.args[0]
    if not is_dtype_cast(cast) or len(cast.users) != 1:
        return None
    source, vsource, vview = cast.args[0], _val(cast.args[0]), _val(view)
    if not isinstance(source, fx.Node) or not isinstance(vsource, torch.Tensor) or not isinstance(vview, torch.Tensor):
        return None
    if vview.dtype.itemsize <= vsource.dtype.itemsize:  # not an upcast: a region's output side
        return None
    rest = fx.node.map_arg((view.args[1:], view.kwargs), _val)
    with fake_mode:
        try:
            vfirst = view.target(vsource, *rest[0], **rest[1])
        except (RuntimeError, ValueError):  # not viewable so: aten's graph would have copied
            return None
        vcast = aten._to_copy.default(vfirst, **cast.kwargs)
    if vcast.shape != vview.shape or vcast.stride() != vview.stride() or vcast.dtype != vview.dtype:
        return None
    with graph.inserting_before(view):
        first = graph.call_function(view.target, (source, *view.args[1:]), dict(view.kwargs))
        recast = graph.call_function(cast.target, (first,), dict(cast.kwargs))
    first.meta = {**view.meta, "val": vfirst}
    recast.meta = {**cast.meta, "val": vcast}
    view.replace_all_uses_with(recast)
    graph.erase_node(view)
    graph.erase_node(cast)
    return first


def views_before_casts(gm: fx.GraphModule) -> int:
    """Every ``view(cast(x))`` of ``gm`` that may be, rewritten (Note [Views before casts]);
    returns how many."""
    views = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in VIEWS_OF_INPUTS]
    if not views:
        return 0
    fake_mode = detect_fake_mode([_val(n) for n in gm.graph.nodes if n.op == "placeholder"])
    if fake_mode is None:
        return 0
    swapped = 0
    for view in views:
        while (view := _swap(gm.graph, fake_mode, view)) is not None:  # then the cast before it
            swapped += 1
    if swapped:
        rewritten(gm)
    return swapped
