"""Views and data movement: reshape, permute, expand, squeeze/unsqueeze, slice, cat, select, split.

Note [Shapes stay symbolic]
Fusions are cached by the region's code text and an input descriptor that records which
dims are 1 but not the other sizes. So a translator may read from meta which dims are 1,
and may use sizes written as literals in the graph (a view's shape list), but every other
extent comes from ``ctx.ops.size(t, d)``, never from ``node.meta["val"].shape``.
"""

from __future__ import annotations

import os

import torch
from torch import fx

from .._nvfuser import nvfuser, to_nv_dtype
from ..registry import translator
from ._common import canonical_dim, cast, is_val, materialized, out_dtype, static_ints

aten = torch.ops.aten

# Slice bounds at or beyond this are "to the end" (aten writes sys.maxsize for x[a:]).
_END = 2**62


def _rank(ctx, i: int = 0) -> int:
    return ctx.arg_val(i).dim()


def _input_size1(ctx, i: int = 0) -> list[bool]:
    return [s == 1 for s in ctx.arg_val(i).shape]


def _arg(node: fx.Node, i: int, name: str, default=None):
    if i < len(node.args):
        return node.args[i]
    return node.kwargs.get(name, default)


def _is_symbolic(a) -> bool:
    return isinstance(a, (fx.Node, torch.SymInt))


# --- reshape / permute -----------------------------------------------------------------


@translator(aten.view.default, aten._unsafe_view.default, aten.reshape.default, compute=False)
def view(ctx, a, shape):
    # nvFuser resolves -1 itself, from symbolic sizes. An expanded input (only a clone's
    # output in aten: a view cannot merge an expanded dim) is made concrete first: Note
    # [Expanded broadcasts are materialized].
    out = ctx.ops.reshape(materialized(ctx, a), list(shape))
    # A literal 1 in the new shape becomes an iteration domain of extent 1, not a broadcast
    # one, and broadcasting it against a constant size then fails while the fusion is
    # defined (INTERNAL ASSERT at csrc/ops/utils.cpp:117, "Expected sizes to match: 8 vs 1":
    # Llama's rotary cos/sin, batch 1, times q, batch 8). Squeezed and broadcast again, it
    # broadcasts as aten's size-1 dim does.
    ones = [i for i, s in enumerate(shape) if isinstance(s, int) and s == 1]
    return _as_broadcast(ctx, out, ones, len(shape)) if ones else out


def _as_broadcast(ctx, out, dims: list[int], ndim: int):
    """``out`` with its extent-1 iteration dims ``dims`` made broadcast dims (squeezed and
    broadcast again), as aten's size-1 dims are."""
    return ctx.ops.broadcast(ctx.ops.squeeze(out, dims), [d in dims for d in range(ndim)])


@translator(aten.permute.default, compute=False)
def permute(ctx, a, dims):
    ndim = _rank(ctx)
    return ctx.ops.permute(a, [canonical_dim(d, ndim) for d in dims])


@translator(aten.transpose.int, compute=False)
def transpose(ctx, a, dim0, dim1):
    ndim = _rank(ctx)
    if ndim < 2:
        return a
    perm = list(range(ndim))
    d0, d1 = canonical_dim(dim0, ndim), canonical_dim(dim1, ndim)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.ops.permute(a, perm)


@translator(aten.t.default, compute=False)
def t(ctx, a):
    return ctx.ops.permute(a, [1, 0]) if _rank(ctx) == 2 else a


# --- broadcasting ----------------------------------------------------------------------


def _check_expand(node: fx.Node) -> str | None:
    src, size = node.args[0].meta["val"], node.args[1]
    for s in size[: len(size) - src.dim()]:
        if isinstance(s, int) and s == -1:
            return "-1 in a new leading dim of expand"
    return None


