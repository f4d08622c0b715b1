"""The global view on the real nvFuser IR, one process with the fake process group (world 2, 4).

Collectives of the fake process group return garbage, so these tests check structure: the
path taken, the device axes nvFuser's inputs carry, output shapes and placements. Values
are checked on gloo ranks in test_tensor_parallel.py.
"""

import contextlib
import logging
import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

import nvfuser_dtensor_backend as nb


@pytest.fixture(params=[2, 4], ids=["world2", "world4"])
def mesh(request):
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=request.param)
    torch._dynamo.reset()
    nb.clear_reports()
    yield init_device_mesh("cpu", (request.param,))
    dist.destroy_process_group()


def _regions():
    return [region for report in nb.reports() for region in report.regions]


def _device_axis(text: str) -> int:
    """Index of the logical axis that carries deviceIdx in nvFuser's print of a TensorView
    (``ideviceIdx.x``; ``?deviceIdx.x`` after a reshape, whose iter types are resolved later)."""
    axes = text[text.index("[") + 1:text.rindex("]")].split(",")
    hits = [i for i, a in enumerate(axes) if "deviceIdx" in a]
    return hits[0] if hits else -1


@pytest.mark.parametrize("dim", [0, 1])
def test_shard_axis_becomes_the_device_axis(mesh, dim):
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(dim)])
    b = distribute_tensor(torch.randn(16), mesh, [Replicate()])
    out = torch.compile(lambda x, b: torch.relu(x + b) * 2, backend="nvfuser_dtensor")(x, b)
    assert isinstance(out, DTensor) and out.placements == (Shard(dim),)
    assert out.shape == (8, 16) and out.to_local().shape == x.to_local().shape
    assert all("global view" in r.kind for r in nb.reports())
    (region,) = _regions()
    tx, tb = region.scheduled_inputs
    # The outer split of the sharded dim is the device axis: it sits at position `dim`.
    assert _device_axis(tx) == dim and f"{{{mesh.size()}}}" in tx, tx
    assert _device_axis(tb) == -1, tb  # Replicate: mesh only
    assert "DeviceMesh" in tx and "DeviceMesh" in tb


def test_tensors_made_from_no_tensor_are_put_on_the_mesh(mesh):
    """Note [Every tensor on the mesh]: a full_like inside a region has no producer to get a
    mesh from; nvFuser rejects a fusion with some TensorViews on a mesh and some not."""
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    out = torch.compile(lambda x: x * 2 + torch.full_like(x, 3.0), backend="nvfuser_dtensor")(x)
    assert isinstance(out, DTensor) and out.shape == (8, 16)
    (region,) = _regions()
    (made,) = region.scheduled_sourceless
    assert "[iS" in made and f"DeviceMesh{{{' '.join(map(str, range(mesh.size())))}}}" in made, made
    assert "deviceIdx" not in made  # replicated


def test_reduction_over_the_sharded_dim_gives_eager_placement(mesh):
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(1)])
    fn = lambda x: (x * x).sum(1)  # noqa: E731
    expected = fn(x).placements  # eager DTensor: Partial(sum)
    out = torch.compile(fn, backend="nvfuser_dtensor")(x)
    assert out.placements == expected == (Partial(),)
    assert out.shape == (8,)


def test_two_dim_mesh_uses_mesh_x_and_mesh_y():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        torch._dynamo.reset()
        nb.clear_reports()
        mesh = init_device_mesh("cpu", (2, 2))
        x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0), Shard(1)])
        out = torch.compile(lambda x: torch.exp(x) + 1, backend="nvfuser_dtensor")(x)
        assert out.placements == (Shard(0), Shard(1)) and out.to_local().shape == (4, 8)
        (region,) = _regions()
        text = region.scheduled_inputs[0]
        assert "ideviceIdx.x" in text and "ideviceIdx.y" in text, text
        assert text.index("ideviceIdx.x") < text.index("ideviceIdx.y")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("mesh_shape", [(1,), (2, 1)], ids=["one_device", "tp_of_one"])
