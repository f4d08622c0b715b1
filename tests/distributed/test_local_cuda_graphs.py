"""CUDA graphs of the global view's local graphs (Note [CUDA graphs of local graphs]).

On the CPU the recording is ``ReplayByRerun`` (tests/cpu_capture.py): a replay reruns the
graph into the recorded outputs, so outputs live at fixed addresses and are overwritten in
place, as a CUDA graph's are; ``cuda_graphs=True`` asks for capture off CUDA. The GPU runs
the same through scripts/gpu_tp_kernels.py and the TP benchmark.
"""

import copy
import logging

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore

import nvfuser_dtensor_backend as nb
from cpu_capture import captured_on_cpu  # noqa: F401 - a fixture
from models import MLP, TPBlock, sp_block_plan, tp_mlp_plan


def _mesh(world: int):
    """One gloo rank (its collectives compute: parameters are distributed for real), or a fake
    process group of ``world`` ranks (nothing is communicated)."""
    if world == 1:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    torch._dynamo.reset()
    nb.clear_reports()
    nb.cuda_graph_stats(clear=True)
    return init_device_mesh("cpu", (world,))


@pytest.fixture
def one_device():
    yield _mesh(1)
    dist.destroy_process_group()


def _train(model, steps: int, make_input, compiled: bool, options=None):
    """Losses, last gradients and weights after ``steps`` SGD steps."""
    model = copy.deepcopy(model)
    run = torch.compile(model, backend="nvfuser_dtensor", options=options) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        out = run(make_input(step))
        loss = (out.float() ** 2).mean()
        loss.backward()
        losses.append(loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item())
        opt.step()
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    weights = {n: p.full_tensor().detach() for n, p in model.named_parameters()}
    return losses, grads, weights


@pytest.mark.parametrize("build, plan", [(lambda: MLP(32, 128, approximate="tanh"), tp_mlp_plan),
                                         (lambda: TPBlock(32, 4), sp_block_plan)], ids=["tp_mlp", "sp_block"])
def test_tp_training_steps_replay_and_match_eager(one_device, captured_on_cpu, build, plan, caplog):
    """Forward and backward record on their second call and replay after it; every step's
    loss, gradients and SGD-updated weights match eager DTensor (the weights change in place
    between replays, which read them where they lie)."""
    torch.manual_seed(0)
    model = parallelize_module(build(), one_device, plan())
    inputs = [torch.randn(2, 8, 32) for _ in range(5)]
    with caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        got = _train(model, 5, inputs.__getitem__, True, {"cuda_graphs": True})
    want = _train(model, 5, inputs.__getitem__, False)
    assert "the global view's forward graph replays as a CUDA graph" in caplog.text
    assert "the global view's backward graph replays as a CUDA graph" in caplog.text
    assert captured_on_cpu.records == 2, captured_on_cpu.records  # the forward and the backward, once each
    assert nb.cuda_graph_stats()["recorded"] == 2
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        assert g.keys() == w.keys()
        for name in g:
            torch.testing.assert_close(g[name], w[name], rtol=1e-4, atol=1e-5, msg=name)


def _captured_tp_mlp(mesh):
    """A TP MLP on ``mesh`` (seeded) and the same compiled with CUDA graphs asked for."""
    torch.manual_seed(0)
    model = parallelize_module(MLP(32, 128, approximate="none"), mesh, tp_mlp_plan())
    return model, torch.compile(model, backend="nvfuser_dtensor", options={"cuda_graphs": True})


def test_inference_outputs_kept_by_the_user_keep_their_values(one_device, captured_on_cpu):
    """Every output of an inference graph reaches the user: each replay's small one (below
    LEND_FROM_BYTES) is a copy, so an output kept across calls is not overwritten by the next
    replay (a large one is lent: test_cuda_graph_runner's inference tests)."""
    model, compiled = _captured_tp_mlp(one_device)
    xs = [torch.randn(2, 8, 32) for _ in range(4)]
    with torch.no_grad():
        kept = [compiled(x) for x in xs]
        want = [model(x) for x in xs]
    assert captured_on_cpu.records == 1
    for k, w in zip(kept, want):
        torch.testing.assert_close(k, w, rtol=1e-5, atol=1e-5)


def _runners_made(monkeypatch) -> list:
    """The runners CudaGraphs makes from now on, with inputs of 64 bytes or more read in place."""
    from nvfuser_dtensor_backend import cuda_graph_runner
    from nvfuser_dtensor_backend.cuda_graphs import CudaGraphs

    monkeypatch.setattr(cuda_graph_runner, "TANGENT_IN_PLACE_FROM_BYTES", 64)
    runners, make = [], CudaGraphs.runner
    monkeypatch.setattr(CudaGraphs, "runner", lambda self, *a: runners.append(make(self, *a)) or runners[-1])
    return runners


