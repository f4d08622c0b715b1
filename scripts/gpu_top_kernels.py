"""The GPU kernels that take a zoo model's step time, per backend (issue 13).

    python scripts/gpu_top_kernels.py gpt2 --backends eager,inductor,nvfuser_dtensor [--mode train] [--top 12]
    python scripts/gpu_top_kernels.py gpt2 --backends nvfuser_dtensor:no_cuda_graphs --regions

For each backend: three warm-up steps, then one step under the profiler; prints the kernels
by total GPU time (name, calls, ms), so two backends' steps can be told apart kernel by kernel.
``--regions`` (sets NVFUSER_DTENSOR_PROFILE=1; use a backend without CUDA graphs, whose
replays hide the ranges) also prints each of our region calls' GPU span (first kernel's start
to last kernel's end, gaps included), with its ops, and the kernels launched outside regions by
the aten op that launched them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo, zoo_check  # noqa: E402
from benchmarks.measure import is_gpu_range  # noqa: E402
from benchmarks.run import parse_backend  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=[*zoo.NAMES, *zoo.more_entries()])  # the wider zoo too (efficientnet_b0)
    p.add_argument("--backends", default="eager,inductor,nvfuser_dtensor")
    p.add_argument("--mode", default="train", choices=("train", "infer"))
    p.add_argument("--size", default="real", choices=("real", "tiny"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (no GPU kernels)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--regions", action="store_true", help="GPU time per nvfuser_dtensor region")
    args = p.parse_args(argv)
    if args.regions:
        os.environ["NVFUSER_DTENSOR_PROFILE"] = "1"  # read when the package is imported
    from torch.profiler import ProfilerActivity, profile

    zm = zoo.build(args.model, args.size, args.device, getattr(torch, args.dtype))
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    batch = zm.make_inputs(0)
    train = args.mode == "train"
    for backend in args.backends.split(","):
        name, options = parse_backend(backend)  # e.g. nvfuser_dtensor:no_cuda_graphs
        model = zoo_check.compile_model(zm.model, name, options)
        for _ in range(3):
            zoo_check.seeded_step(model, zm, batch, train, 0, collect=False)
        sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=args.regions) as prof:
            zoo_check.seeded_step(model, zm, batch, train, 0, collect=False)
            sync()
        totals: dict[str, list] = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and not is_gpu_range(e.name):
                _add(totals, e.name, e.time_range.elapsed_us() / 1e3)
        all_ms = sum(t[1] for t in totals.values())
        print(f"== {args.model} {args.mode} {backend}: {sum(t[0] for t in totals.values())} GPU activities, {all_ms:.2f} ms")
        _print_top(totals, args.top, 150)
        if args.regions:
            _print_regions(prof, args.top, all_ms)
        sys.stdout.flush()
    return 0


def _add(table: dict, key: str, ms: float) -> None:
    """Counts one more call of ``key`` taking ``ms`` (``table``: key -> [calls, ms])."""
    t = table.setdefault(key, [0, 0.0])
    t[0] += 1
    t[1] += ms


def _print_top(table: dict, top: int, width: int) -> None:
    for name, (n, ms) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {ms:7.3f} ms {n:4d}x  {name[:width]}")


def _print_regions(prof, top: int, all_ms: float) -> None:
    """The GPU span of each ``nvfr`` range (region.py, _ProfiledEntry), and the kernels
    launched outside them by the aten op that launched them."""
    regions: dict[str, list] = {}
    for e in prof.events():  # the ranges' GPU side: from the first kernel's start to the last one's end
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("nvfr "):
            _add(regions, e.name, e.time_range.elapsed_us() / 1e3)
    total = sum(r[1] for r in regions.values())
    try:
        _print_outside(prof, top)
    except Exception as e:  # noqa: BLE001 - the profiler's event fields differ between versions
        print(f"-- kernels outside our regions: not attributed ({type(e).__name__}: {e})")
    print(f"-- {len(regions)} region calls' spans on the GPU: {total:.2f} ms of the step's {all_ms:.2f} ms of kernels")
    _print_top(regions, top, 220)


def _print_outside(prof, top: int) -> None:
    ops: dict[str, list] = {}  # kernels launched outside our regions, by the aten op (and its caller)
    for e in prof.events():
        kernels = getattr(e, "kernels", None)
        if e.device_type != torch.autograd.DeviceType.CPU or not kernels or e.name.startswith("nvfr "):
            continue
        up, chain = e.cpu_parent, []
        while up is not None and not up.name.startswith("nvfr "):
            chain.append(up.name)
            up = up.cpu_parent
        if up is not None:
            continue  # inside one of our regions
        key = " < ".join([e.name] + chain[:2]) + f" {e.input_shapes}"[:160]
        _add(ops, key, sum(k.duration for k in kernels) / 1e3)
    print("-- kernels outside our regions, by the op that launched them")
    _print_top(ops, top, 400)


if __name__ == "__main__":
    raise SystemExit(main())
