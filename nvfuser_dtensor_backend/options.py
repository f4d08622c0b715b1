"""Options accepted through ``torch.compile(..., options={...})``."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

FALLBACKS = ("eager", "inductor", "error")
CUDA_GRAPHS = (True, False, "auto", "trees")


def env_flag(name: str, default: bool = False) -> bool:
    """Whether the environment variable ``name`` is set to something other than "" or "0"
    (``default`` when it is not set)."""
    return os.environ.get(name, "1" if default else "0") not in ("", "0")


class OptionsError(ValueError):
    """Bad ``options`` given to the nvfuser_dtensor backend."""


@dataclass(frozen=True)
class Options:
    """Backend options.

    Attributes:
        fallback: what runs the code nvFuser does not: ``"eager"`` (plain PyTorch),
            ``"inductor"`` (compiled by inductor) or ``"error"`` (raise instead of falling
            back when a supported region fails in nvFuser).
        dump_dir: if set, each fusion's nvFuser definition is written there as Python.
        fuse_matmul: put matmuls (mm/addmm/bmm/linear, flash attention) into nvFuser
            regions. nvFuser runs them as ATen calls in segments of their own anyway, and
            inside a region the views around them get materialised, so by default they
            stay in PyTorch and regions hold the pointwise/reduction work between them.
        min_region_size: regions with fewer compute nodes stay in PyTorch.
        cache_size: how many fusion definitions the process-wide cache keeps.
        global_view: how graphs with DTensor inputs are compiled: ``True`` in the global view
            (fusions with global shapes and multidevice annotations, distributed/global_view.py),
            ``False`` on the local path (AOTAutograd's per-rank desugaring), ``"auto"``
            (default): the global view, on CPU and CUDA (on one H100 it ran ahead of the
            local path in every TP case, benchmarks/results/h100_session25), except on CUDA
            with an nvFuser wheel built for another torch than the running one (its
            multidevice runtime then corrupts the heap: scripts/gpu_nvfuser_abi_fix.py):
            there the local path, and the log line says why.
        dtensor_runtime: the global view's code between regions dispatches through DTensor on
            every call, as before Note [Local execution of the global view] (default
            ``False``: it is traced once into local aten ops and functional collectives). For
            A/B benchmarks and as an escape hatch.
        check_layouts: debug check of Note [Output layout contract] (fusion.py): every
            region output's strides are compared with the ones aten recorded, on every
            call; a mismatch raises ``LayoutContractError``. Also set by the environment
            variable ``NVFUSER_DTENSOR_CHECK_LAYOUTS=1`` (the test suite sets it).
        cuda_graphs: replay the compiled forward and backward as CUDA graphs with the
            backend's own runner (cuda_graph_runner.py, Note [CUDA graphs of our own]): no
            value a user holds changes in a later replay. ``"auto"`` (default: dynamo graphs
            whose tensor inputs are all on CUDA with static shapes; of DTensor graphs, the
            global view's on a mesh of one device, Note [CUDA graphs of local graphs]), ``True``
            (any graph), ``False``, or ``"trees"`` (what ``"auto"`` captures, through
            PyTorch's cudagraph trees instead, Note [CUDA graphs through cudagraph trees]).
            Graphs that cannot be captured (input mutations, host syncs, dynamic shapes) run
            as they are, with one log line.
        pad_matmuls: bf16/fp16 ``mm``/``addmm`` with a dim that is not a multiple of 8 (a
            vocabulary of 50257) run on zero-padded operands, so cuBLAS uses its aligned
            kernels (pad_matmul.py, Note [Padded matmuls]): ``"auto"`` (default: on CUDA,
            GEMMs of at least 2**27 multiply-adds), ``True`` (every such GEMM, any device) or
            ``False``.
        channels_last: 2-d convolutions take channels-last (NHWC) inputs, so cuDNN skips its
            NCHW<->NHWC transposes and the regions between convolutions work in NHWC
            (channels_last.py, Note [Channels-last convolutions]); what reaches the user keeps
            eager's layout. ``True`` (every graph with a batched conv2d), ``"auto"``
            (default: inductor's heuristics) or ``False``. On CUDA only inference graphs take
            it (in training its batch norm reductions over NHWC data were slower, the
            Note); a training graph that asks for it with ``True`` is refused with a warning.
        verify: debug mode for wrong numbers: every region also runs in PyTorch on the same
            inputs, and an output beyond its dtype's tolerance is reported with a
            ``RegionMismatchWarning`` naming the region (verify.py). Doubles the work of each
            region. Also set by ``NVFUSER_DTENSOR_VERIFY=1``.
        kernel_cache: keep nvFuser's compiled kernels (cubins) in a folder, so that a later
            process skips NVRTC for the kernels it shares with an earlier one
            (kernel_cache.py, Note [Kernel cache across processes]): ``False`` (default;
            ``NVFUSER_DTENSOR_KERNEL_CACHE=<folder>``, or ``=1`` for the default folder, turns
            it on), ``True`` (``~/.cache/nvfuser_dtensor/kernels``) or a folder. Process-wide:
            the first folder asked for holds.
    """

    fallback: str = "eager"
    dump_dir: str | None = None
    fuse_matmul: bool = False
    min_region_size: int = 1
    cache_size: int = 4096
    global_view: bool | str = "auto"
    check_layouts: bool = False
    verify: bool = False
    cuda_graphs: bool | str = "auto"
    pad_matmuls: bool | str = "auto"
    dtensor_runtime: bool = False
    channels_last: bool | str = "auto"
    kernel_cache: bool | str | os.PathLike = False

    @staticmethod
    def from_dict(options: dict[str, Any] | None) -> "Options":
        options = dict(options or {})
        names = {f.name for f in fields(Options)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise OptionsError(
                f"unknown nvfuser_dtensor option(s) {unknown}; valid options are {sorted(names)}"
            )
        if "dump_dir" not in options and os.environ.get("NVFUSER_DTENSOR_DUMP"):
            options["dump_dir"] = os.environ["NVFUSER_DTENSOR_DUMP"]
        if "check_layouts" not in options and env_flag("NVFUSER_DTENSOR_CHECK_LAYOUTS"):
            options["check_layouts"] = True
        if "verify" not in options and env_flag("NVFUSER_DTENSOR_VERIFY"):
            options["verify"] = True
        opts = Options(**options)
        if opts.fallback not in FALLBACKS:
            raise OptionsError(f"fallback must be one of {FALLBACKS}, got {opts.fallback!r}")
        if not isinstance(opts.min_region_size, int) or opts.min_region_size < 1:
            raise OptionsError(f"min_region_size must be a positive int, got {opts.min_region_size!r}")
        if not isinstance(opts.cache_size, int) or opts.cache_size < 1:
            raise OptionsError(f"cache_size must be a positive int, got {opts.cache_size!r}")
        if not isinstance(opts.fuse_matmul, bool):
            raise OptionsError(f"fuse_matmul must be a bool, got {opts.fuse_matmul!r}")
        for name in ("check_layouts", "verify", "dtensor_runtime"):
            if not isinstance(getattr(opts, name), bool):
                raise OptionsError(f"{name} must be a bool, got {getattr(opts, name)!r}")
        if opts.cuda_graphs not in CUDA_GRAPHS:
            raise OptionsError(f"cuda_graphs must be True, False, 'auto' or 'trees', got {opts.cuda_graphs!r}")
        if opts.pad_matmuls not in (True, False, "auto"):
            raise OptionsError(f"pad_matmuls must be True, False or 'auto', got {opts.pad_matmuls!r}")
        if opts.channels_last not in (True, False, "auto"):
            raise OptionsError(f"channels_last must be True, False or 'auto', got {opts.channels_last!r}")
        if opts.global_view not in (True, False, "auto"):
            raise OptionsError(f"global_view must be True, False or 'auto', got {opts.global_view!r}")
        if not isinstance(opts.kernel_cache, (bool, str, os.PathLike)) or opts.kernel_cache == "":
            raise OptionsError(f"kernel_cache must be True, False or a folder, got {opts.kernel_cache!r}")
        if opts.dump_dir is not None and not isinstance(opts.dump_dir, (str, os.PathLike)):
            raise OptionsError(f"dump_dir must be a path, got {opts.dump_dir!r}")
        return opts
