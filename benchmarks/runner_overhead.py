"""Host time per call of the CUDA-graph runner's replay path, on any machine.

    python -m benchmarks.runner_overhead

A forward ``GraphRunner`` with 50 inputs used in place and 10, 100 or 300 watched outputs
(saved activations), recorded by a capture whose replay does nothing: what is left is the
runner's own Python per call (the key check, the liveness check of the watched outputs,
the ledger, the copy-out of the one user output). Numbers vary by a few microseconds between
runs on a loaded machine; compare two versions by running each several times.
"""

from __future__ import annotations

import time

import torch

from nvfuser_dtensor_backend.cuda_graph_runner import GraphRunner


class NoReplay:
    def __init__(self, *_):
        pass

    def free_memory(self):
        return None  # every output at risk: the ledger's checks run too

    def record(self, fn, inputs):
        outputs = list(fn(list(inputs)))
        return (lambda: None), outputs


def per_call_us(watched: int, static: int = 50, calls: int = 2000) -> float:
    params = [torch.randn(4) for _ in range(static)]

    def forward(args):
        a = list(args)
        args.clear()
        return [a[0] * 2] + [torch.randn(8) for _ in range(watched)]

    runner = GraphRunner("forward", forward, list(range(1, static + 1)), 1, NoReplay(), print, lambda: False)
    x = torch.randn(4)
    for _ in range(3):  # warm-up, record, first replay
        runner([x] + params)
    start = time.perf_counter()
    for _ in range(calls):
        runner([x] + params)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    for n in (10, 100, 300):
        print(f"{n} watched outputs: {per_call_us(n):.1f} us per call")


if __name__ == "__main__":
    main()
