"""Session 28, call 1: the full traceback of a zoo model's compiled inference step (the
channels-last inference default failed with BackendCompilerFailed in session 27's zoo).

    python3 benchmarks/results/h100_session28/probe_channels_last.py resnet18
"""
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import zoo, zoo_check  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
zm = zoo.build(name, "real", "cuda", torch.bfloat16)
zm.model.eval()
batch = zm.make_inputs(0)
ref = zoo_check.seeded_step(zm.model, zm, batch, False, 0)
compiled = zoo_check.compile_model(zm.model, "nvfuser_dtensor")
try:
    for _ in range(3):
        step = zoo_check.seeded_step(compiled, zm, batch, False, 0)
    print(name, "ok, output error", zoo_check._rel(step.output.float(), ref.output.float()))
except Exception:
    traceback.print_exc()
    e = sys.exc_info()[1]
    while e.__cause__ is not None or e.__context__ is not None:
        e = e.__cause__ or e.__context__
        print("CAUSE:", type(e).__name__, str(e)[:3000])
