"""Row sums of a scaled one-hot, replaced by the one value each row holds.

Note [Sums of a one-hot]
Cross-entropy's backward (aten's nll_loss_backward and _log_softmax_backward_data, after
decomposition) makes ``g = scatter(zeros, dim, target, -1) * w``, with ``w`` one weight per
row (the loss gradient over the count of labels, 0 where a label is ignored), and then
``sum(g, dim)`` for the softmax's backward. Each row of the one-hot holds one ``-1`` and
zeros, so that sum is ``-1 * w``. nvFuser cannot know it: it computed the sum over the whole
vocabulary from an iota, a compare and a select, which for GPT-2's 8 x 512 tokens over 50257
classes was a reduction kernel of its own taking 0.41 ms on the H200 (about as long as
inductor's whole loss backward), since rows of odd width are cut into separate segments
(Note [Wide odd rows]). So, before partitioning, ``sum(scatter(zeros, d, index, c) * w, [d])``
with an index of extent 1 along ``d`` that covers the other dims and a ``w`` of extent 1
along ``d`` (and the sum's shape and dtype otherwise) becomes ``w * c``, and the same sum of
the product cast to another dtype (a bf16 model's loss: the decomposed log-softmax backward
sums in float32) becomes ``w * c`` cast: exact, since a row holds one value; where the softmax
backward is still one op (rows that are not wide and odd), ``_log_softmax_backward_data(g,
out, d)`` of such a ``g`` becomes ``g - exp(out) * (w * c)``, its definition with the sum
folded. The value is the
same, except where ``w`` is infinite or NaN: the full sum multiplies the zeros by it too
(NaN), this gives ``c * w``. An index out of range, which aten's scatter rejects, is not
checked here.
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import call_with_val, is_dtype_cast, one_per_row, rewritten
from .fx_nodes import val as _val

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten

_ZEROS = (aten.full_like.default, aten.zeros_like.default, aten.full.default, aten.zeros.default)


def _zeros(node) -> bool:
    """A tensor of zeros made by a factory op."""
    if not isinstance(node, fx.Node) or node.op != "call_function" or node.target not in _ZEROS:
        return False
    if node.target in (aten.full_like.default, aten.full.default):
        return len(node.args) > 1 and not isinstance(node.args[1], fx.Node) and node.args[1] == 0
    return True


def _one_hot(node, dim: int):
    """The value ``c`` when ``node`` is ``scatter(zeros, dim, index, c)`` with one index per row
    along ``dim`` (extent 1 there, the source's extents elsewhere); else None."""
    if not isinstance(node, fx.Node) or node.op != "call_function" or node.target is not aten.scatter.value:
        return None
    src, d, index, value = node.args[:4]
    vsrc = _val(src)
    if (not _zeros(src) or not isinstance(d, int) or not isinstance(value, (int, float))
            or not isinstance(vsrc, torch.Tensor) or vsrc.dim() == 0 or d % vsrc.dim() != dim
            or not one_per_row(_val(index), vsrc, dim)):
        return None
    return value


def _scaled_one_hot(prod, dim: int):
    """(w, c) when ``prod`` is ``scatter(zeros, dim, index, c) * w`` with one index per row and
    ``w`` of extent 1 along ``dim`` (the product's extents elsewhere, its dtype); else None."""
    vprod = _val(prod)
    if (not isinstance(prod, fx.Node) or prod.op != "call_function" or prod.target is not aten.mul.Tensor
            or not isinstance(vprod, torch.Tensor) or vprod.dim() <= dim):
        return None
    row_shape = [1 if d == dim else n for d, n in enumerate(vprod.shape)]
    for one_hot, w in (prod.args[:2], prod.args[1::-1]):
        c, vw = _one_hot(one_hot, dim), _val(w)
        if (c is not None and isinstance(vw, torch.Tensor) and vw.dtype == vprod.dtype == _val(one_hot).dtype
                and list(vw.shape) == row_shape):
            return w, c
    return None


def _dtype_cast(node):
    """(its input, the dtype) when ``node`` is ``_to_copy(x, dtype=...)`` changing nothing but
    the dtype; else None."""
    return (node.args[0], _val(node).dtype) if is_dtype_cast(node) else None


def _row_sum(node: fx.Node):
    """(w, c, dtype) when ``node`` is ``sum(scatter(zeros, d, index, c) * w, [d], keepdim=True)``,
    which equals ``w * c`` (Note [Sums of a one-hot]), or the same sum of the product cast to
    ``dtype`` (a bf16 model's log-softmax backward sums in float32: RoBERTa's and BERT's
    masked-LM losses), which equals ``w * c`` cast; dtype None without a cast; else None."""
    if node.target is not aten.sum.dim_IntList or node.kwargs.get("dtype") is not None:
        return None
    prod, dims = node.args[0], node.args[1]
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    vprod = _val(prod)
    if not keepdim or not isinstance(vprod, torch.Tensor) or vprod.dim() == 0 or len(dims) != 1:
        return None
    prod, dtype = _dtype_cast(prod) or (prod, None)
    found = _scaled_one_hot(prod, dims[0] % vprod.dim())
    return None if found is None else (*found, dtype)


def _softmax_backward(node: fx.Node):
    """(g, out, w, c) when ``node`` is ``_log_softmax_backward_data(g, out, d, dtype)`` with
    ``g = scatter(zeros, d, index, c) * w``: it is ``g - exp(out) * (w * c)``; else None."""
    if node.target is not aten._log_softmax_backward_data.default:
        return None
    g, out, dim, dtype = node.args[:4]
    vg, vout = _val(g), _val(out)
    if (not isinstance(vg, torch.Tensor) or not isinstance(vout, torch.Tensor) or not isinstance(dim, int)
            or vg.dim() == 0 or vg.dtype != vout.dtype or vg.dtype != dtype or vg.shape != vout.shape):
        return None
    found = _scaled_one_hot(g, dim % vg.dim())
    return None if found is None else (g, out, *found)


def fold_one_hot_sums(gm: fx.GraphModule) -> int:
    """Replaces row sums of a scaled one-hot by their value (Note [Sums of a one-hot]);
    returns how many."""
    graph, folded = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        row_sum, softmax = _row_sum(node), _softmax_backward(node)
        if row_sum is None and softmax is None:
            continue
        fake_mode = detect_fake_mode([_val(node)])
        if fake_mode is None:
            continue
        with graph.inserting_before(node):
            if row_sum is not None:
                w, c, dtype = row_sum
                value = call_with_val(graph, fake_mode, aten.mul.Tensor, [w, c])
                if dtype is not None:  # one value and zeros: the cast of the product's element
                    value = call_with_val(graph, fake_mode, aten._to_copy.default, [value], {"dtype": dtype})
            else:  # log_softmax's backward, g - exp(out) * sum(g, d), with the sum folded
                g, out, w, c = softmax
                wc = call_with_val(graph, fake_mode, aten.mul.Tensor, [w, c])
                scaled = call_with_val(graph, fake_mode, aten.mul.Tensor,
                                       [call_with_val(graph, fake_mode, aten.exp.default, [out]), wc])
                value = call_with_val(graph, fake_mode, aten.sub.Tensor, [g, scaled])
        node.replace_all_uses_with(value)
        graph.erase_node(node)
        folded += 1
    if folded:
        rewritten(gm)
        log.info("nvfuser_dtensor: %d row sum(s) of a one-hot folded (Note [Sums of a one-hot])", folded)
    return folded
