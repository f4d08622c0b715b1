"""A fusion region at run time: cached FusionDefinitions, execution, safe fallback.

Note [Lean call path]
After the first call with a given input layout, ``FusedRegion.__call__`` computes one cheap
key (dtype, shape, stride, device kind of each tensor), finds the entry for it in a dict and
calls it: ``fd.execute`` on CUDA, the evaluator on CPU, or the fallback. No graph walking, no
translation and no descriptor work happens on that path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable

import torch
from torch import fx

from ._nvfuser import version as nvfuser_version
from .evaluator import Evaluator
from .fusion import BuiltFusion, build_fusion, describe, inverse_permutation, memory_order, recorded_layout
from .options import Options, env_flag
from .permuted_inputs import PermutedEntry, without_input_permutes
from .registry import op_name
from . import compile_time, kernel_cache, verify

log = logging.getLogger("nvfuser_dtensor_backend")


class NvFuserFallbackWarning(UserWarning):
    """A region that was meant for nvFuser runs in PyTorch instead."""


class NvFuserRegionError(RuntimeError):
    """nvFuser failed on a region and ``fallback="error"`` was asked for."""


class LayoutContractError(AssertionError):
    """A region output's strides differ from aten's (``options.check_layouts``)."""


def layout_mismatch(out, val) -> str | None:
    """Why ``out`` is not laid out as the recorded ``val`` (Note [Output layout contract]),
    or None. Dims of size 1 carry no layout; a recorded value that is not dense is not checked."""
    if not isinstance(out, torch.Tensor) or out.dim() == 0:
        return None
    order = memory_order(val)
    if order is None:
        return None
    if len(order) != out.dim():
        return f"rank {out.dim()}, recorded {len(order)}"
    expected, step = [0] * out.dim(), 1
    for d in reversed(order):  # innermost first
        expected[d] = step
        step *= out.shape[d]
    actual = out.stride()
    if any(out.shape[d] != 1 and actual[d] != expected[d] for d in range(out.dim())):
        return f"shape {tuple(out.shape)} strides {actual}, expected {tuple(expected)}"
    return None


class RegionDeclined(Exception):
    """A region runs in PyTorch for this input signature; the message says why."""


def _tensor_key(a):
    return (a.dtype, a.shape, a.stride(), a.is_cuda) if isinstance(a, torch.Tensor) else type(a)


# --- process-wide definition cache ------------------------------------------------------
# Note [Fusion cache key]
# (region code, input descriptors, nvFuser version). The region code is the region's FX
# graph with its values numbered in order (``_canonical_code``: the names aten gave them,
# ``view_12`` in one layer and ``view_30`` in the next, are left out, so the repeated layers
# of a model share one definition and one set of nvFuser kernels), which holds every
# constant of the graph (shape arguments included), plus which dims of every node's value
# are 1 (translators of squeeze, expand, ... read that from meta, and a slice to the end can
# make a dim 1 for one input size and not for another) and the memory order aten recorded
# for every output (Note [Output layout contract]); the descriptors hold what the inputs add
# (see fusion.TensorDesc). Sizes other than 1 are not in the key: definitions are
# shape-symbolic.


def _canonical_code(region: fx.GraphModule) -> str:
    """The region's graph as text with its values numbered in order (Note [Fusion cache key])."""
    names = {node: f"v{i}" for i, node in enumerate(region.graph.nodes)}
    lines = []
    for node in region.graph.nodes:
        args = fx.node.map_arg((node.args, node.kwargs), names.__getitem__)
        lines.append(f"{names[node]} = {node.op} {node.target if node.op != 'placeholder' else ''} {args!r}")
    return "\n".join(lines)


def _output_orders(outs) -> tuple:
    return tuple(tuple(memory_order(o.meta.get("val")) or ()) if isinstance(o, fx.Node) else None for o in outs)


def _size1_mask(value):
    if isinstance(value, torch.Tensor):
        return tuple(isinstance(s, int) and s == 1 for s in value.shape)
    if isinstance(value, (tuple, list)):
        return tuple(_size1_mask(v) for v in value)
    return None


class FusionCache:
    def __init__(self, maxsize: int = 4096):
        self.maxsize = maxsize
        self._entries: OrderedDict[Any, BuiltFusion] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.builds = 0

    def get_or_build(self, key, build: Callable[[], BuiltFusion]) -> BuiltFusion:
        with self._lock:
            if key in self._entries:
                self.hits += 1
                self._entries.move_to_end(key)
                return self._entries[key]
            self.misses += 1
        built = build()
        with self._lock:
            self.builds += 1
            self._entries[key] = built
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return built

    def cache_info(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "builds": self.builds, "size": len(self._entries)}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = self.builds = 0


