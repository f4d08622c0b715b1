"""``options.cuda_graphs``: the compiled forward and backward replayed as CUDA graphs.

Which graphs are captured is decided here (``refusal``, ``skip_reason``); how, by
the backend's own runner (cuda_graph_runner.py, Note [CUDA graphs of our own]), the
default, or with ``cuda_graphs="trees"`` by PyTorch's cudagraph trees, as below.

Note [CUDA graphs through cudagraph trees]
Most of a compiled step's time on the GPU is host time (dynamo guards, AOTAutograd's
wrappers, one Python call and one nvFuser ``execute`` per region); a CUDA graph replays all
the kernels of a graph with one launch. With ``cuda_graphs="trees"`` (the default until
2026-12-04, now replaced by our own runner) the backend hands its compiled graphs to
PyTorch's cudagraph trees (``torch._inductor.cudagraph_trees``,
the machinery of inductor's ``mode="reduce-overhead"`` and of dynamo's ``"cudagraphs"``
backend), which already does what a production capture needs:
- a warm-up run before recording (nvFuser compiles its kernels on a region's first call);
- parameters and buffers used in place (static inputs: AOTAutograd's
  ``static_input_indices`` in the forward, the saved values in the backward), other inputs
  copied into the graph's buffers;
- forward and backward recorded into one memory pool, a new graph per new input layout;
- while an output of a replay is alive, the next call in the same step replays or records
  another graph instead of overwriting it.
Where the trees stop short, the backend adds one thing. A new step (any new call of the
compiled function once pending backwards ran, or ``cudagraph_mark_step_begin()``) lets a
replay write over the outputs of the last step, and the trees flag that only for outputs
of a warm-up or recording: an output of a replay kept across steps (a loss appended to a
list, logits kept for a metric, a gradient stolen into ``param.grad`` and accumulated into
by the next step) silently changed value on the H200. So every output that reaches the
user is copied out of the graph's memory after the replay (``copying_out``): the forward's
user outputs (AOTAutograd's ``num_forward_returns``; the activations saved for the backward
stay in the pool, the backward is their only reader), every output of an inference graph
and every gradient of a backward graph. That costs one device copy of those outputs per
step (measured in benchmarks/results/h200_models, ``nvfuser_dtensor`` against
``inductor:reduce-overhead``, which does not copy); in exchange, no value a user holds ever
changes under them, and the graph's outputs are dead at once, so the trees replay the same
graph on every call instead of recording a second one for a live output.
- random ops draw new numbers on every replay: PyTorch's CUDA generator registers its
  philox seed and offset with the captured graph, and nvFuser's kernels read them through
  the generator's device pointers (Note [Random numbers drawn by nvFuser]).
A graph that cannot be captured runs as it is, with one log line saying why: inputs or nodes
on the CPU (the CPU evaluator), input mutations, ops that sync with the host, symbolic shapes
(``dynamic=True``).

``"auto"`` (the default) captures dynamo graphs whose tensor inputs are all on CUDA with
static shapes, and no DTensor (the global view and the DTensor local path run uncaptured:
collectives inside a captured graph are left for a later change), that launch at least
``least_launches(kind)`` kernels per call (three, for an inference graph as for a
forward/backward pair). ``True`` asks for capture of any graph (those that cannot
be captured say why at WARNING; under ``"auto"`` at INFO), ``False`` turns it off,
``"trees"`` captures what ``"auto"`` does through cudagraph trees.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

import torch
from torch import fx

from .cpu_constants import copies_from_cpu
from .fx_nodes import is_random_op
from .options import env_flag
from .cuda_graph_runner import CudaCapture, GraphRunner, is_graph_error, marking_graph_errors, note_uncaptured

log = logging.getLogger("nvfuser_dtensor_backend")


def _symbolic(inputs) -> bool:
    return any(isinstance(s, torch.SymInt) for a in inputs if isinstance(a, torch.Tensor) for s in a.shape)


def cpu_nodes_reason(gm: fx.GraphModule) -> str | None:
    """Why the CPU values of ``gm`` (a graph whose inputs are all on the GPU) keep it from our
    runner, or None. A CPU value that comes from constants and factories alone (T5's and BART's
    lifted ``_tensor_constant0``, a position bucket computed on the CPU) is the same on every
    call: the recording computes it once and the replays need nothing from it, as long as GPU
    ops read it as a scalar argument. One copied to the GPU (PyTorch refuses copies from
    pageable memory under capture), one read from the GPU (a host sync), an input on the CPU,
    or a random op on the CPU (it would be drawn once) is not."""
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        if val.device.type != "cpu":
            if any(copies_from_cpu(n, a) for a in n.all_input_nodes):
                return f"a copy from the CPU to the GPU ({n.name})"
            continue
        if n.op == "placeholder":
            return f"an input on the CPU ({n.name})"
        target = n.target
        if is_random_op(target):
            return f"a random op on the CPU ({n.name})"
        for a in n.all_input_nodes:
            av = a.meta.get("val")
            if isinstance(av, torch.Tensor) and av.device.type not in ("cpu", "meta"):
                return f"a value copied from the GPU to the CPU ({n.name})"
    return None


def skip_reason(gm: fx.GraphModule, inputs, static: list[int], cpu_constants: bool = False) -> str | None:
    """Why the aten graph ``gm`` cannot be captured, or None. ``static``: the indices of the
    inputs used in place (parameters, buffers, saved values), which may be mutated.
    ``cpu_constants``: CPU values made from constants alone are allowed (``cpu_nodes_reason``;
    our runner; cudagraph trees refuse any CPU value)."""
    if _symbolic(inputs):
        return "symbolic shapes (dynamic=True)"
    from torch._dynamo import config as dynamo_config
    from torch._dynamo.backends.cudagraphs import check_for_skip, find_input_mutations, get_device_node_mapping
    from torch._inductor.cudagraph_utils import (check_multiple_devices_or_any_cpu_nodes, get_mutation_stack_trace,
                                                 get_placeholder_info)
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    try:
        mutated = find_input_mutations(gm.graph) - set(static)
        if mutated:
            return get_mutation_stack_trace(get_placeholder_info(gm.graph), mutated)
        if cpu_constants:
            why = cpu_nodes_reason(gm)
            if why is None:
                devices = get_device_node_mapping(gm)
                devices.pop(torch.device("cpu"), None)
                why = check_multiple_devices_or_any_cpu_nodes(devices)
            if why is None and (node := get_first_incompatible_cudagraph_node(gm)) is not None:
                why = f"incompatible op ({node.name})"
        else:
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
    the generated code of AOTAutograd's boxed functions does). An exception of the graph
    itself is marked, so that ``_falling_back`` lets it through."""

    marked = marking_graph_errors(compiled)

    def run(args: list) -> Any:
        mine = list(args)
        args.clear()
        return marked(mine)

    run._boxed_call = True
    return run


