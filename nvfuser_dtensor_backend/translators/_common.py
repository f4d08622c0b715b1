"""Helpers shared by translators: dtypes, checks, dims, promotion."""

from __future__ import annotations

import torch
from torch import fx

from .._nvfuser import nvfuser, to_nv_dtype, to_torch_dtype

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
LOW_PRECISION = (torch.float16, torch.bfloat16)


def is_tensor(x) -> bool:
    return isinstance(x, nvfuser().TensorView)


def is_val(x) -> bool:
    """An nvFuser value (tensor or symbolic scalar) rather than a Python constant."""
    return isinstance(x, (nvfuser().TensorView, nvfuser().Val))


def nv_dtype(x):
    """nvFuser DataType of a TensorView (None for scalars)."""
    return x.dtype() if is_tensor(x) else None


def torch_dtype(x) -> torch.dtype | None:
    return to_torch_dtype(x.dtype()) if is_tensor(x) else None


def cast(ctx, x, dtype: torch.dtype):
    """Cast a TensorView to a torch dtype, a no-op when it already has it."""
    if is_tensor(x) and x.dtype() != to_nv_dtype(dtype):
        return ctx.ops.cast(x, dtype=to_nv_dtype(dtype))
    return x


def canonical_dim(dim: int, ndim: int) -> int:
    ndim = max(ndim, 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} out of range for rank {ndim}")
    return dim % ndim


def canonical_dims(dims, ndim: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(canonical_dim(d, ndim) for d in dims)


def out_dtype(ctx) -> torch.dtype:
    val = ctx.val
    if isinstance(val, (tuple, list)):
        val = val[0]
    return val.dtype


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype nvFuser (and aten's CUDA kernels) compute low-precision floats in."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def upcast(ctx, x):
    """fp16/bf16 -> fp32; other dtypes unchanged."""
    dt = torch_dtype(x)
    if dt in LOW_PRECISION:
        return cast(ctx, x, torch.float32)
    return x


# --- checks (read fx meta only, never nvFuser values) --------------------------------


def arg_tensors(node: fx.Node):
    for arg in node.all_input_nodes:
        v = arg.meta.get("val")
        if isinstance(v, torch.Tensor):
            yield v


def float_inputs(node: fx.Node) -> str | None:
    for v in arg_tensors(node):
        if not v.dtype.is_floating_point:
            return f"needs floating-point inputs, got {v.dtype}"
    return None


def float_output(node: fx.Node) -> str | None:
    v = node.meta.get("val")
    v = v[0] if isinstance(v, (tuple, list)) else v
    if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point:
        return f"needs a floating-point result, got {v.dtype}"
    return None


def static_ints(*positions: int):
    """Check that the args at ``positions`` are plain ints / int lists (no SymInts)."""

    def check(node: fx.Node) -> str | None:
        for p in positions:
            if p >= len(node.args):
                continue
            arg = node.args[p]
            items = arg if isinstance(arg, (list, tuple)) else [arg]
            for a in items:
                if isinstance(a, fx.Node) or isinstance(a, torch.SymInt):
                    return "symbolic shape argument"
        return None

    return check


def all_of(*checks):
    def check(node: fx.Node) -> str | None:
        for c in checks:
            reason = c(node)
            if reason:
                return reason
        return None

    return check


# Note [Expanded broadcasts are materialized]
# nvFuser keeps an expanded dim (``expand``, or a stride-0 input) as a broadcast with an
# expanded extent ("bS{1 ex 4}") through set, cast and pointwise ops, where aten's value is
# dense. nvFuser 0.2.36 on the H200 got three consumers of such dims wrong:
# - a reshape merging the expanded dim with another (Llama's GQA ``repeat_kv``, an expand then
#   a reshape, consumed in the fusion): half the values wrong, as if the expanded dim were
#   the outer one of the merge (tests/test_gpu_layouts.py);
# - an ATen embedding segment reading expanded indices (BERT's token_type_ids expanded over
#   the batch, BART's positions ``arange(...).expand(batch, -1) + offset``): the next segment
#   binds its dense result to the expanded domain and asserts (expr_evaluator.cpp:156);
# - a clone of an expand returned as an alias of the input.
# ``materialized`` gives such a value concrete iteration dims, as aten's clone does: a
# ``where`` with an all-true condition of the full shape, exact for every dtype.


def expanded_dims(tv) -> list[int]:
    """Logical dims of ``tv`` that are broadcasts with an expanded extent."""
    dims = [ax for ax in tv.get_logical_domain() if not ax.is_reduction()]
    return [i for i, ax in enumerate(dims) if " ex " in str(ax)]


def materialized(ctx, tv):
    """``tv`` with its expanded broadcast dims made concrete (Note [Expanded broadcasts are
    materialized]); ``tv`` itself when it has none."""
    if not expanded_dims(tv):
        return tv
    ndim = sum(not ax.is_reduction() for ax in tv.get_logical_domain())
    shape = [ctx.ops.size(tv, d) for d in range(ndim)]
    true = ctx.ops.full(shape, ctx.fd.define_scalar(True, dtype=nvfuser().DataType.Bool), nvfuser().DataType.Bool)
    return ctx.ops.where(true, tv, tv)
