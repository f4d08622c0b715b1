"""One arm of gpu_graph_memory_reuse.py's gradient accumulation, alone in its process, for
finding where gradients stop being finite or a CUDA fault starts.

    CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 python scripts/gpu_accumulate_alone.py efficientnet_b0 --arm plain

``--arm eager`` (no compile), ``plain`` (``cuda_graphs=False``) or ``graphs`` (the default
options). After every backward it prints which gradients are not finite and the largest
gradient, so the first micro-batch that goes wrong is named; with NVFUSER_DTENSOR_TRACE=1 the
last region printed before a fault is the one that faulted; ``--options '{"verify": true}'``
names every region whose nvFuser output differs from PyTorch's on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--arm", default="plain", choices=("eager", "plain", "graphs"))
    p.add_argument("--size", default="real", choices=("tiny", "real"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--micro", type=int, default=2)
    p.add_argument("--options", default="{}", help="backend options (JSON), added to the arm's")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    zm = zoo.build(args.model, args.size, device, getattr(torch, args.dtype))
    model = zm.model
    if args.arm != "eager":
        options = {**({"cuda_graphs": False} if args.arm == "plain" else {}), **json.loads(args.options)}
        model = torch.compile(model, backend="nvfuser_dtensor", dynamic=False, options=options or None)
    warnings.simplefilter("always")  # every region mismatch (options.verify), each micro-batch
    opt = torch.optim.SGD(zm.model.parameters(), lr=1e-3)
    bad_total = 0
    for step in range(args.steps):
        for k in range(args.micro):
            b = zm.make_inputs(step * args.micro + k)
            loss = zm.loss_fn(model(**b.kwargs), b)
            loss.backward()
            grads = [(n, q.grad) for n, q in zm.model.named_parameters() if q.grad is not None]
            bad = [n for n, g in grads if not g.isfinite().all()]
            bad_total += len(bad)
            top = max(g.float().abs().max().item() for _, g in grads)
            print(f"{args.model} {args.arm} step {step} micro {k}: loss {loss.item():.4g}, "
                  f"largest gradient {top:.3g}, {len(bad)} not finite {bad[:4]}", flush=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"{args.model} {args.arm}: {'OK' if bad_total == 0 else 'NOT FINITE'}", flush=True)
    return 0 if bad_total == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
