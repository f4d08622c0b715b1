"""Note [CPU constants copied to the GPU] (cpu_constants.py), with the meta device standing in
for the GPU on a machine without one."""

import torch
from torch import fx

from nvfuser_dtensor_backend.cpu_constants import copy_constants_once

aten = torch.ops.aten


def _graph(copy_from_input=False):
    """out = x + copy(empty_like(x)[0], lift_fresh_copy(_tensor_constant0) * 2), x on "the GPU"."""
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    const = g.get_attr("_tensor_constant0")
    lifted = g.call_function(aten.lift_fresh_copy.default, (y if copy_from_input else const,))
    doubled = g.call_function(aten.mul.Tensor, (lifted, 2))
    dst = g.call_function(aten.empty.memory_format, ([3],), {"device": torch.device("meta")})
    copied = g.call_function(aten.copy.default, (dst, doubled))
    g.output(g.call_function(aten.add.Tensor, (x, copied)))
    vals = [torch.empty(3, device="meta"), torch.tensor(5.0), torch.tensor(7.0), torch.tensor(7.0),
            torch.tensor(14.0), torch.empty(3, device="meta"), torch.empty(3, device="meta"),
            torch.empty(3, device="meta")]
    for node, val in zip([n for n in g.nodes if n.op != "output"], vals):
        node.meta["val"] = val
    return fx.GraphModule({"_tensor_constant0": torch.tensor(7.0)}, g)


def test_a_constant_copied_to_the_gpu_is_copied_once_at_compile_time():
    from nvfuser_dtensor_backend.cpu_constants import _Constants

    gm = _graph()
    (doubled,) = [n for n in gm.graph.nodes if n.target is aten.mul.Tensor]
    assert _Constants(gm).value(doubled).item() == 14.0  # the value the GPU tensor gets
    assert copy_constants_once(gm) == 1
    (copy,) = [n for n in gm.graph.nodes if n.target is aten.copy.default]
    src = copy.args[1]
    assert src.op == "get_attr" and getattr(gm, src.target).device.type == "meta"
    assert not [n for n in gm.graph.nodes if n.target is aten.mul.Tensor]  # the CPU work is gone


def test_a_value_from_an_input_is_left_alone():
    gm = _graph(copy_from_input=True)
    assert copy_constants_once(gm) == 0


def test_two_constants_get_two_gpu_tensors():
    g = fx.Graph()
    x = g.placeholder("x")
    outs = []
    for name in ("_tensor_constant0", "_tensor_constant1"):
        const = g.get_attr(name)
        outs.append(g.call_function(aten._to_copy.default, (const,), {"device": torch.device("meta")}))
    g.output(g.call_function(aten.add.Tensor, (g.call_function(aten.add.Tensor, (x, outs[0])), outs[1])))
    values = {"_tensor_constant0": torch.tensor([1.0, 2.0]), "_tensor_constant1": torch.tensor([3.0, 4.0])}
    for node in g.nodes:
        if node.op == "get_attr":
            node.meta["val"] = values[node.target]
        elif node.op != "output":
            node.meta["val"] = torch.empty(2, device="meta")
    gm = fx.GraphModule(values, g)
    assert copy_constants_once(gm) == 2
    sources = [n.args[0].target for n in gm.graph.nodes if n.target is aten._to_copy.default]
    assert len(set(sources)) == 2 and all(getattr(gm, s).device.type == "meta" for s in sources)
