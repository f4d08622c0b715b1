"""Compiling a dynamo graph with DTensor inputs in the global view (Note [Global view]).

Note [Global-view lowering]
Dynamo hands over plain torch code whose DTensor inputs carry global shapes. We trace it
to aten with AOTAutograd's ``aot_export_joint_simple`` on plain fake tensors of the
GLOBAL shapes (so no collectives are traced in), split the joint graph into forward and
backward with the min-cut partitioner, and partition each into nvFuser regions that run
as :class:`GlobalViewRegion`. Each partitioned graph is then traced once more on fake
DTensors into a graph on local tensors (Note [Local execution of the global view],
local_execution.py): ops outside regions become local aten ops and the functional
collectives DTensor places for them, regions run nvFuser on the local shards. The forward
and backward are tied together by our own ``autograd.Function``: AOTAutograd's runtime
wrapper would reject DTensor grad_outputs for a graph traced with plain tensors.

The tensor-parallel closures of ``parallelize_module`` are rewritten first
(tp_conversions.py). Graphs the global view cannot take (``Partial`` or unevenly sharded
inputs, several meshes, symbolic shapes, input mutation, outputs aliasing inputs, an op
DTensor cannot shard, ...) take the local path instead: AOTAutograd's DTensor
desugaring, per-rank fusions with PyTorch's collectives between them. One log line says why.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch
from torch import fx
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental import implicit_replication
from torch._functorch.aot_autograd import aot_export_joint_simple
from torch._functorch.partitioners import min_cut_rematerialization_partition

from ..decompositions import decomposition_table
from .dtensor import PlacementDesc, placement_reason
from .dtensor_ops import register_strategies
from .dtensor_region import GlobalViewRegion, fake_dtensor
from .local_cuda_graphs import capture
from .local_execution import BackwardByGradPlacements, NotLocal, lower_to_local
from .sharded_reshapes import keep_inner_sharded_reshapes_out
from ..options import Options
from ..region import _first_line
from .tp_conversions import Conversions, NotGlobalView, rewrite, use_run_relayout

log = logging.getLogger("nvfuser_dtensor_backend")

# DTensor methods called explicitly in a graph (not as dynamo's closures, tp_conversions.py).
_DTENSOR_METHODS = ("from_local", "redistribute", "to_local", "full_tensor")


def has_dtensor(example_inputs) -> bool:
    return any(isinstance(a, DTensor) for a in example_inputs)


def global_view_reason(gm: fx.GraphModule, example_inputs) -> str | None:
    """Why the global view cannot take this graph (before rewriting its TP conversions), or None."""
    dts = [a for a in example_inputs if isinstance(a, DTensor)]
    if len({a.device_mesh for a in dts}) > 1:
        return "DTensor inputs on several device meshes"
    for node in gm.graph.nodes:
        if node.op == "call_method" and node.target in _DTENSOR_METHODS:
            return f"DTensor.{node.target} called in the graph"
    for i, a in enumerate(example_inputs):
        if not isinstance(a, torch.Tensor):
            return f"input {i} is a {type(a).__name__} (symbolic shapes)"
        if isinstance(a, DTensor):
            reason = placement_reason(PlacementDesc.of(a), a.shape)
            if reason:
                return f"input {i}: {reason}"
    return None


def _global_fakes(example_inputs, conv: Conversions) -> list[torch.Tensor]:
    """Plain fake tensors of the global shapes, in the fake mode dynamo traced with."""
    mode = torch._guards.detect_fake_mode()
    if mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode()
    fakes = []
    with mode:
        for i, a in enumerate(example_inputs):
            if i in conv.global_inputs:  # a local part wrapped by from_local
                g = conv.global_inputs[i]
                t = torch.empty(g.shape, dtype=a.dtype, device=a.device)
            elif isinstance(a, DTensor):
                t = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a._local_tensor.device)
            else:
                t = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
            fakes.append(t.requires_grad_(a.requires_grad))
    return fakes


def _full_sums_as_sum_default(graph: fx.Graph) -> None:
    """``sum.dim_IntList(x, [])`` -> ``sum.default(x)``.

    Both reduce every dim, but DTensor (torch 2.10) propagates a Shard placement onto the
    0-dim result of the first; eager DTensor, which sees ``sum.default``, gives Partial.
    """
    for node in graph.nodes:
        if node.target is torch.ops.aten.sum.dim_IntList and len(node.args) >= 2 and not node.args[1] \
                and not (len(node.args) > 2 and node.args[2]) and not node.kwargs.get("keepdim"):
            dtype = node.args[3] if len(node.args) > 3 else node.kwargs.get("dtype")
            node.target = torch.ops.aten.sum.default
            node.args = (node.args[0],)
            node.kwargs = {"dtype": dtype} if dtype is not None else {}


class _GlobalViewFunction(torch.autograd.Function):
    """Compiled global forward and backward graphs as one autograd node (see the Note)."""

    @staticmethod
    def forward(ctx, runner: "_TrainingRunner", *args):
        outs = runner.forward(list(args))
        ctx.runner = runner
        ctx.saved = outs[runner.n_out:]
        return tuple(outs[: runner.n_out])

    @staticmethod
    def backward(ctx, *grads):
        saved, ctx.saved = ctx.saved, None  # free the activations
        return (None, *ctx.runner.backward(list(saved) + list(grads)))


class _TrainingRunner:
    """``conv`` is None where the graphs take and return the TP conversions' local tensors
    themselves (Note [Local execution of the global view])."""

    def __init__(self, forward: Callable, backward: Callable, n_out: int, conv: Conversions | None):
        self.forward = forward
        self.backward = backward
        self.n_out = n_out
        self.conv = conv

    def __call__(self, *args):
        with implicit_replication():
            if self.conv is None:
                return _GlobalViewFunction.apply(self, *args)
            args = self.conv.wrap_inputs(list(args))
            return self.conv.unwrap_outputs(_GlobalViewFunction.apply(self, *args))


class _InferenceRunner:
    def __init__(self, forward: Callable, conv: Conversions | None):
        self.forward = forward
        self.conv = conv

    def __call__(self, *args):
        with implicit_replication():
            if self.conv is None:
                return tuple(self.forward(list(args)))
            args = self.conv.wrap_inputs(list(args))
            return self.conv.unwrap_outputs(self.forward(args))


def compile_global_view(gm: fx.GraphModule, example_inputs, options: Options,
                        compile_aten_graph: Callable) -> Callable:
    """The callable that replaces ``gm``; raises :class:`NotGlobalView` where it cannot."""
    register_strategies()
    gm, conv = rewrite(gm)
    for i, g in conv.global_inputs.items():
        reason = placement_reason(PlacementDesc.of(g), g.shape)
        if reason:
            raise NotGlobalView(f"input {i}: {reason}")
    fakes = _global_fakes(example_inputs, conv)
    train = torch.is_grad_enabled() and any(f.requires_grad for f in fakes)
    try:
        graph = aot_export_joint_simple(gm, fakes, trace_joint=train, decompositions=decomposition_table())
    except Exception as e:  # input mutation, outputs aliasing inputs, pytrees, ...
        raise NotGlobalView(f"tracing the global view failed: {_first_line(e)[:250]}") from e
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    n_out = len(out) if isinstance(out, (tuple, list)) else 1

    graphs = [graph]
    if train:
        tangents = [n for n in graph.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
        if len(tangents) != n_out:
            raise NotGlobalView(f"{n_out - len(tangents)} output(s) without a gradient")
        graphs = list(min_cut_rematerialization_partition(graph, fakes, num_fwd_outputs=n_out))
    for g in graphs:
        use_run_relayout(g.graph)
        keep_inner_sharded_reshapes_out(g.graph)
        _full_sums_as_sum_default(g.graph)
        g.recompile()
    fake_args = _dry_run(graphs, example_inputs, conv, n_out)

    def compile_graph(g, kind):
        return compile_aten_graph(g, None, options, kind, region_cls=GlobalViewRegion)

    compiled = [compile_graph(graphs[0], "inference")] if not train else \
        [compile_graph(graphs[0], "forward"), compile_graph(graphs[1], "backward")]
    runs = compiled
    if options.dtensor_runtime:
        for c in compiled:
            c.__wrapped__.meta["report"].between_regions = "DTensor (options dtensor_runtime=True)"
    else:
        runs = _local_or_dtensor(compiled, fake_args, n_out, conv)
        if runs is not compiled:  # Note [CUDA graphs of local graphs]
            capture(runs, [c.report for c in compiled], example_inputs, options.cuda_graphs, n_out)
    # Local graphs take and return the conversions' local tensors themselves.
    conv_at_run = None if runs is not compiled else conv
    if not train:
        return _InferenceRunner(runs[0], conv_at_run)
    return _TrainingRunner(runs[0], runs[1], n_out, conv_at_run)


def _local_or_dtensor(compiled: list[Callable], fake_args: list, n_out: int, conv: Conversions) -> list[Callable]:
    """The compiled graphs lowered to local tensors (Note [Local execution of the global
    view]), or as they are (ops between regions dispatch through DTensor) where they cannot be.

    The TP conversions move into the local graphs: a ``from_local`` input is taken as the
    local tensor it wraps, a ``to_local`` output is redistributed in the graph and returned
    local, and in the backward their gradients are the local tensors autograd passes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = torch._guards.detect_fake_mode(fake_args) or FakeTensorMode(allow_non_fake_inputs=True)
    conv_in, conv_out = frozenset(conv.inputs), dict(conv.outputs)
    try:
        with implicit_replication():
            if len(compiled) == 1:
                inference, _ = lower_to_local(compiled[0], fake_args, local_inputs=conv_in,
                                              local_outputs=frozenset(conv_out), out_placements=conv_out)
                result = [inference]
            else:
                n_fwd = len(next(n for n in compiled[0].__wrapped__.graph.nodes if n.op == "output").args[0])
                forward, outs = lower_to_local(compiled[0], fake_args, local_inputs=conv_in,
                                               local_outputs=frozenset(range(n_out, n_fwd)) | frozenset(conv_out),
                                               out_placements=conv_out)
                with mode:
                    grads = _unit_gradients(outs[:n_out])
                saved = outs[n_out:]
                n_saved = len(saved)
                backward = BackwardByGradPlacements(
                    compiled[1], saved, mode, grads,
                    local_inputs=frozenset(range(n_saved)) | frozenset(n_saved + j for j in conv_out),
                    local_outputs=conv_in, out_placements=dict(conv.inputs))
                result = [forward, backward]
    except NotLocal as e:
        log.warning("nvfuser_dtensor: the global view's ops between regions dispatch through DTensor at run time: %s", e)
        result, how = compiled, f"DTensor ({e})"
    else:
        how = "local tensors, collectives placed at compile time"
    for c, r in zip(compiled, result):
        random_ops = getattr(r, "random_ops", [])
        c.__wrapped__.meta["report"].between_regions = how + (
            f"; {len(random_ops)} random op(s) through DTensor ({', '.join(sorted(set(random_ops)))})"
            if random_ops else "")
    return result


