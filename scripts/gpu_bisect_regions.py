"""Which nvFuser regions make a zoo model's step wrong, when each region alone is right.

    python scripts/gpu_bisect_regions.py convnext [--mode train] [--size real] [--options '{}']

``scripts/gpu_verify_regions.py`` compares each region's values with PyTorch's on the same
inputs; an error it cannot see (an output's layout that PyTorch code after the region reads
wrongly, memory shared with something written later) shows only in the whole step. This
compiles the model once, then reruns the same seeded step with chosen regions run by PyTorch
instead of nvFuser (``region.region``, the region's own aten graph, on the same inputs):
all in PyTorch, all in nvFuser, then each region alone in nvFuser. Regions whose use alone
makes the step wrong are printed with their ops and how their outputs' strides differ from
PyTorch's. Run each model in its own process (a CUDA fault poisons the context).
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


def _layouts(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(tuple(o.shape), o.stride(), o.storage_offset()) if isinstance(o, torch.Tensor) else None for o in outs]


def main(argv=None) -> int:
    p = zoo_check.step_parser(__doc__.splitlines()[0])
    p.add_argument("--tol", type=float, default=None, help="grad_err (train) or output error above which a step is wrong")
    args = p.parse_args(argv)
    from nvfuser_dtensor_backend.region import FusedRegion

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    zm = zoo.build(args.model, args.size, device, dtype)
    train = args.mode == "train"
    batch = zm.make_inputs(0)
    ref = zoo_check.seeded_step(copy.deepcopy(zm.model), zm, batch, train, 0)
    tol = args.tol if args.tol is not None else zoo_check.TOLERANCES.get(dtype, zoo_check.TOLERANCES[torch.bfloat16])["grad" if train else "loss"]

    regions: dict[FusedRegion, int] = {}  # in order of first call
    in_pytorch: set = set()
    probed: dict = {}  # "region": the region under study; "how": what its call does
    kept: list = []  # outputs held until the step ends ("keep")
    original = FusedRegion.forward

    def _as_tuple(out):
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def _like(self, outs):
        return outs[0] if self._single else tuple(outs)

    # Installed before compiling: the compiled graph binds each region's forward once (Note
    # [Lean call path], backend.py), so what it does is switched through in_pytorch and probed.
    def forward(self, *a):
        regions.setdefault(self, len(regions))
        if self in in_pytorch:
            return self.region(*a)
        if probed.get("region") is not self:
            return original(self, *a)
        how = probed.get("how")
        out = original(self, *a)
        if how == "layouts":
            probed["args"] = [(tuple(x.shape), x.stride(), x.storage_offset(), x.dtype) if isinstance(x, torch.Tensor)
                              else x for x in a]
            probed["nvfuser"] = _layouts(out)
            probed["pytorch"] = _layouts(self.region(*a))
        elif how == "clone":  # fresh PyTorch allocations, same strides
            out = _like(self, [o.clone() if isinstance(o, torch.Tensor) else o for o in _as_tuple(out)])
        elif how == "keep":  # nvFuser's outputs can not be freed before the step ends
            kept.append(out)
        elif how == "into_pytorch":  # nvFuser's values in PyTorch's outputs (PyTorch's layouts)
            ref = self.region(*a)
            for r, o in zip(_as_tuple(ref), _as_tuple(out)):
                if isinstance(r, torch.Tensor):
                    r.copy_(o)
            out = ref
        elif how == "sync" and torch.cuda.is_available():
            torch.cuda.synchronize()
        elif how == "inputs_cloned":  # nvFuser on copies of the inputs (an input written by the fusion?)
            copies = [x.clone() if isinstance(x, torch.Tensor) else x for x in a]
            out = original(self, *copies)
            changed = [i for i, (x, c) in enumerate(zip(a, copies)) if isinstance(x, torch.Tensor) and not torch.equal(x, c)]
            probed["inputs_changed"] = changed
        return out

    FusedRegion.forward = forward
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = zoo_check.compile_model(zm.model, "nvfuser_dtensor", json.loads(args.options))

        def err(pytorch_regions, region=None, how=None) -> float:
            in_pytorch.clear()
            in_pytorch.update(pytorch_regions)
            probed.clear()
            probed.update(region=region, how=how)
            step = zoo_check.seeded_step(compiled, zm, batch, train, 0)
            kept.clear()
            loss_err, grad_err = zoo_check.errors(step, ref, train)
            return grad_err if train else loss_err

        first = err(())
        names = sorted(regions, key=regions.get)
        print(f"{args.model} {args.mode}: {len(names)} regions; tolerance {tol:g}", flush=True)
        print(f"  all in nvFuser: {first:.3g}; again: {err(()):.3g}", flush=True)
        print(f"  all in PyTorch: {err(names):.3g}", flush=True)
        bad = []
        for r in names:
            e = err([x for x in names if x is not r])
            if e > tol:
                bad.append((r, e))
        print(f"  regions wrong alone: {len(bad)}", flush=True)
        for r, e in bad:
            others = [x for x in names if x is not r]
            print(f"  {r.name} err {e:.3g}: {', '.join(r.ops)}"[:1500])
            tries = {how: err(others, r, how) for how in ("clone", "keep", "into_pytorch", "sync", "inputs_cloned")}
            changed = probed.get("inputs_changed")
            err(others, r, "layouts")
            print("    alone with its outputs " + ", ".join(f"{k}: {v:.3g}" for k, v in tries.items())
                  + f"; inputs the fusion changed: {changed}")
            print(f"    inputs: {probed.get('args')}"[:1500])
            for i, (a, b) in enumerate(zip(probed.get("nvfuser", []), probed.get("pytorch", []))):
                print(f"    output {i}: nvFuser {a} PyTorch {b}")
            print("    " + r.region.code.strip().replace("\n", "\n    ")[:3000])
        if len(bad) == 0 and first > tol:  # wrong only together: drop regions one at a time
            for r in names:
                e = err([r])
                if e <= tol:
                    print(f"  right once {r.name} runs in PyTorch: {', '.join(r.ops)}"[:1500])
    FusedRegion.forward = original
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
