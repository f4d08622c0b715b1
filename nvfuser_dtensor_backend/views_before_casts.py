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


def _commute(graph: fx.Graph, fake_mode, outer: fx.Node) -> fx.Node | None:
    """``outer(inner(x))`` replaced by ``inner(outer(x))``, each with its own other arguments,
    where ``inner`` has no other reader and the result has the value's recorded shape, strides
    and dtype; returns the new ``outer(x)``, or None."""
    inner = outer.args[0]
    if len(inner.users) != 1:
        return None
    source, vsource, vout = inner.args[0], _val(inner.args[0]), _val(outer)
    if not isinstance(source, fx.Node) or not isinstance(vsource, torch.Tensor) or not isinstance(vout, torch.Tensor):
        return None
    if vout.device != vsource.device:
        return None
    outer_rest, inner_rest = (fx.node.map_arg((n.args[1:], n.kwargs), _val) for n in (outer, inner))
    with fake_mode:
        try:
            vfirst = outer.target(vsource, *outer_rest[0], **outer_rest[1])
            vsecond = inner.target(vfirst, *inner_rest[0], **inner_rest[1])
        except (RuntimeError, ValueError):  # not viewable so: aten's graph would have copied
            return None
    if vsecond.shape != vout.shape or vsecond.stride() != vout.stride() or vsecond.dtype != vout.dtype:
        return None
    with graph.inserting_before(outer):
        first = graph.call_function(outer.target, (source, *outer.args[1:]), dict(outer.kwargs))
        second = graph.call_function(inner.target, (first, *inner.args[1:]), dict(inner.kwargs))
    first.meta = {**outer.meta, "val": vfirst}
    second.meta = {**inner.meta, "val": vsecond}
    outer.replace_all_uses_with(second)
    graph.erase_node(outer)
    graph.erase_node(inner)
    return first


def _widening(cast: fx.Node) -> int:
    """Bytes per element ``cast`` adds (negative: a downcast; 0 where unknown)."""
    src, out = _val(cast.args[0]), _val(cast)
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
        return 0
    return out.dtype.itemsize - src.dtype.itemsize


def _view_first(graph: fx.Graph, fake_mode, view: fx.Node) -> fx.Node | None:
    """``view(upcast(x))`` replaced by ``upcast(view(x))``; returns the new view, or None."""
    cast = view.args[0]
    if not is_dtype_cast(cast) or _widening(cast) <= 0:  # not an upcast: a region's output side
        return None
    return _commute(graph, fake_mode, view)


def _cast_first(graph: fx.Graph, fake_mode, cast: fx.Node) -> fx.Node | None:
    """``downcast(view(x))`` replaced by ``view(downcast(x))``; returns the new cast, or None."""
    view = cast.args[0]
    if not isinstance(view, fx.Node) or view.target not in VIEWS_OF_INPUTS or _widening(cast) >= 0:
        return None
    return _commute(graph, fake_mode, cast)


def views_before_casts(gm: fx.GraphModule) -> int:
    """Every ``view(upcast(x))`` and ``downcast(view(x))`` of ``gm`` that may be, rewritten
    (Note [Views before casts]); returns how many."""
    views = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in VIEWS_OF_INPUTS]
    if not views:
        return 0
    fake_mode = detect_fake_mode([_val(n) for n in gm.graph.nodes if n.op == "placeholder"])
    if fake_mode is None:
        return 0
    swapped = 0
    for view in views:
        while (view := _view_first(gm.graph, fake_mode, view)) is not None:  # then the cast before it
            swapped += 1
    for cast in [n for n in gm.graph.nodes if is_dtype_cast(n, named_device=True)]:  # _commute checks the device
        while (cast := _cast_first(gm.graph, fake_mode, cast)) is not None:  # then the view before it
            swapped += 1
    if swapped:
        rewritten(gm)
    return swapped
