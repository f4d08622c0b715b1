"""The tensor-parallel conversions in a dynamo graph, rewritten for the global view.

Note [Tensor-parallel conversions]
``parallelize_module`` hooks appear in dynamo graphs as closures: ``prim_from_local``
(a local tensor becomes a DTensor with the captured mesh and placements),
``prim_redistribute`` and ``prim_to_local``. In the global view:
- ``redistribute`` changes the layout, not the value. It stays, as the op
  ``nvfuser_dtensor::relayout`` (identity while tracing with plain global tensors, with a
  relayout back as its gradient). Outside fusions it is ``DTensor.redistribute`` (traced
  once into functional collectives): the ops left outside the fusions (matmuls, views) then
  see the layouts the program chose, which some of them need (a view cannot flatten a
  sharded dim). Inside
  a fusion it is a copy annotated with the target layout, and nvFuser inserts the
  communication.
- ``from_local(x, P)`` of a graph input says "x is the local part of a DTensor with
  placements P": the input is wrapped with ``DTensor.from_local`` when the compiled graph is
  called (no communication), and the node is dropped.
- ``to_local`` -> pointwise ops -> ``from_local`` with the same placements P is the same
  pointwise ops on the global tensor: both conversions are dropped. The same holds for
  pointwise ops between local parts of one placement (a residual add of the input, say).
- ``from_local(y, Replicate)`` of a value computed from plain inputs (a norm's output
  handed to a ColwiseParallel input hook) says that y is the same on every rank: those
  plain inputs are Replicate local parts of that mesh (wrapped like the inputs above), and
  any op on Replicate local parts alone is the same op on the global values, pointwise or
  not (``_replicated_inputs``).
- ``from_local(y, Shard(d))`` of a value computed from plain inputs by pointwise ops on
  tensors of y's shape (the sequence-parallel residual ``from_local(x + attn, Shard(1))``,
  which dynamo leaves when the block runs under no_grad) makes those inputs local parts
  with the same placements: each rank's parts of the operands give its part of the result.
  Any other use of such an input is checked like every local part below.
- Outside fusions the code runs on local tensors (Note [Local execution of the global
  view]): a ``relayout`` there is the functional collective DTensor placed at compile time.
- A local value that reaches the graph output is the local part, under P, of the global
  value: the compiled graph's output is redistributed to P and ``to_local``-ed.
Anything else (a non-pointwise op on local parts, local parts of different placements,
``Partial`` local parts, a plain input used without ``from_local``) cannot be expressed:
:class:`NotGlobalView` says what, and the graph takes the local path.
"""

from __future__ import annotations

import contextlib
import inspect
import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx
from torch.distributed.tensor import DTensor, Replicate, Shard

from .dtensor import has_partial, without_partial
from ..registry import translator


class NotGlobalView(Exception):
    """This graph takes the local path; the message says why."""


# --- relayout: redistribute as a graph op --------------------------------------------------
_LAYOUTS: list[tuple] = []  # key -> (mesh, placements); process-wide, grows with compiled graphs


def _layout_key(mesh, placements) -> int:
    entry = (mesh, tuple(placements))
    if entry not in _LAYOUTS:
        _LAYOUTS.append(entry)
    return _LAYOUTS.index(entry)


@torch.library.custom_op("nvfuser_dtensor::relayout", mutates_args=())
def relayout(x: torch.Tensor, key: int, back: int) -> torch.Tensor:
    """Identity on plain tensors (tracing); the real DTensors are redistributed by run_relayout."""
    return x.clone()


@relayout.register_fake
def _(x, key, back):
    return torch.empty_like(x)


def _relayout_backward(ctx, grad):
    return relayout(grad, ctx.back, ctx.key), None, None


def _relayout_setup(ctx, inputs, output):
    _, ctx.key, ctx.back = inputs


relayout.register_autograd(_relayout_backward, setup_context=_relayout_setup)


def run_relayout(x, key: int, back: int):
    """``relayout`` at run time, where ``x`` is a DTensor (see the Note)."""
    if isinstance(x, DTensor):
        mesh, placements = layout(key)
        if tuple(x.placements) != placements:
            return x.redistribute(mesh, placements)
    return x


def layout(key: int) -> tuple:
    """(mesh, placements) of a relayout's layout key."""
    return _LAYOUTS[key]


@translator(run_relayout, compute=False)
def _relayout_translator(ctx, x, key: int, back: int):
    """A change of annotation, not of value: a copy whose layout is the target's.

    The global view annotates the copy with the target mesh and shardings once the fusion is
    defined (``ctx.layouts``, see dtensor_region.py), so nvFuser itself moves the data: an
    all-reduce for Partial -> Replicate after a row-parallel matmul, a reduce-scatter for
    Partial -> Shard(seq) in sequence parallelism, an all-gather for Shard -> Replicate.
    """
    y = ctx.ops.set(x)
    ctx.layouts.append((y, key, tuple(ctx.val.shape)))
    return y


