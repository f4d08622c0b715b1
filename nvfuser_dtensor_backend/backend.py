"""The ``nvfuser_dtensor`` dynamo backend: decompose -> partition -> cached fusions.

``torch.compile(model, backend="nvfuser_dtensor", options={...})`` calls
:func:`nvfuser_dtensor` with the dynamo FX graph. AOTAutograd lowers it to aten (forward and
backward graphs for training), each aten graph is partitioned into nvFuser regions, and each
region becomes a :class:`FusedRegion` that builds and caches its FusionDefinition on the
first call.
"""

from __future__ import annotations

import copy
import logging
import operator
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import fx
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.passes.operator_support import OperatorSupportBase

from ._nvfuser import multidevice_abi_reason, nvfuser
from . import channels_last, compile_time, cuda_graphs, kernel_cache
from .cuda_graphs import CudaGraphs
from .decompositions import decomposition_table
from .distributed.global_view import NotGlobalView, compile_global_view, global_view_reason, has_dtensor
from .options import Options
from .partition_proposal import Partitioner
from .cpu_constants import copy_constants_once
from .dense_stack import write_stacks_once
from .early_gather import gather_early
from .grouped_copies import group_input_copies
from .zero_size import drop_empty_operands
from .one_hot_sum import fold_one_hot_sums
from .padded_rows import pad_on_padded_rows, reduce_padded_rows, rows_widened
from .pad_matmul import pad_matmuls
from .views_before_casts import views_before_casts
from . import partition as partitioning
from .partition import PartitionReport, partition
from .region import FUSION_CACHE, FusedRegion, _first_line

log = logging.getLogger("nvfuser_dtensor_backend")


@dataclass
class GraphReport:
    """What one compiled aten graph became."""

    kind: str  # "forward", "backward" or "inference"
    partition: PartitionReport
    regions: list[FusedRegion] = field(default_factory=list)
    inductor_parts: list = field(default_factory=list)  # LazyInductor pieces between regions
    # Global view only: how the code between regions runs, "local tensors, ..." or "DTensor (<why>)"
    # (Note [Local execution of the global view]).
    between_regions: str | None = None

    def summary(self) -> str:
        text = f"[{self.kind}] " + self.partition.summary()
        if self.inductor_parts:
            text += f"\n  {len(self.inductor_parts)} piece(s) between regions compiled by inductor"
        if self.between_regions:
            text += f"\n  between regions: {self.between_regions}"
        return text


_REPORTS: list[GraphReport] = []


def reports() -> list[GraphReport]:
    """Reports of every aten graph compiled in this process, oldest first."""
    return list(_REPORTS)


def clear_reports() -> None:
    _REPORTS.clear()


class LazyInductor:
    """Compiles an aten subgraph with inductor on its first call (eager if inductor fails)."""

    def __init__(self, sub: fx.GraphModule):
        self.sub = sub
        self.compiled: Callable | None = None
        self.error: str | None = None

    def __call__(self, *args):
        if self.compiled is None:
            self.compiled = self._compile(list(args))
        return self.compiled(*args)

    def _compile(self, args) -> Callable:
        from torch._inductor.compile_fx import compile_fx_inner
        from torch._inductor.decomposition import select_decomp_table
        from torch.fx.experimental.proxy_tensor import make_fx

        # inductor compiles graphs that return a tuple/list.
        gm = fx.GraphModule(self.sub, copy.deepcopy(self.sub.graph))
        out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        single = not isinstance(out.args[0], (tuple, list))
        if single:
            out.args = ((out.args[0],),)
        gm.recompile()
        try:
            # Our aten graphs keep ops inductor decomposes before lowering (aten.t, Note
            # KEEP in decompositions.py); lowered as they are, inductor asserted "both a
            # fallback and a decomp for same op" and every piece ran eagerly.
            gm = make_fx(gm, decomposition_table=select_decomp_table(), tracing_mode="fake")(*args)
            fn = compile_fx_inner(gm, args)
        except Exception as e:  # inductor failing must not break the program
            self.error = _first_line(e)
            log.warning("nvfuser_dtensor: inductor could not compile a fallback piece (%s); running eagerly", self.error)
            return self.sub

        def run(*a):
            outs = fn(list(a))
            return outs[0] if single else tuple(outs)

        return run


class _RestSupport(OperatorSupportBase):
    """Everything between the nvFuser regions (the regions and their getitems excluded)."""

    def is_node_supported(self, submodules, node: fx.Node) -> bool:
        if node.op != "call_function" or _is_region_call(node) or node.target is rows_widened:
            return False  # rows_widened returns a view where it can, which inductor would copy
        return not (node.target is operator.getitem and isinstance(node.args[0], fx.Node)
                    and _is_region_call(node.args[0]))


