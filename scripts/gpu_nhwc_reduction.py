"""Per-channel reductions over NHWC data: nvFuser in one stage, in two, NCHW, and inductor.

    python scripts/gpu_nhwc_reduction.py [--shapes 32x56x56x64,...] [--iters 100]

Why: with channels-last on, ResNet-18's batch-norm backward sums took 1.06 ms for 4 calls
against 0.23 ms in NCHW, and inductor, which reduces in two stages through [1, C, 1, 1, 784]
partials, took 0.04 ms (Note [Channels-last convolutions], benchmarks/results/h100_session21).
This times the same work outside the backend, per ResNet-18 layer shape (bf16 N, H, W, C):
``sum(dy)`` and ``sum(dy * (x - mean) * rstd)`` over N, H and W, the two sums of a batch
norm's backward, as
- ``nhwc_1``: one nvFuser fusion, each sum over the three outer axes of [N, H, W, C] (how the
  backend defines it for channels-last inputs);
- ``nhwc_2``: one fusion, each sum in two stages: [N*H*W, C] seen as [P, Q, C], summed over
  Q, then over P;
- ``nhwc_2f``: the two stages as two fusions (the partials [P, C] go through memory);
- ``nchw_1``: one fusion on [N, C, H, W], sums over N, H and W (the default path's layout);
- ``inductor``: ``torch.compile`` of the same function on the NHWC tensors.
On the CPU (no GPU) the fusions' definitions are still built and evaluated by the backend's
evaluator against PyTorch, which checks the script, not nvFuser.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import time_single_call  # noqa: E402

SHAPES = "32x112x112x64,32x56x56x64,32x28x28x128,32x14x14x256,32x7x7x512"


def _split(rows: int, target: int = 128) -> tuple[int, int]:
    """(P, Q) with P * Q == rows and Q the largest divisor of rows at most ``target``."""
    q = max(d for d in range(1, min(rows, target) + 1) if rows % d == 0)
    return rows // q, q


def _define(fd, DataType, kind: str, n: int, h: int, w: int, c: int) -> None:
    """The two sums of a batch norm's backward; ``kind`` as in the module's docstring."""
    ops = fd.ops
    bf16 = dict(contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False)
    dy = fd.define_tensor(shape=[-1] * 4, **bf16)
    x = fd.define_tensor(shape=[-1] * 4, **bf16)
    mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)
    rstd = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)
    channel_dim = 1 if kind == "nchw_1" else 3
    per_channel = [d != channel_dim for d in range(4)]
    dyf, xf = ops.cast(dy, dtype=DataType.Float), ops.cast(x, dtype=DataType.Float)
    xhat = ops.mul(ops.sub(xf, ops.broadcast(mean, is_broadcast_dim=per_channel)),
                   ops.broadcast(rstd, is_broadcast_dim=per_channel))
    prod = ops.mul(dyf, xhat)
    if kind in ("nhwc_1", "nchw_1"):
        dims = [d for d in range(4) if d != channel_dim]
        fd.add_output(ops.sum(dyf, dims=dims))
        fd.add_output(ops.sum(prod, dims=dims))
        return
    p, q = _split(n * h * w)
    for value in (dyf, prod):
        partial = ops.sum(ops.reshape(value, new_shape=[p, q, c]), dims=[1])
        fd.add_output(partial if kind == "nhwc_2f" else ops.sum(partial, dims=[0]))


def _define_finish(fd, DataType) -> None:
    """``nhwc_2f``'s second fusion: the partials [P, C] summed over P."""
    for _ in range(2):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)
        fd.add_output(fd.ops.sum(t, dims=[0]))


def _reference(dy, x, mean, rstd, channel_dim):
    dims = [d for d in range(4) if d != channel_dim]
    shape = [-1 if d == channel_dim else 1 for d in range(4)]
    dyf = dy.float()
    xhat = (x.float() - mean.view(shape)) * rstd.view(shape)
    return dyf.sum(dims), (dyf * xhat).sum(dims)


def _time_us(fn, iters: int) -> float:
    """Median of ``iters`` single calls between CUDA events, after 10 warm ones."""
    for _ in range(10):
        fn()
    return time_single_call(fn, (), "cuda", iters)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--iters", type=int, default=100)
    a = p.parse_args()
    from nvfuser_direct import DataType, FusionDefinition

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    kinds = ["nhwc_1", "nhwc_2", "nhwc_2f", "nchw_1"]
    print("| N, H, W, C | P x Q | " + " | ".join(f"{k} us" for k in kinds) + " | inductor us | max rel. error |", flush=True)
    print("|---|---|" + "---|" * (len(kinds) + 2))
    for spec in a.shapes.split(","):
        n, h, w, c = map(int, spec.split("x"))
        torch.manual_seed(0)
        dy = torch.randn(n, h, w, c, device=device, dtype=torch.bfloat16)
        x = torch.randn(n, h, w, c, device=device, dtype=torch.bfloat16)
        mean, rstd = torch.randn(c, device=device), torch.rand(c, device=device) + 0.5
        ref = _reference(dy, x, mean, rstd, 3)
        row, error = {}, 0.0
        finish = FusionDefinition()
        with finish:
            _define_finish(finish, DataType)
        for kind in kinds:
            fd = FusionDefinition()
            with fd:
                _define(fd, DataType, kind, n, h, w, c)
            args = ([dy.permute(0, 3, 1, 2).contiguous(), x.permute(0, 3, 1, 2).contiguous(), mean, rstd]
                    if kind == "nchw_1" else [dy, x, mean, rstd])
            if cuda:
                run = ((lambda fd=fd, args=args: finish.execute(fd.execute(args))) if kind == "nhwc_2f"
                       else (lambda fd=fd, args=args: fd.execute(args)))
            else:
                from nvfuser_dtensor_backend.evaluator import Evaluator

                first, second = Evaluator(fd, {}), Evaluator(finish, {})
                run = ((lambda: second(first(args))) if kind == "nhwc_2f" else (lambda: first(args)))
            outs = run()
            error = max(error, *((o - r).abs().max().item() / r.abs().max().item() for o, r in zip(outs, ref)))
            row[kind] = _time_us(run, a.iters) if cuda else float("nan")
        if cuda:
            compiled = torch.compile(lambda dy, x, mean, rstd: _reference(dy, x, mean, rstd, 3), dynamic=False)
            row["inductor"] = _time_us(lambda: compiled(dy, x, mean, rstd), a.iters)
        else:
            row["inductor"] = float("nan")
        pq = "x".join(map(str, _split(n * h * w)))
        print(f"| {spec} | {pq} | " + " | ".join(f"{row[k]:.1f}" for k in kinds + ["inductor"]) + f" | {error:.1e} |", flush=True)


if __name__ == "__main__":
    main()
