"""Lazy access to nvFuser (``nvfuser_direct``) with one clear error when it is missing."""

from __future__ import annotations

import atexit
import functools
import os
import sys
from types import ModuleType

import torch

INSTALL_HINT = (
    "nvFuser is not installed. Install the wheel that matches your CUDA and torch, e.g.\n"
    "    pip install 'nvfuser_dtensor_backend[cu128]'   # nvfuser-cu128-torch210\n"
    "    pip install 'nvfuser_dtensor_backend[cu130]'   # nvfuser-cu130-torch210\n"
    "(nvFuser wheels exist for Python 3.10 and 3.12 only)."
)


class NvFuserMissingError(ImportError):
    """Raised when a graph is compiled but ``nvfuser_direct`` cannot be imported."""


@functools.cache
def nvfuser() -> ModuleType:
    """Return the ``nvfuser_direct`` module, importing it on first use."""
    try:
        import nvfuser_direct
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise NvFuserMissingError(f"{INSTALL_HINT}\n(import error: {e})") from e
    atexit.register(_hide_launcher_env)  # see Note [nvFuser communicator at exit]
    return nvfuser_direct


_communicator_used = False


def use_communicator() -> None:
    """Called before a multidevice (global-view) execution on CUDA; see
    Note [nvFuser communicator at exit] for why nothing else turns the communicator on."""
    global _communicator_used
    if not _communicator_used:
        _communicator_used = True
        _point_communicator_at_launcher()


def _point_communicator_at_launcher() -> None:
    """nvFuser's communicator reads NVFUSER_MASTER_ADDR, not the launcher's MASTER_ADDR.

    Without it nvFuser's multidevice support is silently off, so under torchrun on GPUs the
    launcher's address is passed on (the port stays nvFuser's own, NVFUSER_MASTER_PORT or
    29542). Left alone without CUDA: the gloo tests need no nvFuser communicator.
    """
    if "MASTER_ADDR" not in os.environ or "NVFUSER_MASTER_ADDR" in os.environ or not torch.cuda.is_available():
        return
    # One GPU per local rank, as nvFuser's communicator assumes (CPU ranks sharing a GPU
    # machine would make it open an invalid device).
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) <= torch.cuda.device_count():
        os.environ["NVFUSER_MASTER_ADDR"] = os.environ["MASTER_ADDR"]


# Note [nvFuser communicator at exit]
# nvFuser creates its communicator (a singleton) on first use, and its cleanup at exit also
# asks for it. Under torchrun (RANK/WORLD_SIZE/... set) that cleanup then built a
# communicator at exit: without a usable GPU it called CUDA and aborted ("CUDA driver version
# is insufficient", exit code 134); on the H200 it built and freed a ``c10d::ProcessGroupNCCL``
# with a wheel built for another torch, on a heap that mismatch corrupts (SIGABRT through
# ``~ProcessGroupNCCL``; see multidevice_abi_reason), even on the local path, which needs no
# nvFuser communicator. So NVFUSER_MASTER_ADDR is set only by :func:`use_communicator` (the
# global view on CUDA), and unless that ran, the launcher's variables are hidden at exit, when
# nothing reads them any more: the cleanup then finds no communicator to build (on the H200
# the local-path torchrun processes now exit with status 0). The handler is registered after
# nvFuser's import, so it runs before nvFuser's.
_LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _hide_launcher_env() -> None:
    if _communicator_used:
        return
    for name in _LAUNCHER_ENV:
        os.environ.pop(name, None)


@functools.cache
def wheel_torch() -> str | None:
    """The torch version ("2.10") the installed nvFuser wheel was built for, from its
    distribution name (``nvfuser-cu130-torch210``); None for a source build."""
    import importlib.metadata
    import re

    for dist in importlib.metadata.distributions():
        match = re.fullmatch(r"nvfuser[-_]cu\d+[-_]torch(\d)(\d+)", (dist.metadata["Name"] or "").lower())
        if match:
            return f"{match[1]}.{match[2]}"
    return None


def multidevice_abi_reason() -> str | None:
    """Why nvFuser's multidevice runtime cannot be trusted with this torch, or None.

    nvFuser's communicator allocates c10d objects with the layout of the torch it was built
    against; torch 2.11 grew ``c10d::Backend::Options``, and a wheel built for 2.10 then
    corrupts the heap (Note [nvFuser wheel on a newer torch] in scripts/gpu_nvfuser_abi_fix.py).
    """
    built = wheel_torch()
    running = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if built is not None and built != running:
        return (f"the nvFuser wheel is built for torch {built}, this is torch {running}: its multidevice "
                f"runtime allocates c10d objects with torch {built}'s layout (heap corruption on the H200)")
    return None


def available() -> bool:
    try:
        nvfuser()
    except NvFuserMissingError:
        return False
    return True


def version() -> str:
    mod = sys.modules.get("nvfuser_direct") or nvfuser()
    return str(getattr(mod, "__version__", "unknown"))


@functools.cache
def dtype_map() -> dict[torch.dtype, object]:
    """torch dtype -> nvFuser ``DataType`` for every dtype nvFuser can hold."""
    DT = nvfuser().DataType
    return {
        torch.float32: DT.Float,
        torch.float16: DT.Half,
        torch.bfloat16: DT.BFloat16,
        torch.float64: DT.Double,
        torch.int64: DT.Int,
        torch.int32: DT.Int32,
        torch.bool: DT.Bool,
        torch.complex64: DT.ComplexFloat,
        torch.complex128: DT.ComplexDouble,
        torch.uint64: DT.UInt64,  # flash attention's RNG seed/offset
    }


@functools.cache
def reverse_dtype_map() -> dict[object, torch.dtype]:
    return {v: k for k, v in dtype_map().items()}


def to_nv_dtype(dtype: torch.dtype):
    return dtype_map()[dtype]


def to_torch_dtype(nv_dtype) -> torch.dtype:
    return reverse_dtype_map()[nv_dtype]
