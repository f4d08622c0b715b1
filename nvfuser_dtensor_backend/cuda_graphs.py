"""``options.cuda_graphs``: the compiled forward and backward replayed as CUDA graphs.

Note [CUDA graphs through cudagraph trees]
Most of a compiled step's time on the GPU is host time (dynamo guards, AOTAutograd's
wrappers, one Python call and one nvFuser ``execute`` per region); a CUDA graph replays all
the kernels of a graph with one launch. Rather than a capture loop of its own, the backend
hands its compiled graphs to PyTorch's cudagraph trees (``torch._inductor.cudagraph_trees``,
the machinery of inductor's ``mode="reduce-overhead"`` and of dynamo's ``"cudagraphs"``
backend), which already does what a production capture needs:
- a warm-up run before recording (nvFuser compiles its kernels on a region's first call);
- parameters and buffers used in place (static inputs: AOTAutograd's
  ``static_input_indices`` in the forward, the saved values in the backward), other inputs
  copied into the graph's buffers;
- forward and backward recorded into one memory pool, a new graph per new input layout;
- an output of a replay is never overwritten while it is alive: the next call in the same
  step replays or records another graph instead (tests/test_cuda_graphs.py). Only
  ``torch.compiler.cudagraph_mark_step_begin()`` (the user saying that earlier outputs are
  no longer needed, as with inductor's reduce-overhead) lets a replay reuse their memory; an
  output kept across that is overwritten without an error in a replay (the H200 showed it:
  cudagraph trees raise "accessing tensor output of CUDAGraphs that has been overwritten"
  only when a warm-up or recording ends), so clone what you keep across steps;
- random ops (dropout stays in PyTorch) draw new numbers on every replay: PyTorch's CUDA
  generator registers its philox seed and offset with the captured graph.
A graph that cannot be captured runs as it is, with one log line saying why: inputs or nodes
on the CPU (the CPU evaluator), input mutations, ops that sync with the host, symbolic shapes
(``dynamic=True``).

``"auto"`` will turn CUDA graphs on for CUDA graphs with static shapes once they are measured
on the H200; until then the option is off unless asked for (``cuda_graphs=True``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch
from torch import fx

log = logging.getLogger("nvfuser_dtensor_backend")

CHOICES = (True, False, "auto")


def _symbolic(inputs) -> bool:
    return any(isinstance(s, torch.SymInt) for a in inputs if isinstance(a, torch.Tensor) for s in a.shape)


def skip_reason(gm: fx.GraphModule, inputs, static: list[int]) -> str | None:
    """Why the aten graph ``gm`` cannot be captured, or None. ``static``: the indices of the
    inputs used in place (parameters, buffers, saved values), which may be mutated."""
    if _symbolic(inputs):
        return "symbolic shapes (dynamic=True)"
    from torch._dynamo import config as dynamo_config
    from torch._dynamo.backends.cudagraphs import check_for_skip, find_input_mutations
    from torch._inductor.cudagraph_utils import get_mutation_stack_trace, get_placeholder_info

    try:
        mutated = find_input_mutations(gm.graph) - set(static)
        if mutated:
            return get_mutation_stack_trace(get_placeholder_info(gm.graph), mutated)
        # CPU nodes, ops that sync; mutations of the static inputs were allowed just above
        # (check_for_skip would take the first ``num_fixed`` inputs as the static ones).
        with dynamo_config.patch(cudagraph_backend_support_input_mutation=True):
            why = check_for_skip(gm, 0)
    except Exception as e:  # pragma: no cover - depends on the torch version
        why = f"the capture check failed: {type(e).__name__}: {e}"
    if why is None and not torch.cuda.is_available():
        why = "CUDA is not available"
    return why


def consuming(compiled: Callable) -> Callable:
    """``compiled`` (a boxed function) as cudagraph trees call it: they hand over their list
    of inputs and assert that the callee emptied it, so the inputs can be freed early (as
    the generated code of AOTAutograd's boxed functions does)."""

    def run(args: list) -> Any:
        mine = list(args)
        args.clear()
        return compiled(mine)

    run._boxed_call = True
    return run


class CudaGraphs:
    """Wraps the compiled forward/backward/inference functions of one dynamo graph.

    The forward decides for the pair: if it runs uncaptured, so does its backward (as in
    dynamo's ``"cudagraphs"`` backend).
    """

    def __init__(self, num_dynamo_inputs: int):
        self.num_dynamo_inputs = num_dynamo_inputs
        self.captured = True
        self.device_index: int | None = None

    def _device_index(self, gm: fx.GraphModule) -> int:
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor) and val.device.type == "cuda":
                return val.device.index or 0
        return torch.cuda.current_device()

    def plan(self, kind: str, gm: fx.GraphModule, inputs: list) -> Callable[[Callable], Callable]:
        """Read what capture needs from the aten graph ``gm`` (before partitioning rewrites
        it); returns the function that wraps its compiled (boxed) function: replayed through
        cudagraph trees, or as it is when the graph cannot be captured (one log line)."""
        from torch._dynamo.backends.cudagraphs import find_input_mutations, get_stack_traces
        from torch._inductor.cudagraph_utils import get_placeholder_info

        if kind == "backward":
            if not self.captured:  # the forward runs as it is: so does its backward
                return lambda compiled: compiled
            from torch._inductor.utils import count_tangents

            static = list(range(count_tangents(gm)))
        else:
            from torch._inductor.compile_fx import get_static_input_idxs
            from torch._inductor.utils import num_fw_fixed_arguments

            static = get_static_input_idxs(num_fw_fixed_arguments(self.num_dynamo_inputs, len(inputs)))
        why = skip_reason(gm, inputs, static)
        if why is not None:
            log.warning("nvfuser_dtensor: the %s graph runs without CUDA graphs: %s", kind, why)
            if kind != "backward":
                self.captured = False
                return lambda compiled: compiled
            return self._uncaptured_backward
        self.device_index = self._device_index(gm)
        recorded = dict(stack_traces=get_stack_traces(gm), placeholders=get_placeholder_info(gm.graph),
                        mutated_input_idxs=find_input_mutations(gm.graph))

        def wrap(compiled: Callable) -> Callable:
            from torch._inductor.cudagraph_trees import cudagraphify_impl

            out = cudagraphify_impl(consuming(compiled), inputs, static, device_index=self.device_index,
                                    is_backward=kind == "backward", is_inference=kind == "inference", **recorded)
            out._boxed_call = True
            log.info("nvfuser_dtensor: the %s graph replays as a CUDA graph (%d static inputs of %d)",
                     kind, len(static), len(inputs))
            return out

        return wrap

    def _uncaptured_backward(self, compiled: Callable) -> Callable:
        """The backward of a captured forward, run as it is: the tree manager is told, or it
        would wait for that backward before it starts a new generation (as dynamo's
        "cudagraphs" backend and inductor do)."""
        from torch._inductor.cudagraph_trees import get_manager

        manager = get_manager(self.device_index or 0, create_if_none_exists=False)
        if manager is None:
            return compiled

        def run(args: list) -> Any:
            manager.set_to_running_backward()
            return compiled(args)

        run._boxed_call = True
        return run


def wants_cuda_graphs(option: Any, example_inputs) -> bool:
    """Whether ``options.cuda_graphs`` asks for capture of this dynamo graph."""
    if option is True:
        return True
    return False  # "auto": see the module docstring
