"""DTensor placements <-> nvFuser's multidevice schedule (groundwork of the global-view path).

Note [Global view]
A fusion over DTensors is defined with GLOBAL shapes. Each input TensorView gets the
DeviceMesh of its DTensor, and each ``Shard(d)`` on mesh dimension k becomes
``outer_split(d, mesh.size(k))`` + ``axis(d).parallelize(mesh_x/mesh_y/mesh_z[k])``;
``Replicate`` stays unsplit. nvFuser propagates the shardings and inserts the
communication; the fusion runs on each rank's local shard. ``Partial`` inputs, uneven
shards, meshes of more than 3 dims and a tensor dim sharded on two mesh dims cannot be
expressed this way: :func:`placement_reason` says why, and such graphs take the local path
(AOTAutograd's DTensor desugaring, collectives run by PyTorch).

Translators never see placements; this module is the only place that does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .._nvfuser import nvfuser

MAX_MESH_DIMS = 3


@dataclass(frozen=True)
class PlacementDesc:
    """A DTensor's mesh and placements, hashable (part of a fusion's cache key)."""

    mesh_shape: tuple[int, ...]
    devices: tuple[int, ...]  # the mesh's device ids, row-major
    placements: tuple[tuple, ...]  # ("shard", dim) | ("replicate",) | ("partial", op) | ("other", repr)

    @staticmethod
    def of(dt) -> "PlacementDesc":
        """From a DTensor or a fake DTensor (``node.meta["example_value"]``)."""
        return PlacementDesc.from_mesh(dt.device_mesh, dt.placements, dt.ndim)

    @staticmethod
    def from_mesh(mesh, placements, ndim: int) -> "PlacementDesc":
        """From a DeviceMesh and placements (of a tensor with ``ndim`` dims)."""
        from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

        coded = []
        for p in placements:
            if type(p) is Shard:
                coded.append(("shard", p.dim % ndim if ndim else p.dim))
            elif isinstance(p, Replicate):
                coded.append(("replicate",))
            elif isinstance(p, Partial):
                coded.append(("partial", p.reduce_op))
            else:
                coded.append(("other", repr(p)))
        return PlacementDesc(*mesh_layout(mesh), tuple(coded))

    @property
    def sharded_dims(self) -> dict[int, int]:
        """tensor dim -> mesh dim, for every Shard placement."""
        return {p[1]: k for k, p in enumerate(self.placements) if p[0] == "shard"}


def mesh_layout(mesh) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, device ids in row-major order) of a DTensor DeviceMesh."""
    return tuple(mesh.mesh.shape), tuple(int(d) for d in mesh.mesh.flatten().tolist())


def has_partial(placements) -> bool:
    from torch.distributed.tensor.placement_types import Partial

    return any(isinstance(p, Partial) for p in placements)


def without_partial(placements) -> tuple:
    """``placements`` with each Partial replaced by Replicate (what a reduction leaves)."""
    from torch.distributed.tensor.placement_types import Partial, Replicate

    return tuple(Replicate() if isinstance(p, Partial) else p for p in placements)


def placement_reason(desc: PlacementDesc, global_shape) -> str | None:
    """Why nvFuser's global view cannot take this DTensor input, or None."""
    if len(desc.mesh_shape) > MAX_MESH_DIMS:
        return f"a {len(desc.mesh_shape)}-D device mesh (nvFuser has mesh_x/y/z)"
    seen = set()
    for k, p in enumerate(desc.placements):
        if p[0] == "partial":
            return f"Partial({p[1]}) input"
        if p[0] == "other":
            return f"placement {p[1]}"
        if p[0] == "shard":
            dim = p[1]
            if dim in seen:
                return f"tensor dim {dim} sharded on several mesh dims"
            seen.add(dim)
            size = global_shape[dim]
            if isinstance(size, int) and size % desc.mesh_shape[k]:
                return f"uneven shard: dim {dim} of size {size} over {desc.mesh_shape[k]} devices"
    return None


