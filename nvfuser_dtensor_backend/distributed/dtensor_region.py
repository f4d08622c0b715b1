"""A fusion region of the DTensor global view at run time (see Note [Global view] in dtensor.py).

The region's inputs are DTensors (plain tensors count as ``Replicate`` on the same mesh, as
under DTensor's ``implicit_replication``). The fusion is defined with the GLOBAL shapes and
each input annotated with its mesh and shardings; it runs on the local shards, nvFuser
inserts the communication, and each output comes back as a DTensor with the placements that
eager DTensor gives (found once per input signature by running the region on fake DTensors),
redistributed where nvFuser's sharding differs (e.g. ``Partial``, which nvFuser never makes).
nvFuser takes no ``Partial`` input either: such inputs (gradients after a sharded matmul,
typically) are all-reduced by PyTorch before the fusion runs.

On CPU the evaluator stands in for nvFuser and reproduces the same semantics the simple way:
gather every input (``full_tensor``), evaluate the global fusion, keep each rank's part.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
from torch.distributed.tensor.placement_types import Partial
from torch._subclasses.fake_tensor import FakeTensorMode

from .._nvfuser import use_communicator, version as nvfuser_version
from .dtensor import (
    PlacementDesc,
    has_partial,
    placement_reason,
    mesh_layout,
    mesh_sourceless_tensors,
    placements_from_sharding,
    schedule_input,
    without_partial,
)
from ..evaluator import Evaluator
from ..fusion import describe
from ..region import FUSION_CACHE, FusedRegion, RegionDeclined, _announce_evaluator, _first_line
from .tp_conversions import layout

def _fast_key(a):
    if isinstance(a, DTensor):
        return (a.dtype, a.shape, a.stride(), a._local_tensor.is_cuda, a.placements, a.device_mesh)
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.shape, a.stride(), a.is_cuda)
    return type(a)


class GlobalViewRegion(FusedRegion):
    """A :class:`FusedRegion` whose inputs are DTensors, fused in the global view."""

    _key_of = staticmethod(_fast_key)

    def _recover(self, key, args, entry, error):
        """nvFuser failed at run time: the region runs with DTensor from now on."""
        return self._fail(key, f"nvFuser failed at run time: {_first_line(error)}", error)(list(args))

    def _make_entry(self, args):
        given = args
        mesh = next(a.device_mesh for a in args if isinstance(a, DTensor))
        # nvFuser takes no Partial input: those are reduced first (PyTorch's all-reduce).
        partial = [i for i, a in enumerate(args) if isinstance(a, DTensor) and has_partial(a.placements)]
        # Expanded (stride-0) inputs are materialized: with static sizes (Note [Input
        # descriptors]) nvFuser takes their dims as broadcasts, which its matmuls reject.
        expanded = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                    and any(st == 0 and n > 1 for st, n in zip(a.stride(), a.shape))]
        args = _prepare_inputs(list(args), partial, expanded)
        placements = []
        for a in args:
            if isinstance(a, DTensor):
                if a.device_mesh != mesh:
                    raise _NotGlobal("inputs on different device meshes")
                desc = PlacementDesc.of(a)
                reason = placement_reason(desc, a.shape)
                if reason:
                    raise _NotGlobal(reason)
                placements.append(desc)
            elif isinstance(a, torch.Tensor) and a.dim() > 0:
                placements.append(PlacementDesc.of(_replicated_like(a, mesh)))
            else:
                placements.append(None)
        expected = _expected_placements(self.region, given, mesh)  # from the inputs as given
        descs = tuple(describe(a, static=True) for a in args)  # global sizes and strides
        cache_key = (self._code_key, descs, tuple(placements), nvfuser_version())

        def schedule(fusion, tvs, layouts):
            for tv, desc in zip(tvs, placements):
                if desc is not None:
                    schedule_input(tv, desc)
            # The annotated inputs and relayouts as nvFuser prints them (device axes show as
            # ideviceIdx.x), for tests and dumps (Note [Device mesh on the host]: safe).
            self.scheduled_inputs = [str(tv) for tv in tvs]
            self.scheduled_relayouts = []
            for tv, key, shape in layouts:
                target = _relayout_target(key, shape, mesh)
                if target is not None:
                    schedule_input(tv, target)
                    self.scheduled_relayouts.append(str(tv))
            self.scheduled_sourceless = mesh_sourceless_tensors(fusion, *mesh_layout(mesh))

        built = FUSION_CACHE.get_or_build(cache_key, lambda: self._build(descs, schedule))
        if not any(_local(a).is_cuda for a in args if isinstance(a, torch.Tensor)):
            _announce_evaluator()
            entry = _GatherEvaluateEntry(built, self._single, mesh, expected)
        else:
            use_communicator()
            entry = _GlobalViewEntry(built, self._single, mesh, expected, _contiguous_outputs(self.region, built))
        return _PrepareInputsFirst(entry, partial, expanded) if partial or expanded else entry


class _NotGlobal(RegionDeclined):
    """An input signature the global view cannot express (the region runs with DTensor)."""

    def __init__(self, reason: str):
        super().__init__(f"the global view cannot take it ({reason}); running it with DTensor")


def _contiguous_outputs(region, built) -> frozenset[int]:
    """Fusion outputs that aten makes contiguous: nvFuser may lay a sharded output out
    otherwise (a reduce-scatter output with its scattered dim outermost: strides (32, 64, 1)
    for [2, 8, 32]), and a view of it outside the region would then fail."""
    out = next(n for n in region.graph.nodes if n.op == "output").args[0]
    out = out if isinstance(out, (tuple, list)) else (out,)
    return frozenset(i for o, i in zip(out, built.output_index)
                     if isinstance(o.meta.get("val"), torch.Tensor) and o.meta["val"].is_contiguous())


def _relayout_target(key: int, shape, mesh) -> PlacementDesc | None:
    """The annotation of a relayout in a fusion on ``mesh``, or None where nvFuser cannot take
    the target layout (then the copy stays unannotated and the region's output is
    redistributed by PyTorch, as for any output whose placement differs from eager's)."""
    target_mesh, target = layout(key)
    if target_mesh != mesh:
        return None
    desc = PlacementDesc.from_mesh(target_mesh, target, len(shape))
    return None if placement_reason(desc, shape) else desc


def _prepare_inputs(args: list, partial: list[int], expanded: list[int]) -> list:
    """Partial inputs all-reduced, expanded ones materialized (see _make_entry)."""
    for i in partial:
        a = args[i]
        args[i] = a.redistribute(a.device_mesh, without_partial(a.placements))
    for i in expanded:
        args[i] = args[i].contiguous()
    return args


class _PrepareInputsFirst:
    __slots__ = ("inner", "partial", "expanded")

    def __init__(self, inner, partial: list[int], expanded: list[int]):
        self.inner = inner
        self.partial = partial
        self.expanded = expanded

    def __call__(self, args):
        return self.inner(_prepare_inputs(args, self.partial, self.expanded))


def _local(a: torch.Tensor) -> torch.Tensor:
    return a._local_tensor if isinstance(a, DTensor) else a


def _replicated_like(t: torch.Tensor, mesh) -> DTensor:
    return DTensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False)


