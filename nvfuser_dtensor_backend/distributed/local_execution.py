"""Global-view graphs run on local tensors (Note [Local execution of the global view]).

Note [Local execution of the global view]
A global-view graph (global_view.py) is partitioned on global shapes: its regions are
nvFuser fusions with mesh annotations, and the code between them is aten on DTensors. Run
as it is, every op between regions dispatches through DTensor on every call (sharding
propagation, redistribution, wrapping), which made the global view about 3x slower than
the local path on one H200 (benchmarks/results/h200_tp1_global_view).

So the placement of every value is decided once, at compile time, by tracing the
partitioned graph with ``make_fx`` on fake DTensors: DTensor's dispatch runs during the
trace and leaves behind what it would do at run time, the local aten ops and the
collectives (functional collectives, ``_c10d_functional.*``) it places. Each region is
traced as one opaque call, ``nvfuser_dtensor::region``, on local tensors: its inputs are
redistributed first where the region needs it (``Partial`` inputs all-reduced, as
``GlobalViewRegion`` does) and its outputs get the placements eager DTensor gives, found
on fake DTensors. After the trace, each region call node calls a :class:`_LocalRegionCall`
directly. The graph that runs is then plain: local tensors in, local tensors out, no
DTensor dispatch on the per-call path.

A region call keeps the global view inside: the fusion is defined on global shapes with
its inputs' meshes and shardings, and nvFuser inserts its communication. Its first call
goes through :class:`GlobalViewRegion` on DTensors (which builds the fusion and finds
nvFuser's output shardings); when those are the placements the trace assumed, later calls
run ``fd.execute`` on the local tensors directly. Anything else (the CPU evaluator, a
region that fell back to PyTorch, an output nvFuser shards otherwise) keeps the DTensor
call for that region only, so the answer stays eager DTensor's.

The TP conversions around the graph (global_view.py, tp_conversions.py) move into it: a
``from_local`` input is taken as the local tensor it wraps, a ``to_local`` output is
redistributed inside the graph and returned local, and in the backward their gradients
are the local tensors autograd passes. The backward is traced at compile time with
gradients placed like the forward's outputs (``ones_like``), and again on the first call
whose gradients arrive with other placements (:class:`BackwardByGradPlacements`): DTensor's
sharding propagation then picks what eager picks for those placements (on one GPU, a
Replicate gradient of a Shard(0) output gave eager a Replicate weight gradient where the
compile-time trace gave Partial(sum)).

A random op between regions (dropout's ``rand_like``) on a DTensor is traced the same way
as a region, as one opaque call (:class:`_RandomOp`) that runs the op through DTensor at
run time: DTensor's RNG tracker offsets the generator for each shard on every call, which
a trace would bake in. So random numbers are eager DTensor's, and only those ops dispatch
through DTensor.
"""

from __future__ import annotations

import itertools
import logging
import operator
import warnings
from typing import Callable

import torch
from torch import fx
from torch._prims_common import make_contiguous_strides_for
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental import implicit_replication
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx

from ..fx_nodes import is_random_op
from .dtensor import has_partial, without_partial
from .dtensor_region import (GlobalViewRegion, _GlobalViewEntry, _fast_key, _replicated_like, fake_dtensor,
                             holds_zero)

log = logging.getLogger("nvfuser_dtensor_backend")


class NotLocal(Exception):
    """Why a global-view graph keeps running on DTensors."""


# Region calls by the id the traced op carries, while a local graph is traced.
_CALLS: dict[int, "_LocalRegionCall"] = {}
_IDS = itertools.count()


@torch.library.custom_op("nvfuser_dtensor::region", mutates_args=())
def _region_op(region_id: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    return _CALLS[region_id].run(args)


@_region_op.register_fake
def _(region_id, args):
    return [torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=m.device)
            for m in _CALLS[region_id].out_locals]


