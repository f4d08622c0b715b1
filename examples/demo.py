"""A real model through ``torch.compile(model, backend="nvfuser_dtensor")``.

Builds a Hugging Face, timm or torchvision model from its config class with random weights
(nothing is downloaded; ``benchmarks/zoo.py``, default: Hugging Face Llama), compiles a copy
with the backend, checks a training step (loss and every parameter's gradient) and an
inference step against eager, prints which aten ops became nvFuser fusion regions and which
stayed in PyTorch, and times eager / inductor / nvfuser_dtensor on the same inputs.

    python examples/demo.py                          # CUDA + bf16 + real size if available, else CPU
    python examples/demo.py --model gpt2 --device cpu --iters 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/ of this checkout

import nvfuser_dtensor_backend as nb  # noqa: E402
from benchmarks import zoo, zoo_check  # noqa: E402

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parity(zm, train: bool) -> bool:
    """One step of the compiled model against eager, judged as the zoo judges it."""
    res = zoo_check.compare(zm, "nvfuser_dtensor", train)
    what = "training step (forward, loss, backward)" if train else "inference (forward, no_grad)"
    tol = res["tol"]
    grad = f", grad_err {res['grad_err']:.2e} (tol {tol['grad']:.0e})" if train else ""
    print(f"  {what:<40} loss_err {res['loss_err']:.2e} (tol {tol['loss']:.0e}){grad}  "
          f"{'PASS' if res['status'] == 'ok' else 'FAIL'}")
    for message in res["fallbacks"]:
        print(f"    fallback: {message[:300]}")
    return res["status"] == "ok"


def report() -> None:
    reps = nb.reports()
    n_regions = n_fused = 0
    for r in reps:
        n_regions += len(r.partition.regions)
        n_fused += sum(len(ops) for ops in r.partition.regions)
        for line in r.summary().splitlines()[:12]:
            print("  " + line)
        if len(r.summary().splitlines()) > 12:
            print(f"  ... ({len(r.summary().splitlines()) - 12} more lines: nvfuser_dtensor_backend.reports())")
    print(f"  total: {len(reps)} aten graph(s), {n_regions} nvFuser region(s), {n_fused} fused aten op(s)")
    print(f"  fusion cache: {nb.cache_info()}")


def step_time(model, zm, batch, train: bool, iters: int, device) -> float:
    for _ in range(2):  # warm-up: compiles, fills caches
        zoo_check.run_step(model, batch, zm.loss_fn, train, collect=False)
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        zoo_check.run_step(model, batch, zm.loss_fn, train, collect=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timing(zm, iters: int, device) -> None:
    batch = zm.make_inputs(0)
    print(f"  {'backend':<16} {'inference':>12} {'training step':>15}")
    base = {}
    for backend in ("eager", "inductor", "nvfuser_dtensor"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = zoo_check.compile_model(zm.model, backend)
                t = [step_time(model, zm, batch, train, iters, device) for train in (False, True)]
        except Exception as e:  # e.g. inductor without a working C++ compiler on CPU
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"  {backend:<16} failed: {type(e).__name__}: {first[:200]}")
            continue
        base[backend] = t
        vs = ""
        if backend == "nvfuser_dtensor" and "inductor" in base:
            vs = "   vs inductor: " + " / ".join(f"{b / o:.2f}x" for b, o in zip(base["inductor"], t))
        print(f"  {backend:<16} {t[0] * 1e3:9.2f} ms {t[1] * 1e3:12.2f} ms{vs}")
    if device.type == "cpu":
        print("  (on CPU nvFuser regions run through the torch evaluator, not nvFuser kernels: "
              "these timings say nothing about GPU performance)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama", choices=zoo.NAMES)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=sorted(DTYPES),
                        help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--size", default=None, choices=zoo.SIZES, help="default: real on CUDA, tiny on CPU")
    parser.add_argument("--iters", type=int, default=None, help="timed steps per measurement (default: 3 on CPU, 20 on CUDA)")
    args = parser.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    size = args.size or ("real" if device.type == "cuda" else "tiny")
    iters = args.iters if args.iters is not None else (20 if device.type == "cuda" else 3)
    if iters < 1:
        parser.error("--iters must be >= 1")

    print(f"torch {torch.__version__}, nvfuser_dtensor_backend {nb.__version__}, "
          f"nvFuser available: {nb.nvfuser_available()}")
    entry = zoo.BY_NAME[args.model]
    family = {"hf": "Hugging Face transformers", "vision": "timm/torchvision"}.get(entry.family, entry.family)
    print(f"model {args.model} ({family}{', ' + entry.note if entry.note else ''}), {size} size, "
          f"device {device}, dtype {str(dtype).removeprefix('torch.')}")
    zm = zoo.build(args.model, size, str(device), dtype)

    nb.clear_reports()
    nb.clear_cache()
    print("\nParity with eager:")
    ok = True
    for train in (False, True):  # training last: the report below is of its forward and backward
        try:
            ok &= parity(zm, train)
        except Exception:
            traceback.print_exc()
            print("  FAIL: the compiled model raised")
            ok = False

    print("\nWhat the backend compiled (nvfuser_dtensor_backend.reports()):")
    report()

    print(f"\nTiming: median of {iters} step(s) after two warm-up steps")
    timing(zm, iters, device)

    print(f"\nParity: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
