"""Where the host time of a zoo model's training step goes: the step timed back to back
(synchronized once per step), then a cProfile of steady steps, top functions by own time and
by cumulative time, per backend, each backend in its own process (run this script once per
backend). Issue 13: GPT-2's step is 7.9 ms against 5.8 ms of kernels, reduce-overhead's 8.2
against about 6.7.

    source .device/setup.sh && python3 scripts/gpu_step_profile.py gpt2 --backend nvfuser_dtensor
    python3 scripts/gpu_step_profile.py gpt2 --backend nvfuser_dtensor --device cpu --size tiny   # smoke
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

from benchmarks import zoo, zoo_check  # noqa: E402
from benchmarks.run import compile_kwargs, parse_backend  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--backend", default="nvfuser_dtensor")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="real")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    dtype = torch.bfloat16
    zm = zoo.build(a.model, a.size, a.device, dtype)
    compiled = torch.compile(zm.model, **compile_kwargs(*parse_backend(a.backend)))
    batch = zm.make_inputs(0)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)

    def step():
        zoo_check.seeded_step(compiled, zm, batch, True, 0, collect=False)

    for _ in range(5):
        step()
    sync()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    print(f"== {a.model} {a.backend}: step {statistics.median(times):.2f} ms (median of {a.steps}, synchronized)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(a.steps):
        step()
    sync()
    prof.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(a.top)
        body = out.getvalue()
        print(f"-- by {key}, {a.steps} steps")
        print(body[body.find("ncalls"):])


if __name__ == "__main__":
    main()