def _unit_gradients(outs: list) -> list:
    """The gradients a backward graph is dry-run and traced with: ones placed like each
    output (DTensor's ``ones_like``)."""
    return [torch.ones_like(o) if isinstance(o, torch.Tensor) else o for o in outs]


def _dry_run(graphs: list[fx.GraphModule], example_inputs, conv: Conversions, n_out: int) -> list:
    """Run the aten graphs on fake DTensors: every op must have a DTensor sharding strategy.

    At run time the ops outside regions (and a region that falls back) dispatch through
    DTensor; an op our lowering produced that DTensor cannot shard would fail there, after
    compilation. Found here, the graph takes the local path instead. The backward graph gets
    gradients placed like the forward outputs.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = torch._guards.detect_fake_mode() or FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with mode, implicit_replication():
            args = conv.wrap_inputs([fake_dtensor(mode, a) if isinstance(a, DTensor) else mode.from_tensor(a)
                                     for a in example_inputs])
            fake_args = list(args)
            outs = graphs[0](*args)
            if len(graphs) > 1:
                outs = list(outs)
                grads = _unit_gradients(outs[:n_out])
                graphs[1](*outs[n_out:], *grads)
    except Exception as e:
        raise NotGlobalView(f"DTensor cannot run the lowered graph: {_first_line(e)[:250]}") from e
    return fake_args
