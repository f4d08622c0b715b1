"""Timing, memory and error measurement shared by the benchmark entry points."""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from typing import Callable

import torch


@contextlib.contextmanager
def timing_turn(lock_file: str):
    """Hold the zoo's timing lock (``--timing-lock``): with several processes at once, they
    compile side by side but warm up and time one at a time, so no timed step shares the GPU
    with another process's steps (compiles still share the CPU)."""
    if not lock_file:
        yield
        return
    import fcntl

    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def is_gpu_range(name: str) -> bool:
    """A profiler event on the GPU timeline that is a range, not a kernel: our regions'
    ``nvfr`` ranges (NVFUSER_DTENSOR_PROFILE=1) or inductor's ``## Call CompiledFxGraph ... ##``
    (torch 2.11 puts those there), which would count their kernels twice."""
    return name.startswith("nvfr ") or name.startswith("## ")


def time_per_call(fn: Callable, args, device: str, iters: int, repeats: int = 5) -> float:
    """Throughput: median over ``repeats`` of (time of ``iters`` back-to-back calls) / iters, in us."""
    for _ in range(3):
        fn(*args)
    sync(device)
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn(*args)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(*args)
            samples.append((time.perf_counter() - t0) * 1e6 / iters)
    return statistics.median(samples)


def time_single_call(fn: Callable, args, device: str, reps: int) -> float:
    """Latency: median of single calls, each timed alone after a synchronize, in us."""
    samples = []
    for _ in range(reps):
        sync(device)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn(*args)
            samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def copy_bandwidth(device: str, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written)."""
    if device != "cuda":
        nbytes = 1 << 26
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    us = time_per_call(lambda: dst.copy_(src), (), device, iters=20)
    return 2 * nbytes / (us * 1e-6)


def step_function(fn: Callable, train: bool) -> Callable:
    """One benchmark step: forward under no_grad, or forward + backward. A training step
    begins a CUDA-graph step and drops the last step's gradients, as a training loop's
    ``zero_grad(set_to_none=True)`` does: accumulated into ``.grad`` across steps, gradients
    a CUDA graph handed out are read after its next replay (inductor's reduce-overhead mode
    raised "accessing tensor output of CUDAGraphs that has been overwritten" on the
    transformer block)."""
    if train:
        params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []

        def step(*inputs):
            torch.compiler.cudagraph_mark_step_begin()
            for t in (*params, *inputs):
                if isinstance(t, torch.Tensor) and t.grad is not None:
                    t.grad = None
            out = fn(*inputs)
            out.backward(torch.ones_like(out))
            return out
    else:
        def step(*inputs):
            with torch.no_grad():
                return fn(*inputs)
    return step


def max_error_vs_float64(fn: Callable, compiled: Callable, inputs) -> tuple[float, float] | None:
    """(max |compiled - fp64|, max |eager - fp64|) of the forward output; None if not feasible."""
    try:
        fn64 = copy.deepcopy(fn).double() if isinstance(fn, torch.nn.Module) else fn
        with torch.no_grad():
            ref = fn64(*[x.detach().double() for x in inputs])
            got = compiled(*[x.detach() for x in inputs])
            eager = fn(*[x.detach() for x in inputs])
        return (got.double() - ref).abs().max().item(), (eager.double() - ref).abs().max().item()
    except Exception:  # a DTensor model, an op without float64 support, ...
        return None