@translator(aten.expand.default, check=_check_expand, compute=False)
def expand(ctx, a, size, implicit=False):
    size1 = _input_size1(ctx)
    ndim = len(size1)
    offset = len(size) - ndim
    if offset:
        a = ctx.ops.broadcast(a, [True] * offset + [False] * ndim)
    shape, expands = [], offset > 0
    for i, s in enumerate(size):
        d = i - offset
        if d >= 0 and (not size1[d] or (isinstance(s, int) and s == -1)):
            shape.append(ctx.ops.size(a, i))  # an existing dim: its own extent
        else:
            shape.append(s)
            expands = expands or is_val(s) or s != 1
    return ctx.ops.expand(a, shape) if expands else a


@translator(aten.repeat.default, check=static_ints(1), compute=False)
def repeat(ctx, a, repeats):
    """``a`` tiled ``repeats[i]`` times along each dim (the extra leading repeats are new
    dims): each repeated dim gets a broadcast dim of the repeat count before it, expanded, and
    the pair is merged by a reshape (InstanceNorm's affine parameters, ``weight.repeat(N)``)."""
    lead = len(repeats) - _rank(ctx)
    flags, expanded, shape = [], [], []
    for i, r in enumerate(repeats):
        if r != 1 or i < lead:
            flags.append(True)
            expanded.append(r)
        if i >= lead:
            size = ctx.ops.size(a, i - lead)
            flags.append(False)
            expanded.append(size)
        shape.append(r if i < lead else size if r == 1 else ctx.ops.mul(size, r))
    tiled = ctx.ops.expand(ctx.ops.broadcast(a, flags), expanded)
    out = ctx.ops.reshape(materialized(ctx, tiled), shape)
    ones = [i for i, s in enumerate(ctx.node.meta["val"].shape) if s == 1]
    return _as_broadcast(ctx, out, ones, len(shape)) if ones else out


@translator(aten.unsqueeze.default, compute=False)
def unsqueeze(ctx, a, dim):
    ndim = _rank(ctx) + 1
    dim = canonical_dim(dim, ndim)
    return ctx.ops.broadcast(a, [i == dim for i in range(ndim)])


def _squeeze(ctx, a, dims):
    size1 = _input_size1(ctx)
    if not size1:
        return a
    if dims is None:
        dims = range(len(size1))
    dims = sorted({canonical_dim(d, len(size1)) for d in dims})
    # aten leaves dims that are not 1 alone; which dims are 1 is part of the cache key.
    dims = [d for d in dims if size1[d]]
    return ctx.ops.squeeze(a, dims) if dims else a


@translator(aten.squeeze.dim, compute=False)
def squeeze_dim(ctx, a, dim):
    return _squeeze(ctx, a, [dim])


@translator(aten.squeeze.dims, compute=False)
def squeeze_dims(ctx, a, dims):
    return _squeeze(ctx, a, dims)


@translator(aten.squeeze.default, compute=False)
def squeeze(ctx, a):
    return _squeeze(ctx, a, None)


# --- slicing ---------------------------------------------------------------------------


def _bound(ctx, a, dim, b, default):
    """A slice bound of dim ``dim``: None -> default, negative -> from the end, clamped."""
    if b is None:
        b = default
    if is_val(b):
        return b
    if b >= _END:
        return ctx.ops.size(a, dim)
    if b < 0:
        return ctx.ops.maximum(ctx.ops.add(ctx.ops.size(a, dim), b), 0)
    return b  # nvFuser clamps to the extent


def _slice_dim(ctx, a, ndim, dim, start, end):
    starts = [0] * ndim
    ends = [ctx.ops.size(a, d) for d in range(ndim)]
    starts[dim] = _bound(ctx, a, dim, start, 0)
    ends[dim] = _bound(ctx, a, dim, end, _END)
    return ctx.ops.slice(a, starts, ends, [1] * ndim)


def _check_slice(node: fx.Node) -> str | None:
    step = _arg(node, 4, "step", 1)
    if _is_symbolic(step) or step != 1:
        return "nvFuser slices with step 1 only"
    for b in (_arg(node, 2, "start"), _arg(node, 3, "end")):
        if _is_symbolic(b):
            # NOTE: a symbolic bound may be negative at run time; aten wraps it, nvFuser does not.
            return "symbolic slice bound"
    return None


