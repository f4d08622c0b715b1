"""Where a tensor-parallel case's call goes, per backend (issue 14, point 2): GPU kernels
(count and time per call, the longest by name) against the wall time per call, so host time
and kernel time of the global view, the local path and inductor are told apart.

    torchrun --standalone --nproc_per_node 1 scripts/gpu_tp_kernels.py \\
        --cases tp_attention,sp_block --size large --modes fwd,fwd+bwd \\
        --backends inductor,nvfuser_dtensor,nvfuser_dtensor:global_view [--top 8]

Three warm-up calls, then ``--calls`` calls under the profiler (rank 0 prints); the log says
which global-view regions run through DTensor on every call, and why. On the CPU
(``--device cpu``) it is a smoke test of the script: no GPU kernels.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cases as cases_mod  # noqa: E402
from benchmarks.measure import is_gpu_range, step_function, sync  # noqa: E402
from benchmarks.run import _compile, _init_mesh  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="tp_mlp,tp_attention,sp_block")
    p.add_argument("--size", default="large")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    p.add_argument("--backends", default="inductor,nvfuser_dtensor,nvfuser_dtensor:global_view")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    # Region calls of the global view that run through DTensor say why (Note [Local execution
    # of the global view]); the evaluator on the CPU never takes the fast path.
    logger = logging.getLogger("nvfuser_dtensor_backend")
    logger.setLevel(logging.INFO)
    logger.addHandler(logging.StreamHandler())

    mesh = _init_mesh(args.device)
    rank0 = mesh is None or torch.distributed.get_rank() == 0
    dtype = getattr(torch, args.dtype)
    for name in args.cases.split(","):
        for mode in args.modes.split(","):
            for backend in args.backends.split(","):
                torch.manual_seed(0)
                work = cases_mod.BY_NAME[name].build(args.size, dtype, args.device, mesh)
                if mode == "fwd+bwd":
                    work.inputs[0].requires_grad_(True)
                fn = copy.deepcopy(work.fn) if isinstance(work.fn, torch.nn.Module) else work.fn
                torch._dynamo.reset()
                step = step_function(_compile(fn, backend), mode == "fwd+bwd")
                for _ in range(3):
                    step(*work.inputs)
                sync(args.device)
                activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
                with profile(activities=activities) as prof:
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        step(*work.inputs)
                    sync(args.device)
                    wall_ms = (time.perf_counter() - t0) * 1e3 / args.calls
                totals: dict[str, list] = {}
                for e in prof.events():
                    if e.device_type == torch.autograd.DeviceType.CUDA and not is_gpu_range(e.name):
                        entry = totals.setdefault(e.name, [0, 0.0])
                        entry[0] += 1
                        entry[1] += e.device_time / 1e3
                if not rank0:
                    continue
                kernels = sum(n for n, _ in totals.values()) / args.calls
                kernel_ms = sum(ms for _, ms in totals.values()) / args.calls
                print(f"== {name} {args.size} {mode} {backend}: wall {wall_ms:.3f} ms/call (profiled), "
                      f"{kernels:.0f} kernels, {kernel_ms:.3f} ms of kernels per call")
                for kname, (n, ms) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:args.top]:
                    print(f"   {ms / args.calls:8.3f} ms {n / args.calls:5.1f}x  {kname[:110]}")
    if mesh is not None:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
