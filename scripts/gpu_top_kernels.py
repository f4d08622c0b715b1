"""The GPU kernels that take a zoo model's step time, per backend (issue 13).

    python scripts/gpu_top_kernels.py gpt2 --backends eager,inductor,nvfuser_dtensor [--mode train] [--top 12]

For each backend: three warm-up steps, then one step under the profiler; prints the kernels
by total GPU time (name, calls, ms), so two backends' steps can be told apart kernel by kernel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo, zoo_check  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=zoo.NAMES)
    p.add_argument("--backends", default="eager,inductor,nvfuser_dtensor")
    p.add_argument("--mode", default="train", choices=("train", "infer"))
    p.add_argument("--size", default="real", choices=("real", "tiny"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    zm = zoo.build(args.model, args.size, "cuda", getattr(torch, args.dtype))
    batch = zm.make_inputs(0)
    train = args.mode == "train"
    for backend in args.backends.split(","):
        model = zoo_check.compile_model(zm.model, backend)
        for _ in range(3):
            zoo_check.seeded_step(model, zm, batch, train, 0, collect=False)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            zoo_check.seeded_step(model, zm, batch, train, 0, collect=False)
            torch.cuda.synchronize()
        totals: dict[str, list] = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                t = totals.setdefault(e.name, [0, 0.0])
                t[0] += 1
                t[1] += e.time_range.elapsed_us() / 1e3
        all_ms = sum(t[1] for t in totals.values())
        print(f"== {args.model} {args.mode} {backend}: {sum(t[0] for t in totals.values())} GPU activities, {all_ms:.2f} ms")
        for name, (n, ms) in sorted(totals.items(), key=lambda kv: -kv[1][1])[: args.top]:
            print(f"  {ms:7.3f} ms {n:4d}x  {name[:150]}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