def fake_dtensor(mode, a: DTensor) -> DTensor:
    """A DTensor like ``a`` (mesh, placements, global shape) over a fake local tensor of ``mode``."""
    return DTensor.from_local(mode.from_tensor(a._local_tensor), a.device_mesh, a.placements, run_check=False,
                              shape=a.shape, stride=a.stride())


def _expected_placements(region, args, mesh) -> list[tuple]:
    """The placements eager DTensor gives each region output, from a run on fake DTensors."""
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = []
        for a in args:
            if isinstance(a, DTensor):
                fake.append(fake_dtensor(mode, a))
            elif isinstance(a, torch.Tensor) and a.dim() > 0:
                fake.append(_replicated_like(mode.from_tensor(a), mesh))
            else:
                fake.append(a)
        outs = region(*fake)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    return [tuple(o.placements) if isinstance(o, DTensor) else (Replicate(),) * mesh.ndim for o in outs]


def _to_expected(dt: DTensor, expected: tuple) -> DTensor:
    if tuple(dt.placements) == expected:
        return dt
    if not has_partial(expected):
        return dt.redistribute(dt.device_mesh, expected)
    # nvFuser reduces fully and DTensor refuses to redistribute to Partial, so the value is
    # split by hand: with Partial(sum) one rank of that mesh dim keeps it, the others hold
    # zeros; avg, max and min keep it everywhere.
    mesh = dt.device_mesh
    plain = without_partial(expected)
    if tuple(dt.placements) != plain:
        dt = dt.redistribute(mesh, plain)
    local = dt._local_tensor
    if holds_zero(expected, mesh.get_coordinate()):
        local = torch.zeros_like(local)
    return DTensor.from_local(local, mesh, expected, run_check=False, shape=dt.shape, stride=dt.stride())