class _LocalRegionCall:
    """One region call of a local graph: local tensors in, local tensors out, each with the
    DTensor spec fixed at compile time (see the Note)."""

    def __init__(self, region: GlobalViewRegion, in_specs: list, out_specs: list, out_locals: list):
        self.region = region
        self.in_specs = in_specs  # DTensorSpec, or None for a plain tensor (Replicate)
        self.out_specs = out_specs
        self.out_locals = out_locals  # fake local outputs (for the traced op's shapes)
        self.fast: _GlobalViewEntry | None = None
        self.zero_outputs: frozenset[int] = frozenset()  # Partial(sum) outputs this rank holds as 0
        self.tried_fast = False

    def run(self, args: list) -> list:
        fast = self.fast
        if fast is not None:
            try:
                outs = fast.fd.execute(args)
            except Exception:  # the region's own recovery decides (fallback, one warning)
                self.fast = None
            else:
                for i in fast.contiguous:
                    if not outs[i].is_contiguous():
                        outs[i] = outs[i].contiguous()
                results = [outs[i] for i in fast.index]
                for j in self.zero_outputs:
                    results[j] = torch.zeros_like(results[j])
                return results
        dts = [DTensor(a.detach(), spec, requires_grad=False) if spec is not None else a
               for a, spec in zip(args, self.in_specs)]
        outs = self.region.forward(*dts)
        outs = (outs,) if self.region._single else outs
        results = []
        restrided = False
        for o, spec, like in zip(outs, self.out_specs, self.out_locals):
            if tuple(o.placements) != spec.placements:  # not expected: GlobalViewRegion gives eager's
                o = o.redistribute(spec.mesh, spec.placements)
            t = _like(o._local_tensor, like)
            restrided |= t is not o._local_tensor
            results.append(t)
        if not self.tried_fast:
            self.tried_fast = True
            why = "an output needs other strides than the trace gave it" if restrided else self._take_fast_path(dts)
            if why:
                log.info("nvfuser_dtensor: region %s runs through DTensor on every call: %s", self.region.name, why)
        return results

    def _take_fast_path(self, dts) -> str | None:
        """Sets ``self.fast`` to the region's nvFuser entry when running it on local tensors
        gives what the trace assumed: nvFuser's output shardings are the expected placements,
        or for a ``Partial`` output the same with Replicate, which ``_to_expected``
        (dtensor_region.py) turns into a Partial(sum) by keeping the value on coordinate 0 of
        that mesh dim and zeros elsewhere; here the same is set once in ``zero_outputs``.
        Otherwise returns why not."""
        if isinstance(self.region, _RandomOp):  # always through DTensor (see the Note)
            return None
        opts = self.region.options
        if opts.check_layouts or opts.verify:
            return "options check_layouts or verify"
        entry = self.region._entries.get(tuple(map(_fast_key, dts)))
        if type(entry) is not _GlobalViewEntry or entry.placements is None:
            return f"no nvFuser entry on local tensors ({type(entry).__name__})"
        zero = set()
        for j, i in enumerate(entry.index):
            got, want = tuple(entry.placements[i]), tuple(entry.expected[j])
            if want != self.out_specs[j].placements:
                return f"output {j}: eager's placements {want} are not the traced {self.out_specs[j].placements}"
            if got == want:
                continue
            coordinate = entry.mesh.get_coordinate()
            if got != without_partial(want) or coordinate is None:
                return f"output {j}: nvFuser shards it {got}, eager {want}"
            if holds_zero(want, coordinate):
                zero.add(j)
        self.zero_outputs = frozenset(zero)
        self.fast = entry
        return None


