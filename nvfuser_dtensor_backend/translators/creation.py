"""Tensors made from nothing: full/zeros/ones, scalar_tensor, arange, full_like and friends.

They move no data, so they are ``compute=False``: a region of only them stays in PyTorch,
and they are fused only next to compute. ``empty``-like ops are left alone on purpose
(their contents are undefined, so PyTorch makes them for free).
"""

from __future__ import annotations

import math

import torch
from torch import fx

from .._nvfuser import to_nv_dtype
from ..options import env_flag
from ..registry import translator
from ._common import out_dtype

aten = torch.ops.aten


def _factory_kwargs(node: fx.Node) -> str | None:
    layout = node.kwargs.get("layout")
    if layout is not None and layout != torch.strided:
        return f"layout {layout}"
    if node.kwargs.get("pin_memory"):
        return "pin_memory"
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type not in ("cuda", "cpu", "meta"):
        return f"device {device}"
    memory_format = node.kwargs.get("memory_format")
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        return f"memory_format {memory_format}"
    if node.kwargs.get("requires_grad"):
        return "requires_grad"
    return None


def _fill(ctx, shape, value):
    return ctx.ops.full(list(shape), value, to_nv_dtype(out_dtype(ctx)))


def _sizes(ctx, a):
    return [ctx.ops.size(a, d) for d in range(ctx.arg_val(0).dim())]


@translator(aten.full.default, check=_factory_kwargs, compute=False)
def full(ctx, size, fill_value, **kwargs):
    return _fill(ctx, size, fill_value)


@translator(aten.zeros.default, check=_factory_kwargs, compute=False)
def zeros(ctx, size, **kwargs):
    return _fill(ctx, size, 0)


@translator(aten.ones.default, check=_factory_kwargs, compute=False)
def ones(ctx, size, **kwargs):
    return _fill(ctx, size, 1)


@translator(aten.scalar_tensor.default, check=_factory_kwargs, compute=False)
def scalar_tensor(ctx, s, **kwargs):
    return _fill(ctx, [], s)


@translator(aten.full_like.default, check=_factory_kwargs, compute=False)
def full_like(ctx, a, fill_value, **kwargs):
    # NOTE: the result is contiguous even where aten's preserve_format would copy a's strides.
    return _fill(ctx, _sizes(ctx, a), fill_value)


@translator(aten.zeros_like.default, check=_factory_kwargs, compute=False)
def zeros_like(ctx, a, **kwargs):
    return _fill(ctx, _sizes(ctx, a), 0)


@translator(aten.ones_like.default, check=_factory_kwargs, compute=False)
def ones_like(ctx, a, **kwargs):
    return _fill(ctx, _sizes(ctx, a), 1)


# --- arange ----------------------------------------------------------------------------


def _arange_args(node: fx.Node):
    if node.target is aten.arange.default:
        return 0, node.args[0], 1
    if node.target is aten.arange.start:
        return node.args[0], node.args[1], 1
    args = list(node.args) + [1] * (3 - len(node.args))
    return args[0], args[1], args[2]


def _check_arange(node: fx.Node) -> str | None:
    for a in _arange_args(node):
        if isinstance(a, (fx.Node, torch.SymInt, torch.SymFloat)):
            return "symbolic arange bound"
    return _factory_kwargs(node)


def _iota(ctx, start, end, step):
    dtype = out_dtype(ctx)
    # aten's length: ceil((end - start) / step), computed in double (literals of the code text).
    length = math.ceil((end - start) / step)
    if dtype.is_floating_point:
        start, step = float(start), float(step)
    else:
        start, step = int(start), int(step)
    return ctx.ops.iota(length, start, step, to_nv_dtype(dtype))


@translator(aten.arange.default, check=_check_arange, compute=False)
def arange(ctx, end, **kwargs):
    return _iota(ctx, 0, end, 1)


@translator(aten.arange.start, check=_check_arange, compute=False)
def arange_start(ctx, start, end, **kwargs):
    return _iota(ctx, start, end, 1)


@translator(aten.arange.start_step, check=_check_arange, compute=False)
def arange_start_step(ctx, start, end, step=1, **kwargs):
    return _iota(ctx, start, end, step)


# --- random numbers --------------------------------------------------------------------

# Note [Random numbers drawn by nvFuser]
# Dropout's ``rand_like`` is drawn inside the region that compares it with p, as inductor
# draws it inside its kernels; in PyTorch its numbers were written to memory and read back
# (7 per forward in the zoo's bert_dropout). nvFuser 0.2.36's ``uniform`` with no
# ``rng_seed``/``rng_offset`` takes seed and offset from PyTorch's default CUDA generator on
# every execute and advances it by 4 per random op of the kernel (csrc/rng.cpp:70-95), and under
# CUDA-graph capture the kernel reads them through the generator's device pointers (rng.cpp:21-53),
# so each replay draws new numbers. Explicit seed and offset would be host scalars, frozen into
# a captured graph. The numbers differ from eager's, as inductor's do; the backward reads the
# mask the forward saved (AOTAutograd's partitioner never recomputes a random op). On one H100
# (session 28, benchmarks/results/h100_session28) bert_dropout's training kernels went from
# 9.36 ms (session 27) to 7.70 (inductor 7.55), its step from 0.91x to 1.05x inductor's, and
# tests/test_cuda_graphs.py::test_dropout_draws_new_numbers_on_every_replay and
# tests/test_models.py::test_dropout_statistics passed. Graphs with DTensor inputs keep their
# random ops in PyTorch (``partition(random_ops=False)``): DTensor's RNG tracker gives each
# shard numbers of its own, where ranks seeded alike would draw the same ones in nvFuser.
# ``NVFUSER_DTENSOR_RANDOM_IN_FUSIONS=0`` (an A/B switch, read at import) draws them in PyTorch.
RANDOM_IN_FUSIONS = env_flag("NVFUSER_DTENSOR_RANDOM_IN_FUSIONS", default=True)


def _check_rand_like(node: fx.Node) -> str | None:
    if not RANDOM_IN_FUSIONS:
        return "random numbers are drawn by PyTorch (NVFUSER_DTENSOR_RANDOM_IN_FUSIONS=0)"
    if node.kwargs.get("generator") is not None:
        return "a generator of its own"
    dtype = node.kwargs.get("dtype") or node.args[0].meta["val"].dtype
    if not dtype.is_floating_point:
        return f"dtype {dtype}"
    return _factory_kwargs(node)


@translator(aten.rand_like.default, check=_check_rand_like)
def rand_like(ctx, a, **kwargs):
    # NOTE: the result is contiguous even where aten's preserve_format would copy a's strides.
    return ctx.ops.uniform(0.0, 1.0, _sizes(ctx, a), dtype=to_nv_dtype(out_dtype(ctx)))