FUSION_CACHE = FusionCache()

_evaluator_announced = False


def _announce_evaluator() -> None:
    global _evaluator_announced
    if not _evaluator_announced:
        _evaluator_announced = True
        log.warning(
            "nvfuser_dtensor: inputs are on the CPU, so nvFuser cannot run the fusions; a torch "
            "evaluator of nvFuser's op set runs the fusion definitions nvFuser built instead."
        )


# Note [Fusion outputs are fresh tensors]
# aten's graph promises that a region output is a new tensor (Note [Region outputs are not
# views], partition.py), and AOTAutograd and the autograd engine rely on it: a gradient that
# arrives as a graph output may be accumulated into in place, and a saved activation is
# assumed not to share memory with anything written later. nvFuser returns an output that
# only moves data as an alias of its input when it can (an expand then a clone came back so
# on the H200), so an output that is a view (nvFuser makes aliases with ATen view ops) is
# copied. The check is one attribute read per output; fresh outputs are left alone. An output
# that is an input itself (a ``set``, a cast to the same dtype: nvFuser's evaluation of such
# an alias hands back the input tensor, which is no view) is copied too: otherwise a
# ``p.clone()`` of a parameter would change with the optimizer's next step. Which outputs
# those are is found on an entry's first call (nvFuser decides aliases when it compiles,
# for the layouts the entry key fixes) and copied on every call.


class _NvFuserEntry:
    __slots__ = ("run", "index", "single", "permutes", "dense", "inputs_out")

    def __init__(self, built: BuiltFusion, single: bool):
        self.run = built.fd.execute
        self.index = built.output_index
        self.single = single
        self.permutes = built.output_permutes  # Note [Output layout contract]
        self.dense = built.dense_outputs
        self.inputs_out: frozenset[int] | None = None  # outputs that are an input (found on the first call)

    def __call__(self, args):
        if self.inputs_out is None:  # the first call
            outs = self._first_run(args)
            ids = set(map(id, args))
            self.inputs_out = frozenset(i for i, o in enumerate(outs) if id(o) in ids)
        else:
            outs = self.run(args)
        if self.inputs_out or any(o._is_view() for o in outs):  # Note [Fusion outputs are fresh tensors]
            outs = [o.clone() if i in self.inputs_out or o._is_view() else o for i, o in enumerate(outs)]
        if self.dense:  # every permuted output is a dense one too
            outs = list(outs)
            for i in self.dense:
                outs[i] = outs[i].contiguous()
            for i, inverse in self.permutes:
                outs[i] = outs[i].permute(inverse)
        if self.single:
            return outs[self.index[0]]
        return tuple(outs[i] for i in self.index)

    def _first_run(self, args):
        """Where nvFuser compiles (Note [Kernel cache across processes])."""
        with kernel_cache.first_call() as options:
            return self.run(args, **options)


class _EvaluatorEntry(_NvFuserEntry):
    """The same entry with the CPU evaluator in place of ``fd.execute``."""

    __slots__ = ()

    def __init__(self, built: BuiltFusion, single: bool):
        super().__init__(built, single)
        self.run = Evaluator(built.fd, built.constants)

    def _first_run(self, args):
        return self.run(args)  # nothing is compiled


# Note [Mixed input layouts with several outputs]
# nvFuser 0.2.36 computes wrong values on the H200 for a fusion whose inputs mix a
# channels_last tensor (cuDNN's gradient) with row-major ones and that has several outputs:
# ConvNeXt-T's layer-scale backward, ``add = div + g``, ``(add * gamma)`` moved to NHWC, at
# [32, 768, 7, 7] had a third of both outputs wrong (not at 14x14 or 8x8; right with a
# row-major ``g``, with one output, or with no output layouts given;
# ``python -m tools.nvfuser_repros --case convnext_layer_scale``, docs/nvfuser_faults.md
# item 8). Such a region runs on row-major copies of its channels_last inputs (a copy per
# input per call), which nvFuser gets right. The rule is kept to channels_last: applied to
# every permuted input (transformers' transposes), nvFuser failed to compile the row-major
# variant of the rotary-embedding backward regions of Llama, Mistral, Qwen2 and Phi on the
# H200 ("Invalid domains to map", fusion.cpp:1020), which then ran in PyTorch.