def _like(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` with the strides the trace gave ``like`` (a copy only where they differ): the
    local graph's ops were traced on those strides, and some (collectives, views) need them."""
    if t.stride() == like.stride() or t.dim() != like.dim():
        return t
    if like.is_contiguous():
        return t.contiguous()
    return torch.empty_strided(t.shape, like.stride(), dtype=t.dtype, device=t.device).copy_(t)


class _RegionTracer:
    """Stands in for a region's call while the partitioned graph is traced (see the Note)."""

    def __init__(self, region: GlobalViewRegion, calls: list[int]):
        self.region = region
        self.calls = calls

    def trace(self, *args):
        mesh = next(a.device_mesh for a in args if isinstance(a, DTensor))
        prepared = []
        for a in args:
            if isinstance(a, DTensor):
                if has_partial(a.placements):  # nvFuser takes no Partial input: all-reduced first
                    a = a.redistribute(a.device_mesh, without_partial(a.placements))
                prepared.append(a)
            elif isinstance(a, torch.Tensor):
                prepared.append(a)
            else:
                raise NotLocal(f"region {self.region.name} takes a {type(a).__name__}")
        outs = _fake_outputs(self.region, prepared, mesh)
        in_specs = [a._spec if isinstance(a, DTensor) else None for a in prepared]
        call = _LocalRegionCall(self.region, in_specs, [o._spec for o in outs],
                                [o._local_tensor for o in outs])
        region_id = next(_IDS)
        _CALLS[region_id] = call
        self.calls.append(region_id)
        locals_ = _region_op(region_id, [a._local_tensor if isinstance(a, DTensor) else a for a in prepared])
        results = tuple(DTensor.from_local(t, o.device_mesh, o.placements, run_check=False, shape=o.shape,
                                           stride=o.stride()) for t, o in zip(locals_, outs))
        return results[0] if self.region._single else results


class _RandomOp:
    """A random op on DTensors, with the region interface :class:`_RegionTracer` and
    :class:`_LocalRegionCall` use: it runs through DTensor at run time (see the Note)."""

    def __init__(self, op, flat: list, spec, tensor_slots: list[int]):
        self.op = op
        self.name = op.name()
        self.flat = [None if i in tensor_slots else v for i, v in enumerate(flat)]
        self.spec = spec
        self.tensor_slots = tensor_slots
        self._single = True

    def region(self, *tensors):
        flat = list(self.flat)
        for i, t in zip(self.tensor_slots, tensors):
            flat[i] = t
        args, kwargs = torch.utils._pytree.tree_unflatten(flat, self.spec)
        return self.op(*args, **kwargs)

    forward = region


class _RandomOpTracer:
    """Stands in for a random op on DTensors while the graph is traced."""

    def __init__(self, op, calls: list[int]):
        self.op = op
        self.calls = calls

    def trace(self, *args, **kwargs):
        flat, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        slots = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        if not any(isinstance(flat[i], DTensor) for i in slots):
            return self.op(*args, **kwargs)  # plain tensors: no DTensor at run time either
        op = _RandomOp(self.op, flat, spec, slots)
        return _RegionTracer(op, self.calls).trace(*(flat[i] for i in slots))


def _fake_outputs(region: GlobalViewRegion, args: list, mesh) -> list[DTensor]:
    """The region's outputs as eager DTensor places them, on fake DTensors outside the trace."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = torch._guards.detect_fake_mode() or FakeTensorMode(allow_non_fake_inputs=True)
    with disable_proxy_modes_tracing(), mode:
        fake = [fake_dtensor(mode, a) if isinstance(a, DTensor)
                else _replicated_like(mode.from_tensor(a), mesh) if a.dim() > 0 else mode.from_tensor(a)
                for a in args]
        with implicit_replication():
            outs = region.region(*fake)
    outs = (outs,) if region._single else tuple(outs)
    if not all(isinstance(o, DTensor) for o in outs):
        raise NotLocal(f"region {region.name} has an output that is not a DTensor")
    return list(outs)


class LocalGraph:
    """A global-view graph that runs on local tensors (see the Note).

    Called like the compiled graph it replaces (a list of DTensors and plain tensors), it
    returns DTensors for the outputs that are DTensors in the global view. Inputs listed in
    ``local_inputs`` and outputs in ``local_outputs`` pass as local tensors (activations
    saved between the forward and the backward).
    """

    def __init__(self, gm: fx.GraphModule, in_specs: list, in_locals: list, out_specs: list,
                 local_inputs: frozenset[int], local_outputs: frozenset[int]):
        self.gm = gm
        self.in_specs = in_specs
        self.in_strides = [t.stride() if isinstance(t, torch.Tensor) else None for t in in_locals]
        self.in_locals = in_locals
        self.random_ops: list[str] = []  # random ops that run through DTensor (see the Note)
        self.out_specs = out_specs
        self.local_inputs = local_inputs
        self.local_outputs = local_outputs
        # Runs the graph on a list of local tensors (boxed: it empties the list); a GraphRunner
        # where the graph replays as a CUDA graph (Note [CUDA graphs of local graphs]).
        self.run: Callable[[list], list] = _boxed(gm)

    def __call__(self, args: list) -> list:
        locals_ = []
        for i, (a, spec) in enumerate(zip(args, self.in_specs)):
            if spec is not None and i not in self.local_inputs:
                if a.placements != spec.placements:  # a gradient placed otherwise than assumed
                    a = a.redistribute(spec.mesh, spec.placements)
                a = a._local_tensor
            if isinstance(a, torch.Tensor) and a.stride() != self.in_strides[i]:
                a = _like(a, self.in_locals[i])  # e.g. an expanded gradient of a sum
            locals_.append(a)
        outs = self.run(locals_)
        return [DTensor(o, spec, requires_grad=False) if spec is not None and j not in self.local_outputs else o
                for j, (o, spec) in enumerate(zip(outs, self.out_specs))]


def _boxed(gm: fx.GraphModule) -> Callable[[list], list]:
    def run(args: list) -> list:
        mine = list(args)
        args.clear()  # consumed, as the boxed functions GraphRunner wraps (AOTAutograd's) consume theirs
        return list(gm(*mine))

    return run


class BackwardByGradPlacements:
    """A global-view backward as :class:`LocalGraph` s, one per placements of the gradients
    it is called with (see the Note). ``args`` of a call: the saved values (local tensors,
    as many as ``saved``, their fakes), then the gradients."""

    def __init__(self, compiled: Callable, saved: list, mode, grads: list, **lowering):
        self.compiled, self.saved, self.mode, self.lowering = compiled, saved, mode, lowering
        self.graphs: dict[tuple, LocalGraph] = {}
        self.on_lower: Callable[[LocalGraph], None] | None = None  # applied to each graph lowered at run time
        self.first = self._lower(grads)  # at compile time: a graph that cannot be lowered is found there

    def _local(self, j: int) -> bool:
        """The gradient ``j`` is of a ``to_local`` output: autograd passes it as the local
        tensor, whatever placements the others have."""
        return len(self.saved) + j in self.lowering.get("local_inputs", frozenset())

    def _key(self, grads) -> tuple:
        return tuple("local" if self._local(j) else (a.device_mesh, tuple(a.placements)) if isinstance(a, DTensor)
                     else None for j, a in enumerate(grads))

    def _lower(self, grads: list) -> LocalGraph:
        graph, _ = lower_to_local(self.compiled, self.saved + list(grads), **self.lowering)
        self.graphs[self._key(grads)] = graph
        if self.on_lower is not None:
            self.on_lower(graph)
        return graph

    def _fake(self, j: int, a):
        """A dense fake of the gradient ``a`` (under ``self.mode``) with its static sizes: an
        expanded gradient (of a sum) is made dense at run time (``LocalGraph``). The local
        gradient of a ``to_local`` output is faked as the DTensor the first trace took."""
        spec = self.first.in_specs[len(self.saved) + j] if self._local(j) else None
        if spec is not None:
            local = torch.empty(a.shape, dtype=a.dtype, device=a.device)
            return DTensor.from_local(local, spec.mesh, spec.placements, run_check=False, shape=spec.shape,
                                      stride=spec.stride)
        if isinstance(a, DTensor):
            local = a._local_tensor
            local = torch.empty(local.shape, dtype=local.dtype, device=local.device)
            return DTensor.from_local(local, a.device_mesh, a.placements, run_check=False, shape=a.shape,
                                      stride=make_contiguous_strides_for(a.shape))
        return torch.empty(a.shape, dtype=a.dtype, device=a.device) if isinstance(a, torch.Tensor) else a

    @property
    def random_ops(self) -> list[str]:
        return self.first.random_ops

    def __call__(self, args: list) -> list:
        grads = args[len(self.saved):]
        graph = self.graphs.get(self._key(grads))
        if graph is None:
            with self.mode, implicit_replication():
                fakes = [self._fake(j, a) for j, a in enumerate(grads)]
            try:
                graph = self._lower(fakes)
            except NotLocal as e:  # the graph traced with the assumed placements still runs
                log.warning("nvfuser_dtensor: the backward keeps the gradient placements it was traced with: %s", e)
                graph = self.graphs[self._key(grads)] = self.first
        return graph(args)


def _is_random(node: fx.Node) -> bool:
    return node.op == "call_function" and is_random_op(node.target) and not _no_dropout(node)


def _no_dropout(node: fx.Node) -> bool:
    """Attention ops are tagged random for their dropout; with ``dropout_p=0`` they are not."""
    names = [a.name for a in node.target._schema.arguments]
    if "dropout_p" not in names:
        return False
    i = names.index("dropout_p")
    p = node.args[i] if i < len(node.args) else node.kwargs.get("dropout_p", 0.0)
    return p == 0


def lower_to_local(compiled: Callable, args: list, local_inputs: frozenset[int] = frozenset(),
                   local_outputs: frozenset[int] = frozenset(),
                   out_placements: dict[int, tuple] | None = None) -> tuple[LocalGraph, list]:
    """Trace ``compiled`` (compile_aten_graph's boxed global-view graph) on ``args`` (fake
    DTensors and fake plain tensors) into a :class:`LocalGraph`; also returns the fake
    outputs, for the graph that consumes them. ``out_placements`` maps an output to the
    ``(mesh, placements)`` it is redistributed to inside the graph (a ``to_local`` of
    ``parallelize_module`` after it, or a ``from_local``'s gradient). Raises :class:`NotLocal`."""
    fused = getattr(compiled, "__wrapped__", None)
    if not isinstance(fused, fx.GraphModule):
        raise NotLocal("the compiled graph is not a partitioned GraphModule")
    calls: list[int] = []
    tracing = fx.GraphModule(fused, _with_tracers(fused.graph, calls))

    in_specs = [a._spec if isinstance(a, DTensor) else None for a in args]
    out_specs: list = []
    fake_outs: list = []

    def local_graph(*locals_):
        dts = [DTensor.from_local(t, s.mesh, s.placements, run_check=False, shape=s.shape, stride=s.stride)
               if s is not None else t for t, s in zip(locals_, in_specs)]
        with implicit_replication():
            outs = tracing(*dts)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        for j, (mesh, placements) in (out_placements or {}).items():
            if isinstance(outs[j], DTensor) and tuple(outs[j].placements) != tuple(placements):
                outs[j] = outs[j].redistribute(mesh, placements)
        out_specs[:] = [o._spec if isinstance(o, DTensor) else None for o in outs]
        fake_outs[:] = outs
        return [o._local_tensor if isinstance(o, DTensor) else o for o in outs]

    locals_ = [a._local_tensor if isinstance(a, DTensor) else a for a in args]
    try:
        with warnings.catch_warnings():  # DTensor's own, about requires_grad of fake locals
            warnings.filterwarnings("ignore", "To construct DTensor from torch.Tensor")
            gm = make_fx(local_graph)(*locals_)
        _drop_dead_aten_ops(gm)
        _call_regions_directly(gm)
        random_ops = [_CALLS[i].region.name for i in calls if isinstance(_CALLS[i].region, _RandomOp)]
    except NotLocal:
        raise
    except Exception as e:
        raise NotLocal(f"tracing the local graph failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from e
    finally:
        for region_id in calls:  # the graph holds its region calls now; the table was for the trace
            _CALLS.pop(region_id, None)
    with disable_proxy_modes_tracing():
        outs = [DTensor(o._local_tensor.detach(), o._spec, requires_grad=False) if isinstance(o, DTensor) else o
                for o in fake_outs]
    graph = LocalGraph(gm, in_specs, locals_, list(out_specs), local_inputs, local_outputs)
    graph.random_ops = random_ops
    return graph, outs


def _with_tracers(graph: fx.Graph, calls: list[int]) -> fx.Graph:
    """A copy of ``graph`` whose region calls go to :class:`_RegionTracer`."""
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        copied = new.node_copy(node, lambda n: env[n])
        region = getattr(node.target, "__self__", None)
        if node.op == "call_function" and isinstance(region, GlobalViewRegion):
            copied.target = _RegionTracer(region, calls).trace
        elif _is_random(node):
            copied.target = _RandomOpTracer(node.target, calls).trace
        env[node] = copied
    return new


# Note [Dead ops of DTensor's metadata propagation]
# On a miss of its cache, DTensor's sharding propagation finds an op's output shapes by
# running the op on fake tensors (``_propagate_tensor_meta_non_cached``: ``empty_strided``
# inputs, in the fake mode it detects). Under ``make_fx`` that run is traced as well: the
# local graph then holds the op a second time, on ``empty_strided`` tensors, with an output
# nobody reads, and would run it on every call. In the SP block that was a second attention
# forward and backward per step (the CPU flash attention's, on one gloo rank). Dead aten ops
# are dropped, attention ops with ``dropout_p=0`` among them (tagged random for their
# dropout); region calls, random ops and collectives are kept as they are.
def _drop_dead_aten_ops(gm: fx.GraphModule) -> None:
    def keep(node: fx.Node) -> bool:
        target = node.target
        aten_op = isinstance(target, torch._ops.OpOverload) and target.namespace == "aten"
        if not (aten_op or target is operator.getitem):
            return True
        return node.is_impure(impure_random=False) or _is_random(node)  # attention without dropout goes

    if gm.graph.eliminate_dead_code(is_impure_node=keep):
        gm.recompile()


def _call_regions_directly(gm: fx.GraphModule) -> None:
    """Region op nodes -> calls of their :class:`_LocalRegionCall` (no dispatcher per call)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.nvfuser_dtensor.region.default:
            region_id, args = node.args
            node.target = _CALLS[region_id].run
            node.args = (args,)
    gm.recompile()

