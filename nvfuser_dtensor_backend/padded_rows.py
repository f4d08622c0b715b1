"""Row reductions and pads of logits that lie in padded rows are computed on the whole padded rows, masked.

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
The gather of the labels reads the logits as before; the pad of the loss backward's
gradient is computed on the padded rows too (Note [Pads computed on padded rows], below).
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import RESHAPES, call_with_val, is_dtype_cast, rewritten
from .fx_nodes import val as _val
from .options import env_flag
from .pad_matmul import ALIGN  # padded widths are multiples of it (Note [Padded matmuls])

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten

MIN_WIDTH = 1024  # narrower rows fit nvFuser's persistent kernels as they are
_REDUCTIONS = {aten.amax.default: float("-inf"), aten.sum.dim_IntList: 0.0}
_ROW_WISE = frozenset({aten.sub.Tensor, aten.add.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.exp.default,
                       aten.neg.default, aten._to_copy.default, aten.clone.default, aten.alias.default,
                       aten.where.self, aten.full_like.default, aten.scatter.value, *RESHAPES})


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


def _row_wise(node: fx.Node) -> bool:
    """Each output row's column ``j`` depends on column ``j`` of its operands' rows only (or on
    no column: row statistics, numbers). A scatter is, when it writes one given column per row
    (cross-entropy's one-hot, Note [One-hot scatter])."""
    if node.op != "call_function" or node.target not in _ROW_WISE:
        return False
    if node.target is aten._to_copy.default:
        return is_dtype_cast(node)
    if node.target is aten.clone.default:
        return node.kwargs.get("memory_format") in (None, torch.contiguous_format)
    if node.target is aten.scatter.value:
        index = _val(node.args[2])
        return (isinstance(index, torch.Tensor) and index.dim() > 0 and index.shape[-1] == 1
                and node.args[1] in (-1, index.dim() - 1))
    return True


class _Lifter:
    """Rebuilds the row-wise ops between values in padded rows and a node on the padded rows.

    ``leaf(node)`` is the padded-rows version of a node the lift starts from (made on first
    use), or None where there is none; the ops between the leaves and the node lifted are
    rebuilt on rows of ``stride`` columns, each next to the op it copies."""

    def __init__(self, graph, fake_mode, width: int, stride: int, leaf):
        self.graph, self.fake_mode = graph, fake_mode
        self.width, self.stride, self.leaf = width, stride, leaf
        self.wide: dict[fx.Node, fx.Node | None] = {}

    def call(self, target, args, kwargs=None):
        return call_with_val(self.graph, self.fake_mode, target, args, kwargs)

    def lift(self, node) -> fx.Node | None:
        """``node`` computed on the padded rows, or None."""
        if node in self.wide:
            return self.wide[node]
        self.wide[node] = None  # a cycle guard; the graph has none
        v = _val(node)
        if not isinstance(node, fx.Node) or not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[-1] != self.width:
            return None
        out = self.leaf(node)
        if out is None and _row_wise(node):
            out = self._rebuilt(node)
        self.wide[node] = out
        return out

    def _rebuilt(self, node: fx.Node) -> fx.Node | None:
        if node.target in RESHAPES:
            inner = self.lift(node.args[0])
            shape = list(node.args[1])
            if inner is None or not shape or shape[-1] not in (self.width, -1) or _val(node.args[0]).shape[-1] != self.width:
                return None
            shape[-1] = self.stride
            with self.graph.inserting_after(node):
                return self.call(node.target, [inner, shape])
        args, lifted = list(node.args), 0
        for i, a in enumerate(args):
            av = _val(a)
            if isinstance(a, fx.Node) and isinstance(av, torch.Tensor) and av.dim() > 0 and av.shape[-1] != 1:
                inner = self.lift(a)
                if inner is None:
                    return None
                args[i], lifted = inner, lifted + 1
            elif isinstance(a, fx.Node) and not isinstance(av, torch.Tensor):
                return None
        if lifted == 0:
            return None
        with self.graph.inserting_after(node):
            return self.call(node.target, args, dict(node.kwargs))

    def kept_columns(self, device) -> fx.Node:
        """``arange(stride) < width``: the columns of the padded rows that hold values."""
        columns = self.call(aten.arange.default, [self.stride], {"dtype": torch.int64, "device": device})
        return self.call(aten.lt.Scalar, [columns, self.width])

    def masked(self, keep: fx.Node, wide: fx.Node, fill) -> fx.Node:
        """``where(keep, wide, fill)``: the padding's contents replaced by ``fill``."""
        v = _val(wide)
        return self.call(aten.where.self, [keep, wide, self.call(
            aten.scalar_tensor.default, [fill], {"dtype": v.dtype, "device": v.device})])


def _widened_input(graph: fx.Graph, fake_mode, node: fx.Node, stride: int) -> fx.Node:
    """``rows_widened(node, stride)`` after the graph's inputs: dense rows of ``stride``
    columns, whether a view or a padded copy. The graph module's ``meta["padded_inputs"]``
    keeps the input's index and stride (a CUDA graph's buffer for it is made in padded rows)."""
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    graph.owning_module.meta.setdefault("padded_inputs", {})[inputs.index(node)] = stride
    last_input = inputs[-1]
    v = _val(node)
    with graph.inserting_after(last_input):
        made = graph.call_function(rows_widened, (node, stride))
    with fake_mode:
        made.meta["val"] = torch.empty((*v.shape[:-1], stride), dtype=v.dtype, device=v.device)
    return made


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

        def leaf(node, narrow=narrow, padded=padded, stride=stride):
            if node is not narrow:
                return None
            # a graph input is read as padded rows (made on first use)
            return padded if padded is not None else _widened_input(graph, fake_mode, narrow, stride)

        lifter = _Lifter(graph, fake_mode, width, stride, leaf)
        keep = None
        for node in list(graph.nodes):
            fill = _row_reduction(node)
            if fill is None:
                continue
            wide = lifter.lift(node.args[0])
            if wide is None:
                continue
            with graph.inserting_before(node):
                if keep is None:  # made once
                    keep = lifter.kept_columns(_val(narrow).device)
                out = lifter.call(node.target, [lifter.masked(keep, wide, fill), *node.args[1:]], dict(node.kwargs))
            node.replace_all_uses_with(out)
            graph.erase_node(node)
            done += 1
    rewritten(gm)
    if done:
        log.info("nvfuser_dtensor: %d row reduction(s) read padded rows (Note [Reductions over padded rows])", done)
    return done


# Note [Pads computed on padded rows]
# A padded LM head's gradient (Note [Padded matmuls]) is the loss backward's value padded to
# a multiple of 8 columns for the input- and weight-gradient GEMMs: ``pad(g, [0, p])``, with
# ``g`` computed row by row from the logits (rows of 50265 elements in RoBERTa and BART). nvFuser
# 0.2.36 cut that region in two: a pointwise kernel wrote ``g`` and a resize kernel read it
# again to pad it (its resize scheduler refuses a pad of a dim that row statistics broadcast
# along), 0.97 ms of RoBERTa's training step on the H100 for 824 MB moved in rows of an odd
# width, where inductor's whole loss backward took 0.55 ms (benchmarks/results/h100_session26).
# So the pad of a value computed row-wise is computed on the padded rows instead: the same
# ops (_row_wise) on rows of the padded width, then ``where(column < width, value, fill)``,
# one pointwise op over aligned rows. Its leaves are read as padded rows:
# - a graph input by ``rows_widened``: the logits the forward saved are a view of the padded
#   product (Note [Padded matmuls]), read where they lie. A dense input (the tangent of the
#   logits) would be padded by a copy; the CUDA-graph recording copies it into a buffer laid
#   out in padded rows instead (``padded_inputs``, ``_buffer_like``), so that copy is the
#   only one;
# - the padded product's slice in the same graph, by the padded product.
# On the H100, kernels per training step went from 9.53 to 8.59 ms for RoBERTa (inductor
# 8.46), 7.61 to 7.40 for BERT, 16.19 to 15.21 for BART and 5.89 to 5.74 for GPT-2, whose
# model graph padded the tangent from its loss graph (benchmarks/results/h100_session27).
# Padding the tangent inside the region made nvFuser's resize scheduler take the whole region
# as one kernel of 1.09 ms: not kept. ``NVFUSER_DTENSOR_PADS_ON_PADDED_ROWS=0`` turns the
# rewrite off (an A/B switch, read at import).
ENABLED = env_flag("NVFUSER_DTENSOR_PADS_ON_PADDED_ROWS", default=True)


def _row_pad(node: fx.Node) -> tuple[int, int | float] | None:
    """(the padded width, the pad value) when ``node`` pads only the last dim on the right, by
    fewer than ``ALIGN`` columns to a multiple of it, of a wide odd width (Note [Pads computed
    on padded rows]), with a number; else None."""
    if node.op != "call_function" or node.target is not aten.constant_pad_nd.default:
        return None
    x, pad = _val(node.args[0]), list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    if (not isinstance(x, torch.Tensor) or x.dim() < 2 or not isinstance(x.shape[-1], int) or len(pad) < 2
            or any(p != 0 for p in pad[2:]) or pad[0] != 0 or not isinstance(value, (int, float))):
        return None
    width, stride = x.shape[-1], x.shape[-1] + pad[1]
    if width < MIN_WIDTH or width % ALIGN == 0 or not 0 < pad[1] < ALIGN or stride % ALIGN:
        return None
    return stride, value


def pad_on_padded_rows(gm: fx.GraphModule) -> int:
    """Computes pads of row-wise values on padded rows, masked (Note [Pads computed on padded
    rows]); returns how many."""
    if not ENABLED:
        return 0
    graph, done = gm.graph, 0
    pads = [(n, found) for n in graph.nodes if (found := _row_pad(n)) is not None]
    fake_mode = detect_fake_mode([_val(n) for n, _ in pads]) if pads else None
    if fake_mode is None:
        return 0
    products = {narrow: (padded, stride) for narrow, padded, stride in _sources(graph) if padded is not None}
    inputs: dict[tuple, fx.Node] = {}  # (input, stride) -> its padded rows, made once

    def leaf(node, stride):
        if node in products and products[node][1] == stride:
            return products[node][0]
        if node.op != "placeholder":
            return None
        if (node, stride) not in inputs:
            inputs[node, stride] = _widened_input(graph, fake_mode, node, stride)
        return inputs[node, stride]

    for pad, (stride, value) in pads:
        x = pad.args[0]
        lifter = _Lifter(graph, fake_mode, _val(x).shape[-1], stride, lambda n, s=stride: leaf(n, s))
        wide = lifter.lift(x)
        if wide is None:
            continue
        with graph.inserting_before(pad):
            out = lifter.masked(lifter.kept_columns(_val(x).device), wide, value)
        pad.replace_all_uses_with(out)
        graph.erase_node(pad)
        done += 1
    rewritten(gm)
    if done:
        log.info("nvfuser_dtensor: %d pad(s) computed on padded rows (Note [Pads computed on padded rows])", done)
    return done