@translator(aten.slice.Tensor, check=_check_slice, compute=False)
def nv_slice(ctx, a, dim=0, start=None, end=None, step=1):
    ndim = _rank(ctx)
    dim = canonical_dim(dim, ndim)
    out = _slice_dim(ctx, a, ndim, dim, start, end)
    if ctx.val.shape[dim] == 1 and not _input_size1(ctx)[dim]:
        # A slice to one element leaves an iteration dim of extent 1 where aten's size-1 dim
        # broadcasts; mixed with a broadcast dim (the slice_scatter backward of a size-1
        # source) nvFuser 0.2.36 failed to compile it on the H200 (bfs.h:261). Squeezed and
        # broadcast again, as view does for a literal 1.
        out = _as_broadcast(ctx, out, [dim], ndim)
    return out


@translator(aten.select.int, check=static_ints(1, 2), compute=False)
def select(ctx, a, dim, index):
    ndim = _rank(ctx)
    dim = canonical_dim(dim, ndim)
    if index < 0:
        index = ctx.ops.add(ctx.ops.size(a, dim), index)
    else:
        index = ctx.fd.define_scalar(index, dtype=nvfuser().DataType.Int)  # select takes a Val
    return ctx.ops.select(a, index, dim)


@translator(aten.split.Tensor, check=static_ints(1, 2), compute=False)
def split(ctx, a, split_size, dim=0):
    ndim = _rank(ctx)
    dim = canonical_dim(dim, ndim)
    # Explicit ends (clamped by the slice) keep every chunk right for any size that reuses
    # this definition; only the chunk count comes from meta, and unused chunks are dead.
    return tuple(
        _slice_dim(ctx, a, ndim, dim, i * split_size, (i + 1) * split_size) for i in range(len(ctx.val))
    )


@translator(aten.split_with_sizes.default, check=static_ints(1, 2), compute=False)
def split_with_sizes(ctx, a, split_sizes, dim=0):
    ndim = _rank(ctx)
    dim = canonical_dim(dim, ndim)
    out, start = [], 0
    for i, s in enumerate(split_sizes):
        end = start + s if i < len(split_sizes) - 1 else None
        out.append(_slice_dim(ctx, a, ndim, dim, start, end))
        start += s
    return tuple(out)


@translator(aten.cat.default, compute=False)
def cat(ctx, tensors, dim=0):
    ndim = ctx.node.args[0][0].meta["val"].dim()
    dtype = out_dtype(ctx)
    # NOTE: aten promotes mixed dtypes; cast each input to the result dtype first.
    tensors = [cast(ctx, t, dtype) for t in tensors]
    if len(tensors) == 1:
        return ctx.ops.set(tensors[0])
    return ctx.ops.cat(tensors, canonical_dim(dim, ndim))


# --- gather / pad / scatter --------------------------------------------------------------


def _check_gather(node: fx.Node) -> str | None:
    src, index = node.args[0].meta["val"], node.args[2].meta["val"]
    if src.dim() == 0 or index.dim() != src.dim():
        return "nvFuser gathers between tensors of the same rank >= 1"
    if index.dtype not in (torch.int64, torch.int32):
        return f"index of dtype {index.dtype}"
    if _is_symbolic(node.args[1]):
        return "symbolic dim"
    return None


