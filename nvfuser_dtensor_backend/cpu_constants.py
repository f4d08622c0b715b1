"""CPU constants that a graph copies to the GPU, copied once at compile time.

Note [CPU constants copied to the GPU]
Model code makes small tensors on the CPU and moves them to the GPU inside the step: BART's
``shift_tokens_right`` writes its start token from a lifted ``_tensor_constant0``, T5's
relative-position code does the same. Each call then copies host memory to the device, and
a CUDA graph cannot hold such a copy: PyTorch refuses copies from pageable memory while
capturing, so these graphs ran uncaptured (H200: "a copy from the CPU to the GPU (copy_1)").
Such a value depends on the graph's constants alone (``get_attr`` and deterministic ops on
the CPU, no input), so it is the same on every call: it is computed once here, moved to
the GPU, and the copy reads that GPU tensor (a new ``get_attr``). The copy itself stays, so
the graph's output is still a fresh tensor. Values that depend on an input or on a random
op are left alone (and keep the graph uncaptured, cuda_graphs.cpu_nodes_reason).
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .fx_nodes import is_random_op, rewritten
from .fx_nodes import val as _val

log = logging.getLogger("nvfuser_dtensor_backend")


def _on_cpu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


def copies_from_cpu(node: fx.Node, arg: fx.Node) -> bool:
    """Whether ``node`` (a value on the GPU) reads its input ``arg``, a CPU tensor, from host
    memory: a copy of it, or a CPU tensor of more than one element. A CPU scalar that a GPU op
    reads is a kernel argument and needs no copy. PyTorch refuses copies from pageable memory
    while a CUDA graph is captured."""
    v = _val(arg)
    if not _on_cpu(v):
        return False
    name = getattr(node.target, "__name__", str(node.target))
    return v.dim() > 0 or "copy" in name or "device_put" in name


class _Constants:
    """Real values of the graph's CPU nodes that depend on its constants alone."""

    def __init__(self, gm: fx.GraphModule):
        self.gm, self.values = gm, {}

    def value(self, node: fx.Node):
        if node not in self.values:
            self.values[node] = self._compute(node)
        return self.values[node]

    def _compute(self, node: fx.Node):
        if not _on_cpu(_val(node)):
            return None
        if node.op == "get_attr":
            try:
                real = functools.reduce(getattr, node.target.split("."), self.gm)
            except AttributeError:
                return None
            return real if _on_cpu(real) and not isinstance(real, torch._subclasses.FakeTensor) else None
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or is_random_op(target):
            return None
        inputs = {a: self.value(a) for a in node.all_input_nodes}
        if any(v is None for v in inputs.values()):
            return None
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: inputs[a])
        out = target(*args, **kwargs)
        return out if _on_cpu(out) else None


def copy_constants_once(gm: fx.GraphModule) -> int:
    """Moves the CPU constants that ``gm`` copies to the GPU there once (Note [CPU constants
    copied to the GPU]); returns how many."""
    graph, moved = gm.graph, 0
    constants, made = _Constants(gm), {}
    for node in list(graph.nodes):
        out = _val(node)
        if not isinstance(out, torch.Tensor) or out.device.type == "cpu" or node.op != "call_function":
            continue
        for a in node.all_input_nodes:
            if not copies_from_cpu(node, a):
                continue
            fake_mode = detect_fake_mode([out])
            with unset_fake_temporarily():
                real = constants.value(a)
                if real is None:
                    continue
                key = (a, out.device)
                if key not in made:
                    on_device = real.to(out.device)
                    name = f"_nvfuser_constant_{sum(k.startswith('_nvfuser_constant_') for k in gm._buffers)}"
                    gm.register_buffer(name, on_device, persistent=False)
                    with graph.inserting_before(node):
                        const = graph.get_attr(name)
                    const.meta["val"] = fake_mode.from_tensor(on_device) if fake_mode is not None else on_device
                    made[key] = const
            node.replace_input_with(a, made[key])
            moved += 1
    if moved:
        rewritten(gm)
        log.info("nvfuser_dtensor: %d CPU constant(s) copied to the GPU once, at compile time "
                 "(Note [CPU constants copied to the GPU])", moved)
    return moved
