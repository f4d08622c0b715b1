"""A view of a dtype upcast becomes the upcast of the view, so that the view reads the cast's input;
a downcast of a view becomes the view of the downcast, so that the view trails its region.

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
The other way round for downcasts: the loss backward views its float gradient back to
[batch, seq, vocabulary], then casts it to bf16, ``_to_copy(view(g))``, and nvFuser got that
reshape before the cast (an extra 393 MB in GPT-2's loss backward on an H100, session 42,
absent with the logits handed over as rows). As ``view(_to_copy(g))`` the view trails the
region and PyTorch makes it for free.
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


def _is_cast(node) -> bool:
    """``node`` is ``_to_copy(x)`` changing the dtype and naming at most its device and a
    strided layout (AOTAutograd's backward casts so; the device is checked on the values)."""
    return (isinstance(node, fx.Node) and node.op == "call_function" and node.target is aten._to_copy.default
            and len(node.args) == 1 and set(node.kwargs) <= {"dtype", "layout", "device"}
            and node.kwargs.get("layout") in (None, torch.strided))


def _cast_first(graph: fx.Graph, fake_mode, cast: fx.Node) -> fx.Node | None:
    """A downcast ``cast(view(x))`` replaced by ``view(cast(x))`` when exact and the layouts
    agree; returns the new cast, or None."""
    view = cast.args[0] if _is_cast(cast) else None
    if not isinstance(view, fx.Node) or view.target not in VIEWS_OF_INPUTS or len(view.users) != 1:
        return None
    source, vsource, vcast = view.args[0], _val(view.args[0]), _val(cast)
    if not isinstance(source, fx.Node) or not isinstance(vsource, torch.Tensor) or not isinstance(vcast, torch.Tensor):
        return None
    if vcast.device != vsource.device:
        return None
    if vcast.dtype.itemsize >= vsource.dtype.itemsize:  # not a downcast
        return None
    rest = fx.node.map_arg((view.args[1:], view.kwargs), _val)
    with fake_mode:
        vfirst = aten._to_copy.default(vsource, **cast.kwargs)
        try:
            vview = view.target(vfirst, *rest[0], **rest[1])
        except (RuntimeError, ValueError):
            return None
    if vview.shape != vcast.shape or vview.stride() != vcast.stride() or vview.dtype != vcast.dtype:
        return None
    with graph.inserting_before(cast):
        first = graph.call_function(cast.target, (source,), dict(cast.kwargs))
        reviewed = graph.call_function(view.target, (first, *view.args[1:]), dict(view.kwargs))
    first.meta = {**cast.meta, "val": vfirst}
    reviewed.meta = {**view.meta, "val": vview}
    cast.replace_all_uses_with(reviewed)
    graph.erase_node(cast)
    graph.erase_node(view)
    return first


def views_before_casts(gm: fx.GraphModule) -> int:
    """Every ``view(upcast(x))`` and ``downcast(view(x))`` of ``gm`` that may be, rewritten
    (Note [Views before casts]); returns how many."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    views = [n for n in nodes if n.target in VIEWS_OF_INPUTS]
    if not views:
        return 0
    fake_mode = detect_fake_mode([_val(n) for n in gm.graph.nodes if n.op == "placeholder"])
    if fake_mode is None:
        return 0
    swapped = 0
    for view in views:
        while (view := _swap(gm.graph, fake_mode, view)) is not None:  # then the cast before it
            swapped += 1
    for cast in [n for n in gm.graph.nodes if _is_cast(n)]:
        while (cast := _cast_first(gm.graph, fake_mode, cast)) is not None:  # then the view before it
            swapped += 1
    if swapped:
        rewritten(gm)
    return swapped