def _is_region_call(node: fx.Node) -> bool:
    return node.op == "call_module" or isinstance(getattr(node.target, "__self__", None), FusedRegion)


class _InductorRest(torch.nn.Module):
    def __init__(self, sub: fx.GraphModule):
        super().__init__()
        self.run = LazyInductor(sub)

    def forward(self, *args):
        return self.run(*args)


def _compile_rest_with_inductor(fused: fx.GraphModule) -> list[LazyInductor]:
    """With ``fallback="inductor"``, hand the code between regions to inductor (lazily)."""
    partitioner = Partitioner(fused, _RestSupport(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    if not partitions:
        return []
    partitioner.fuse_partitions(partitions, prefix="inductor_rest_")
    parts = []
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("inductor_rest_"):
            module = _InductorRest(getattr(fused, node.target))
            setattr(fused, node.target, module)
            parts.append(module.run)
    fused.recompile()
    return parts


def _eliminate_common_subexpressions(gm: fx.GraphModule) -> None:
    """AOTAutograd's CSE (``fx_graph_cse``: random ops, mutations and outputs kept apart) runs
    on training graphs only, in the min-cut partitioner; an inference graph gets it here. In
    GPT-2 each layer turned the same boolean mask into a float mask, one kernel per layer."""
    from torch._functorch.compile_utils import fx_graph_cse

    gm.graph = fx_graph_cse(gm.graph)
    gm.recompile()


@compile_time.timed("graphs")  # Note [First-call accounting]
def compile_aten_graph(gm: fx.GraphModule, example_inputs, options: Options, kind: str,
                       region_cls: type = FusedRegion, random_ops: bool = True) -> Callable:
    """Partition an aten graph and swap each region for a FusedRegion (or ``region_cls``).
    ``random_ops=False`` (a DTensor graph's): random ops stay in PyTorch (Note [Random numbers
    drawn by nvFuser])."""
    local = region_cls is FusedRegion  # not the DTensor global view's regions
    if local:  # DTensor graphs (the global view) keep theirs as they are
        if kind == "inference":
            _eliminate_common_subexpressions(gm)
        if options.pad_matmuls:
            pad_matmuls(gm, options.pad_matmuls)
        drop_empty_operands(gm)
        gather_early(gm)
        group_input_copies(gm)
        fold_one_hot_sums(gm)
        write_stacks_once(gm)
        reduce_padded_rows(gm)
        pad_on_padded_rows(gm)
        if partitioning.INPUT_VIEWS_OUT:  # the views then read values from outside their regions
            views_before_casts(gm)
    fused, names, report = partition(gm, options.min_region_size, options.fuse_matmul,
                                     random_ops=random_ops and local, global_view=not local)
    # The global view runs its graphs on DTensors, which inductor does not take: there,
    # regions fall back to the aten code and the code between regions stays as it is.
    use_inductor = options.fallback == "inductor" and local
    graph_report = GraphReport(kind=kind if local else f"{kind}, global view", partition=report)
    regions = {}
    for name in names:
        sub = getattr(fused, name)
        region = region_cls(f"{kind}.{name}", sub, options, LazyInductor(sub) if use_inductor else None)
        setattr(fused, name, region)
        graph_report.regions.append(region)
        regions[name] = region
    # See Note [Lean call path]: the graph calls each region's forward directly, which
    # skips nn.Module.__call__ (hooks and dispatch) on every call.
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target in regions:
            node.op, node.target = "call_function", regions[node.target].forward
    fused.recompile()
    fused.meta["report"] = graph_report
    if use_inductor and names:
        graph_report.inductor_parts = _compile_rest_with_inductor(fused)
    _REPORTS.append(graph_report)
    log.info("nvfuser_dtensor %s", graph_report.summary())
    if use_inductor and not names:
        whole = LazyInductor(gm)
        graph_report.inductor_parts = [whole]
        compiled = make_boxed_func(whole)
    else:
        # The generated forward, not the module: nn.Module.__call__ and GraphModule's
        # traceback wrapper cost 2.2 us per call (Note [Lean call path]). Dynamo builds lazy
        # graph modules, whose ``recompile`` only marks them: their ``forward`` is then
        # ``_lazy_forward``, which calls the module, on every call. Recompile for real first.
        _LazyGraphModule.force_recompile(fused)
        compiled = make_boxed_func(fused.forward)
        compiled.__wrapped__ = fused  # the graph module: the global view reads its graph and report
    compiled.report = graph_report  # CudaGraphs counts its kernel launches
    compiled.padded_inputs = gm.meta.get("padded_inputs", {})  # Note [Pads computed on padded rows]
    return compiled


def _any_on_cuda(values) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in values)


def _global_view_choice(opts: Options, example_inputs) -> str | None:
    """Why ``options.global_view`` keeps this DTensor graph off the global view, or None."""
    if opts.global_view is False:
        return "options global_view=False"
    # On one H100 the global view, its local graphs replayed as CUDA graphs, ran ahead of the
    # local path in every TP case (benchmarks/results/h100_session25): "auto" takes it on CUDA
    # too, unless nvFuser's multidevice runtime does not match this torch.
    if opts.global_view == "auto" and _any_on_cuda(example_inputs) and (why := multidevice_abi_reason()):
        return f"the global view needs options={{'global_view': True}} here: {why}"
    return None


def nvfuser_dtensor(gm: fx.GraphModule, example_inputs, options: dict | None = None, **kwargs) -> Callable:
    """The dynamo backend registered as ``"nvfuser_dtensor"``."""
    opts = Options.from_dict(options)
    nvfuser()  # raises NvFuserMissingError with the pip command that fixes it
    FUSION_CACHE.maxsize = opts.cache_size  # process-wide: the last compile's setting holds
    kernel_cache.configure(opts.kernel_cache)  # process-wide: the first folder holds
    if has_dtensor(example_inputs):
        reason = _global_view_choice(opts, example_inputs) or global_view_reason(gm, example_inputs)
        if reason is None:
            try:
                return compile_global_view(gm, example_inputs, opts, compile_aten_graph)
            except NotGlobalView as e:
                reason = str(e)
        log.warning("nvfuser_dtensor: DTensor graph takes the local path (per-rank fusions, collectives run "
                    "by PyTorch): %s", reason)

    channels_last.plain_global_avg_pools(gm)
    rewrite = None
    # DTensor graphs on the local path keep their layouts: their shards' strides are the mesh's
    why_nhwc = ("DTensor inputs" if opts.channels_last is not False and has_dtensor(example_inputs)
                else channels_last.refusal(gm, opts.channels_last, channels_last.is_inference(gm, example_inputs)))
    if why_nhwc is None:
        rewrite = channels_last.to_channels_last(gm)
        log.info("nvfuser_dtensor: %d convolution(s) take channels-last inputs", rewrite.convs)
    elif why_nhwc == channels_last.OFF_ON_CUDA and opts.channels_last is True:  # asked for, not the default
        log.warning("nvfuser_dtensor: options channels_last=%r ignored, convolutions keep their layout: %s",
                    opts.channels_last, why_nhwc)
    elif opts.channels_last is not False:
        log.info("nvfuser_dtensor: convolutions keep their layout: %s", why_nhwc)
    try:
        return _compile_through_aot(gm, example_inputs, opts)
    except Exception as e:
        if rewrite is None:
            raise
        # Note [Channels-last convolutions]: code that assumed NCHW memory fails the trace.
        log.warning("nvfuser_dtensor: convolutions keep their layout: tracing with channels-last inputs "
                    "failed (%s: %s)", type(e).__name__, _first_line(e))
        rewrite.undo()
        return _compile_through_aot(gm, example_inputs, opts)


def _compile_through_aot(gm: fx.GraphModule, example_inputs, opts: Options) -> Callable:
    """AOTAutograd's forward, backward and inference graphs, each partitioned into regions
    (and replayed as CUDA graphs where ``opts.cuda_graphs`` captures them)."""
    why_not = cuda_graphs.refusal(opts.cuda_graphs, example_inputs)
    graphs = (None if why_not is not None else
              CudaGraphs(len(example_inputs), asked=opts.cuda_graphs is True, trees=opts.cuda_graphs == "trees"))
    if why_not is not None and opts.cuda_graphs is not False and _any_on_cuda(example_inputs):
        log.info("nvfuser_dtensor: this dynamo graph runs without CUDA graphs: %s", why_not)
        cuda_graphs.note_uncaptured(why_not)

    dtensor = has_dtensor(example_inputs)

    def compiler(kind):
        def compile_fn(g, inputs):
            if _any_on_cuda(inputs):
                try:
                    copy_constants_once(g)  # Note [CPU constants copied to the GPU]
                except Exception as e:  # noqa: BLE001 - an optimization: the graph stays right without it
                    log.warning("nvfuser_dtensor: CPU constants stay on the CPU (%s: %s)", type(e).__name__, e)
            wrap = graphs.plan(kind, g, inputs) if graphs is not None else None  # before partition() rewrites g
            compiled = compile_aten_graph(g, inputs, opts, kind, random_ops=not dtensor)
            return wrap(compiled) if wrap is not None else compiled

        return compile_fn

    backend = aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        decompositions=decomposition_table(),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
    )
    return backend(gm, example_inputs)
