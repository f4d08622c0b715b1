"""The ``nvfuser_dtensor`` dynamo backend: decompose -> partition -> cached fusions.

``torch.compile(model, backend="nvfuser_dtensor", options={...})`` calls
:func:`nvfuser_dtensor` with the dynamo FX graph. AOTAutograd lowers it to aten (forward and
backward graphs for training), each aten graph is partitioned into nvFuser regions, and each
region becomes a :class:`FusedRegion` that builds and caches its FusionDefinition on the
first call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import fx
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

from ._nvfuser import nvfuser
from .decompositions import decomposition_table
from .options import Options
from .partition import PartitionReport, partition
from .region import FUSION_CACHE, FusedRegion

log = logging.getLogger("nvfuser_dtensor_backend")


@dataclass
class GraphReport:
    """What one compiled aten graph became."""

    kind: str  # "forward", "backward" or "inference"
    partition: PartitionReport
    regions: list[FusedRegion] = field(default_factory=list)

    def summary(self) -> str:
        return f"[{self.kind}] " + self.partition.summary()


_REPORTS: list[GraphReport] = []


def reports() -> list[GraphReport]:
    """Reports of every aten graph compiled in this process, oldest first."""
    return list(_REPORTS)


def clear_reports() -> None:
    _REPORTS.clear()


def _inductor_compile(gm: fx.GraphModule, example_inputs) -> Callable:
    from torch._inductor.compile_fx import compile_fx_inner

    return compile_fx_inner(gm, example_inputs)


def _region_fallback(sub: fx.GraphModule, options: Options) -> Callable | None:
    """What a region runs when nvFuser fails on it: the aten subgraph, or inductor's build."""
    if options.fallback != "inductor":
        return None
    state: dict[str, Any] = {}

    def run(*args):
        fn = state.get("fn")
        if fn is None:
            try:
                fn = _inductor_compile(sub, list(args))
            except Exception as e:  # inductor failing must not break the program
                log.warning("nvfuser_dtensor: inductor could not compile a fallback region (%s); running eagerly", e)
                fn = sub
            state["fn"] = fn
        return fn(*args)

    return run


def compile_aten_graph(gm: fx.GraphModule, example_inputs, options: Options, kind: str) -> Callable:
    """Partition an aten graph and swap each region for a FusedRegion."""
    fused, names, report = partition(gm, options.min_region_size, options.fuse_matmul)
    graph_report = GraphReport(kind=kind, partition=report)
    for name in names:
        sub = getattr(fused, name)
        region = FusedRegion(f"{kind}.{name}", sub, options, _region_fallback(sub, options))
        setattr(fused, name, region)
        graph_report.regions.append(region)
    fused.recompile()
    _REPORTS.append(graph_report)
    log.info("nvfuser_dtensor %s", graph_report.summary())
    if options.fallback == "inductor" and not names:
        return _inductor_compile(gm, example_inputs)
    return make_boxed_func(fused)


def nvfuser_dtensor(gm: fx.GraphModule, example_inputs, options: dict | None = None, **kwargs) -> Callable:
    """The dynamo backend registered as ``"nvfuser_dtensor"``."""
    opts = Options.from_dict(options)
    nvfuser()  # raises NvFuserMissingError with the pip command that fixes it
    FUSION_CACHE.maxsize = opts.cache_size  # process-wide: the last compile's setting holds

    def compiler(kind):
        def compile_fn(g, inputs):
            return compile_aten_graph(g, inputs, opts, kind)

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
