"""nvFuser's compiled kernels kept across processes (issue 13, goal 3; docs/compile_time.md).

Note [Kernel cache across processes]
nvFuser 0.2.36 can keep the cubins NVRTC made in a folder, its KernelDb (csrc/kernel_db/): a
``db.csv`` keyed by the kernel's CUDA text and its NVRTC options (which name the GPU
architecture), read once per process when first used. A later process that generates the same
kernel text loads the cubin instead of running NVRTC; segmentation, scheduling and lowering
still run. Option ``kernel_cache`` (or ``NVFUSER_DTENSOR_KERNEL_CACHE=<folder>``) turns it on
for the backend's regions. Used as nvFuser ships it, the KernelDb is unsafe in three ways, and
each is closed here:
- **Processes sharing the folder.** Each process numbers its new files from the count it read
  (``kernel_<N>.cubin``), so two processes writing at once overwrite each other's files and
  one may load the other's cubin for its kernel. So the folder is split into slots, and a
  process writes only to a slot it holds an exclusive ``flock`` on, for its whole life (the
  kernel drops the lock when the process ends, crash included). With every slot held, the
  process compiles without a cache and says so once.
- **Threads within a process.** nvFuser compiles a fusion's segments on a thread pool, and
  ``KernelDb::query`` reads the hash map that ``KernelDb::write`` inserts into without taking
  its lock: a data race. So a first call with the cache on also passes
  ``_disable_options=["parallel_compile"]``: its segments compile one after another. A cold
  cache pays for that; a warm one skips NVRTC, the part worth running in parallel.
- **Where the folder is.** nvFuser opens ``$TMPDIR/nvfuser_kernel_db``. ``TMPDIR`` is pointed at
  the slot for the calls that may open it and put back afterwards, so the rest of the process
  (and its children) keep the user's temporary folder.
The folder is keyed by the nvFuser distribution (its CUDA flavour and build) and torch's CUDA,
so an upgrade starts a fresh one; a slot over ``MAX_SLOT_BYTES`` is emptied when taken (the
KernelDb never evicts). Only first calls pass the options: the per-call path is unchanged
(Note [Lean call path]). Fusions run through DTensor (the global view) do not use it yet.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import torch

log = logging.getLogger("nvfuser_dtensor_backend")

ENV = "NVFUSER_DTENSOR_KERNEL_CACHE"
SLOTS = 16
MAX_SLOT_BYTES = 2 << 30
DB_FOLDER = "nvfuser_kernel_db"  # what nvFuser opens under the temporary folder
FIRST_CALL_OPTIONS = {"_enable_options": ["kernel_db"], "_disable_options": ["parallel_compile"]}


def default_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "nvfuser_dtensor" / "kernels"


def resolve(option) -> Path | None:
    """The cache's root folder for option ``kernel_cache`` (``False``/``None``: the
    environment variable's folder if set, else none; ``True``: the default folder)."""
    if option is None or option is False:
        env = os.environ.get(ENV, "")
        return None if env in ("", "0") else (default_root() if env == "1" else Path(env))
    return default_root() if option is True else Path(option)


def version_key() -> str:
    """The nvFuser distribution and build, and torch's CUDA: cubins do not cross them."""
    from importlib import metadata

    import nvfuser_direct

    dists = metadata.packages_distributions().get("nvfuser_direct") or ["nvfuser"]
    return f"{dists[0]}-{nvfuser_direct.__version__}-cuda{torch.version.cuda}".replace("+", "-")


class _State:
    def __init__(self):
        self.root: Path | None = None  # set by configure
        self.slot: Path | None = None  # the slot this process holds
        self.lock_file = None  # kept open: the flock lives as long as it does
        self.opened = False  # nvFuser has opened its KernelDb (in our slot)
        self.refused = False  # no slot could be had
        self.mutex = threading.RLock()  # TMPDIR is process-wide; the backward runs in another thread


_STATE = _State()


def configure(option) -> None:
    """Called at compile time with option ``kernel_cache``. Process-wide, as nvFuser's KernelDb
    is: the first folder asked for is the one used."""
    root = resolve(option)
    if root is None:
        return
    root = root.expanduser()
    if _STATE.root is None:
        _STATE.root = root
    elif _STATE.root != root:
        log.warning("nvfuser_dtensor: kernel_cache %s ignored: this process already keeps its kernels in %s",
                    root, _STATE.root)


def take_slot(folder: Path, slots: int = SLOTS):
    """The first of ``folder``'s slots no other process holds: (slot path, open lock file), or
    ``None`` when all are held."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(slots):
        lock = open(folder / f"slot-{i}.lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        slot = folder / f"slot-{i}"
        db = slot / DB_FOLDER
        if db.is_dir() and sum(f.stat().st_size for f in db.iterdir() if f.is_file()) > MAX_SLOT_BYTES:
            shutil.rmtree(db)
        slot.mkdir(exist_ok=True)
        return slot, lock
    return None


def _ensure_slot() -> Path | None:
    if _STATE.slot is None and not _STATE.refused:
        folder = _STATE.root / version_key()
        taken = take_slot(folder, SLOTS)
        if taken is None:
            _STATE.refused = True
            log.warning("nvfuser_dtensor: kernel_cache off in this process: all %d slots of %s are held "
                        "by other processes (Note [Kernel cache across processes])", SLOTS, folder)
            return None
        _STATE.slot, _STATE.lock_file = taken
        log.info("nvfuser_dtensor: nvFuser kernels are kept in %s", _STATE.slot / DB_FOLDER)
    return _STATE.slot


@contextmanager
def first_call():
    """Around a region's first ``fd.execute`` on CUDA: yields the keyword arguments that make
    nvFuser read and write the cache (none when it is off)."""
    if _STATE.root is None or _STATE.refused:
        yield {}
        return
    with _STATE.mutex:
        slot = _ensure_slot()
        if slot is None:
            yield {}
            return
        if _STATE.opened:
            yield FIRST_CALL_OPTIONS
            return
        old = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = str(slot)
        try:
            yield FIRST_CALL_OPTIONS
        finally:
            if old is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = old
            _STATE.opened = (slot / DB_FOLDER).is_dir()


def kept() -> dict:
    """Where this process keeps its kernels and how many its slot holds (for logs and tests)."""
    slot = _STATE.slot
    db = slot / DB_FOLDER / "db.csv" if slot is not None else None
    rows = max(0, len(db.read_text().splitlines()) - 1) if db is not None and db.is_file() else 0
    return {"root": _STATE.root, "slot": slot, "kernels": rows, "refused": _STATE.refused}
