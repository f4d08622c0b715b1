"""Two backends on the same case, calls interleaved (A, B, A, B, ...), median per-call time.

On a shared or virtual machine, back-to-back runs of one backend after the other drift by
tens of percent; interleaving single calls puts both under the same conditions, so the
ratio is what stays. For host-side differences (the global view on local tensors against
the same through DTensor, Note [Local execution of the global view]):

    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 1 -m benchmarks.ab_interleaved \\
        --device cpu --cases tp_mlp,tp_attention,sp_block \\
        --a nvfuser_dtensor:global_view --b nvfuser_dtensor:global_view+dtensor_runtime \\
        --out benchmarks/results/cpu_tp1_local_execution
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch
import torch.distributed as dist

from . import cases as cases_mod
from .measure import step_function, time_single_call
from .run import _compile, _init_mesh, environment


def measure(case, size: str, dtype, device: str, mode: str, a: str, b: str, calls: int, mesh) -> dict:
    torch.manual_seed(0)
    work = case.build(size, dtype, device, mesh)
    train = mode == "fwd+bwd"
    if train:
        work.inputs[0].requires_grad_(True)
    steps = {}
    for name in (a, b):
        fn = copy.deepcopy(work.fn) if isinstance(work.fn, torch.nn.Module) else work.fn
        steps[name] = step_function(_compile(fn, name), train)
        for _ in range(3):  # compile and warm up
            steps[name](*work.inputs)
    times: dict[str, list] = {a: [], b: []}
    for _ in range(calls):
        for name in (a, b):
            times[name].append(time_single_call(steps[name], work.inputs, device, reps=1))
    us = {name: statistics.median(t) for name, t in times.items()}
    return {"case": case.name, "size": size, "mode": mode, "a": a, "b": b, "a_us": us[a], "b_us": us[b],
            "b_over_a": us[b] / us[a], "calls": calls}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--cases", default="tp_mlp,tp_attention,sp_block")
    p.add_argument("--size", default="", help="default: cpu on the CPU, large on CUDA")
    p.add_argument("--dtype", default="", help="default: float32 on the CPU, bfloat16 on CUDA")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    size = args.size or ("cpu" if args.device == "cpu" else "large")
    dtype = getattr(torch, args.dtype or ("float32" if args.device == "cpu" else "bfloat16"))
    mesh = _init_mesh(args.device)
    by_name = {c.name: c for c in cases_mod.CASES}
    rows = [measure(by_name[c], size, dtype, args.device, m, args.a, args.b, args.calls, mesh)
            for c in args.cases.split(",") for m in args.modes.split(",")]
    print(f"{'case':14} {'mode':8} {'A us':>9} {'B us':>9} {'B/A':>6}   A = {args.a}, B = {args.b}")
    for r in rows:
        print(f"{r['case']:14} {r['mode']:8} {r['a_us']:9.1f} {r['b_us']:9.1f} {r['b_over_a']:6.2f}")
    if args.out and (mesh is None or dist.get_rank() == 0):
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ab_interleaved.json").write_text(json.dumps(
            {"environment": environment(args.device, mesh), "rows": rows}, indent=1))
    if mesh is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