def copying_out(replay: Callable, escaping: int | None) -> Callable:
    """``replay`` (boxed) with its first ``escaping`` outputs (None: all) copied out of the
    graph's memory (see the Note)."""
    def run(args: list) -> Any:
        outs = list(replay(args))
        for i, o in enumerate(outs[:escaping] if escaping is not None else outs):
            if isinstance(o, torch.Tensor):
                outs[i] = o.clone()
        return outs

    run._boxed_call = True
    return run


# A replay costs about what it saves on a graph of one or two kernels: the input copies, the
# graph launch and the output copies (tiny bias+gelu, scripts/gpu_call_overhead.py: 83 us per
# call replayed, 53 us launched as it is on the H200; 51 and 44 us on an H100 in session 36).
# From three launches on, capture. A training pair (a forward and its backward) of fewer
# launches gains more (session 36, H100: the tiny bias+gelu's forward and backward 563 -> 351
# us per call; GPT-2's step, whose loss graphs hold one region each, 7.36 -> 6.79 ms alone,
# reduce-overhead 7.68), but loses where such a graph runs several times per step: BART's
# layer graphs (LayerDrop's graph breaks), whose backward then recorded 16 graphs, none free
# for later steps, and ran uncaptured (step 18.44 -> 19.95 ms, reduce-overhead 18.08). So
# training pairs need three launches too, unless NVFUSER_DTENSOR_MIN_TRAINING_LAUNCHES says
# otherwise (1: GPT-2's gain); NVFUSER_DTENSOR_MIN_LAUNCHES for inference graphs (A/B runs).
# Session 38 (H100, BART's layer chains fixed): 1 with NVFUSER_DTENSOR_LAYER_CHAINS=1 kept
# BART's backwards from filling, but neither model gained any more (GPT-2 6.85 -> 6.81 ms,
# BART 19.95 -> 19.91) and BART reserved 1.6 GB more: three launches stay the rule.
MIN_LAUNCHES = {"inference": int(os.environ.get("NVFUSER_DTENSOR_MIN_LAUNCHES", 3)),
                "training": int(os.environ.get("NVFUSER_DTENSOR_MIN_TRAINING_LAUNCHES", 3))}


