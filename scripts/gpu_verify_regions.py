"""Which region of a zoo model gives wrong numbers: one step with ``options.verify`` on.

    python scripts/gpu_verify_regions.py convnext --mode train [--size real] [--options '{}']

Every region also runs in PyTorch on the same inputs (nvfuser_dtensor_backend/verify.py);
each region output beyond its dtype's tolerance is printed with the region's ops, and the
step's loss and gradient errors against eager are printed last. Run each model in its own
process (a CUDA fault poisons the context).
"""

from __future__ import annotations

import copy
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo, zoo_check  # noqa: E402


def main(argv=None) -> int:
    p = zoo_check.step_parser(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    from nvfuser_dtensor_backend.verify import RegionMismatchWarning

    device = "cuda" if torch.cuda.is_available() else "cpu"
    zm = zoo.build(args.model, args.size, device, getattr(torch, args.dtype))
    train = args.mode == "train"
    batch = zm.make_inputs(0)
    ref = zoo_check.seeded_step(copy.deepcopy(zm.model), zm, batch, train, 0)
    options = {"verify": True, **json.loads(args.options)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = zoo_check.compile_model(zm.model, "nvfuser_dtensor", options)
        step = zoo_check.seeded_step(compiled, zm, batch, train, 0)
    for w in caught:
        if issubclass(w.category, RegionMismatchWarning) or "runs in PyTorch" in str(w.message):  # also logged to stderr
            print(f"[{w.category.__name__}] {w.message}"[:1500], flush=True)
    loss_err, grad_err = zoo_check.errors(step, ref, train)
    print(f"{args.model} {args.mode}: loss_err {loss_err:.3g} grad_err {grad_err}")
    if train:  # the worst parameters, by gradient error relative to all gradients' norm
        total = sum(g.double().norm().item() ** 2 for g in ref.grads.values() if g is not None) ** 0.5 or 1.0
        worst = sorted(((((step.grads[n].double() - g.double()).norm().item() / total), n)
                        for n, g in ref.grads.items() if g is not None and step.grads.get(n) is not None),
                       reverse=True)[:6]
        for err, name in worst:
            print(f"  grad {name}: {err:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