def test_a_mesh_dim_of_one_device_splits_nothing(mesh_shape):
    """Note [One device along a mesh dim]: a Shard over a mesh dim of one device is the whole
    tensor, so it is not split onto a device axis (nvFuser ran a scatter and device copies
    for each such relayout on one H100); the tensor stays on the mesh, and the output keeps
    eager's placements."""
    world = 1
    for n in mesh_shape:
        world *= n
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        torch._dynamo.reset()
        nb.clear_reports()
        mesh = init_device_mesh("cpu", mesh_shape)
        placements = [Shard(0), Shard(1)][:len(mesh_shape)]
        x = distribute_tensor(torch.randn(8, 16), mesh, placements)
        out = torch.compile(lambda x: torch.exp(x) + 1, backend="nvfuser_dtensor")(x)
        assert out.placements == tuple(placements)
        assert out.to_local().shape == x.to_local().shape
        (region,) = _regions()
        text = region.scheduled_inputs[0]
        assert "DeviceMesh" in text, text
        assert "deviceIdx.y" not in text, text  # the mesh dim of one device, if any, is mesh_y
        assert ("ideviceIdx.x" in text) == (mesh_shape[0] > 1), text
    finally:
        dist.destroy_process_group()


def test_outputs_on_a_mesh_dim_of_one_device_take_eager_placements():
    """nvFuser reports Replicate along a mesh dim it did not split (one device); the GPU entry
    takes eager's placements there (a Partial as Replicate, which holds the whole value on the
    one device), so the local graph's fast path finds what it traced."""
    from types import SimpleNamespace

    from nvfuser_dtensor_backend.distributed.dtensor_region import _GlobalViewEntry

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2, 1))
        fec = SimpleNamespace(get_output_shardings=lambda: [])  # nvFuser: nothing sharded
        built = SimpleNamespace(output_index=[1, 0], fd=SimpleNamespace(fec=fec))
        entry = _GlobalViewEntry(built, False, mesh, [(Replicate(), Shard(0)), (Replicate(), Partial())], frozenset())
        assert entry._output_placements(2) == [(Replicate(), Replicate()), (Replicate(), Shard(0))]
    finally:
        dist.destroy_process_group()


def test_training_graph_runs_forward_and_backward_in_the_global_view(mesh):
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16), mesh, [Replicate()]).requires_grad_()
    out = torch.compile(lambda x, w: torch.nn.functional.gelu(x * w).sum(), backend="nvfuser_dtensor")(x, w)
    out.backward()
    assert w.grad is not None and w.grad.shape == (16,)
    kinds = sorted(r.kind for r in nb.reports())
    assert kinds == ["backward, global view", "forward, global view"]


@pytest.mark.parametrize("make, reason", [
    (lambda mesh: distribute_tensor(torch.randn(2 * mesh.size() + 1, 4), mesh, [Shard(0)]), "uneven shard"),
    (lambda mesh: DTensor.from_local(torch.randn(4, 4), mesh, [Partial()]), "Partial(sum) input"),
])
def test_local_path_for_what_the_global_view_cannot_take(mesh, caplog, make, reason):
    x = make(mesh)
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        out = torch.compile(lambda x: torch.tanh(x) * 3, backend="nvfuser_dtensor")(x)
    assert isinstance(out, DTensor) and out.shape == x.shape
    lines = [r.getMessage() for r in caplog.records if "local path" in r.getMessage()]
    assert len(lines) == 1 and reason in lines[0], lines
    assert all("global view" not in r.kind for r in nb.reports())


def test_global_view_option(mesh, caplog):
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        out = torch.compile(lambda x: torch.sigmoid(x) + 1, backend="nvfuser_dtensor",
                            options={"global_view": False})(x)
    assert out.placements == (Shard(0),)
    assert any("options global_view=False" in r.getMessage() for r in caplog.records)
    assert all("global view" not in r.kind for r in nb.reports())
    with pytest.raises(Exception, match="global_view must be"):
        torch.compile(lambda x: x + 1, backend="nvfuser_dtensor", options={"global_view": "yes"})(x)