@functools.lru_cache(maxsize=64)
def device_mesh(mesh_shape: tuple[int, ...], devices: tuple[int, ...]):
    """nvFuser DeviceMesh, built once per mesh (not per call).

    Note [Device mesh on the host]
    nvFuser keeps the mesh's device ids in the at::Tensor it is given and reads them on the
    host (``DeviceMesh::vector()`` dereferences ``data_ptr``; ``hasDeviceMesh()``, the
    printer and the host-IR lowering of multi-segment fusions all call it). A mesh built
    under ``torch.set_default_device("cuda")`` (as training scripts do) held a CUDA tensor,
    and every such read dereferenced a device pointer on the host: the segfaults seen on the
    H200 when printing an annotated TensorView and in ``fd.execute`` of segmented global-view
    fusions (layer_norm, fused matmuls). The ids are therefore always a CPU tensor.
    """
    ids = torch.tensor(devices, dtype=torch.int64, device="cpu").reshape(mesh_shape)
    return nvfuser().multidevice.DeviceMesh(ids)


def mesh_axes():
    PT = nvfuser().ParallelType
    return (PT.mesh_x, PT.mesh_y, PT.mesh_z)


def schedule_input(tv, desc: PlacementDesc) -> None:
    """Annotate a TensorView with its mesh and shardings (see Note [Global view]).

    Inputs get this from their DTensors; an intermediate annotated this way (a relayout,
    tp_conversions.py) makes nvFuser redistribute to that layout itself.

    Note [One device along a mesh dim]
    A Shard over a mesh dim of one device is the whole tensor along that dim: the same local
    tensor as Replicate. It is not split onto a device axis, so nvFuser sees no resharding
    there. Split, every relayout along it was a communication segment of its own: on one
    H100 the SP block's global view ran ``nccl:scatter``s and device copies on a mesh of
    one GPU, 100 kernels per step against the local path's 69, and lost to it by 0.61x
    (benchmarks/results/h100_session24). The outputs then read Replicate along such a dim
    from nvFuser and take eager's placements there (``_GlobalViewEntry._output_placements``,
    dtensor_region.py). Tensor parallelism of one GPU (debugging, or a ``tp`` dim of 1 in a
    2-D mesh) is where this applies.
    """
    tv.set_device_mesh(device_mesh(desc.mesh_shape, desc.devices))
    axes = mesh_axes()
    # Split higher tensor dims first so the positions of lower dims do not move.
    for dim, k in sorted(desc.sharded_dims.items(), reverse=True):
        if desc.mesh_shape[k] == 1:
            continue
        tv.outer_split(dim, desc.mesh_shape[k])
        tv.axis(dim).parallelize(axes[k])


def mesh_sourceless_tensors(fusion, mesh_shape: tuple[int, ...], devices: tuple[int, ...]) -> list[str]:
    """Put every TensorView that can get no mesh from a producer on the mesh, replicated.

    Note [Every tensor on the mesh]
    nvFuser takes a fusion whose TensorViews all have a device mesh or none do ("Cannot have
    some TensorViews with device mesh and some without", seen on the H200 for an SP block
    with fuse_matmul). Its sharding propagation carries meshes from producers to consumers,
    so the ones left without a mesh are the TensorViews made from no tensor: ``full``,
    ``iota``, random numbers, the int64 seed/offset placeholders of the cuDNN attention
    translator. Those are the same on every device: replicated on the region's mesh. (Fusion
    inputs are left as scheduled: a 0-dim input has no placement.) Returns their prints.
    """
    TensorView = nvfuser().TensorView
    mesh, done = device_mesh(mesh_shape, devices), []
    for val in fusion.vals():
        if not isinstance(val, TensorView) or val.definition() is None or "DeviceMesh" in str(val):
            continue
        if any(isinstance(v, TensorView) for v in _definition_inputs(val)):
            continue  # nvFuser propagates its producers' mesh
        val.set_device_mesh(mesh)
        done.append(str(val))
    return done


def _definition_inputs(tv) -> list:
    """The inputs of the expression that defines ``tv``."""
    expr, inputs = tv.definition(), []
    while expr is not None:
        try:
            inputs.append(expr.input(len(inputs)))
        except (IndexError, RuntimeError, ValueError):
            break
    return inputs


def placements_from_sharding(sharding, mesh_ndim: int):
    """DTensor placements of an output from nvFuser's ``Sharding`` (never Partial)."""
    from torch.distributed.tensor.placement_types import Replicate, Shard

    placements = []
    for axis in mesh_axes()[:mesh_ndim]:
        dim = sharding.axis_sharded_on(axis)
        placements.append(Replicate() if dim < 0 else Shard(dim))
    return tuple(placements)
