"""Why a zoo model's regions fall back on the GPU: each failing region's whole nvFuser error.

    NVFUSER_DISABLE=parallel_compile python scripts/gpu_region_errors.py gpt2 --dump DIR [--mode train]
    python scripts/gpu_region_errors.py bart --steps 6 --info   # step times, graphs, what is captured

The zoo rows keep one line of each fallback reason; nvFuser's parallel compile hides the
failing segment's own error behind a preamble. This runs one compiled step of the model with
the backend's definitions written to DIR (``dump_dir``) and prints, for every region that
falls back, its ops and the whole error (with ``NVFUSER_DISABLE=parallel_compile`` that is
the segment's own assert), so the definition in DIR can be reduced to a repro.
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
    p.add_argument("--mode", default="train", choices=("train", "infer"))
    p.add_argument("--size", default="real", choices=("real", "tiny"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--dump", default=None, help="write every region's definition there")
    p.add_argument("--chars", type=int, default=4000, help="print at most this much of each error")
    p.add_argument("--steps", type=int, default=1, help="steps to run and time (the first compiles)")
    p.add_argument("--info", action="store_true", help="the backend's INFO log lines (what is captured, and why not)")
    args = p.parse_args(argv)
    if args.info:
        import logging

        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("nvfuser_dtensor_backend").setLevel(logging.INFO)
    from nvfuser_dtensor_backend import region as region_mod

    original = region_mod.FusedRegion._fail

    def _fail(self, key, reason, error):
        print(f"== region {self.name} ({', '.join(self.ops)}) falls back: {reason[:200]}")
        print(str(error)[: args.chars])
        sys.stdout.flush()
        return original(self, key, reason, error)

    region_mod.FusedRegion._fail = _fail
    device = "cuda" if torch.cuda.is_available() else "cpu"
    zm = zoo.build(args.model, args.size, device, getattr(torch, args.dtype))
    batch = zm.make_inputs(0)
    model = zoo_check.compile_model(zm.model, "nvfuser_dtensor", {"dump_dir": args.dump} if args.dump else None)
    import time

    import nvfuser_dtensor_backend as nb

    for i in range(args.steps):
        start = time.perf_counter()
        zoo_check.seeded_step(model, zm, batch, args.mode == "train", 0, collect=False)
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"step {i}: {(time.perf_counter() - start) * 1e3:.1f} ms", flush=True)
    kinds = [getattr(r, "kind", "?") for r in nb.reports()]
    print(f"compiled graphs: {len(kinds)} {kinds}; regions: {sum(len(r.regions) for r in nb.reports())}")
    print(f"cuda_graph_stats: {nb.cuda_graph_stats()}")
    if device == "cuda":  # reserved memory by pool: the general one, and each of our graphs' pools
        pools: dict = {}
        for seg in torch.cuda.memory_snapshot():
            key = tuple(seg.get("segment_pool_id") or ()) or "general"
            reserved, active = pools.get(key, (0, 0))
            pools[key] = (reserved + seg["total_size"], active + seg["active_size"])
        total = sum(r for r, _ in pools.values())
        print(f"memory: reserved {total / 2**20:.0f} MB in {len(pools)} pools; "
              f"peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MB")
        for key, (reserved, active) in sorted(pools.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"memory pool {key}: reserved {reserved / 2**20:.0f} MB, active {active / 2**20:.0f} MB")
    print("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