# Note [One-hot scatter]
# Cross-entropy's backward makes its one-hot by scattering a value into zeros at one class
# per row (``zeros.scatter(1, target[:, None], -1)``). nvFuser 0.2.36's scatter defines it,
# but on the H200 the fusion around it failed to compile in every LM's loss region ("Not all
# logical IDs are covered by loop domain", internal_base_nodes.cpp:802; "Disjoint loop and
# logical are only permitted for scatter outputs", fusion_segmenter.cpp:1755), which then
# fell back. With an index of extent 1 along ``dim`` that covers the other dims it is a
# pointwise op against an iota of the dim: ``where(iota == index, value, self)``; the H200
# ran it in Llama, Mistral, Phi, BERT and T5 (vocabularies of 30522 to 51200) and, with
# log_softmax's backward in the same region, in Qwen2 (151936; the standalone repro
# ``python -m tools.nvfuser_repros --case qwen2_loss_backward`` is exact there). Qwen2's step
# once faulted at 151936: that was the forward's one-class gather written as a masked sum
# (reverted; its repro ``qwen2_loss_forward_masked_sum`` faults at 151936, not at 32000,
# docs/nvfuser_faults.md item 6). Wider class dims than the widest run on the H200
# (``MAX_VERIFIED_CLASSES``) keep the scatter and the log_softmax backward in PyTorch.
# Other shapes keep nvFuser's scatter. The same rewrite of the forward's one-class ``gather``
# did not help: nvFuser failed to compile it inside most loss regions as it fails on its
# gather there, and faulted in Qwen2's. ``NVFUSER_DTENSOR_MAX_CLASSES`` moves the limit (for
# bisecting on a GPU; not a user setting).
MAX_VERIFIED_CLASSES = int(os.environ.get("NVFUSER_DTENSOR_MAX_CLASSES", "151936"))


def one_hot_width(node: fx.Node) -> int | None:
    """The extent of ``dim`` when a scatter node's index has extent 1 along dim and the
    source's extents elsewhere (Note [One-hot scatter]), else None."""
    src, index, dim = node.args[0].meta["val"], node.args[2].meta["val"], node.args[1]
    if _is_symbolic(dim) or src.dim() == 0:
        return None
    dim = canonical_dim(dim, src.dim())
    if index.shape[dim] == 1 and all(i == s for d, (i, s) in enumerate(zip(index.shape, src.shape)) if d != dim):
        return src.shape[dim] if isinstance(src.shape[dim], int) else MAX_VERIFIED_CLASSES + 1
    return None


@translator(aten.gather.default, check=_check_gather, compute=False)
def gather(ctx, a, dim, index, sparse_grad=False):
    # aten and nvFuser agree: out[i][j][k] = a[index[i][j][k]][j][k] (dim 0), index no larger
    # than a in the other dims. sparse_grad only changes the backward.
    index, dim = cast(ctx, index, torch.int64), canonical_dim(dim, _rank(ctx))  # nvFuser: Int index
    # Where the index matches the input off ``dim`` (every loss and embedding-buffer lookup),
    # nvFuser's exact gather: its outputs keep plain iteration axes, where ``gather`` makes
    # GatherScatter ones that a self replay rejects (transform_replay.cpp:302, HF BERT's
    # token_type_ids lookup; docs/nvfuser_faults.md item 7, measured on the H200).
    src, idx = ctx.node.args[0].meta["val"], ctx.node.args[2].meta["val"]
    if all(_same(i, s) for d, (i, s) in enumerate(zip(idx.shape, src.shape)) if d != dim):
        return ctx.ops.take_along_axis(a, index, dim)
    return ctx.ops.gather(a, index, dim)


def _same(a, b) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a == b


