"""Which tensors fail cudagraph trees' memory-pool check, for a zoo model's training steps.

    python scripts/gpu_cuda_graph_pool_probe.py convnext [--before inductor] [--steps 3]

On the H200, ConvNeXt's first backward warm-up under ``cuda_graphs`` (default "auto") raised
"These storage data ptrs are not allocated in pool (0, 1) but should be" when the model ran
after an inductor compile in the same process (scripts/gpu_top_kernels.py), not in the zoo.
This wraps the trees' ``check_memory_pool``: on a failure it prints the live CUDA tensors
whose storages are the ones named (shape, dtype, strides, storage size, whether a parameter
or a gradient), then lets the error go on (the backend then runs the graph uncaptured,
cuda_graphs.py ``_falling_back``).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo, zoo_check  # noqa: E402


def _describe(ptrs: set[int], params: dict) -> list[str]:
    lines = []
    for obj in gc.get_objects():
        try:
            if not (isinstance(obj, torch.Tensor) and obj.is_cuda):
                continue
            ptr = obj.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - freed or special tensors
            continue
        if ptr in ptrs:
            name = params.get(id(obj), "")
            lines.append(f"  {ptr}: {tuple(obj.shape)} {obj.dtype} strides {obj.stride()} storage "
                         f"{obj.untyped_storage().nbytes()} B offset {obj.storage_offset()} {name} "
                         f"base={'yes' if obj._base is not None else 'no'}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=zoo.NAMES)
    p.add_argument("--before", default="inductor", help="a backend compiled and run first, or ''")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    from torch._inductor import cudagraph_trees as trees

    original = trees.check_memory_pool
    zm = zoo.build(args.model, "real", "cuda", torch.bfloat16)
    batch = zm.make_inputs(0)
    models = {}

    def probe(device, pool_id, live_storages_ptrs):
        try:
            return original(device, pool_id, live_storages_ptrs)
        except RuntimeError as e:
            ptrs = {int(x) for x in re.findall(r"\d{8,}", str(e))}
            params = {}
            for m in models.values():
                for n, prm in zoo_check._module(m).named_parameters():
                    params[id(prm)] = f"param {n}"
                    if prm.grad is not None:
                        params[id(prm.grad)] = f"grad {n}"
            print(f"pool check failed for {len(ptrs)} storages; live CUDA tensors on them:", flush=True)
            print("\n".join(_describe(ptrs, params)) or "  (none found by gc)", flush=True)
            raise

    trees.check_memory_pool = probe
    for backend in [b for b in (args.before, "nvfuser_dtensor") if b]:
        model = models[backend] = zoo_check.compile_model(zm.model, backend)
        for step in range(args.steps):
            zoo_check.seeded_step(model, zm, batch, True, 0, collect=False)
            torch.cuda.synchronize()
            print(f"{backend}: step {step} done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