def _channels_last(t: torch.Tensor) -> bool:
    """Dense, not row-major, with dim 1 (channels) innermost: channels_last(_3d)."""
    return (t.dim() >= 3 and t.shape[1] > 1 and t.stride(1) == 1 and not t.is_contiguous()
            and recorded_layout(t) is not None)


# A/B switch (read at import, off): ``NVFUSER_DTENSOR_MIXED_IGNORES_SIZE1=1`` leaves tensors with
# one dim above size 1 (a batch norm's [1, C, 1, 1] statistic, row-major and channels-last at
# once) out of the check below. With channels-last on, such statistics made 10 of tiny
# ResNet-18's 48 region signatures run on row-major copies of their NHWC inputs (CPU, session
# 20). On an H100 (session 21, benchmarks/results/h100_session21) it took ResNet-18's
# channels-last training step from 92 copies to 52 (1.14 ms to 0.22), and the channels-last GPU
# tests pass with it. It stays off while channels-last is: channels-last is still slower
# (Note [Channels-last convolutions]).
MIXED_IGNORES_SIZE1 = env_flag("NVFUSER_DTENSOR_MIXED_IGNORES_SIZE1")


def _mixed_layouts(args, outputs: int) -> bool:
    """Several tensor outputs, and tensor inputs both channels_last and row-major
    (Note [Mixed input layouts with several outputs])."""
    if outputs < 2:
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 2 and a.numel() > 1
               and (not MIXED_IGNORES_SIZE1 or sum(s > 1 for s in a.shape) > 1)]
    return any(map(_channels_last, tensors)) and any(t.is_contiguous() for t in tensors)


# Note [Channels-last inputs in memory order]
# A channels-last input is defined with its logical NCHW shape and a ``stride_order``, so
# nvFuser's schedulers see an allocation domain that differs from the logical one. On an
# H100 our channels-last batch-norm backward regions took 1.06 ms for 4 calls against 0.23
# in NCHW, while the same two per-channel sums over an input defined dense as [N, H, W, C]
# and permuted to NCHW in the fusion took 66 us per call (scripts/gpu_nhwc_reduction.py,
# session 21). ``NVFUSER_DTENSOR_MEMORY_ORDER_INPUTS=1`` (an A/B switch, read at import,
# off) defines every channels-last input that way: the region hands it over permuted to its
# memory order (a view, dense and row-major) and the definition permutes it back to the
# logical order first thing (``TensorDesc.logical``). Outputs keep their contract (Note
# [Output layout contract]). A region with mixed layouts and several outputs still runs on
# row-major copies (Note [Mixed input layouts with several outputs]), which comes first.
# Off until the GPU times it (scripts/gpu_region_times.sh replays the variant of ResNet-18's
# recorded regions, scripts/region_variants.py memory_order_inputs).
MEMORY_ORDER_INPUTS = env_flag("NVFUSER_DTENSOR_MEMORY_ORDER_INPUTS")


class _MemoryOrderEntry:
    """Hands the inputs at ``dims`` over permuted to their memory order (Note [Channels-last
    inputs in memory order])."""

    __slots__ = ("inner", "dims")

    def __init__(self, inner, dims: dict[int, list[int]]):
        self.inner, self.dims = inner, dims

    def handed(self, args) -> list:
        """What the inner entry gets (also what scripts/region_replay.py records)."""
        return [a.permute(self.dims[i]) if i in self.dims else a for i, a in enumerate(args)]

    def __call__(self, args):
        return self.inner(self.handed(args))


