"""Where a zoo model's training-step memory sits, step by step, for one backend (goal 5 of
issue 13: ours reserved 1380 MB for ResNet-18 against reduce-overhead's 540, allocated at most
725 against 462). Run it once per backend, each in its own process:

    source .device/setup.sh && python3 scripts/gpu_memory_probe.py resnet18 --backend nvfuser_dtensor
    python3 scripts/gpu_memory_probe.py resnet18 --backend inductor:reduce-overhead

After each of the first steps it prints the memory allocated and reserved now and at most so
far, and our CUDA graphs' counters; at the end, the reserved memory of each memory pool (the
allocator's default pool and each CUDA-graph pool), how much of it is in use, and its largest
segments. A pool that holds much more than it uses, or a default pool as large as a graph
pool, says where the extra reserved memory comes from. Then one more step is judged against
eager's, as the zoo judges it (models with dropout are not judged here).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package

from benchmarks import zoo, zoo_check  # noqa: E402
from benchmarks.run import compile_kwargs, parse_backend  # noqa: E402

MB = 2**20


def pools() -> None:
    """Reserved and in-use memory per pool, from the allocator's snapshot."""
    by_pool: dict = defaultdict(lambda: [0, 0, []])
    for segment in torch.cuda.memory_snapshot():
        entry = by_pool[tuple(segment.get("segment_pool_id", (0, 0)))]
        entry[0] += segment["total_size"]
        entry[1] += segment["allocated_size"]
        entry[2].append(segment["total_size"])
    for pool, (total, used, sizes) in sorted(by_pool.items()):
        name = "default pool" if pool == (0, 0) else f"graph pool {pool}"
        largest = ", ".join(f"{s / MB:.0f}" for s in sorted(sizes, reverse=True)[:8])
        print(f"-- {name}: {total / MB:.0f} MB reserved, {used / MB:.0f} MB in use, {len(sizes)} segments "
              f"(largest MB: {largest})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--backend", default="nvfuser_dtensor")
    p.add_argument("--size", default="real")
    p.add_argument("--steps", type=int, default=8)
    a = p.parse_args()
    zm = zoo.build(a.model, a.size, "cuda", torch.bfloat16)
    compiled = torch.compile(zm.model, **compile_kwargs(*parse_backend(a.backend)))
    batch = zm.make_inputs(0)
    ours = a.backend.startswith("nvfuser_dtensor")
    if ours:
        import nvfuser_dtensor_backend as nb
    torch.cuda.synchronize()
    print(f"== {a.model} {a.backend}: before the first step {torch.cuda.memory_allocated() / MB:.0f} MB allocated "
          f"(weights and batch), {torch.cuda.memory_reserved() / MB:.0f} MB reserved")
    most_allocated = most_reserved = 0
    for i in range(a.steps):
        torch.cuda.reset_peak_memory_stats()  # the peaks below are this step's
        zoo_check.seeded_step(compiled, zm, batch, True, 0, collect=False)
        torch.cuda.synchronize()
        most_allocated = max(most_allocated, torch.cuda.max_memory_allocated())
        most_reserved = max(most_reserved, torch.cuda.max_memory_reserved())
        graphs = f"; our graphs {nb.cuda_graph_stats()}" if ours else ""
        print(f"-- step {i + 1}: allocated at most {torch.cuda.max_memory_allocated() / MB:.0f} MB, after it "
              f"{torch.cuda.memory_allocated() / MB:.0f}; reserved at most {torch.cuda.max_memory_reserved() / MB:.0f}, "
              f"after it {torch.cuda.memory_reserved() / MB:.0f}{graphs}")
    print(f"-- over all steps: allocated at most {most_allocated / MB:.0f} MB, reserved at most {most_reserved / MB:.0f} MB")
    pools()
    if zm.dropout:
        print("-- not judged against eager (dropout)")
        return
    ref = zoo_check.seeded_step(copy.deepcopy(zm.model), zm, batch, True, 0)
    step = zoo_check.seeded_step(compiled, zm, batch, True, 0)
    errs = zoo_check.errors(step, ref, True)
    verdict = zoo_check.judgement(step, ref, errs, zm, batch, True, 0, torch.bfloat16, {})
    print(f"-- step {a.steps + 1} against eager: {'ok' if verdict['ok'] else 'WRONG'} "
          f"(loss {errs[0]:.1e}, gradients {errs[1]:.1e})")


if __name__ == "__main__":
    main()
