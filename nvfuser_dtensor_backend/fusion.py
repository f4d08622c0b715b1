"""FX region -> nvFuser ``FusionDefinition``.

Each call_function node of a region is translated by the translator that
:func:`registry.lookup` returns for it; the result is cast to the dtype of the node's
example value so that every node rounds exactly as aten does (nvFuser computes
fp16/bf16 in fp32 and returns fp32).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import fx

from . import translators  # noqa: F401  (registers every translator)
from ._nvfuser import nvfuser, to_nv_dtype
from .options import env_flag
from .registry import TranslationContext, Translator, lookup


class UnsupportedNodeError(RuntimeError):
    """A node reached translation that lookup() rejects; after partitioning, a bug."""


class TranslationError(RuntimeError):
    """nvFuser rejected a node while the fusion was being defined."""

    def __init__(self, node: fx.Node, cause: BaseException):
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(f"{node.format_node()} -> {type(cause).__name__}: {first}")
        self.node = node
        self.cause = cause


# Note [Input descriptors]
# A tensor input is described by (dtype, size-1 mask, contiguity, stride order, is_cpu);
# sizes other than 1 stay symbolic, so one definition serves every size of that class.
# A scalar input is described by its Python type.
# The DTensor global view defines static sizes instead (``sizes``): its reshapes then have
# static iter domains, which nvFuser's sharding propagation and concretization need (on
# symbolic reshapes of annotated tensors nvFuser 0.2.36 hit INTERNAL ASSERTs at
# multidevice/propagation.cpp:312 and dynamic_transform.cpp:1556 on the H200). Its graphs
# are compiled per shape anyway (symbolic shapes take the local path).


@dataclass(frozen=True)
class TensorDesc:
    dtype: torch.dtype
    size1: tuple[bool, ...]
    contiguity: tuple
    stride_order: tuple
    is_cpu_scalar: bool
    sizes: tuple[int, ...] | None = None  # static sizes (the global view), else symbolic
    # handed over permuted to its memory order: the dims that give its logical order back
    # (Note [Channels-last inputs in memory order], region.py)
    logical: tuple[int, ...] | None = None

    @staticmethod
    def of(t: torch.Tensor, static: bool = False) -> "TensorDesc":
        contiguity, stride_order = nvfuser().compute_tensor_descriptor(t.shape, t.stride())
        return TensorDesc(
            t.dtype,
            tuple(s == 1 for s in t.shape),
            tuple(contiguity),
            tuple(stride_order),
            t.device.type == "cpu" and t.dim() == 0,
            tuple(int(s) for s in t.shape) if static else None,
        )

    def define(self, fd):
        shape = list(self.sizes) if self.sizes is not None else [1 if one else -1 for one in self.size1]
        kwargs = dict(shape=shape, contiguity=list(self.contiguity), dtype=to_nv_dtype(self.dtype))
        if self.is_cpu_scalar:
            kwargs["is_cpu"] = True
        if self.stride_order and list(self.stride_order) != list(range(len(shape) - 1, -1, -1)):
            kwargs["stride_order"] = list(self.stride_order)
        tv = fd.define_tensor(**kwargs)
        return fd.ops.permute(tv, dims=list(self.logical)) if self.logical is not None else tv


@dataclass(frozen=True)
class ScalarDesc:
    kind: type

    def define(self, fd):
        DT = nvfuser().DataType
        dtype = {bool: DT.Bool, int: DT.Int, float: DT.Double}[self.kind]
        return fd.define_scalar(None, dtype=dtype)


def describe(value, static: bool = False) -> TensorDesc | ScalarDesc:
    """The descriptor of a fusion input; ``static``: with its sizes (Note [Input descriptors])."""
    if isinstance(value, torch.Tensor):
        return TensorDesc.of(value, static)
    if isinstance(value, (bool, torch.SymBool)):
        return ScalarDesc(bool)
    if isinstance(value, (int, torch.SymInt)):
        return ScalarDesc(int)
    if isinstance(value, (float, torch.SymFloat)):
        return ScalarDesc(float)
    raise TypeError(f"cannot pass {type(value).__name__} to an nvFuser fusion")


AMBIGUOUS = float("nan")  # a printed constant that stands for two different values


class RecordingOps:
    """Proxy of ``fd.ops`` that remembers every Python float it is given.

    The canonical text of a fusion (``repr(fd)``) prints floats with 6 significant
    digits; the CPU evaluator uses these exact values instead (see evaluator.py).
    """

    def __init__(self, ops, constants: dict[str, float]):
        self._ops = ops
        self._constants = constants

    def __getattr__(self, name):
        fn = getattr(self._ops, name)
        constants = self._constants

        def call(*args, **kwargs):
            for a in (*args, *kwargs.values()):
                for v in a if isinstance(a, (list, tuple)) else (a,):
                    if isinstance(v, float):
                        key, value = "%#g" % abs(v), abs(v)
                        if constants.setdefault(key, value) != value and not math.isnan(value):
                            constants[key] = AMBIGUOUS  # two constants print alike
            return fn(*args, **kwargs)

        return call


# Note [Output layout contract]
# Every region output has exactly the strides aten recorded for it (``node.meta["val"]``),
# on CPU and GPU. nvFuser otherwise picks an output's layout itself (its allocation-order
# pass follows the inputs: a cast of a permuted input comes out permuted), while aten's
# ``clone``, pointwise ops and reductions promise their own layouts, and PyTorch code after
# the region (a ``view`` above all) depends on them. So:
# - region outputs are never views (Note [Region outputs are not views], partition.py):
#   the value of every output is dense;
# - each output is defined in the memory order of its recorded value: permuted so that its
#   dims are outermost-first in memory, then ``fd.ops.stride_order`` with the row-major
#   order, which sets the output's allocation domain (nvFuser's layout passes leave outputs
#   with an allocation domain alone; the row-major order is what nvFuser would not pick
#   after permuted inputs). The region permutes that output back in PyTorch, a free view
#   with exactly aten's strides (``BuiltFusion.output_permutes``). A non-row-major
#   ``stride_order`` straight on the output would say the same, but nvFuser 0.2.36 cannot
#   print it after a slice ("non-trivial allocation domain not expressible with stride
#   order"), and the CPU evaluator runs the printed text. ``repr(fd)`` prints the
#   row-major order as ``stride_order=[]``;
# - nvFuser 0.2.36 does not always honour the allocation domain: an output that only moves
#   data (an expand then a clone: Llama's GQA ``repeat_kv``) came back as an alias of its
#   input, and outputs over an expanded broadcast dim (Llama's causal mask and T5's position
#   bias, expanded over the batch, then computed on) came back with stride 0 there, where
#   aten's are dense (seen on the H200 by the layout check). So every laid-out output is
#   made dense after the run (``.contiguous()`` on the output in memory order: a no-op
#   when nvFuser honoured the layout, a copy where it did not);
# - strides of size-1 dims carry no layout and are not compared;
# - multidevice fusions (the global view) are laid out by their sharding and made
#   contiguous after the run where aten's value is (distributed/dtensor_region.py).
# ``options.check_layouts`` (tests turn it on) compares every region output's strides with
# the recorded ones on every call, so a layout bug fails a CPU test (region.py).


def _hint(v) -> int:
    return int(v.node.hint) if isinstance(v, torch.SymInt) and v.node.hint is not None else int(v)


def recorded_layout(val) -> tuple[list[int], list[int]] | None:
    """(shape, strides) of a recorded example value, with hints for symbolic sizes; None if
    it has no layout to keep (not a tensor, 0-dim, or not dense)."""
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        return None
    try:
        shape = [_hint(s) for s in val.shape]
        strides = [_hint(s) for s in val.stride()]
    except (TypeError, ValueError):  # a size without a hint
        return None
    return (shape, strides) if _dense(shape, strides) else None


def _dense(shape, strides) -> bool:
    """Non-overlapping and dense: some order of the dims (size-1 dims aside) is row-major."""
    step = 1
    for stride, size in sorted((st, sz) for sz, st in zip(shape, strides) if sz != 1):
        if stride != step:
            return False
        step *= size
    return True


def memory_order(val) -> list[int] | None:
    """The dims of a recorded value, outermost in memory first, or None (no layout to keep)."""
    layout = recorded_layout(val)
    if layout is None:
        return None
    _, stride_order = nvfuser().compute_tensor_descriptor(*layout)  # larger = outer
    return sorted(range(len(stride_order)), key=lambda d: -stride_order[d])


def inverse_permutation(dims) -> tuple[int, ...]:
    """The dims that undo ``permute(dims)``."""
    return tuple(sorted(range(len(dims)), key=dims.__getitem__))


# A/B switch (read at import, on by default): ``NVFUSER_DTENSOR_PIN_ROW_MAJOR=0`` gives an
# output already in row-major order no allocation domain, only the copy ``stride_order=[]``
# makes (what ``repr(fd)`` prints, so what the CPU evaluator and printed-text replays run); it
# is still made dense after the run. For telling nvFuser bugs that follow the pinned layouts
# (ConvNeXt's wrong values went away without them, docs/nvfuser_faults.md item 8) from others:
# EfficientNet-B0's out-of-bounds writes (item 9) came either way.
PIN_ROW_MAJOR = env_flag("NVFUSER_DTENSOR_PIN_ROW_MAJOR", default=True)


def _laid_out(ops, value, val) -> tuple[Any, tuple[int, ...] | None]:
    """``value`` as a fusion output in the memory order of ``val``, and the permutation
    that gives its logical dims back (None: none needed). See Note [Output layout contract]."""
    order = memory_order(val)
    if order is None:
        return value, None
    inverse, row_major = None, order == list(range(len(order)))
    if not PIN_ROW_MAJOR and row_major:
        return ops.stride_order(value, []), None  # a plain copy, no allocation domain
    if not row_major:
        value = ops.permute(value, order)
        inverse = inverse_permutation(order)
    return ops.stride_order(value, list(range(len(order) - 1, -1, -1))), inverse


@dataclass
class BuiltFusion:
    fd: Any
    constants: dict[str, float]
    output_index: list[int]  # region output i -> fusion output output_index[i]
    # (fusion output, permutation back to its logical dims): Note [Output layout contract]
    output_permutes: tuple[tuple[int, tuple[int, ...]], ...] = ()
    # fusion outputs defined in aten's memory order (Note [Output layout contract]: made dense after the run)
    dense_outputs: tuple[int, ...] = ()


def _fix_dtype(ctx: TranslationContext, value, expected):
    """Cast translator results to the dtype of the node's example value."""
    if isinstance(expected, torch.Tensor):
        if isinstance(value, nvfuser().TensorView) and value.dtype() != to_nv_dtype(expected.dtype):
            return ctx.ops.cast(value, dtype=to_nv_dtype(expected.dtype))
        return value
    if isinstance(expected, (tuple, list)) and isinstance(value, (tuple, list)):
        return type(value)(_fix_dtype(ctx, v, e) for v, e in zip(value, expected)) + tuple(value[len(expected):])
    return value


