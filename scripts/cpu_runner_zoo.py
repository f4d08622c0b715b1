"""Every zoo model (tiny by default, fp32, CPU) through the backend's own CUDA-graph runner with a
replay-by-rerun capture (tests/test_cuda_graph_runner.py's ``ReplayByRerun``: a replay runs
the function again and copies into the same output tensors), so the runner's rules (keys,
copies, watched outputs, in-place inputs) meet real model code before the GPU: four steps
each, the last ones replays, judged against eager like the zoo.

    python scripts/cpu_runner_zoo.py [--models gpt2,llama|all] [--layer-graphs] [--size real] [--held]
                                     [--accumulate] [--allocator worst|fresh]

``--layer-graphs`` sets every ``layerdrop`` to 1e-9: transformers then draws LayerDrop's
random number per layer and step, a graph break in the loop over layers, so one compiled
graph runs per layer, as BART's did on the H200's transformers (Note [Backwards of
uncaptured forwards]); no layer is dropped in practice. ``--held`` prints the memory the
recordings hold (their outputs and input buffers, each storage once, not the parameters
they read) and how much of it lies in recordings the last step did not replay (Note
[Record what repeats]).
``--accumulate`` adds a training step of gradient accumulation over two micro-batches after
the replays, judged like the zoo's (``zoo_check.after_replays``). ``--allocator fresh``
plays an allocator that never reuses a recording's memory for a later one, instead of the
worst one (every later recording's outputs overwritten by a replay). ``--models all`` is the
zoo and the wider zoo (``benchmarks/zoo_more.py``). ``--nan-fill``: memory nobody wrote holds
NaN (PyTorch's ``fill_uninitialized_memory``), as recycled GPU memory holds garbage, so a read
of memory never written shows.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(root), str(root / "tests")]

from benchmarks import zoo, zoo_builders, zoo_check  # noqa: E402
from helpers import RecordingWatch, fill_unwritten_memory_with_nan  # noqa: E402
from cpu_capture import ReplayByRerun, stand_in_for_the_gpu  # noqa: E402

import nvfuser_dtensor_backend as nb  # noqa: E402
from nvfuser_dtensor_backend import cuda_graphs  # noqa: E402

STEPS = 4


def held(watch: RecordingWatch) -> str:
    mb = 2**20
    return (f"held {watch.held_bytes(watch.live()) / mb:.1f} MB, "
            f"{watch.held_bytes(watch.stale()) / mb:.1f} MB of it not replayed in the last step")


def judged(step, ref, zm, batch, train: bool, fp64: dict) -> tuple[float, float | None, bool]:
    """(loss error, gradient error, right) of ``step`` against eager's ``ref``, judged as the
    zoo judges (``zoo_check.judgement``; ``fp64`` keeps the float64 run)."""
    loss, grad = zoo_check.errors(step, ref, train)
    return loss, grad, zoo_check.judgement(step, ref, (loss, grad), zm, batch, train, 0, torch.float32, fp64)["ok"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default=",".join(n for n in zoo.NAMES if n != "bert_dropout"))
    p.add_argument("--layer-graphs", action="store_true", help="LayerDrop's draw on: one graph per layer")
    p.add_argument("--size", default="tiny", choices=zoo_builders.SIZES)
    p.add_argument("--held", action="store_true", help="memory the recordings hold, and how much is never replayed")
    p.add_argument("--accumulate", action="store_true", help="then gradient accumulation over two micro-batches")
    p.add_argument("--allocator", default="worst", choices=("worst", "fresh"))
    p.add_argument("--nan-fill", action="store_true",
                   help="memory nobody wrote holds NaN, as recycled GPU memory holds garbage (as in the CPU tests)")
    args = p.parse_args()
    if args.nan_fill:
        fill_unwritten_memory_with_nan()
    ReplayByRerun.worst = args.allocator == "worst"
    names = args.models.split(",") if args.models != "all" else [
        *(n for n in zoo.NAMES if n != "bert_dropout"), *zoo.more_entries()]
    watch = RecordingWatch() if args.held else None
    stand_in_for_the_gpu()
    bad = 0
    for name in names:
        zm = zoo.build(name, args.size, "cpu", torch.float32)
        for m in zm.model.modules() if args.layer_graphs else ():
            if hasattr(m, "layerdrop"):
                m.layerdrop = 1e-9
        for train in (True, False):
            batch = zm.make_inputs(0)
            ref = zoo_check.seeded_step(copy.deepcopy(zm.model), zm, batch, train, 0)
            nb.cuda_graph_stats(clear=True)
            if watch:
                watch.made.clear()
            compiled = zoo_check.compile_model(zm.model, "nvfuser_dtensor", {"cuda_graphs": True})
            errs, fp64 = [], {}
            for i in range(STEPS):
                if watch and i == STEPS - 1:
                    watch.last_step()
                step = zoo_check.seeded_step(compiled, zm, batch, train, 0)
                errs.append(judged(step, ref, zm, batch, train, fp64))
            if train and args.accumulate:
                step = zoo_check.seeded_step(compiled, zm, batch, train, 0, micro_batches=2)
                errs.append(judged(step, ref, zm, batch, train, fp64))
            stats = nb.cuda_graph_stats()
            ok = all(right for _, _, right in errs) and stats["recorded"] > 0
            bad += not ok
            print(f"{name:12s} {'train' if train else 'infer':5s} {'ok' if ok else 'WRONG'} "
                  f"errors {[(f'{l:.1e}', None if g is None else f'{g:.1e}') for l, g, _ in errs]} {stats}"
                  + (" (judged against float64)" if fp64 else "")
                  + (f"; {held(watch)}" if watch else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