def _launches(report) -> int | None:
    """Kernel launches per call of a compiled graph, from its report (None: unknown): one per
    nvFuser region, per op left to PyTorch, per piece compiled by inductor."""
    if report is None:
        return None
    return len(report.regions) + sum(report.partition.unsupported.values()) + len(report.inductor_parts)


def least_launches(kind: str) -> int:
    """The fewest kernel launches per call for which a compiled ``kind`` graph is captured."""
    return MIN_LAUNCHES["inference" if kind == "inference" else "training"]


def too_few_launches(report, kind: str = "inference") -> str | None:
    """Why a compiled ``kind`` graph with this report gains nothing from a replay (fewer
    kernel launches per call than ``least_launches(kind)``), or None."""
    launches = _launches(report)
    if launches is not None and launches < least_launches(kind):
        return f"{launches} kernel launch(es) per call, too few for a replay to gain"
    return None


def _escaping_outputs(kind: str) -> int | None:
    """How many leading outputs of a compiled ``kind`` graph reach the user (None: all). A
    forward graph returns mutated inputs, the user's outputs and intermediate bases first,
    then what it saves for the backward (AOTAutograd's ``num_forward_returns``)."""
    if kind != "forward":
        return None
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    return getattr(meta, "num_forward_returns", None)


class CudaGraphs:
    """Wraps the compiled forward/backward/inference functions of one dynamo graph.

    The forward decides for the pair: if it runs uncaptured, so does its backward (as in
    dynamo's ``"cudagraphs"`` backend).
    """

    def __init__(self, num_dynamo_inputs: int, asked: bool = True, trees: bool = False):
        self.num_dynamo_inputs = num_dynamo_inputs
        self.asked = asked  # options.cuda_graphs=True: every graph that can be, however small
        self.log_level = logging.WARNING if asked else logging.INFO
        self.trees = trees  # options.cuda_graphs="trees": through cudagraph trees, not our runner
        self.captured = True
        self.failed: str | None = None  # why capture failed (_falling_back, _fail)
        self.device_index: int | None = None
        self._capture = None  # our runner's Capture, one memory pool for forward and backward

    def _fail(self, why: str) -> None:
        """Our runner's capture failed: this graph and its partner run uncaptured from now on."""
        if self.failed is None:
            self.failed = why
            note_uncaptured(f"capture failed: {why}")
            log.warning("nvfuser_dtensor: CUDA graphs are off for this compiled graph from now on: %s; "
                        "it runs as it is", why)

    def runner(self, kind: str, compiled: Callable, static: list[int], escaping: int | None) -> Callable:
        if self._capture is None:
            device = self.device_index or 0
            if SHARED_POOL:  # A/B switch: one pool (and ledger) for every compiled graph of a device
                self._capture = _SHARED.get((capture_class, device))
                if self._capture is None:
                    self._capture = _SHARED[(capture_class, device)] = capture_class(device)
            else:
                self._capture = capture_class(device)
        return GraphRunner(kind, compiled, static, escaping, self._capture, self._fail,
                           lambda: self.failed is not None)

    def _device_index(self, gm: fx.GraphModule) -> int:
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor) and val.device.type == "cuda":
                return val.device.index or 0
        return torch.cuda.current_device() if torch.cuda.is_available() else 0

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
        why = skip_reason(gm, inputs, static, cpu_constants=not self.trees)
        if why is not None:
            log.log(self.log_level, "nvfuser_dtensor: the %s graph runs without CUDA graphs: %s", kind, why)
            note_uncaptured(f"{kind}: {why}")
            if kind != "backward":
                self.captured = False
                return lambda compiled: compiled
            return self._uncaptured_backward if self.trees else (lambda compiled: compiled)
        self.device_index = self._device_index(gm)
        escaping = _escaping_outputs(kind)
        if not self.trees:
            def ours(compiled: Callable) -> Callable:
                few = None if self.asked else too_few_launches(getattr(compiled, "report", None), kind)
                if few is not None:
                    log.info("nvfuser_dtensor: the %s graph runs without CUDA graphs: %s", kind, few)
                    note_uncaptured(f"{kind}: fewer than {least_launches(kind)} kernel launches")
                    if kind == "forward":  # Note [Backwards of uncaptured forwards]
                        self.captured = False
                    return compiled
                log.info("nvfuser_dtensor: the %s graph replays as a CUDA graph (%d static inputs of %d)",
                         kind, len(static), len(inputs))
                return self.runner(kind, compiled, static, escaping)

            return ours
        recorded = dict(stack_traces=get_stack_traces(gm), placeholders=get_placeholder_info(gm.graph),
                        mutated_input_idxs=find_input_mutations(gm.graph))

        def wrap(compiled: Callable) -> Callable:
            from torch._inductor.cudagraph_trees import cudagraphify_impl

            out = cudagraphify_impl(consuming(compiled), inputs, static, device_index=self.device_index,
                                    is_backward=kind == "backward", is_inference=kind == "inference", **recorded)
            out = self._falling_back(kind, copying_out(out, escaping), compiled)
            log.info("nvfuser_dtensor: the %s graph replays as a CUDA graph (%d static inputs of %d)",
                     kind, len(static), len(inputs))
            return out

        return wrap

    def _uncaptured_backward(self, compiled: Callable) -> Callable:
        """The backward of a captured forward, run as it is: the tree manager is told, or it
        would wait for that backward before it starts a new generation (as dynamo's
        "cudagraphs" backend and inductor do)."""
        from torch._inductor.cudagraph_trees import get_manager

        def run(args: list) -> Any:
            manager = get_manager(self.device_index or 0, create_if_none_exists=False)
            if manager is not None:
                manager.set_to_running_backward()
            return compiled(args)

        run._boxed_call = True
        return run

    def _falling_back(self, kind: str, replay: Callable, compiled: Callable) -> Callable:
        """``replay`` until the cudagraph trees raise on it (in a warm-up, a recording or a
        replay); from then on this graph and its forward or backward run as they are, after
        one warning. The failed call is rerun as it is on the same inputs: an error of the
        computation itself raises again there. (Seen on the H200: ConvNeXt's first backward
        warm-up stopped at the trees' check that its outputs lie in the graph's memory pool.)
        An exception raised by the graph itself (marked by ``consuming``) propagates as it
        would without capture."""
        plain = self._uncaptured_backward(compiled) if kind == "backward" else compiled

        def run(args: list) -> Any:
            if self.failed is not None:
                return plain(args)
            kept = list(args)  # the trees empty ``args`` as they go
            try:
                return replay(args)
            except Exception as e:  # noqa: BLE001 - any failure of the capture machinery
                if is_graph_error(e):
                    raise  # the graph's own (an error, a warning turned into one): as without capture
                from .region import _first_line

                self.failed = f"{type(e).__name__}: {_first_line(e)[:300]}"
                note_uncaptured(f"capture failed: {self.failed}")
                log.warning("nvfuser_dtensor: CUDA graphs are off for this compiled graph from now on: its %s "
                            "raised in the cudagraph trees (%s); it runs as it is", kind, self.failed)
                return plain(kept)

        run._boxed_call = True
        return run