def use_run_relayout(graph: fx.Graph) -> None:
    """Point the traced relayout nodes of an aten graph at :func:`run_relayout`."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.nvfuser_dtensor.relayout.default,
                                                          torch.ops.nvfuser_dtensor.relayout):
            node.target = run_relayout


_POINTWISE_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg,
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.exp, torch.tanh, torch.sigmoid, torch.relu,
    torch._C._nn.gelu, F.gelu, F.relu, F.silu, torch.nn.functional.sigmoid, torch.nn.functional.tanh,
}
_POINTWISE_METHODS = {"add", "sub", "mul", "div", "neg", "exp", "tanh", "sigmoid", "relu", "float", "half",
                      "bfloat16"}


def closure_kind(node: fx.Node) -> str | None:
    """"from_local", "redistribute" or "to_local" for dynamo's TP closures, else None."""
    if node.op != "call_function":
        return None
    name = getattr(node.target, "__name__", "")
    for kind in ("from_local", "redistribute", "to_local"):
        if kind in name:
            return kind
    return None


def _closure_args(node: fx.Node) -> tuple[list, dict]:
    free = inspect.getclosurevars(node.target).nonlocals
    return list(free.get("args_as_value", [])), dict(free.get("kwargs_as_value", {}))


def _normalize(placements, ndim: int) -> tuple:
    return tuple(Shard(p.dim % ndim) if isinstance(p, Shard) and ndim else p for p in placements)


@dataclass
class Conversions:
    """What the compiled graph's caller does around it (see the Note)."""

    inputs: dict[int, tuple] = field(default_factory=dict)  # input index -> (mesh, placements)
    outputs: dict[int, tuple] = field(default_factory=dict)  # output index -> (mesh, placements)
    global_inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # index -> fake DTensor (global)

    def wrap_inputs(self, args: list) -> list:
        for i, (mesh, placements) in self.inputs.items():
            args[i] = DTensor.from_local(args[i], mesh, placements, run_check=False)
        return args

    def unwrap_outputs(self, outs) -> tuple:
        outs = list(outs)
        for j, (mesh, placements) in self.outputs.items():
            out = outs[j]
            if tuple(out.placements) != placements:
                out = out.redistribute(mesh, placements)
            outs[j] = out.to_local()
        return tuple(outs)


def _all_replicate(placements) -> bool:
    return all(isinstance(p, Replicate) for p in placements)


def _plain_inputs_of(node: fx.Node, value, same_shape_pointwise: bool = False) -> set[fx.Node] | None:
    """The placeholders ``node`` is computed from through plain-tensor code, or None when
    that code reads a DTensor or a TP conversion (then it is not plain replicated code).
    With ``same_shape_pointwise``, also None unless that code is pointwise ops on tensors of
    ``node``'s shape (code that commutes with any sharding of its operands)."""
    found, todo, seen = set(), [node], set()
    shape = tuple(value(node).shape) if isinstance(value(node), torch.Tensor) else None
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        v = value(n)
        if same_shape_pointwise and isinstance(v, torch.Tensor) and tuple(v.shape) != shape:
            return None
        if n.op == "placeholder":
            if isinstance(v, torch.Tensor) and not isinstance(v, DTensor):
                found.add(n)
            continue
        if closure_kind(n) is not None or isinstance(v, DTensor):
            return None
        if same_shape_pointwise and not (n.target in _POINTWISE_FUNCTIONS if n.op == "call_function"
                                         else n.op == "call_method" and n.target in _POINTWISE_METHODS):
            return None
        todo.extend(n.all_input_nodes)
    return found


def _replicated_inputs(graph: fx.Graph, value) -> dict[fx.Node, tuple]:
    """Plain inputs that feed ``from_local`` of a computed value, with that (mesh,
    placements) (Note [Tensor-parallel conversions]): through any plain code for
    ``Replicate``, through same-shape pointwise code for ``Shard`` (a sequence-parallel
    residual add, ``from_local(x + attn, Shard(1))``: each rank's parts of the operands
    make its part of the sum)."""
    placed: dict[fx.Node, tuple] = {}
    for node in graph.nodes:
        if closure_kind(node) != "from_local" or node.args[0].op == "placeholder":
            continue
        args, _ = _closure_args(node)
        if len(args) < 2:
            continue
        want = (args[0], _normalize(args[1], value(node).ndim))
        if has_partial(want[1]):
            continue
        found = _plain_inputs_of(node.args[0], value, same_shape_pointwise=not _all_replicate(want[1]))
        for ph in found or ():
            if placed.setdefault(ph, want) != want:
                raise NotGlobalView(f"input {ph.name} feeds from_local on several meshes or placements")
    return placed