@torch.library.custom_op("nvfuser_dtensor_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_dry_run_finds_ops_dtensor_cannot_run(mesh):
    """Ops left outside regions run through DTensor; one without a sharding strategy is found
    at compile time (the graph then takes the local path), not as a crash at run time."""
    from torch import fx

    from nvfuser_dtensor_backend.distributed.global_view import NotGlobalView, _dry_run
    from nvfuser_dtensor_backend.distributed.tp_conversions import Conversions

    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    good = fx.symbolic_trace(lambda x: torch.ops.aten.exp.default(x))
    _dry_run([good], [x], Conversions(), 1)
    bad = fx.symbolic_trace(lambda x: torch.ops.nvfuser_dtensor_test.twice.default(x))
    with pytest.raises(NotGlobalView, match="DTensor cannot run the lowered graph"):
        _dry_run([bad], [x], Conversions(), 1)


def test_tp_mlp_is_one_fusion_whose_relayouts_are_annotations(mesh):
    """Column-parallel linear -> gelu -> row-parallel linear with fuse_matmul: one fusion
    forward and one backward, each redistribute a copy annotated with its target layout
    (nvFuser then all-reduces the row-parallel output itself)."""
    from torch.distributed.tensor.parallel import parallelize_module

    from models import MLP, tp_mlp_plan

    model = parallelize_module(MLP(32, 128, approximate="none"), mesh, tp_mlp_plan())
    compiled = torch.compile(model, backend="nvfuser_dtensor", options={"fuse_matmul": True})
    out = compiled(torch.randn(2, 8, 32))
    out.sum().backward()
    assert out.shape == (2, 8, 32) and model.fc1.weight.grad.placements == (Shard(0),)
    forward, backward = (next(r for r in nb.reports() if r.kind == f"{k}, global view")
                         for k in ("forward", "backward"))
    (region,) = forward.regions
    assert {"addmm", "gelu"} <= {getattr(n.target, "__name__", "").split(".")[0]
                                 for n in region.region.graph.nodes}, region.ops
    colwise, rowwise = region.scheduled_relayouts
    assert _device_axis(colwise) == 2, colwise  # Shard(-1) of the [2, 8, 128] hidden activation
    assert _device_axis(rowwise) == -1 and "DeviceMesh" in rowwise, rowwise  # Partial -> Replicate
    (region,) = backward.regions
    assert sorted(_device_axis(t) for t in region.scheduled_relayouts) == [-1, 2], region.scheduled_relayouts


def test_sequence_parallel_output_is_a_reduce_scatter_annotation(mesh):
    """RowwiseParallel(output_layouts=Shard(1)): the attention output projection's relayout
    is annotated Shard(1) on the sequence axis, so nvFuser reduce-scatters it."""
    from torch.distributed.tensor.parallel import parallelize_module

    from models import TPBlock, sp_block_plan

    model = parallelize_module(TPBlock(32, 4), mesh, sp_block_plan())
    compiled = torch.compile(model, backend="nvfuser_dtensor", options={"fuse_matmul": True})
    with torch.no_grad():
        out = compiled(torch.randn(2, 8, 32))
    assert out.shape == (2, 8, 32)
    relayouts = [t for r in nb.reports() if "global view" in r.kind
                 for region in r.regions for t in getattr(region, "scheduled_relayouts", [])]
    assert any(_device_axis(t) == 1 for t in relayouts), relayouts


def test_code_between_regions_runs_on_local_tensors_without_dtensor_dispatch(mesh, monkeypatch):
    """Note [Local execution of the global view]: the matmul between the regions and the
    all-gather DTensor places for it are fixed at compile time; a second call dispatches no
    op on a DTensor outside the region calls (on CPU the evaluator inside them gathers
    through DTensor, which stands in for nvFuser's communication)."""
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16, 32), mesh, [Shard(1)]).requires_grad_()
    fn = lambda x, w: torch.relu(x @ w) * 2  # noqa: E731
    compiled = torch.compile(fn, backend="nvfuser_dtensor")
    out = compiled(x, w)
    assert out.placements == fn(x, w).placements == (Shard(1),)
    assert [r.between_regions for r in nb.reports()] == ["local tensors, collectives placed at compile time"] * 2
    grad = distribute_tensor(torch.randn(8, 32), mesh, [Shard(1)])
    with _count_dtensor_work_between_regions(monkeypatch) as seen:
        out = compiled(x, w)
        torch.autograd.backward([out], [grad])
    assert seen["between"] == [], seen["between"]
    assert seen["inside"], "the regions' evaluator should have gathered through DTensor"
    assert isinstance(out, DTensor) and out.placements == (Shard(1),) and out.shape == (8, 32)
    assert w.grad.placements == (Shard(1),) and w.grad.shape == (16, 32)