def build_fusion(region: fx.GraphModule, descs: list, schedule: Callable | None = None) -> BuiltFusion:
    """Translate ``region`` into a new FusionDefinition for inputs described by ``descs``.

    ``schedule(fusion, input_tvs, layouts)``, if given, annotates the inputs and the relayouts
    (``TranslationContext.layouts``) once the fusion is defined (the multidevice schedule of
    the DTensor global view, distributed/dtensor.py); such a fusion is a multidevice one
    (``TranslationContext.multidevice``).
    """
    nvf = nvfuser()
    constants: dict[str, float] = {}
    env: dict[fx.Node, Any] = {}
    layouts: list = []
    with nvf.FusionDefinition() as fd:
        ops = RecordingOps(fd.ops, constants)
        placeholders = [n for n in region.graph.nodes if n.op == "placeholder"]
        for node, desc in zip(placeholders, descs):
            env[node] = desc.define(fd)
        for node in region.graph.nodes:
            if node.op == "call_function":
                entry = lookup(node)
                if not isinstance(entry, Translator):
                    raise UnsupportedNodeError(entry.reason)
                args = fx.node.map_arg(node.args, env.__getitem__)
                kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
                ctx = TranslationContext(fd, node, ops, layouts, multidevice=schedule is not None)
                try:
                    out = entry.fn(ctx, *args, **kwargs)
                    if node.target is not operator.getitem:
                        out = _fix_dtype(ctx, out, node.meta.get("val"))
                except (UnsupportedNodeError, TranslationError):
                    raise
                except Exception as e:  # nvFuser raises RuntimeError/TypeError/ValueError
                    raise TranslationError(node, e) from e
                env[node] = out
            elif node.op == "output":
                outs = node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                index, seen, permutes, dense = [], {}, [], []
                for o in outs:
                    value = env[o]
                    if not isinstance(value, nvf.TensorView):
                        raise UnsupportedNodeError(f"region output {o} is not a tensor")
                    key = id(value)
                    if key not in seen:
                        seen[key] = len(seen)
                        if schedule is None:  # multidevice fusions: laid out by their shardings
                            laid_out, inverse = _laid_out(ops, value, o.meta.get("val"))
                            if laid_out is not value:
                                dense.append(seen[key])
                            if inverse is not None:
                                permutes.append((seen[key], inverse))
                            value = laid_out
                        fd.add_output(value)
                    index.append(seen[key])
        if schedule is not None:
            schedule(fd.fusion, [env[n] for n in placeholders], layouts)
    return BuiltFusion(fd=fd, constants=constants, output_index=index, output_permutes=tuple(permutes),
                       dense_outputs=tuple(dense))