def test_an_inference_input_is_read_where_it_lies(one_device, captured_on_cpu, monkeypatch):
    """Note [Inputs of the global view read in place]: an inference graph's input that stays at
    its address is read there by the replays instead of being copied into a buffer."""
    runners = _runners_made(monkeypatch)
    model, compiled = _captured_tp_mlp(one_device)
    x = torch.empty(2, 8, 32)
    with torch.no_grad():
        for _ in range(4):
            x.copy_(torch.randn(2, 8, 32))
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert captured_on_cpu.records == 1
    (runner,) = runners
    assert runner.inputs_in_place and runner.last.copies == [] and runner.last.steady == {0}, runner.last.copies


def test_inference_inputs_at_new_addresses_stay_right_in_few_recordings(one_device, captured_on_cpu, monkeypatch):
    """A new input tensor on every call: read in place at two addresses at most, then copied
    by one more recording that replays for any address (Note [Tangents read in place])."""
    runners = _runners_made(monkeypatch)
    model, compiled = _captured_tp_mlp(one_device)
    # all kept alive, so every call's input lies at an address of its own: a loop that drops
    # each input as it makes the next may get old addresses back from the allocator, which the
    # recordings then read in place for good (session 27's device run: no recording copied)
    xs = [torch.randn(2, 8, 32) for _ in range(8)]
    with torch.no_grad():
        for x in xs:
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert 1 <= captured_on_cpu.records <= 3, captured_on_cpu.records
    (runner,) = runners
    assert runner.last.copies, "the last recording copies the input that keeps moving"


def test_a_training_forward_copies_its_inputs(one_device, captured_on_cpu, monkeypatch):
    """The forward's (training) inputs stay copied by default (not measured in place)."""
    runners = _runners_made(monkeypatch)
    model, _ = _captured_tp_mlp(one_device)
    _train(model, 3, lambda step: torch.randn(2, 8, 32), True, {"cuda_graphs": True})
    forward = runners[0]
    assert forward.kind == "forward" and not forward.inputs_in_place and forward.last.copies


def test_random_ops_between_regions_keep_the_graph_uncaptured(one_device, captured_on_cpu, caplog):
    x = distribute_tensor(torch.randn(8, 16), one_device, [Shard(0)])
    w = distribute_tensor(torch.randn(16), one_device, [Replicate()]).requires_grad_()
    f = lambda x, w: torch.nn.functional.dropout(torch.tanh(x * w), 0.1, training=True) * 3  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        compiled = torch.compile(f, backend="nvfuser_dtensor", options={"cuda_graphs": True})
        for _ in range(3):
            compiled(x, w).sum().backward()
    assert "runs without CUDA graphs: random ops through DTensor between regions (aten::rand_like)" in caplog.text
    assert captured_on_cpu.records == 0


def test_several_devices_stay_uncaptured_with_a_reason(captured_on_cpu, caplog):
    """Collectives in a captured global-view graph are not tried yet: a mesh of two devices
    runs uncaptured, with one warning when capture was asked for."""
    mesh = _mesh(2)
    try:
        local = torch.randn(4, 16)
        x = DTensor.from_local(local, mesh, [Shard(0)])
        with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
            compiled = torch.compile(lambda x: torch.exp(x) * 2 + x, backend="nvfuser_dtensor",
                                     options={"cuda_graphs": True})
            for _ in range(3):
                out = compiled(x)
        assert "a device mesh of 2 devices" in caplog.text
        assert captured_on_cpu.records == 0
        torch.testing.assert_close(out.to_local(), torch.exp(local) * 2 + local)
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
def test_tp_training_replays_cuda_graphs_on_one_gpu():
    """The real capture (CudaCapture, nvFuser's ``execute`` inside it) on one GPU: TP MLP and
    SP block training steps in the global view record and replay their forward and backward
    and match eager DTensor (tests/distributed/cuda_graph_worker.py)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from nvfuser_dtensor_backend._nvfuser import multidevice_abi_reason

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    reason = multidevice_abi_reason()
    if reason and os.environ.get("NVFUSER_ABI_FIXED") != "1":
        pytest.skip(f"{reason}; run scripts/gpu_nvfuser_abi_fix.py and set NVFUSER_ABI_FIXED=1")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    worker = Path(__file__).with_name("cuda_graph_worker.py")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                           str(worker)], capture_output=True, text=True, timeout=400, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    assert text.count("PASS ") == 2, text[-6000:]