def holds_zero(expected: tuple, coordinate) -> bool:
    """Whether this rank (at mesh ``coordinate``) holds zeros of a fully reduced value placed
    ``expected``: with Partial(sum) on a mesh dim, only coordinate 0 of it keeps the value."""
    return any(isinstance(p, Partial) and p.reduce_op == "sum" and coordinate[k] != 0
               for k, p in enumerate(expected))


class _DTensorEntry:
    """What both entries share: region output j is fusion output ``index[j]``, wrapped as a
    DTensor on ``mesh`` and brought to the placements eager gives (``expected[j]``)."""

    __slots__ = ("index", "single", "mesh", "expected")

    def __init__(self, built, single: bool, mesh, expected: list[tuple]):
        self.index = built.output_index
        self.single = single
        self.mesh = mesh
        self.expected = expected

    def _results(self, wrap):
        """``wrap(i, expected)`` makes the DTensor of fusion output i."""
        results = [_to_expected(wrap(i, self.expected[j]), self.expected[j]) for j, i in enumerate(self.index)]
        return results[0] if self.single else tuple(results)


class _GlobalViewEntry(_DTensorEntry):
    """``fd.execute`` on the local shards; outputs wrapped with nvFuser's output shardings."""

    __slots__ = ("fd", "placements", "contiguous")

    def __init__(self, built, single: bool, mesh, expected: list[tuple], contiguous: frozenset[int]):
        super().__init__(built, single, mesh, expected)
        self.fd = built.fd
        self.placements = None  # of each fusion output, from nvFuser's shardings
        self.contiguous = contiguous  # fusion outputs to return contiguous (_contiguous_outputs)

    def __call__(self, args):
        outs = self.fd.execute([_local(a) if isinstance(a, torch.Tensor) else a for a in args])
        for i in self.contiguous:
            if not outs[i].is_contiguous():
                outs[i] = outs[i].contiguous()
        if self.placements is None:
            self.placements = self._output_placements(len(outs))
        return self._results(lambda i, expected: DTensor.from_local(outs[i], self.mesh, self.placements[i],
                                                                     run_check=False))

    def _output_placements(self, n: int) -> list[tuple]:
        """Read nvFuser's output shardings once per definition (they follow from the input
        annotations alone), as placements; later calls reuse them.

        NOTE: ``get_output_shardings`` is read once and only through ``axis_sharded_on``
        (reading it again, or its ``mesh``, crashed on the H200, nvfuser-facts.md).
        """
        shardings = self.fd.fec.get_output_shardings()
        if not shardings:
            placements = [(Replicate(),) * self.mesh.ndim] * n
        else:
            placements = [placements_from_sharding(s, self.mesh.ndim) for s in shardings]
        # Mesh dims of one device are never split (Note [One device along a mesh dim]):
        # there the output is whole on its device, placed as eager places it.
        ones = [k for k, size in enumerate(self.mesh.shape) if size == 1]
        if ones:
            for j, i in enumerate(self.index):
                want = without_partial(self.expected[j])
                placements[i] = tuple(want[k] if k in ones else p for k, p in enumerate(placements[i]))
        return placements


class _GatherEvaluateEntry(_DTensorEntry):
    """CPU stand-in: gather the global inputs, evaluate the fusion, keep each rank's part."""

    __slots__ = ("run",)

    def __init__(self, built, single: bool, mesh, expected: list[tuple]):
        super().__init__(built, single, mesh, expected)
        self.run = Evaluator(built.fd, built.constants)

    def __call__(self, args):
        outs = self.run([a.full_tensor() if isinstance(a, DTensor) else a for a in args])
        return self._results(
            lambda i, expected: distribute_tensor(outs[i], self.mesh, without_partial(expected), src_data_rank=None))