def _check_pad(node: fx.Node) -> str | None:
    src, pad = node.args[0].meta["val"], node.args[1]
    if len(pad) % 2 or len(pad) // 2 > src.dim():
        return f"{len(pad)} pad widths for rank {src.dim()}"
    if any(_is_symbolic(p) for p in pad):
        return "symbolic pad width"
    value = _arg(node, 2, "value", 0)
    if isinstance(value, (fx.Node, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return "symbolic pad value"
    if not src.dtype.is_floating_point and src.dtype != torch.bool and value != int(value):
        return f"pad value {value} for an integer tensor"
    return None


def _pad_value(ctx, dtype: torch.dtype, value):
    if dtype == torch.bool:  # nvFuser wants a Bool value; a Python bool would be an Int
        return ctx.fd.define_scalar(bool(value), dtype=nvfuser().DataType.Bool)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


@translator(aten.constant_pad_nd.default, check=_check_pad, compute=False)
def constant_pad_nd(ctx, a, pad, value=0):
    ndim = _rank(ctx)
    pad = list(pad)
    # Negative widths crop (the backward of a pad is a pad by the negated widths): slice
    # those first, then pad by what is left; aten's pad list runs from the last dim inwards.
    for i in range(len(pad) // 2):
        dim = ndim - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        if left < 0 or right < 0:
            a = _slice_dim(ctx, a, ndim, dim, -left if left < 0 else None, right if right < 0 else None)
            pad[2 * i], pad[2 * i + 1] = max(left, 0), max(right, 0)
    if not any(pad):
        return ctx.ops.set(a)
    return ctx.ops.pad(a, pad, _pad_value(ctx, ctx.arg_val(0).dtype, value))


def _check_slice_scatter(node: fx.Node) -> str | None:
    step = _arg(node, 5, "step", 1)
    if _is_symbolic(step) or step != 1:
        return "step other than 1"
    for b in (_arg(node, 3, "start"), _arg(node, 4, "end")):
        if _is_symbolic(b):
            return "symbolic slice bound"
    if node.args[0].meta["val"].dim() == 0:
        return "0-dim tensor"
    return None


@translator(aten.slice_scatter.default, check=_check_slice_scatter)
def slice_scatter(ctx, a, src, dim=0, start=None, end=None, step=1):
    # out = a with out[start:start + len] = src along dim: src padded to a's extent, then a
    # where of the window's positions (iota over the dim). The window's length is src's extent
    # (aten checks it equals the slice's), so only start is needed, and sizes stay symbolic.
    ndim = _rank(ctx)
    dim = canonical_dim(dim, ndim)
    if _input_size1(ctx)[dim]:
        # a's dim is 1 and src, non-empty, covers it: the result is src
        return ctx.ops.set(src)
    n = ctx.ops.size(a, dim)
    left = _bound(ctx, a, dim, start, 0)
    pos = ctx.ops.iota(n, 0, 1, dtype=nvfuser().DataType.Int)
    if _input_size1(ctx, 1)[dim]:
        # src of extent 1 there is a broadcast dim: it needs no pad (nvFuser 0.2.36 failed
        # to compile the pad of a broadcast dim on the H200, bfs.h:261), the where broadcasts it.
        inside = ctx.ops.broadcast(ctx.ops.eq(pos, left), [i != dim for i in range(ndim)])
        return ctx.ops.where(inside, src, a)
    right = ctx.ops.sub(ctx.ops.sub(n, left), ctx.ops.size(src, dim))
    padded = ctx.ops.pad(src, [0, 0] * (ndim - 1 - dim) + [left, right])
    inside = ctx.ops.logical_and(ctx.ops.ge(pos, left), ctx.ops.lt(pos, ctx.ops.sub(n, right)))
    inside = ctx.ops.broadcast(inside, [i != dim for i in range(ndim)])
    return ctx.ops.where(inside, padded, a)


def _check_index_put(node: fx.Node) -> str | None:
    accumulate = _arg(node, 3, "accumulate", False)
    if accumulate:
        return ("accumulate=True: nvFuser 0.2.36's Python API has no index_put_accumulate and its scatter does not "
                "accumulate")
    indices = node.args[1]
    if len(indices) != 1 or indices[0] is None:
        return "only one index tensor, on dim 0 (self[idx] = values)"
    index = indices[0].meta["val"]
    if index.dtype != torch.int64 or index.dim() != 1:
        return f"index must be a 1-D int64 tensor, got {index.dim()}-D {index.dtype} (bool masks are data-dependent)"
    self_v, values = node.args[0].meta["val"], node.args[2].meta["val"]
    if self_v.dim() == 0:
        return "0-dim tensor"
    if values.dtype != self_v.dtype:
        return f"values of dtype {values.dtype} into {self_v.dtype}"
    if values.dim() > self_v.dim():
        return "values of a higher rank than self"
    return None


@translator(aten.index_put.default, check=_check_index_put)
def index_put(ctx, a, indices, values, accumulate=False):
    # self[idx] = values (one 1-D index on dim 0) is scatter(self, idx broadcast over the other
    # dims, values expanded to [len(idx), *self.shape[1:]], dim=0). aten wraps negative
    # indices; nvFuser's scatter does not, so they are wrapped here. Duplicate indices write
    # one of their values in both (which one is unspecified).
    ndim = _rank(ctx)
    (idx,) = indices
    n = ctx.ops.size(a, 0)
    idx = ctx.ops.where(ctx.ops.lt(idx, 0), ctx.ops.add(idx, n), idx)
    shape = [ctx.ops.size(idx, 0)] + [ctx.ops.size(a, d) for d in range(1, ndim)]
    index = ctx.ops.broadcast_in_dim(idx, shape, [0])
    vrank = ctx.arg_val(2).dim()
    values = ctx.ops.broadcast_in_dim(values, shape, list(range(ndim - vrank, ndim)))
    return ctx.ops.scatter(a, index, values, 0)


def _check_scatter_value(node: fx.Node) -> str | None:
    src, index = node.args[0].meta["val"], node.args[2].meta["val"]
    if src.dim() == 0 or index.dim() != src.dim():
        return "nvFuser scatters between tensors of the same rank >= 1"
    if node.kwargs.get("reduce") is not None:
        return "scatter with a reduction"
    if _is_symbolic(node.args[3]) or _is_symbolic(node.args[1]):
        return "symbolic value or dim"
    width = one_hot_width(node)
    if width is not None and width > MAX_VERIFIED_CLASSES:
        return (f"one-class scatter over {width} classes: above {MAX_VERIFIED_CLASSES}, unverified on the GPU "
                "(Note [One-hot scatter])")
    return None


@translator(aten.scatter.value, check=_check_scatter_value)
def scatter_value(ctx, a, dim, index, value):
    # Cross-entropy's backward makes its one-hot this way: self.scatter(dim, index, value) is
    # scatter(self, index, full(index's shape, value), dim). Duplicate indices write the same
    # value, so the result is defined.
    ndim = _rank(ctx)
    dim = canonical_dim(dim, ndim)
    if one_hot_width(ctx.node) is not None:  # Note [One-hot scatter]
        pos = ctx.ops.iota(ctx.ops.size(a, dim), 0, 1, dtype=nvfuser().DataType.Int)
        hit = ctx.ops.eq(ctx.ops.broadcast(pos, [d != dim for d in range(ndim)]), cast(ctx, index, torch.int64))
        fill = float(value) if ctx.val.dtype.is_floating_point else int(value)
        return cast(ctx, ctx.ops.where(hit, fill, a), ctx.val.dtype)
    shape = [ctx.ops.size(index, d) for d in range(ndim)]
    src = ctx.ops.full(shape, value, to_nv_dtype(ctx.val.dtype))
    return ctx.ops.scatter(a, cast(ctx, index, torch.int64), src, dim)


def _check_index(node: fx.Node) -> str | None:
    indices = node.args[1]
    given = [i for i, t in enumerate(indices) if t is not None]
    if len(given) != 1:
        return "only one index tensor (self[..., idx, ...])"
    index = indices[given[0]].meta["val"]
    if index.dtype not in (torch.int64, torch.int32) or index.dim() != 1:
        return f"index must be a 1-D integer tensor, got {index.dim()}-D {index.dtype} (bool masks are data-dependent)"
    return None


@translator(aten.index.Tensor, check=_check_index)
def index(ctx, a, indices):
    # self[:, idx] with one 1-D index is index_select(self, dim, idx); aten wraps negative
    # indices, nvFuser's index_select does not, so they are wrapped here.
    dim = next(i for i, t in enumerate(indices) if t is not None)
    idx = cast(ctx, indices[dim], torch.int64)
    n = ctx.ops.size(a, dim)
    idx = ctx.ops.where(ctx.ops.lt(idx, 0), ctx.ops.add(idx, n), idx)
    return ctx.ops.index_select(a, idx, dim)  # nvFuser: (arg, index, dim)
