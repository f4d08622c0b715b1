"""nvFuser as a torch.compile backend: ``torch.compile(model, backend="nvfuser_dtensor")``.

Importing this package does not import nvFuser; compiling a graph does, and raises
:class:`NvFuserMissingError` with the pip command to run when it is missing.
"""

from __future__ import annotations

from ._nvfuser import NvFuserMissingError, available as nvfuser_available
from .options import Options, OptionsError

__version__ = "0.1.0"


def _register_dtensor_strategies_early() -> None:
    """Our DTensor sharding strategies (distributed/dtensor_ops.py) before dynamo traces a
    frame. Registered only on the first global-view compile, they came after dynamo's trace,
    which broke the graph at the CPU flash-attention op for every backend. So they are
    registered when DTensor is loaded by the time this package is imported, and again
    (a no-op then) whenever the backend is looked up (``__getattr__`` below): dynamo loads
    the entry point at the first ``torch.compile(backend="nvfuser_dtensor")``, after it has
    imported DTensor itself, so the order of a script's imports does not matter. (Imported
    before DTensor, the package left the SP block in four graphs on the CPU, one of them
    without CUDA graphs.) A plain import of the package, without DTensor loaded, imports
    nothing more."""
    import sys

    if "torch.distributed.tensor" in sys.modules:
        from .distributed.dtensor_ops import register_strategies

        register_strategies()


_register_dtensor_strategies_early()

__all__ = [
    "NvFuserMissingError",
    "Options",
    "OptionsError",
    "cache_info",
    "clear_cache",
    "clear_reports",
    "compile_stats",
    "cuda_graph_stats",
    "nvfuser_available",
    "nvfuser_dtensor",
    "reports",
]


def _nvfuser_dtensor(gm, example_inputs, options=None, **kwargs):
    """The dynamo backend (entry point of group ``torch_dynamo_backends``)."""
    from .backend import nvfuser_dtensor as backend

    return backend(gm, example_inputs, options=options, **kwargs)


_nvfuser_dtensor.__name__ = _nvfuser_dtensor.__qualname__ = "nvfuser_dtensor"


def __getattr__(name: str):
    if name == "nvfuser_dtensor":  # the backend, looked up (see _register_dtensor_strategies_early)
        _register_dtensor_strategies_early()
        return _nvfuser_dtensor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reports():
    """What each aten graph compiled in this process became (regions, fallbacks)."""
    from .backend import reports as _reports

    return _reports()


def clear_reports() -> None:
    from .backend import clear_reports as _clear

    _clear()


def cuda_graph_stats(clear: bool = False) -> dict:
    """Process-wide counts of our CUDA-graph runner: graphs recorded, calls that ran uncaptured
    (warm-ups, no recording free, capture off), failed recordings, recordings dropped for new
    ones (Note [Moved outputs of other recordings]), and ``not_captured``: why
    compiled graphs with CUDA inputs were left uncaptured ({reason: graphs}); ``clear`` resets them."""
    from .cuda_graph_runner import NOT_CAPTURED, STATS

    counts = dict(STATS, not_captured=dict(NOT_CAPTURED))
    if clear:
        STATS.update(dict.fromkeys(STATS, 0))
        NOT_CAPTURED.clear()
    return counts


def compile_stats(clear: bool = False) -> dict:
    """Process-wide: the backend's part of first calls (Note [First-call accounting]):
    ``graphs_s`` (partitioning aten graphs), ``definitions_s`` (building FusionDefinitions),
    ``first_runs_s`` (regions' first calls: nvFuser's compile on CUDA), their counts, and the
    ``slowest`` first calls; ``clear`` resets them."""
    from .compile_time import stats

    return stats(clear)


def cache_info() -> dict:
    """Hits, misses and builds of the process-wide FusionDefinition cache."""
    from .region import FUSION_CACHE

    return FUSION_CACHE.cache_info()


def clear_cache() -> None:
    from .region import FUSION_CACHE

    FUSION_CACHE.clear()
