"""Every recording and uncaptured call of the backend's CUDA-graph runners, step by step, for
one zoo model on the CPU stand-in (``ReplayByRerun``) with ``cuda_graphs="auto"``: which
runner records, how often, on which inputs read in place, and which fill ``MAX_GRAPHS``.

    python scripts/cpu_recording_trace.py bart --layers 6 --layer-graphs --in-place-bytes 1024 \
        [--min-training-launches 1] [--steps 6]

``--in-place-bytes`` lowers the sizes from which outputs are lent and tangents read in place
(``LEND_FROM_BYTES``, ``TANGENT_IN_PLACE_FROM_BYTES``), so that a tiny model reads in place
what a real one does. Session 36: BART's layer backwards (one compiled graph per layer,
called once per layer) read the gradient the next layer's replay made in place, so a
recording made anew upstream moves every tangent down the chain and each layer records
again; with ``--min-training-launches 1`` the small backwards between the layers record
late (steps 3 to 5) and one layer backward fills its 16 recordings, as on the H100.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch

root = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(root), str(root / "tests")]

from benchmarks import zoo, zoo_builders, zoo_check  # noqa: E402
from cpu_capture import auto_on_cpu, stand_in_for_the_gpu  # noqa: E402

import nvfuser_dtensor_backend as nb  # noqa: E402
from nvfuser_dtensor_backend import cuda_graph_runner as runner, cuda_graphs  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--layers", type=int, default=4, help="layers of the tiny language models")
    p.add_argument("--layer-graphs", action="store_true", help="LayerDrop's draw on: one graph per layer")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--min-training-launches", type=int, default=cuda_graphs.MIN_LAUNCHES["training"])
    p.add_argument("--in-place-bytes", type=int, default=0, help="lend and read tangents in place from this size")
    args = p.parse_args()
    stand_in_for_the_gpu()
    auto_on_cpu()
    cuda_graphs.MIN_LAUNCHES["training"] = args.min_training_launches
    if args.in_place_bytes:
        runner.LEND_FROM_BYTES = runner.TANGENT_IN_PLACE_FROM_BYTES = args.in_place_bytes
    zoo_builders.LM["tiny"]["layers"] = args.layers

    names: dict[int, str] = {}
    step = [0]
    counts: Counter = Counter()

    def name(r) -> str:
        return names.setdefault(id(r), f"{r.kind}#{len(names)}")

    record, uncaptured = runner.GraphRunner._record, runner.GraphRunner._uncaptured

    def traced_record(self, a, *rest):
        key = [hex(a[i].data_ptr())[-5:] for i in self.static][:2]
        rec = record(self, a, *rest)
        if rec is not None:
            counts[(step[0], name(self))] += 1
            print(f"step {step[0]} record   {name(self):12s} n={self.count + 1:2d} static {key}... "
                  f"in place {[(i, hex(ptr)[-5:]) for i, ptr in rec.extra][:3]} copied {len(rec.copies)}")
        return rec

    def traced_uncaptured(self, a, run=None):
        print(f"step {step[0]} as it is {name(self)}")
        return uncaptured(self, a, run)

    runner.GraphRunner._record, runner.GraphRunner._uncaptured = traced_record, traced_uncaptured
    zm = zoo.build(args.model, "tiny", "cpu", torch.float32)
    for m in zm.model.modules() if args.layer_graphs else ():
        if hasattr(m, "layerdrop"):
            m.layerdrop = 1e-9
    batch = zm.make_inputs(0)
    compiled = zoo_check.compile_model(zm.model, "nvfuser_dtensor", {"cuda_graphs": "auto"})
    for step[0] in range(args.steps):
        zoo_check.seeded_step(compiled, zm, batch, True, 0, collect=False)
    print("recordings per step:", [sum(n for (s, _), n in counts.items() if s == i) for i in range(args.steps)])
    print(nb.cuda_graph_stats())
    return 0


if __name__ == "__main__":
    sys.exit(main())
