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