def test_tp_module_calls_no_dtensor_api_between_regions(mesh, monkeypatch):
    """A parallelize_module MLP: its from_local / redistribute / to_local closures are part
    of the local graphs too (in the forward, and their gradients in the backward), so a
    training step calls neither DTensor's ops nor its API outside the region calls."""
    from torch.distributed.tensor.parallel import parallelize_module

    from models import MLP, tp_mlp_plan

    model = parallelize_module(MLP(32, 128, approximate="none"), mesh, tp_mlp_plan())
    compiled = torch.compile(model, backend="nvfuser_dtensor")
    x = torch.randn(2, 8, 32, requires_grad=True)
    compiled(x).sum().backward()
    assert {r.between_regions for r in nb.reports()} == {"local tensors, collectives placed at compile time"}
    with _count_dtensor_work_between_regions(monkeypatch) as seen:
        out = compiled(x)
        out.sum().backward()
    assert not isinstance(out, DTensor) and out.shape == (2, 8, 32)
    assert x.grad is not None and not isinstance(x.grad, DTensor)
    assert seen["between"] == [], seen["between"]
    # The hook sees the API where it is called: the CPU evaluator gathers inside the regions.
    assert "DTensor.full_tensor" in seen["inside"], seen["inside"]


@contextlib.contextmanager
def _count_dtensor_work_between_regions(monkeypatch):
    """From now on, record DTensor ops and the DTensor API calls (from_local, to_local,
    redistribute) made inside the local graphs' region calls and outside them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from nvfuser_dtensor_backend.distributed import local_execution

    seen = {"between": [], "inside": []}
    inside = [False]

    def where():
        return seen["inside" if inside[0] else "between"]

    class CountDTensorOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(a, DTensor) for a in torch.utils._pytree.tree_leaves((args, kwargs))):
                where().append(str(func))
            return func(*args, **(kwargs or {}))

    real_run = local_execution._LocalRegionCall.run
    real_call = local_execution.LocalGraph.__call__

    def run(self, args):
        inside[0] = True
        try:
            return real_run(self, args)
        finally:
            inside[0] = False

    def call(self, args):
        with CountDTensorOps():  # around the local graph only: dynamo would not run a compiled frame under it
            return real_call(self, args)

    # DTensor's API, seen by a profile hook: patching DTensor.from_local would fail dynamo's
    # guards on it and recompile.
    api = {"from_local", "to_local", "redistribute", "full_tensor"}

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name in api and frame.f_code.co_filename.endswith(
                os.path.join("distributed", "tensor", "_api.py")):
            where().append(f"DTensor.{frame.f_code.co_name}")

    monkeypatch.setattr(local_execution.LocalGraph, "__call__", call)
    # Region calls were bound at compile time: re-point them through the patched method.
    for graph in _local_graph_modules():
        for node in graph.graph.nodes:
            if isinstance(getattr(node.target, "__self__", None), local_execution._LocalRegionCall):
                node.target = run.__get__(node.target.__self__)
        graph.recompile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _local_graph_modules():
    import gc

    from nvfuser_dtensor_backend.distributed.local_execution import LocalGraph

    return [o.gm for o in gc.get_objects() if type(o) is LocalGraph]


def test_local_graph_holds_the_collectives_dtensor_places(mesh):
    """x @ w with x Shard(0) and w Shard(1): DTensor all-gathers x; the local graph holds that
    all-gather as a functional collective and takes plain local tensors."""
    from nvfuser_dtensor_backend.distributed import global_view

    made = []
    real = global_view.lower_to_local

    def spy(*args, **kwargs):
        graph, outs = real(*args, **kwargs)
        made.append(graph)
        return graph, outs

    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16, 32), mesh, [Shard(1)])
    try:
        global_view.lower_to_local = spy
        out = torch.compile(lambda x, w: torch.tanh(x @ w) + 1, backend="nvfuser_dtensor")(x, w)
    finally:
        global_view.lower_to_local = real
    assert out.placements == (Shard(1),)
    (graph,) = made
    code = graph.gm.code
    assert "_c10d_functional.all_gather_into_tensor" in code and "aten.mm" in code, code
    assert "DTensor" not in code
    assert [s.placements for s in graph.in_specs] == [(Shard(0),), (Shard(1),)]


def test_local_graphs_hold_no_dead_ops_of_dtensor_metadata_propagation(mesh, monkeypatch, caplog):
    """Note [Dead ops of DTensor's metadata propagation]: the SP block's local graphs ran the
    attention a second time, forward and backward, on ``empty_strided`` tensors nobody read
    (DTensor's shape propagation, traced by make_fx). Every op left computes an output. The
    block's output is ``to_local``-ed, so its gradient comes local: that is what the backward
    was traced with, not a new placement to trace again for (which failed on the local shape)."""
    from torch.distributed.tensor.parallel import parallelize_module

    from models import TPBlock, sp_block_plan
    from nvfuser_dtensor_backend.distributed import global_view, local_execution

    made = []
    real = local_execution.lower_to_local

    def spy(*args, **kwargs):
        graph, outs = real(*args, **kwargs)
        made.append(graph.gm)
        return graph, outs

    monkeypatch.setattr(global_view, "lower_to_local", spy)
    monkeypatch.setattr(local_execution, "lower_to_local", spy)
    model = parallelize_module(TPBlock(32, 4), mesh, sp_block_plan())
    x = torch.randn(2, 8, 32, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        torch.compile(model, backend="nvfuser_dtensor")(x).sum().backward()
    assert not [r for r in caplog.records if "keeps the gradient placements" in r.getMessage()], caplog.text
    attention = "_scaled_dot_product_flash_attention_for_cpu"
    codes = [gm.code for gm in made]
    assert any(f"{attention}.default" in c for c in codes) and any(f"{attention}_backward" in c for c in codes), codes
    for gm in made:
        live = set()
        stack = [n for n in gm.graph.nodes if n.op == "output"]
        while stack:
            node = stack.pop()
            if node not in live:
                live.add(node)
                stack.extend(node.all_input_nodes)
        dead = [n.format_node() for n in gm.graph.nodes if n.op == "call_function" and n not in live]
        assert dead == [], gm.code
        assert gm.code.count(f"{attention}.default(") <= 1 and gm.code.count(f"{attention}_backward.default(") <= 1


def test_random_ops_between_regions_run_through_dtensor_alone(mesh):
    """Dropout's rand_like on a DTensor is one call through DTensor in the local graph (its
    RNG tracker offsets each shard's generator per call); the rest stays local. Attention
    ops tagged random run locally when their dropout_p is 0."""
    from torch import fx

    from nvfuser_dtensor_backend.distributed.local_execution import _is_random

    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16), mesh, [Replicate()]).requires_grad_()
    f = lambda x, w: torch.nn.functional.dropout(torch.tanh(x * w), 0.1, training=True) * 3  # noqa: E731
    out = torch.compile(f, backend="nvfuser_dtensor")(x, w)
    out.sum().backward()
    assert out.placements == (Shard(0),) and w.grad.shape == (16,)
    forward, backward = (next(r for r in nb.reports() if r.kind == f"{k}, global view") for k in ("forward", "backward"))
    assert forward.between_regions == ("local tensors, collectives placed at compile time; "
                                       "1 random op(s) through DTensor (aten::rand_like)"), forward.between_regions
    assert backward.between_regions == "local tensors, collectives placed at compile time"
    sdpa = fx.symbolic_trace(lambda q: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, q, q))
    (node,) = [n for n in sdpa.graph.nodes if n.op == "call_function"]
    assert not _is_random(node)  # dropout_p=0


def test_random_ops_of_a_dtensor_graph_on_the_local_path_stay_in_pytorch(mesh):
    """Note [Random numbers drawn by nvFuser]: nvFuser would draw every shard's numbers from
    its rank's generator; DTensor's RNG tracker gives each shard numbers of its own."""
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16), mesh, [Replicate()]).requires_grad_()
    f = lambda x, w: torch.nn.functional.dropout(torch.tanh(x * w), 0.1, training=True) * 3  # noqa: E731
    out = torch.compile(f, backend="nvfuser_dtensor", options={"global_view": False})(x, w)
    out.sum().backward()
    assert out.placements == (Shard(0),) and w.grad.shape == (16,)
    fused = [op for r in nb.reports() for ops in r.partition.regions for op in ops]
    assert "aten.tanh.default" in fused and "aten.rand_like.default" not in fused, fused
    assert any("RNG tracker" in why for r in nb.reports() for why in r.partition.unsupported)


def _stub_region(mesh, expected, shardings, output_index, fd_outputs, region_outputs, fail=False):
    """A region whose first call (on DTensors) leaves a _GlobalViewEntry with a stub fd:
    ``fd_outputs(args)`` are the fusion's outputs on local tensors, ``region_outputs(dts)``
    the region's DTensor call; ``shardings`` are nvFuser's output shardings (read on the
    first call on GPU), ``expected`` the placements eager DTensor gives."""
    from types import SimpleNamespace

    from nvfuser_dtensor_backend.distributed.dtensor_region import _GlobalViewEntry, _fast_key

    class FD:
        def __init__(self):
            self.calls = []

        def execute(self, args):
            self.calls.append(args)
            if fail:
                raise RuntimeError("nvFuser failed")
            return fd_outputs(args)

    built = SimpleNamespace(output_index=output_index, fd=FD())  # region output j is fusion output index[j]
    entry = _GlobalViewEntry(built, False, mesh, expected, frozenset())
    entry.placements = shardings

    class Region:
        name = "stub"
        _single = False
        options = nb.Options()
        _entries = {}

        def forward(self, *dts):
            self._entries[tuple(map(_fast_key, dts))] = entry
            return region_outputs(dts)

    return Region(), built.fd, entry


@pytest.mark.parametrize("case", ["fast", "other_shardings", "fd_fails"])
def test_region_call_runs_fd_execute_on_local_tensors_once_shardings_match(mesh, case, caplog):
    """The GPU fast path of a region call (the CPU evaluator never takes it): after the first
    call through DTensor, ``fd.execute`` runs on the local tensors directly, but only when
    nvFuser's output shardings are the placements the trace assumed (otherwise one log line
    says why not); a failing execute goes back to the DTensor call."""
    from nvfuser_dtensor_backend.distributed.local_execution import _LocalRegionCall

    # from_local: the fake process group's scatter would leave garbage (NaN) in the shard.
    x = DTensor.from_local(torch.randn(8 // mesh.size(), 16), mesh, [Shard(0)], run_check=False)
    local = x.to_local()
    shardings = [(Replicate(),), (Shard(0),)] if case == "other_shardings" else [(Shard(0),), (Shard(0),)]
    region, fd, _ = _stub_region(mesh, [(Shard(0),), (Shard(0),)], shardings, [1, 0],
                                 lambda args: [args[0] * 3, args[0] + 1], lambda dts: (dts[0] + 1, dts[0] * 3),
                                 fail=case == "fd_fails")
    call = _LocalRegionCall(region, [x._spec], [x._spec, x._spec], [local, local])
    with caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        first = call.run([local])
    torch.testing.assert_close(first[0], local + 1)
    assert (call.fast is not None) == (case != "other_shardings")
    slow = [r.getMessage() for r in caplog.records if "runs through DTensor on every call" in r.getMessage()]
    if case == "other_shardings":
        assert slow == ["nvfuser_dtensor: region stub runs through DTensor on every call: output 1: nvFuser "
                        "shards it (Replicate(),), eager (Shard(dim=0),)"], slow
    else:
        assert slow == []
    second = call.run([local])
    torch.testing.assert_close(second[0], local + 1)
    torch.testing.assert_close(second[1], local * 3)
    if case == "other_shardings":
        assert fd.calls == []
    else:
        assert len(fd.calls) == 1 and fd.calls[0][0] is local
    if case == "fd_fails":
        assert call.fast is None


def test_dtensor_runtime_option_keeps_dtensor_dispatch(mesh):
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(16, 32), mesh, [Shard(1)])
    fn = lambda x, w: torch.tanh(x @ w) + 1  # noqa: E731
    out = torch.compile(fn, backend="nvfuser_dtensor", options={"dtensor_runtime": True})(x, w)
    assert out.placements == fn(x, w).placements
    (report,) = nb.reports()
    assert report.between_regions == "DTensor (options dtensor_runtime=True)"
    assert "between regions: DTensor" in report.summary()


@pytest.mark.parametrize("batch", [1, 2])
def test_sequence_parallel_reshape_with_the_shard_inside_stays_out_of_the_fusion(mesh, batch):
    """Note [Sharded reshapes stay out of fusions]: view([B*S, E] -> [B, S, E]) before the
    relayout to Shard(1) would need the device split inside B*S when B > 1 ("DID on inner
    splits" on the H200 at batch 4 and 8); at batch 1 it stays in the fusion."""
    from torch.distributed.tensor.parallel import parallelize_module

    from models import TPBlock, sp_block_plan

    model = parallelize_module(TPBlock(32, 4), mesh, sp_block_plan())
    compiled = torch.compile(model, backend="nvfuser_dtensor", options={"fuse_matmul": True})
    with torch.no_grad():
        out = compiled(torch.randn(batch, 8, 32))
    assert out.shape == (batch, 8, 32)
    reasons = [r for report in nb.reports() if "global view" in report.kind for r in report.partition.unsupported]
    kept_out = [r for r in reasons if "DID on inner splits" in r]
    if batch == 1:
        assert kept_out == [], kept_out
    else:
        s = 8 * mesh.size()  # the input is this rank's part of the sequence
        assert len(kept_out) == 1 and f"[{batch * s}, 32] -> [{batch}, {s}, 32]" in kept_out[0], reasons


def test_reshapes_reaching_a_sharding_relayout_through_pointwise_ops_stay_out(mesh):
    """The SP block's backward on the H200: add(add(view(mm), view(mm)), view(mm)) relaid out
    to Shard(1); nvFuser carries the sharding back through the adds onto the views."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from nvfuser_dtensor_backend.distributed.sharded_reshapes import keep_inner_sharded_reshapes_out
    from nvfuser_dtensor_backend.distributed.tp_conversions import _layout_key, run_relayout
    from nvfuser_dtensor_backend.registry import KEEP_OUT

    key = _layout_key(mesh, (Shard(1),))

    def grads(a, b, c, x):
        return a.view(2, 8, 4) + b.view(2, 8, 4) * 2 + c.view(2, 8, 4), x.view(2, 8, 4)

    gm = make_fx(grads, tracing_mode="fake")(*[torch.randn(16, 4) for _ in range(3)], torch.randn(2, 32))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(output):  # each result relaid out to Shard(1), as in the graph
        for value in output.args[0]:
            node = gm.graph.call_function(run_relayout, (value, key, key))
            node.meta["val"] = value.meta["val"]
    assert keep_inner_sharded_reshapes_out(gm.graph) == 3  # x.view([2, 32] -> [2, 8, 4]) keeps the shard outermost
    kept = [n for n in gm.graph.nodes if KEEP_OUT in n.meta]
    assert all(n.args[0].meta["val"].shape == (16, 4) for n in kept), kept


@pytest.mark.parametrize("before, after, dim, inner", [
    ([16, 32], [2, 8, 32], 1, True),  # B*S -> B, S with S sharded
    ([8, 32], [1, 8, 32], 1, False),  # batch 1: the shard is outermost
    ([16, 32], [2, 8, 32], 0, False),  # the batch sharded
    ([2, 8, 32], [2, 8, 4, 8], 2, False),  # heads split out of a sharded width
    ([2, 8, 32], [2, 8, 4, 8], 3, True),  # ... sharded inside each head
    ([2, 8, 32], [2, 8, 32], 1, False),
])
def test_inner_split_reason(before, after, dim, inner):
    from nvfuser_dtensor_backend.distributed.sharded_reshapes import inner_split_reason

    assert (inner_split_reason(before, after, dim) is not None) == inner


@pytest.mark.parametrize("rank", [0, 1])
def test_region_call_fast_path_gives_partial_sum_outputs_as_the_dtensor_call_does(rank):
    """nvFuser reduces a sum over a sharded dim fully, while eager DTensor leaves it
    Partial(sum): the DTensor call keeps the value on rank 0 and zeros elsewhere
    (_to_expected), and the fast path does the same without DTensor."""
    from nvfuser_dtensor_backend.distributed.local_execution import _LocalRegionCall

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        local = torch.randn(4, 16)
        x = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
        total = local.sum(0)  # stands in for nvFuser's all-reduced sum
        part = total if rank == 0 else torch.zeros_like(total)
        partial = DTensor.from_local(part, mesh, [Partial()], run_check=False)
        region, fd, entry = _stub_region(mesh, [(Partial(),), (Shard(0),)], [(Replicate(),), (Shard(0),)], [0, 1],
                                         lambda args: [total.clone(), args[0] * 2], lambda dts: (partial, dts[0] * 2))
        call = _LocalRegionCall(region, [x._spec], [partial._spec, x._spec], [part, local])
        slow = call.run([local])
        assert call.fast is entry and call.zero_outputs == (frozenset({0}) if rank else frozenset())
        fast = call.run([local])
        assert len(fd.calls) == 1
        for a, b in zip(fast, slow):
            torch.testing.assert_close(a, b)
    finally:
        dist.destroy_process_group()
