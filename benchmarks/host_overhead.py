"""Where a compiled call's host time goes, with the regions' own work taken out.

    python -m benchmarks.host_overhead [--rows 64] [--cols 1024] [--iters 5000]

Issue 13's goal 4e asks for at most 10 us per call of a tiny bias+gelu. This compiles it
under no_grad, replaces each region's prepared entry by one that returns a precomputed
output, and times per call: the compiled function so stubbed (dynamo's guards, AOTAutograd's
runtime wrapper, the graph module, our region call), our region call alone
(``FusedRegion.forward``) and its cache key, and dynamo with its ``eager`` backend returning
a constant (the guards and frame alone). Runs on the CPU; on the GPU, nvFuser's ``execute``
comes on top.
"""

from __future__ import annotations

import argparse
import time

import torch

import nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend.region import _tensor_key


def _per_call_us(fn, iters: int) -> float:
    for _ in range(min(iters, 100)):
        fn()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--iters", type=int, default=5000)
    a = p.parse_args()

    def bias_gelu(x, b):
        return torch.nn.functional.gelu(x + b, approximate="tanh")

    x, b = torch.randn(a.rows, a.cols), torch.randn(a.cols)
    with torch.no_grad():
        out = bias_gelu(x, b)
        torch._dynamo.reset()
        nb.clear_reports()
        compiled = torch.compile(bias_gelu, backend="nvfuser_dtensor", dynamic=False)
        compiled(x, b)
        regions = [r for report in nb.reports() for r in report.regions]
        for region in regions:
            for key in list(region._entries):
                region._entries[key] = lambda args, o=out: o
        constant = torch.compile(lambda x, b: out, backend="eager", dynamic=False)
        rows = {
            "compiled, regions stubbed": _per_call_us(lambda: compiled(x, b), a.iters),
            "our region call (FusedRegion.forward, stubbed)": _per_call_us(lambda: regions[0].forward(x, b), a.iters),
            "its cache key": _per_call_us(lambda: tuple(map(_tensor_key, (x, b))), a.iters),
            "dynamo alone (eager backend, a constant)": _per_call_us(lambda: constant(x, b), a.iters),
        }
    print(f"bias+gelu [{a.rows}, {a.cols}], {len(regions)} region(s), per call:")
    for name, us in rows.items():
        print(f"  {name:50s} {us:7.2f} us")


if __name__ == "__main__":
    main()