capture_class: Callable[[int], Any] = CudaCapture  # tests on the CPU put a replay-by-rerun capture here

# A/B switch (not a user setting; read at import), for goal 5 of issue 13 (memory):
# ``NVFUSER_DTENSOR_SHARED_POOL=1`` gives every compiled graph of a device one memory pool and
# one Ledger (Note [Memory a replay writes]) instead of a pool per forward/backward pair, as
# cudagraph trees do. A model cut into many graphs (BART's 16 on the H200, 39 recordings and
# 13.1 GB reserved against reduce-overhead's 3.5 GB) then reuses one graph's temporaries in
# the next. The ledger's rule is the same for recordings of other graphs: a replay waits for
# any later recording's outputs at risk to die. Not yet measured on the H200.
SHARED_POOL = env_flag("NVFUSER_DTENSOR_SHARED_POOL")
_SHARED: dict[tuple, Any] = {}  # (capture class, device index) -> the shared capture


def refusal(option: Any, example_inputs) -> str | None:
    """Why ``options.cuda_graphs`` does not ask for capture of this dynamo graph (see the
    Note), or None when it does."""
    if option is False:
        return "options.cuda_graphs=False"
    if option is True:
        return None
    from torch.distributed.tensor import DTensor

    tensors = [a for a in example_inputs if isinstance(a, torch.Tensor)]
    if not tensors:
        return "no tensor inputs"
    if any(isinstance(t, DTensor) for t in tensors):
        return "DTensor inputs"
    if not all(t.is_cuda for t in tensors):
        cpu = [i for i, a in enumerate(example_inputs) if isinstance(a, torch.Tensor) and not a.is_cuda]
        return f"inputs not on CUDA (dynamo graph inputs {cpu[:6]})"
    if _symbolic(example_inputs):
        return "symbolic shapes (dynamic=True)"
    return None
