"""Row reductions over logits that lie in padded rows read the whole padded row, masked.

Note [Reductions over padded rows]
The LM head's product is padded to a width of a multiple of 8 (Note [Padded matmuls]), and
the logits are a view of it: rows of 50257 elements, 50264 apart (GPT-2). Cross-entropy's
row statistics (``amax`` and ``sum(exp(x - max))`` of the decomposed log_softmax, Note [Wide
odd rows]) over an odd width cannot be vectorized, and nvFuser's persistent schedules reject
such rows, so each statistic was a reduction kernel of its own that read the logits again:
0.76 ms of GPT-2's training step on the H200, where inductor's one kernel took 0.35 ms
(benchmarks/results/h200_profiles_vit). Llama's even rows of 32000 take one persistent
kernel (0.16 ms for a similar size). So, before partitioning, a reduction over the last dim
(``amax``, ``sum``) of a value computed row by row from such logits is computed over the
padded rows instead: the same ops (casts, views that keep the last dim, pointwise ops whose
other operands are row statistics or numbers) on the padded rows, and ``where(column <
width, value, -inf or 0)`` before the reduction. The padding's contents are never read
unmasked, so they may be anything. The padded rows come from:
- ``slice(product, -1, 0, width)`` in the same graph (the padded product itself);
- a graph input whose rows lie ``stride`` apart in memory (the logits handed from the model's
  graph to the loss's graph, GPT-2's graph break): ``rows_widened`` reads it as rows of
  ``stride`` elements when its storage holds them, and pads a copy otherwise (a tensor that
  is only a view of narrower memory, a CUDA graph's input buffer made without the tail).
Only the reductions change: the gather of the labels and the backward read the logits as
before.
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import RESHAPES, call_with_val, rewritten
from .fx_nodes import val as _val
from .pad_matmul import ALIGN  # padded widths are multiples of it (Note [Padded matmuls])

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten

MIN_WIDTH = 1024  # narrower rows fit nvFuser's persistent kernels as they are
_REDUCTIONS = {aten.amax.default: float("-inf"), aten.sum.dim_IntList: 0.0}
_ROW_WISE = frozenset({aten.sub.Tensor, aten.add.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.exp.default,
                       aten.neg.default, aten._to_copy.default, aten.clone.default, *RESHAPES})


def rows_widened(x: torch.Tensor, stride: int) -> torch.Tensor:
    """``x`` (rows of ``x.shape[-1]`` elements, ``stride`` apart) as rows of ``stride``
    elements: a view when its storage holds every row's padding, else a padded copy (the
    padding is never read unmasked, Note [Reductions over padded rows])."""
    if _row_padded(x.shape, x.stride(), stride):
        if (x.storage_offset() + padded_extent(x)) * x.element_size() <= x.untyped_storage().nbytes():
            return x.as_strided((*x.shape[:-1], stride), x.stride())
    return torch.nn.functional.pad(x, (0, stride - x.shape[-1]))


def padded_extent(t: torch.Tensor) -> int:
    """The elements ``t`` spans when its rows are read ``t.stride(-2)`` long: its own extent
    and the last row's padding (the CUDA-graph runner's input buffers keep it too)."""
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + t.stride(-2) - t.shape[-1]


def _row_padded(shape, strides, stride: int) -> bool:
    """Rows of ``shape[-1]`` elements ``stride`` apart, the other dims dense over them."""
    if len(shape) < 2 or strides[-1] != 1 or strides[-2] != stride:
        return False
    step = stride * shape[-2]
    for n, st in zip(reversed(shape[:-2]), reversed(strides[:-2])):
        if n != 1 and st != step:
            return False
        step *= n
    return True


def _padded_width(v) -> int | None:
    """The padded row width of an input value laid out in padded rows, else None."""
    if not isinstance(v, torch.Tensor) or v.dim() < 2 or not all(isinstance(s, int) for s in (*v.shape, *v.stride())):
        return None
    width, stride = v.shape[-1], v.stride(-2)
    if width < MIN_WIDTH or width % ALIGN == 0 or stride <= width or stride % ALIGN or stride - width >= ALIGN:
        return None
    return stride if _row_padded(v.shape, v.stride(), stride) else None


def _sources(graph: fx.Graph):
    """(narrow node, padded node or None for a graph input, padded width) of every value in padded rows."""
    for node in graph.nodes:
        v = _val(node)
        if node.op == "placeholder":
            stride = _padded_width(v)
            if stride is not None:
                yield node, None, stride
        elif (node.op == "call_function" and node.target is aten.slice.Tensor and isinstance(v, torch.Tensor)
              and v.dim() >= 2):
            src, dim, start, end = (list(node.args) + [0, 0, None])[:4]
            sv = _val(src)
            width = v.shape[-1]
            if (isinstance(sv, torch.Tensor) and dim in (-1, v.dim() - 1) and start == 0 and end == width
                    and (len(node.args) < 5 or node.args[4] == 1) and width >= MIN_WIDTH and width % ALIGN
                    and sv.shape[-1] % ALIGN == 0 and sv.shape[-1] - width < ALIGN and sv.is_contiguous()):
                yield node, src, sv.shape[-1]


class _Lifter:
    """Rebuilds the row-wise ops between a narrow value and a reduction on the padded rows."""

    def __init__(self, graph, fake_mode, narrow: fx.Node, width: int, stride: int):
        self.graph, self.fake_mode = graph, fake_mode
        self.narrow, self.width, self.stride = narrow, width, stride
        self.wide: dict[fx.Node, fx.Node | None] = {}

    def call(self, target, args, kwargs=None):
        return call_with_val(self.graph, self.fake_mode, target, args, kwargs)

    def lift(self, node, padded: fx.Node) -> fx.Node | None:
        """``node`` computed on the padded rows (``padded`` stands for ``self.narrow``), or None."""
        if node is self.narrow:
            return padded
        if node in self.wide:
            return self.wide[node]
        self.wide[node] = None  # a cycle guard; the graph has none
        v = _val(node)
        if (not isinstance(node, fx.Node) or node.op != "call_function" or node.target not in _ROW_WISE
                or not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[-1] != self.width):
            return None
        if node.target is aten._to_copy.default and not set(node.kwargs) <= {"dtype"}:
            return None
        if node.target is aten.clone.default and node.kwargs.get("memory_format") not in (None, torch.contiguous_format):
            return None
        if node.target in RESHAPES:
            inner = self.lift(node.args[0], padded)
            shape = list(node.args[1])
            if inner is None or not shape or shape[-1] not in (self.width, -1) or _val(node.args[0]).shape[-1] != self.width:
                return None
            shape[-1] = self.stride
            with self.graph.inserting_after(node):
                out = self.call(node.target, [inner, shape])
        else:
            args, lifted = list(node.args), 0
            for i, a in enumerate(args):
                av = _val(a)
                if isinstance(a, fx.Node) and isinstance(av, torch.Tensor) and av.dim() > 0 and av.shape[-1] != 1:
                    inner = self.lift(a, padded)
                    if inner is None:
                        return None
                    args[i], lifted = inner, lifted + 1
                elif isinstance(a, fx.Node) and not isinstance(av, torch.Tensor):
                    return None
            if lifted == 0:
                return None
            with self.graph.inserting_after(node):
                out = self.call(node.target, args, dict(node.kwargs))
        self.wide[node] = out
        return out


def _row_reduction(node: fx.Node) -> float | None:
    """The masking value of a reduction over the last dim only (``amax``/``sum``), else None."""
    if node.op != "call_function" or node.target not in _REDUCTIONS or node.kwargs.get("dtype") is not None:
        return None
    v = _val(node.args[0])
    dims = node.args[1] if len(node.args) > 1 else None
    if not isinstance(v, torch.Tensor) or v.dim() == 0 or not dims or len(dims) != 1 or dims[0] % v.dim() != v.dim() - 1:
        return None
    return _REDUCTIONS[node.target]


def reduce_padded_rows(gm: fx.GraphModule) -> int:
    """Computes row reductions of values in padded rows over the padded rows, masked (Note
    [Reductions over padded rows]); returns how many."""
    graph, done = gm.graph, 0
    sources = list(_sources(graph))
    if not sources:
        return 0
    fake_mode = detect_fake_mode([_val(n) for n, _, _ in sources])
    if fake_mode is None:
        return 0
    for narrow, padded, stride in sources:
        width = _val(narrow).shape[-1]
        lifter = _Lifter(graph, fake_mode, narrow, width, stride)
        made_input = keep = None
        for node in list(graph.nodes):
            fill = _row_reduction(node)
            if fill is None:
                continue
            if padded is None and made_input is None:  # a graph input: read it as padded rows
                last_input = [n for n in graph.nodes if n.op == "placeholder"][-1]
                with graph.inserting_after(last_input):
                    made_input = graph.call_function(rows_widened, (narrow, stride))
                    with fake_mode:
                        made_input.meta["val"] = torch.empty_strided(
                            (*_val(narrow).shape[:-1], stride), _val(narrow).stride(),
                            dtype=_val(narrow).dtype, device=_val(narrow).device)
            wide = lifter.lift(node.args[0], padded if padded is not None else made_input)
            if wide is None:
                continue
            with graph.inserting_before(node):
                if keep is None:  # the columns of the padded rows that hold values, made once
                    columns = lifter.call(aten.arange.default, [stride],
                                          {"dtype": torch.int64, "device": _val(narrow).device})
                    keep = lifter.call(aten.lt.Scalar, [columns, width])
                masked = lifter.call(aten.where.self, [keep, wide, lifter.call(
                    aten.scalar_tensor.default, [fill], {"dtype": _val(wide).dtype, "device": _val(wide).device})])
                out = lifter.call(node.target, [masked, *node.args[1:]], dict(node.kwargs))
            node.replace_all_uses_with(out)
            graph.erase_node(node)
            done += 1
    rewritten(gm)
    if done:
        log.info("nvfuser_dtensor: %d row reduction(s) read padded rows (Note [Reductions over padded rows])", done)
    return done
