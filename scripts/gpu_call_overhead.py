"""Host cost of one call on the GPU: tiny bias+gelu(tanh) [64, 1024] bf16, inference and
fwd+bwd, per backend (us per call, back-to-back, median of 5 rounds), then a cProfile of the
backend's calls (the top functions by own time), so the remaining per-call cost is named.

    source .device/setup.sh && python3 scripts/gpu_call_overhead.py [--backends a,b] [--calls 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package

from benchmarks.run import compile_kwargs, parse_backend  # noqa: E402

BACKENDS = ("eager,inductor,inductor:reduce-overhead,nvfuser_dtensor,nvfuser_dtensor:cuda_graphs=trees,"
            "nvfuser_dtensor:no_cuda_graphs")


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


def _compiled(backend: str):
    if backend == "eager":
        return bias_gelu
    return torch.compile(bias_gelu, **compile_kwargs(*parse_backend(backend)))


def _step(f, x, b, train: bool):
    if not train:
        with torch.no_grad():
            return f(x, b)
    out = f(x, b)
    out.sum().backward()
    x.grad = b.grad = None
    return out


def us_per_call(f, x, b, train: bool, calls: int) -> float:
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            _step(f, x, b, train)
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--backends", default=BACKENDS)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    rows = []
    for train in (False, True):
        for backend in args.backends.split(","):
            torch._dynamo.reset()
            x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=train)
            b = torch.randn(1024, device="cuda", dtype=torch.bfloat16, requires_grad=train)
            f = _compiled(backend)
            for _ in range(5):
                _step(f, x, b, train)
            us = us_per_call(f, x, b, train, args.calls)
            rows.append((("fwd+bwd" if train else "infer"), backend, us))
            print(f"{rows[-1][0]:8s} {backend:40s} {us:8.1f} us/call", flush=True)
            if backend == "nvfuser_dtensor":
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(500):
                    _step(f, x, b, train)
                torch.cuda.synchronize()
                prof.disable()
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
                print("\n".join(s.getvalue().splitlines()[:40]), flush=True)
    print("\n| mode | backend | us per call |\n|---|---|---|")
    for mode, backend, us in rows:
        print(f"| {mode} | {backend} | {us:.1f} |")


if __name__ == "__main__":
    main()
