"""``options.channels_last``: 2-d convolutions take channels-last (NHWC) inputs.

Note [Channels-last convolutions]
cuDNN's fast bf16/fp16 convolutions work in NHWC. Given NCHW tensors it transposes the input
to NHWC and the output back, one or two extra kernels per convolution and per pass; on the
H200, ResNet-18's inference step launched 163 kernels against inductor's 70
(benchmarks/results/h200_models_session11), and inductor avoids them with its layout choice
(``GraphLowering.decide_layout_opt``).

The rewrite is done on the dynamo graph, before AOTAutograd: the input of every ``conv2d`` is
wrapped in ``.contiguous(memory_format=torch.channels_last)``. AOTAutograd then traces the
forward and the backward with those layouts, so both graphs agree on every saved value's
strides without any bookkeeping of ours:
- the first convolution's input (the image) gets one copy to NHWC; every later convolution's
  input is already NHWC, because cuDNN returns NHWC outputs for NHWC inputs and pointwise ops
  and reductions (batch norm, ReLU, a residual add) keep the layout, so ``contiguous`` is a
  no-op at trace time and leaves no node;
- our regions are built on those strides (Note [Output layout contract], fusion.py): a region
  between two convolutions reads and writes NHWC, and batch norm's statistics become a
  reduction over the outer axes with the channels innermost;
- weights stay as the user has them (cuDNN converts them, as in eager with an NHWC input);
- a global average pool is ATen's mean without its restride (``plain_global_avg_pools``,
  applied to every graph, channels-last or not).
Whatever reaches the user keeps the layout eager gives it: every tensor output of the dynamo
graph that dynamo recorded as contiguous (or channels-last) is made so again, a no-op unless
its layout changed. That matters beyond looks: the next graph after a graph break was traced,
and is guarded, on those strides.

**Inference graphs only on CUDA** (``refusal``): there batch norm is pointwise, and cuDNN's
transposes were a third of ResNet-18's inference kernels. On one H100 (session 27,
benchmarks/results/h100_session27), ResNet-18's inference step went from 1.27 ms of kernels
in 105 launches to 0.95 ms in 72 (inductor 0.87 ms in 70); ConvNeXt-T's stayed at 2.35 ms
(2.34; its convolutions were NHWC already). As the default, in the zoo (session 28, one H100,
benchmarks/results/h100_session28), kernels per inference step, ours / inductor's: ResNet-18
0.95 / 0.87 ms, ViT-S/16 1.36 / 1.36, ConvNeXt-T 2.34 / 2.40. **Off for training graphs on CUDA**, whatever
the option says: it made no model's training faster on the H200
(ResNet-18's kernels 6.14 ms against 4.00; benchmarks/results/h200_defaults_ab_session15,
h200_models_session15). It was first refused for
EfficientNet-B0's "illegal memory access"; that fault came with or without it, from nvFuser's
out-of-bounds writes in batch norm + SE-mean regions (docs/nvfuser_faults.md item 9, avoided
by Note [No reduction after a batch norm]). Why it is slower, measured on an H100
(benchmarks/results/h100_session21, ResNet-18's training kernels): 6.55 ms against NCHW's
4.25 and inductor's 2.79.
- Copies: 92 of them, 1.14 ms. A [1, C, 1, 1] statistic is both row-major and channels-last
  and counted as row-major in Note [Mixed input layouts with several outputs] (region.py), so
  regions ran on row-major copies of their NHWC inputs. ``NVFUSER_DTENSOR_MIXED_IGNORES_SIZE1=1``
  leaves such statistics out: 52 copies, 0.22 ms, 6.32 ms in all.
- What is left is in the batch norm backward's regions over NHWC data. Their reduction
  kernel takes 1.06 ms for 4 calls, against 0.23 ms in NCHW. Inductor does the same sums in
  two stages (partials of [1, C, 1, 1, 784]) in 0.04 ms.
- The two sums alone, in nvFuser, take 66 us per call in NHWC against 45 in NCHW, and two
  stages make them slower (``scripts/gpu_nhwc_reduction.py``). So the 265 us per call come
  from the rest of those regions' fusions, not from the reduction itself.
- Without channels-last, cuDNN's NCHW/NHWC transposes take 1.23 of the 4.25 ms.
``NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1`` (read at import) turns it on for the GPU checks.

Code that assumed NCHW memory (``x.view(n, -1)`` of a 4-d activation) fails AOTAutograd's
trace; the backend then compiles the graph again without the rewrite, with one warning
(``backend.py``). ``"auto"`` follows inductor's heuristics (CUDA only; no grouped
convolution with more than one input channel per group, no convolution with at least twice
as many input as output channels, not all convolutions with at most 64 channels, static
shapes).
"""

from __future__ import annotations

import logging

import torch
from torch import fx

from .options import env_flag

log = logging.getLogger("nvfuser_dtensor_backend")

ON_CUDA = env_flag("NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA")  # see the Note: training graphs on CUDA too
OFF_ON_CUDA = ("off for training graphs on CUDA: it made no model's training faster on the H200 (Note "
               "[Channels-last convolutions]; NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1 turns it on)")

CONV2D = (torch.conv2d, torch.nn.functional.conv2d)


