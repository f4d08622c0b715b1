"""``options.cuda_graphs`` for the global view: its local graphs replayed as CUDA graphs.

Note [CUDA graphs of local graphs]
A global-view graph that runs on local tensors (Note [Local execution of the global view])
is plain code once it is lowered: local tensors in, local tensors out, nvFuser's
``execute`` for each region and aten ops between them. On one GPU the TP cases were all
host-bound (H100, large, bf16: tp_attention's forward launched 0.165 ms of kernels in
0.37-0.54 ms per call, benchmarks/results/h100_session24), and the DTensor graphs ran
without CUDA graphs ("DTensor inputs"). So each :class:`LocalGraph` is replayed by the
backend's own runner (cuda_graph_runner.py, Note [CUDA graphs of our own]) with the same
rules as an AOTAutograd graph:
- the forward's and the inference's inputs used in place are the dynamo graph's
  parameters and buffers (``get_static_address_type``: dynamo marks them), whose local
  tensors keep their memory across optimizer steps; the backward's are the values its
  forward saved. Other inputs are copied into the recording's buffers, except an inference
  graph's that stay at their address (Note [Inputs of the global view read in place]);
- the forward's first ``n_out`` outputs reach the user (lent or copied out), the rest are
  saved for the backward and watched; a backward's gradients are watched, so that
  ``AccumulateGrad`` takes them;
- forward and backward share one memory pool, and one failure turns capture off for both.
  A backward lowered again for gradients placed otherwise (:class:`BackwardByGradPlacements`)
  gets a runner of its own in that pool.
``"auto"`` captures where nothing in the graph needs the host between kernels:
- every local input on CUDA, one device in the mesh: on several devices the graphs hold
  collectives (functional collectives between regions, nvFuser's communication inside
  them) whose capture is not yet tried, so they run uncaptured;
- no random op between regions: those run through DTensor, whose RNG tracker reads and
  sets the generator's state on the host on every call;
- the graph passes ``cuda_graphs.skip_reason`` (no input mutation, no CPU value, no op
  that syncs) and launches at least ``MIN_LAUNCHES`` kernels.
Otherwise one log line says why, as for other graphs. The local path (DTensor graphs
through AOTAutograd's desugaring) stays uncaptured.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import torch
from torch.distributed.tensor import DTensor

from .. import cuda_graphs
from ..cuda_graph_runner import note_uncaptured
from .dtensor_region import _local
from .local_execution import BackwardByGradPlacements, LocalGraph

log = logging.getLogger("nvfuser_dtensor_backend")


def _static_inputs(example_inputs) -> list[int]:
    """The dynamo graph's inputs used in place: its parameters and buffers."""
    from torch._dynamo.utils import get_static_address_type

    return [i for i, a in enumerate(example_inputs)
            if isinstance(a, torch.Tensor) and (isinstance(a, torch.nn.Parameter) or get_static_address_type(a) is not None)]


def refusal(option, example_inputs, runs: list) -> str | None:
    """Why the local graphs ``runs`` of this dynamo graph are not captured, or None."""
    if option is False:
        return "options.cuda_graphs=False"
    meshes = {a.device_mesh for a in example_inputs if isinstance(a, DTensor)}
    devices = max((m.size() for m in meshes), default=1)
    if devices > 1:
        return (f"a device mesh of {devices} devices: capture of the collectives of a global-view graph "
                "is not supported yet")
    if option is not True and not all(_local(a).is_cuda for a in example_inputs if isinstance(a, torch.Tensor)):
        return "inputs not on CUDA"
    random_ops = sorted({name for r in runs for name in r.random_ops})
    if random_ops:
        return f"random ops through DTensor between regions ({', '.join(random_ops)})"
    return None


def capture(runs: list, reports: list, example_inputs, option, n_out: int) -> None:
    """Replay the local graphs ``runs`` (the inference graph, or the forward and its
    :class:`BackwardByGradPlacements`) as CUDA graphs where they can be (see the Note);
    ``reports``: the partitioned graphs' reports, for their kernel launches."""
    kinds = ["inference"] if len(runs) == 1 else ["forward", "backward"]
    params = _static_inputs(example_inputs)
    statics = [params if kind != "backward" else list(range(len(run.saved))) for kind, run in zip(kinds, runs)]
    why = refusal(option, example_inputs, runs)
    for run, static in zip(runs, statics):
        graph = run.first if isinstance(run, BackwardByGradPlacements) else run
        why = why or cuda_graphs.skip_reason(graph.gm, graph.in_locals, static, cpu_constants=True)
    if why is None and option is not True:
        why = cuda_graphs.too_few_launches(reports[0])
    cuda = [_local(a) for a in example_inputs if isinstance(a, torch.Tensor) and _local(a).is_cuda]
    if why is not None:
        if option is True or (option is not False and cuda):  # asked for, or CUDA graphs of CUDA inputs
            log.log(logging.WARNING if option is True else logging.INFO,
                    "nvfuser_dtensor: the global view's %s graph runs without CUDA graphs: %s", kinds[0], why)
            note_uncaptured(f"global view: {why}")
        return
    graphs = cuda_graphs.CudaGraphs(len(example_inputs), asked=option is True)
    graphs.device_index = (cuda[0].device.index or 0) if cuda else 0
    for kind, run, static in zip(kinds, runs, statics):
        wrap = _wrapper(graphs, kind, static, n_out if kind == "forward" else None)
        if isinstance(run, BackwardByGradPlacements):
            for graph in run.graphs.values():
                wrap(graph)
            run.on_lower = wrap  # a backward lowered for other gradient placements, later
        else:
            wrap(run)
        log.info("nvfuser_dtensor: the global view's %s graph replays as a CUDA graph", kind)


# Note [Inputs of the global view read in place]
# An inference graph's inputs that are not parameters (the activations a TP block is called
# with) are read where they lie when their address repeats (the rule of Note [Tangents read
# in place]: keyed by address, at two addresses at most, then copied), instead of being copied
# into the recording's buffers on every replay. On one H100 (bf16, large TP forwards, each arm
# in its own process against inductor, benchmarks/results/h100_session26) that took the TP
# MLP from 0.97x to 1.01x inductor, the SP block from 1.05x to 1.07x and TP attention from
# 1.32x to 1.43x. A training forward's inputs stay copied (not measured);
# ``NVFUSER_DTENSOR_INPUTS_IN_PLACE=1`` reads those in place too, ``=0`` neither (read at import).
_INPUTS_ENV = os.environ.get("NVFUSER_DTENSOR_INPUTS_IN_PLACE")
INPUTS_IN_PLACE: frozenset[str] = (frozenset({"inference"}) if _INPUTS_ENV is None
                                   else frozenset({"inference", "forward"}) if _INPUTS_ENV not in ("", "0")
                                   else frozenset())


def _wrapper(graphs: "cuda_graphs.CudaGraphs", kind: str, static: list[int],
             escaping: int | None) -> Callable[[LocalGraph], None]:
    def wrap(graph: LocalGraph) -> None:
        graph.run = graphs.runner(kind, graph.run, static, escaping)
        graph.run.inputs_in_place = kind in INPUTS_IN_PLACE  # Note [Inputs of the global view read in place]

    return wrap
