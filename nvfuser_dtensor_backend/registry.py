"""The translator table: the one place that decides whether an aten node is supported.

The partitioner asks :func:`lookup` whether a node can go into a fusion region, and the
fusion builder asks it again for the translator. Both go through the same function, so
they cannot disagree.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import fx
from torch._ops import OpOverload

# Note [Supported dtypes]
# nvFuser has no 8/16-bit integer types and we do not fuse complex or fp8 math: nodes
# touching any other dtype stay in PyTorch.
SUPPORTED_DTYPES = frozenset(
    {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool}
)


@dataclass(frozen=True)
class Translator:
    """How one aten overload becomes nvFuser ops.

    Attributes:
        fn: ``fn(ctx, *args, **kwargs)``; fx nodes in args are replaced by nvFuser values.
        check: ``check(node) -> None | str``; a string is the reason the node is unsupported.
        target: the aten overload.
        compute: False for ops that only move or view data (a region of only such ops is not
            worth a kernel launch and stays in PyTorch).
        gemm: True for ops nvFuser hands to ATen/cuBLAS in a segment of their own (matmuls,
            attention); they join regions only with ``options.fuse_matmul``.
        generic_check: False skips lookup's per-tensor dtype/size rules for this op, whose
            ``check`` then validates its tensors itself (flash attention carries uint64 RNG
            state and an empty debug mask).
    """

    fn: Callable[..., Any]
    check: Callable[[fx.Node], str | None] | None
    target: Any
    compute: bool = True
    gemm: bool = False
    generic_check: bool = True


@dataclass(frozen=True)
class Unsupported:
    reason: str

    def __bool__(self) -> bool:  # an Unsupported is falsy, a Translator truthy
        return False


TRANSLATORS: dict[Any, Translator] = {}


def translator(
    *targets: OpOverload,
    check: Callable[[fx.Node], str | None] | None = None,
    compute: bool = True,
    gemm: bool = False,
    generic_check: bool = True,
):
    """Register ``fn`` as the translator of each aten overload in ``targets``."""

    def register(fn):
        for target in targets:
            if isinstance(target, torch._ops.OpOverloadPacket):
                raise TypeError(f"register an overload, not the packet {target}")
            if target in TRANSLATORS:
                raise KeyError(f"{target} has two translators")
            TRANSLATORS[target] = Translator(
                fn=fn, check=check, target=target, compute=compute, gemm=gemm, generic_check=generic_check
            )
        return fn

    return register


def _getitem(ctx, seq, index):
    return seq[index]


TRANSLATORS[operator.getitem] = Translator(fn=_getitem, check=None, target=operator.getitem, compute=False)


def _vals(node: fx.Node):
    """Every example value of the node and of its fx-node inputs."""
    yield node.meta.get("val")
    for arg in node.all_input_nodes:
        yield arg.meta.get("val")


def _flat(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    else:
        yield value


def tensor_reason(t: torch.Tensor) -> str | None:
    """Why nvFuser cannot take this tensor, or None."""
    if t.is_sparse or t.layout != torch.strided:
        return f"layout {t.layout}"
    if t.is_quantized:
        return "quantized tensor"
    if t.dtype not in SUPPORTED_DTYPES:
        return f"dtype {t.dtype}"
    if t.device.type not in ("cuda", "cpu", "meta"):
        return f"device {t.device}"
    if any(isinstance(s, int) and s == 0 for s in t.shape):
        return "zero-size dimension"
    return None


def values_reason(values) -> str | None:
    """Why nvFuser cannot take these example values (tensors, or lists of them), or None:
    ``tensor_reason`` of each, or tensors on several devices. ``lookup``'s generic rule; a
    translator with ``generic_check=False`` applies it to the values it takes."""
    devices = set()
    for value in values:
        for v in _flat(value):
            if isinstance(v, torch.Tensor):
                reason = tensor_reason(v)
                if reason:
                    return reason
                if v.dim() > 0:
                    devices.add(v.device)
    if len(devices) > 1:
        return f"tensors on several devices {sorted(map(str, devices))}"
    return None


def op_name(target) -> str:
    """How reports name a node's target: ``aten.add.Tensor``, or a Python function's name."""
    if isinstance(target, OpOverload) or not callable(target) or not hasattr(target, "__qualname__"):
        return str(target)
    return f"{target.__module__.rsplit('.', 1)[-1]}.{target.__qualname__}"


# node.meta key: why this node stays out of the regions, said in the report instead of
# "no translator" (set by the DTensor global view, Note [Sharded reshapes stay out of
# fusions], and by grouped_copies.py).
KEEP_OUT = "nvfuser_dtensor_keep_out"


def lookup(node: fx.Node, fuse_matmul: bool = True) -> Translator | Unsupported:
    """Translator for ``node`` or the reason it cannot be fused.

    ``fuse_matmul=False`` (the partitioner's default, see Options.fuse_matmul) leaves GEMM
    and attention ops to PyTorch.
    """
    if node.op != "call_function":
        return Unsupported(f"{node.op} node")
    if KEEP_OUT in node.meta:
        return Unsupported(f"{node.target}: {node.meta[KEEP_OUT]}")
    entry = TRANSLATORS.get(node.target)
    if entry is None:
        return Unsupported(f"no translator for {op_name(node.target)}")
    if entry.gemm and not fuse_matmul:
        return Unsupported(f"{node.target}: matmuls run in PyTorch/cuBLAS (options fuse_matmul=False)")
    if node.target is not operator.getitem and entry.generic_check:
        reason = values_reason(_vals(node))
        if reason:
            return Unsupported(f"{node.target}: {reason}")
    if entry.check is not None:
        reason = entry.check(node)
        if reason:
            return Unsupported(f"{node.target}: {reason}")
    return entry


class TranslationContext:
    """What a translator sees besides its arguments: the fusion and the fx node.

    ``layouts`` collects (TensorView, layout key) pairs for values whose layout the program
    sets (a DTensor redistribute, distributed/tp_conversions.py); the global view annotates them once
    the fusion is defined, so that nvFuser moves the data itself. ``multidevice``: the fusion
    is a global-view one (see Note [One-axis reductions] in translators/reduction.py).
    """

    __slots__ = ("fd", "node", "ops", "layouts", "multidevice")

    def __init__(self, fd, node: fx.Node, ops, layouts: list | None = None, multidevice: bool = False):
        self.fd = fd
        self.node = node
        self.ops = ops
        self.layouts = [] if layouts is None else layouts
        self.multidevice = multidevice

    @property
    def val(self):
        """The node's example value (a fake tensor, or a tuple of them)."""
        return self.node.meta["val"]

    def arg_val(self, i: int):
        """Example value of the node's i-th positional argument (None if not a node)."""
        arg = self.node.args[i] if i < len(self.node.args) else None
        return arg.meta.get("val") if isinstance(arg, fx.Node) else arg

    def kwarg_val(self, name: str):
        arg = self.node.kwargs.get(name)
        return arg.meta.get("val") if isinstance(arg, fx.Node) else arg