def _val(node) -> torch.Tensor | None:
    if not isinstance(node, fx.Node):
        return None
    v = node.meta.get("example_value", node.meta.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def conv2d_nodes(gm: fx.GraphModule) -> list[tuple[fx.Node, torch.Tensor | None, torch.Tensor | None]]:
    """(node, input value, weight) of each 2-d convolution of a dynamo graph (inlined
    ``torch.conv2d`` calls and ``nn.Conv2d`` modules)."""
    found = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in CONV2D:
            weight = node.args[1] if len(node.args) > 1 else node.kwargs.get("weight")
            found.append((node, _val(node.args[0]), _val(weight)))
        elif node.op == "call_module":
            module = gm.get_submodule(node.target)
            if isinstance(module, torch.nn.Conv2d):
                found.append((node, _val(node.args[0]), module.weight))
    return found


def _groups(node: fx.Node) -> int:
    if node.op == "call_module":
        return node.graph.owning_module.get_submodule(node.target).groups
    return node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)


def is_inference(gm: fx.GraphModule, example_inputs) -> bool:
    """Whether AOTAutograd makes an inference graph of ``gm``: grad mode is off, or no input
    or parameter requires a gradient (its own test, ``needs_autograd``)."""
    tensors = [*example_inputs, *gm.parameters()]
    return not torch.is_grad_enabled() or not any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def refusal(gm: fx.GraphModule, choice, inference: bool = False) -> str | None:
    """Why the convolutions of ``gm`` keep their layout under ``options.channels_last=choice``,
    or None if they take channels-last inputs (``inference``: ``gm`` makes an inference graph)."""
    if choice is False:
        return "options channels_last=False"
    convs = [c for c in conv2d_nodes(gm) if c[1] is not None and c[1].dim() == 4]
    if not convs:
        return "no batched 2-d convolution"
    if not ON_CUDA and not inference and any(x.device.type == "cuda" for _, x, _ in convs):
        return OFF_ON_CUDA
    if choice is True:
        return None
    if any(x.device.type != "cuda" for _, x, _ in convs):
        return "convolutions not on CUDA"
    if any(isinstance(s, torch.SymInt) for _, x, _ in convs for s in x.shape):
        return "symbolic shapes"
    weights = [(n, w) for n, _, w in convs if w is not None and w.dim() == 4]
    if any(_groups(n) > 1 and w.shape[1] > 1 for n, w in weights):
        return "a grouped convolution with more than one input channel per group"
    if any(2 * w.shape[0] <= w.shape[1] and w.shape[2] > 1 for _, w in weights):
        return "a convolution with at least twice as many input as output channels"
    if weights and all(w.shape[0] <= 64 and w.shape[1] <= 64 for _, w in weights):
        return "every convolution has at most 64 channels"
    return None


class Rewrite:
    """What :func:`to_channels_last` changed in a dynamo graph, to change it back."""

    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.convs = 0
        self.added: list[fx.Node] = []  # .contiguous() calls, taken out again

    def undo(self) -> None:
        for node in reversed(self.added):
            node.replace_all_uses_with(node.args[0])
            self.gm.graph.erase_node(node)
        self.added = []
        self.gm.recompile()


GLOBAL_AVG_POOL = (torch.nn.functional.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d)


def _global_avg_pool(node: fx.Node) -> bool:
    """Whether ``node`` is an ``adaptive_avg_pool2d`` of a 4-d value to 1 x 1."""
    if node.op != "call_function" or node.target not in GLOBAL_AVG_POOL:
        return False
    size = node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size")
    x = _val(node.args[0])
    return x is not None and x.dim() == 4 and size in (1, (1, 1), [1, 1]) and len(node.kwargs) == 0


def _format(v: torch.Tensor):
    if v.is_contiguous():
        return torch.contiguous_format
    if v.dim() == 4 and v.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def plain_global_avg_pools(gm: fx.GraphModule) -> int:
    """Make each global average pool (``adaptive_avg_pool2d`` of a 4-d value to 1 x 1) of the
    dynamo graph ``gm`` the ``mean`` ATen computes for it, without the in-place
    ``as_strided_`` by which ATen gives the result of a channels-last input (ours under
    ``channels_last``, ConvNeXt's after its permutes) channels-last strides, no different in
    memory: the restrided dims have size 1. Functionalized, that restride was an
    ``as_strided`` in the forward and a zero-filled ``as_strided_scatter`` and a copy in the
    backward. Returns how many pools were rewritten; only their size-1 dims' strides differ
    from eager's."""
    count = 0
    for node in gm.graph.nodes:
        if _global_avg_pool(node):
            node.op, node.target = "call_method", "mean"
            node.args, node.kwargs = (node.args[0], [-1, -2]), {"keepdim": True}
            count += 1
    if count:
        gm.recompile()
    return count


def to_channels_last(gm: fx.GraphModule) -> Rewrite:
    """Wrap each batched conv2d's input of the dynamo graph ``gm`` in
    ``.contiguous(memory_format=torch.channels_last)`` and give the graph's tensor outputs back
    the memory format dynamo recorded (Note [Channels-last convolutions])."""
    graph = gm.graph
    rewrite = Rewrite(gm)
    for node, x, _ in conv2d_nodes(gm):
        if x is None or x.dim() != 4:
            continue
        with graph.inserting_before(node):
            cl = graph.call_method("contiguous", (node.args[0],), {"memory_format": torch.channels_last})
        node.replace_input_with(node.args[0], cl)
        rewrite.added.append(cl)
        rewrite.convs += 1
    if not rewrite.convs:
        return rewrite
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    restored: dict[fx.Node, fx.Node] = {}  # an output returned twice stays one tensor

    def restore(arg):
        v = _val(arg)
        fmt = _format(v) if v is not None else None
        if fmt is None:
            return arg
        if arg not in restored:
            with graph.inserting_before(output):
                restored[arg] = graph.call_method("contiguous", (arg,), {"memory_format": fmt})
            rewrite.added.append(restored[arg])
        return restored[arg]

    output.args = fx.node.map_arg(output.args, restore)
    gm.recompile()
    return rewrite