def _memory_orders(args) -> dict[int, list[int]]:
    """The channels-last inputs among ``args`` and their dims outermost in memory first."""
    if not MEMORY_ORDER_INPUTS:
        return {}
    return {i: memory_order(a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and _channels_last(a)}


class _ContiguousEntry:
    __slots__ = ("inner",)

    def __init__(self, inner):
        self.inner = inner

    @staticmethod
    def handed(args) -> list:
        """What the inner entry gets (also what scripts/region_replay.py records)."""
        return [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]

    def __call__(self, args):
        return self.inner(self.handed(args))


# Note [Retries at run time]
# nvFuser compiles a definition on its first execute, and some of its schedulers and lowering
# passes reject what they were given. Before a region falls back to PyTorch it is retried:
# 1. on contiguous copies of strided inputs: some schedulers reject permuted inputs
#    ("Vectorized dim for producer has to be from an inner most position");
# 2. defined with static sizes (fusion.TensorDesc.sizes; the entry key holds the shapes):
#    on the H200 Phi's RoPE backward regions (slice_scatter of rotated halves) failed in
#    lowering with symbolic sizes, "Invalid domains to map" at fusion.cpp:1020, where two
#    extents that are equal at run time (an input's metadata size and another input's
#    symbolic size) could not be proven equal;
# 3. with the inputs it only permutes handed over permuted and dense (permuted_inputs.py):
#    ConvNeXt's channels-last LayerNorm backward, whose permuted input nvFuser vectorized
#    along a dim that is not innermost in memory.
# Each retry costs one more compile of that region only, and succeeds or fails once per
# entry key; what runs is logged at INFO.


def _describe_arg(a) -> str:
    if not isinstance(a, torch.Tensor):
        return repr(a)
    return (f"{str(a.dtype).replace('torch.', '')}{list(a.shape)} stride={list(a.stride())} "
            f"offset={a.storage_offset()} align={a.data_ptr() % 16 if a.is_cuda else '-'}")


class _TracingEntry:
    """``NVFUSER_DTENSOR_TRACE=1``: print every region call (name, input layouts, storage
    offsets, pointer alignment) and synchronize before and after it, so a CUDA fault is
    pinned to the region that made it, or to the PyTorch code before it ("before" in the
    error: cuDNN's kernels report a fault only at the next check; run with
    CUDA_LAUNCH_BLOCKING=1 too)."""

    __slots__ = ("inner", "name")

    def __init__(self, inner, name: str):
        self.inner, self.name = inner, name

    def __call__(self, args):
        print(f"[nvfuser_dtensor trace] {self.name} ({type(self.inner).__name__}): "
              + "; ".join(_describe_arg(a) for a in args), flush=True)
        cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        if cuda:
            try:
                torch.cuda.synchronize()
            except Exception as e:
                raise RuntimeError(f"a CUDA error before {self.name} ran (in the PyTorch code before it): {e}") from e
        out = self.inner(args)
        if cuda:
            torch.cuda.synchronize()
        return out


_TRACE = env_flag("NVFUSER_DTENSOR_TRACE")


class _ProfiledEntry:
    """``NVFUSER_DTENSOR_PROFILE=1``: every region call is a ``record_function`` range named
    ``nvfr <region> <ops>``, so a profile (scripts/gpu_top_kernels.py --regions) can put each
    GPU kernel's time on the region that launched it; nvFuser's kernel names do not say."""

    __slots__ = ("inner", "label")

    def __init__(self, inner, label: str):
        self.inner, self.label = inner, label

    def __call__(self, args):
        with torch.profiler.record_function(self.label):
            return self.inner(args)


_PROFILE = env_flag("NVFUSER_DTENSOR_PROFILE")


class FusedRegion(torch.nn.Module):
    """Runs one partitioned region of an aten graph as an nvFuser fusion."""

    def __init__(self, name: str, region: fx.GraphModule, options: Options, fallback: Callable | None = None):
        super().__init__()
        self.name = name
        self.region = region
        self.options = options
        self._fallback = fallback
        out = next(n for n in region.graph.nodes if n.op == "output").args[0]
        self._single = not isinstance(out, (tuple, list))
        outs = [out] if self._single else out
        size1 = tuple(_size1_mask(n.meta.get("val")) for n in region.graph.nodes if n.op == "call_function")
        key_text = _canonical_code(region) + repr(size1) + repr(_output_orders(outs))
        self._code_key = hashlib.sha1(key_text.encode()).hexdigest()
        self._entries: dict[Any, Callable] = {}
        self._static_keys: set = set()  # entry keys already retried with static sizes
        self._warned: set[str] = set()
        self.ops = [op_name(n.target) for n in region.graph.nodes if n.op == "call_function"]
        self.fallback_reason: str | None = None
        self._cuda_outputs = any(isinstance(o, fx.Node) and isinstance(o.meta.get("val"), torch.Tensor)
                                 and o.meta["val"].is_cuda for o in outs)
        vals = [o.meta.get("val") if isinstance(o, fx.Node) else None for o in outs]
        self._output_vals = vals if options.check_layouts else None
        self._verify_vals = vals if options.verify else None  # the dtypes aten recorded
        self._tensor_outputs = sum(isinstance(o, fx.Node) and isinstance(o.meta.get("val"), torch.Tensor)
                                   and o.meta["val"].dim() >= 2 for o in outs)
        self._verify = options.verify and not verify.has_random_ops(self.ops)

    _key_of = staticmethod(_tensor_key)  # the cheap per-argument part of the entry key

    # The fast path: one dict lookup, then run (see Note [Lean call path]).
    def forward(self, *args):
        key = tuple(map(self._key_of, args))
        entry = self._entries.get(key)
        if entry is None:
            return self._first_call(args, key)
        try:
            out = entry(list(args))
        except Exception as e:  # nvFuser compile/run errors surface on the first execute
            if entry is self._run_fallback:
                raise
            out = self._recover(key, args, entry, e)
        if self._output_vals is not None:
            self._check_layouts(out, entry)
        if self._verify and entry is not self._run_fallback:
            self._verify_against_pytorch(args, out)
        return out

    def _first_call(self, args, key):
        """A new input signature: its entry made, then called through ``forward``, timed
        (Note [First-call accounting])."""
        with compile_time.first_run(self.name, self.ops, args):
            self._prepare(args, key)  # always stores an entry for ``key``, the fallback included
            return self.forward(*args)

    def _verify_against_pytorch(self, args, out) -> None:
        """``options.verify``: the region's result against PyTorch's on the same inputs."""
        ref = self.region(*args)
        outs, refs = ((out,), (ref,)) if self._single else (out, ref)
        for i, (o, r, val) in enumerate(zip(outs, refs, self._verify_vals)):
            why = verify.mismatch(verify.in_kernel_dtype(o, r, val), r)
            if why is not None and f"verify {i}" not in self._warned:  # once per output
                self._warned.add(f"verify {i}")
                message = (f"nvfuser_dtensor: region {self.name} ({', '.join(self.ops)}), output {i} "
                           f"differs from PyTorch: {why}")
                # Also logged: a backward on CUDA runs in the autograd engine's thread, and a
                # ConvNeXt region that was wrong on the H200 was never reported as a warning.
                log.warning(message)
                warnings.warn(message, verify.RegionMismatchWarning, stacklevel=3)

    def _check_layouts(self, out, entry) -> None:
        outs = (out,) if self._single else out
        for i, (o, val) in enumerate(zip(outs, self._output_vals)):
            why = layout_mismatch(o, val)
            if why is not None:
                how = "PyTorch fallback" if entry is self._run_fallback else type(entry).__name__
                raise LayoutContractError(
                    f"region {self.name} ({', '.join(self.ops)}), output {i} run by {how}: {why} "
                    "(Note [Output layout contract])")

    def _make_entry(self, args, static: bool = False):
        if _mixed_layouts(args, self._tensor_outputs):  # Note [Mixed input layouts with several outputs]
            return _ContiguousEntry(self._make_entry(_ContiguousEntry.handed(args), static))
        dims = _memory_orders(args)
        if dims:  # Note [Channels-last inputs in memory order]
            entry = _MemoryOrderEntry(None, dims)
            descs = tuple(dataclasses.replace(describe(h, static), logical=inverse_permutation(dims[i]))
                          if i in dims else describe(h, static) for i, h in enumerate(entry.handed(args)))
            entry.inner = self._entry_for(args, descs)
            return entry
        return self._entry_for(args, tuple(describe(a, static) for a in args))

    def _entry_for(self, args, descs):
        """The entry that runs the definition of ``descs`` (cached across regions)."""
        cache_key = (self._code_key, descs, nvfuser_version())
        built = FUSION_CACHE.get_or_build(cache_key, lambda: self._build(descs))
        # A region whose tensor inputs are all CPU scalars (T5's position buckets next to an
        # arange on the GPU) still runs on the GPU when aten recorded CUDA outputs for it.
        on_cuda = self._cuda_outputs or any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() > 0 for a in args) or not on_cuda:
            _announce_evaluator()
            return _EvaluatorEntry(built, self._single)
        return _NvFuserEntry(built, self._single)

    def _prepare(self, args, key):
        if len(self._entries) > 64:
            self._entries.clear()
        try:
            entry = self._make_entry(args)
        except RegionDeclined as e:
            return self._fail(key, str(e), e)
        except Exception as e:
            return self._fail(key, f"the fusion could not be defined: {_first_line(e)}", e)
        if _TRACE:
            entry = _TracingEntry(entry, self.name)
        if _PROFILE:
            entry = _ProfiledEntry(entry, f"nvfr {self.name} {','.join(self.ops)[:200]}")
        self._entries[key] = entry
        return entry

    def _recover(self, key, args, entry, error):
        """nvFuser failed at run time: retry with contiguous inputs, then with static sizes
        (Note [Retries at run time]), else fall back."""
        strided = any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args)
        retries = []
        if strided and not isinstance(entry, _ContiguousEntry):
            retries.append((True, False, "contiguous copies of its inputs"))
        if key not in self._static_keys:
            retries.append((strided, True, "static sizes" + (" on contiguous copies" if strided else "")))
        for contiguous, static, how in retries:
            run_args = [a.contiguous() if contiguous and isinstance(a, torch.Tensor) else a for a in args]
            try:
                inner = self._make_entry(run_args, static)
                out = inner(run_args)
            except Exception as e:  # noqa: BLE001 - the next retry, or the fallback, says why
                error = e
                continue
            if static:
                self._static_keys.add(key)
            self._entries[key] = _ContiguousEntry(inner) if contiguous else inner
            log.info("nvfuser_dtensor: region %s runs with %s (%s)", self.name, how, _first_line(error))
            return out
        taken = without_input_permutes(self.region)
        if taken is not None:
            # a region of its own, which raises instead of falling back (this one falls back)
            inner = FusedRegion(f"{self.name}.permuted_inputs", taken[0], dataclasses.replace(self.options, fallback="error"))
            entry = PermutedEntry(inner.forward, taken[1])
            try:
                out = entry(args)
            except Exception as e:  # noqa: BLE001 - the fallback below gives the first error
                log.info("nvfuser_dtensor: region %s with its inputs permuted failed too: %s", self.name, _first_line(e))
            else:
                self._entries[key] = entry
                log.info("nvfuser_dtensor: region %s runs on its inputs permuted and copied (%s)",
                         self.name, _first_line(error))
                return out
        fallback = self._fail(key, f"nvFuser failed at run time: {_first_line(error)}", error)
        return fallback(list(args))

    def _build(self, descs, schedule=None) -> BuiltFusion:
        with compile_time.timed("definitions"):
            built = build_fusion(self.region, list(descs), schedule)
        if self.options.dump_dir:
            os.makedirs(self.options.dump_dir, exist_ok=True)
            n = FUSION_CACHE.builds
            path = os.path.join(self.options.dump_dir, f"{self.name}_{self._code_key[:8]}_{n}.py")
            with open(path, "w") as f:
                f.write(f"# region {self.name}: {', '.join(self.ops)}\n")
                f.write(f"# inputs: {descs}\n")
                f.write(repr(built.fd))
                # repr() prints a segment_set as a cast; nvFuser's own IR shows it (SegmenterSet)
                math = built.fd.fusion.print_math() if hasattr(built.fd, "fusion") else ""
                f.write("\n# nvFuser IR:\n" + "".join(f"#   {line}\n" for line in (math or "").splitlines()))
        return built

    def _fail(self, key, reason: str, error: BaseException):
        if self.options.fallback == "error":
            raise NvFuserRegionError(f"region {self.name} ({', '.join(self.ops)}): {reason}") from error
        self.fallback_reason = reason
        if reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(
                f"nvfuser_dtensor: region {self.name} ({', '.join(self.ops)}) runs in PyTorch: {reason}",
                NvFuserFallbackWarning,
                stacklevel=3,
            )
        self._entries[key] = self._run_fallback
        return self._run_fallback

    def _run_fallback(self, args):
        fn = self._fallback or self.region
        return fn(*args)


def _first_line(e: BaseException) -> str:
    """The error's first line; for nvFuser's asserts, whose first line only says where,
    also the line that says what (``Expected ...``)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if "please report a bug" in text and len(lines) > 1:
        text += " " + lines[1]
    # A failure in nvFuser's parallel compilation says only that; the segment's own error
    # follows ("Error from segmentation group N: ..." and the line that says what).
    for i, ln in enumerate(lines):
        if ln.startswith("Error from segmentation group"):
            cause = ln + (" " + lines[i + 1][:300] if i + 1 < len(lines) else "")
            text += " First segment error: " + cause
            break
    return f"{type(e).__name__}: {_REPORT_A_BUG.sub('', text)}"


_REPORT_A_BUG = re.compile(r",? please report a bug with repro script to NVFuser at \S+")
