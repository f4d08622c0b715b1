"""Which inputs the backend's CUDA-graph runner copies into its buffers on every replay, per
zoo model, on the CPU stand-in (``scripts/cpu_runner_zoo.py``, whose arguments it takes).

    python scripts/cpu_runner_copies.py --models llama [--size real] [--accumulate]
    python scripts/cpu_runner_copies.py --models llama --tangent-bytes 1024
    NVFUSER_DTENSOR_TANGENTS_IN_PLACE=0 python scripts/cpu_runner_copies.py --models llama --tangent-bytes 1024

Each replay prints ``REPLAY copies=[(input index, shape, dtype, strides), ...]``, the outputs
it clones and the storages it rebuilds. ``--tangent-bytes`` lowers the size from which
a backward reads its tangents in place (Note [Tangents read in place], the default since
session 30; ``NVFUSER_DTENSOR_TANGENTS_IN_PLACE=0`` copies them), so that tiny models show
what real ones do (session 29: the logits' tangent of Llama's backward, copied on every
replay then, is read in place).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nvfuser_dtensor_backend.cuda_graph_runner as runner  # noqa: E402


def _printing(replay):
    def wrapped(self, rec, args):
        copies = [(i, tuple(args[i].shape), str(args[i].dtype).removeprefix("torch."), tuple(args[i].stride()))
                  for i, _, _ in rec.copies]
        print(f"REPLAY copies={copies} cloned={list(rec.cloned)} rebuilt={len(rec.rebuilt)}", flush=True)
        return replay(self, rec, args)

    return wrapped


def main(argv: list[str]) -> None:
    if "--tangent-bytes" in argv:
        i = argv.index("--tangent-bytes")
        runner.TANGENT_IN_PLACE_FROM_BYTES = int(argv[i + 1])
        del argv[i:i + 2]
    runner.GraphRunner._replay = _printing(runner.GraphRunner._replay)
    sys.argv = [str(Path(__file__).parent / "cpu_runner_zoo.py"), *argv]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
