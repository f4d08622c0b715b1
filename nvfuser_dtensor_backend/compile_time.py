"""Where a first call's time goes (issue 13, goal 3; docs/compile_time.md).

Note [First-call accounting]
A model's first compiled step is dynamo's trace, AOTAutograd's, the backend's own work on
each aten graph, and each region's first call. Only the last two are ours, and they are
counted process-wide here:
- ``graphs_s``: ``compile_aten_graph`` (the graph rewrites, the partition, the regions set
  up), ``graphs`` of them;
- ``definitions_s``: building FusionDefinitions (translation; ``definitions`` built, a
  repeated layer's region reuses its definition);
- ``first_runs_s``: every region's first call for an input signature, ``first_runs`` of
  them. On CUDA that is where nvFuser segments, schedules and compiles (NVRTC) the fusion,
  synchronized at both ends; on the CPU it is the evaluator's first run. Retries and a
  fallback's first run count too (Note [Retries at run time]). A definition built there is
  counted in ``definitions_s`` as well.
``slowest`` names the regions whose first calls took longest. What is left of a first
call is dynamo, AOTAutograd and the PyTorch ops between regions. The extra cost is a clock
read around each new entry, never on the per-call path (Note [Lean call path]).
"""

from __future__ import annotations

import heapq
import time
from contextlib import contextmanager

import torch

SLOWEST_KEPT = 8

STATS = {"graphs": 0, "graphs_s": 0.0, "definitions": 0, "definitions_s": 0.0, "first_runs": 0, "first_runs_s": 0.0}
_SLOWEST: list[tuple[float, str]] = []  # a min-heap of (seconds, "region: ops")
_inside_first_run = False


def _sync(args) -> None:
    """Waits for the GPU where ``args`` hold CUDA tensors, unless a CUDA graph is being captured."""
    if (any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
            and not torch.cuda.is_current_stream_capturing()):
        torch.cuda.synchronize()


@contextmanager
def timed(kind: str):
    """Adds the block's wall time to ``STATS[kind + "_s"]`` and one to ``STATS[kind]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        STATS[kind] += 1
        STATS[kind + "_s"] += time.perf_counter() - t0


@contextmanager
def first_run(name: str, ops: list[str], args):
    """Times a region's first call for a new input signature. A region run inside another's
    first call (a retry's inner region) is part of the outer one's time."""
    global _inside_first_run
    if _inside_first_run:
        yield
        return
    _inside_first_run = True
    _sync(args)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _sync(args)
        seconds = time.perf_counter() - t0
        _inside_first_run = False
        STATS["first_runs"] += 1
        STATS["first_runs_s"] += seconds
        label = f"{name}: {','.join(ops)[:120]}"
        if len(_SLOWEST) < SLOWEST_KEPT:
            heapq.heappush(_SLOWEST, (seconds, label))
        else:
            heapq.heappushpop(_SLOWEST, (seconds, label))


def stats(clear: bool = False) -> dict:
    """``STATS`` and ``slowest``: [(seconds, "region: ops")], the longest first calls first."""
    out = dict(STATS, slowest=sorted(_SLOWEST, reverse=True))
    if clear:
        STATS.update({k: 0.0 if k.endswith("_s") else 0 for k in STATS})
        _SLOWEST.clear()
    return out