def rewrite(gm: fx.GraphModule) -> tuple[fx.GraphModule, Conversions]:
    """Drop the TP conversions of ``gm`` (a copy) for the global view; raises NotGlobalView."""
    gm = fx.GraphModule(gm, gm.graph.__deepcopy__())  # keep the dynamo graph for the local path
    graph = gm.graph
    conv = Conversions()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    local: dict[fx.Node, tuple] = {}  # plain value -> (mesh, placements) of the DTensor it is a part of

    def value(n):
        return n.meta.get("example_value")

    # Inputs wrapped by from_local.
    for i, ph in enumerate(placeholders):
        wraps = [u for u in ph.users if closure_kind(u) == "from_local"]
        if not wraps:
            continue
        seen = set()
        for u in wraps:
            args, _ = _closure_args(u)
            if len(args) < 2:
                raise NotGlobalView(f"from_local of input {ph.name} without a mesh and placements")
            seen.add((args[0], _normalize(args[1], value(u).ndim)))
        if len(seen) > 1:
            raise NotGlobalView(f"input {ph.name} is wrapped with several placements")
        (m, placements), = seen
        if has_partial(placements):
            raise NotGlobalView(f"input {ph.name} is a Partial local part")
        local[ph] = (m, placements)
        conv.inputs[i] = (m, placements)
        conv.global_inputs[i] = value(wraps[0])
    # Plain inputs of replicated code handed to from_local(Replicate).
    for ph, want in _replicated_inputs(graph, value).items():
        if ph in local:
            if local[ph] != want:
                raise NotGlobalView(f"input {ph.name} is wrapped with several placements")
            continue
        i = placeholders.index(ph)
        local[ph] = want
        conv.inputs[i] = want
        fake = value(ph)
        with getattr(fake, "fake_mode", None) or contextlib.nullcontext():
            conv.global_inputs[i] = DTensor.from_local(fake, want[0], want[1], run_check=False)

    for node in list(graph.nodes):
        kind = closure_kind(node)
        ev = value(node)
        if kind == "to_local":
            src = value(node.args[0])
            placements = _normalize(src.placements, src.ndim)
            if has_partial(placements):
                raise NotGlobalView(f"{node.name}: to_local of a Partial DTensor feeds local code")
            local[node] = (src.device_mesh, placements)
        elif kind == "from_local":
            src = node.args[0]
            args, _ = _closure_args(node)
            want = (args[0], _normalize(args[1], ev.ndim))
            if src not in local:
                raise NotGlobalView(f"{node.name}: from_local of a value the global view cannot place")
            if local[src] != want:
                raise NotGlobalView(f"{node.name}: from_local with placements {want[1]} of a local part "
                                    f"placed {local[src][1]}")
        elif kind == "redistribute":
            src = value(node.args[0])
            args, kwargs = _closure_args(node)
            placements = kwargs.get("placements", args[1] if len(args) > 1 else None)
            mesh_r = kwargs.get("device_mesh", args[0] if args else None) or src.device_mesh
            if placements is None:
                raise NotGlobalView(f"{node.name}: redistribute without placements")
            placements = _normalize(placements, src.ndim)
            if has_partial(placements):
                raise NotGlobalView(f"{node.name}: redistribute to Partial")
            # The gradient goes back to the input's layout; DTensor makes Partial Replicate there.
            back = without_partial(_normalize(src.placements, src.ndim))
            with graph.inserting_before(node):
                new = graph.call_function(torch.ops.nvfuser_dtensor.relayout.default,
                                          (node.args[0], _layout_key(mesh_r, placements),
                                           _layout_key(src.device_mesh, back)))
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(node)
        elif node.op in ("call_function", "call_method") and not isinstance(ev, DTensor):
            tensor_args = [a for a in node.all_input_nodes if isinstance(value(a), torch.Tensor)]
            placed = [a for a in tensor_args if a in local]
            if not placed:
                continue  # plain code that never touches a local part (e.g. a mask built from sizes)
            pointwise = (node.target in _POINTWISE_FUNCTIONS if node.op == "call_function"
                         else node.target in _POINTWISE_METHODS)
            replicated = len(placed) == len(tensor_args) and len({local[a] for a in placed}) == 1 \
                and _all_replicate(local[placed[0]][1])
            if replicated:  # the same op on the global values (see the Note)
                local[node] = local[placed[0]]
                continue
            if not pointwise:
                raise NotGlobalView(f"{node.name}: {getattr(node.target, '__name__', node.target)} on local parts "
                                    f"is not pointwise")
            if len(placed) != len(tensor_args) or len({local[a] for a in placed}) > 1:
                raise NotGlobalView(f"{node.name}: combines local parts of different placements")
            if any(tuple(value(a).shape) != tuple(ev.shape) for a in placed):
                raise NotGlobalView(f"{node.name}: broadcasts local parts")
            local[node] = local[placed[0]]

    out = next(n for n in graph.nodes if n.op == "output")
    outs = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    for j, o in enumerate(outs):
        if isinstance(o, fx.Node) and o in local:
            conv.outputs[j] = local[o]

    for node in list(graph.nodes):
        if closure_kind(node) in ("from_local", "to_local"):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return gm, conv
