"""DTensor placements -> nvFuser multidevice schedule, on the real nvFuser IR (fake process group)."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

from nvfuser_dtensor_backend._nvfuser import nvfuser
from nvfuser_dtensor_backend.distributed.dtensor import (
    PlacementDesc,
    placement_reason,
    placements_from_sharding,
    schedule_input,
)


@pytest.fixture(params=[2, 4], ids=["world2", "world4"])
def world(request):
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=request.param)
    yield request.param
    dist.destroy_process_group()


def _define(fd, dt):
    return fd.define_tensor(shape=[-1] * dt.ndim, contiguity=[True] * dt.ndim, dtype=nvfuser().DataType.Float)


def test_shard_becomes_device_axis_on_the_right_dim(world):
    mesh = init_device_mesh("cpu", (world,))
    x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(1)])
    w = distribute_tensor(torch.randn(16, 16), mesh, [Replicate()])
    dx, dw = PlacementDesc.of(x), PlacementDesc.of(w)
    assert dx.placements == (("shard", 1),) and dw.placements == (("replicate",),)
    assert placement_reason(dx, x.shape) is None and placement_reason(dw, w.shape) is None
    with nvfuser().FusionDefinition() as fd:
        tx, tw = _define(fd, x), _define(fd, w)
        fd.add_output(fd.ops.relu(fd.ops.add(tx, tw)))
        schedule_input(tx, dx)
        schedule_input(tw, dw)
    sx, sw = str(tx), str(tw)
    # Shard(1): the outer split of logical dim 1 is the device axis, dim 0 untouched.
    assert sx.split("[")[1].split(",")[0].startswith("iS"), sx
    assert "ideviceIdx.x" in sx.split(",")[1] and f"{{{world}}}" in sx.split(",")[1], sx
    assert "ideviceIdx" not in sw, sw  # Replicate: no device axis
    assert f"DeviceMesh{{{' '.join(map(str, range(world)))}}}" in sx


def test_two_dim_mesh_uses_mesh_x_and_mesh_y():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        mesh = init_device_mesh("cpu", (2, 2))
        x = distribute_tensor(torch.randn(8, 16), mesh, [Shard(0), Shard(1)])
        desc = PlacementDesc.of(x)
        assert desc.mesh_shape == (2, 2) and desc.devices == (0, 1, 2, 3)
        with nvfuser().FusionDefinition() as fd:
            t = _define(fd, x)
            fd.add_output(fd.ops.exp(t))
            schedule_input(t, desc)
        text = str(t)
        assert text.index("ideviceIdx.x") < text.index("ideviceIdx.y"), text
    finally:
        dist.destroy_process_group()


def test_reasons_for_what_the_global_view_cannot_take(world):
    mesh = init_device_mesh("cpu", (world,))
    partial = PlacementDesc((world,), tuple(range(world)), (("partial", "sum"),))
    assert "Partial" in placement_reason(partial, (8, 8))
    uneven = PlacementDesc.of(distribute_tensor(torch.randn(world + 1, 4), mesh, [Shard(0)]))
    assert "uneven" in placement_reason(uneven, (world + 1, 4))
    assert "4-D" in placement_reason(PlacementDesc((1, 1, 1, 1), (0,), (("replicate",),) * 4), (4,))
    twice = PlacementDesc((2, 2), (0, 1, 2, 3), (("shard", 0), ("shard", 0)))
    assert "several mesh dims" in placement_reason(twice, (8, 8))
    # The descriptor is a cache-key part: equal for the same mesh and placements, any shape.
    a = PlacementDesc.of(distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)]))
    b = PlacementDesc.of(distribute_tensor(torch.randn(4 * world, 3), mesh, [Shard(0)]))
    c = PlacementDesc.of(distribute_tensor(torch.randn(8, 8), mesh, [Shard(1)]))
    assert a == b and hash(a) == hash(b) and a != c


def test_placements_from_sharding():
    class FakeSharding:  # what fd.fec.get_output_shardings() returns, reduced to its API
        def __init__(self, dims):
            self.dims = dims

        def axis_sharded_on(self, axis):
            return self.dims.get(str(axis), -1)

    PT = nvfuser().ParallelType
    out = placements_from_sharding(FakeSharding({str(PT.mesh_x): 1}), 2)
    assert out == (Shard(1), Replicate())
    assert Partial not in map(type, out)


_MESH_ON_HOST = """
import torch
from nvfuser_dtensor_backend._nvfuser import nvfuser
from nvfuser_dtensor_backend.distributed.dtensor import PlacementDesc, schedule_input
torch.set_default_device({device!r})
with nvfuser().FusionDefinition() as fd:
    t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.add_output(fd.ops.relu(t))
    schedule_input(t, PlacementDesc((2,), (0, 1), (("shard", 1),)))
print(t)
"""


@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_mesh_ids_stay_on_the_host_whatever_the_default_device(device):
    """See Note [Device mesh on the host]: nvFuser reads the mesh's ids on the host, so a mesh
    built under another default device crashed the process (meta: bus error; CUDA on the H200:
    segfault). A subprocess, so that a crash fails this test instead of ending pytest."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _MESH_ON_HOST.format(device=device)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "DeviceMesh{0 1}" in proc.stdout and "ideviceIdx.x" in proc.stdout, proc.stdout


def test_multidevice_abi_reason_compares_the_wheels_torch_with_the_running_one(monkeypatch):
    """options.global_view="auto" keeps CUDA DTensor graphs on the local path when the
    nvFuser wheel is built for another torch (Note [nvFuser wheel on a newer torch])."""
    from nvfuser_dtensor_backend import _nvfuser

    import re

    # The installed wheel's torch ("2.10" here; the GPU machine runs it on torch 2.11).
    assert re.fullmatch(r"\d\.\d+", _nvfuser.wheel_torch() or "2.10"), _nvfuser.wheel_torch()
    monkeypatch.setattr(_nvfuser, "wheel_torch", lambda: "2.10")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    reason = _nvfuser.multidevice_abi_reason()
    assert reason and "built for torch 2.10, this is torch 2.11" in reason
    monkeypatch.setattr(torch, "__version__", "2.10.1+cu128")
    assert _nvfuser.multidevice_abi_reason() is None
    monkeypatch.setattr(_nvfuser, "wheel_torch", lambda: None)  # a source build
    monkeypatch.setattr(torch, "__version__", "2.11.0")
    assert _nvfuser.multidevice_abi_reason() is None


@pytest.mark.parametrize("abi_reason", [None, "the nvFuser wheel is built for torch 2.10, this is torch 2.11"])
def test_auto_takes_the_global_view_on_cuda_unless_the_wheel_is_built_for_another_torch(monkeypatch, abi_reason):
    from nvfuser_dtensor_backend import backend
    from nvfuser_dtensor_backend.options import Options

    monkeypatch.setattr(backend, "_any_on_cuda", lambda values: True)
    monkeypatch.setattr(backend, "multidevice_abi_reason", lambda: abi_reason)
    why = backend._global_view_choice(Options.from_dict(None), [])
    if abi_reason is None:
        assert why is None
    else:
        assert why.startswith("the global view needs options={'global_view': True} here") and abi_reason in why
    assert backend._global_view_choice(Options.from_dict({"global_view": True}), []) is None
    assert backend._global_view_choice(Options.from_dict({"global_view": False}), []) == "options global_view=False"
