"""Graph fuzzer: seeded random programs over the supported ops, backend vs eager.

A program is a list of steps over a pool of values (inputs first): pointwise unary and
binary ops (with broadcasting and size-1 dims), reductions, views, casts. ``run_program``
interprets it, so dynamo traces one straight-line graph per program. Each seed compiles its
program with ``backend="nvfuser_dtensor"`` and compares with eager: for floating outputs the
backend's error against a float64 run must be no worse than twice eager's (plus a
dtype-sized tolerance); integer and bool outputs must be equal. Some programs also run
backward and compare the input gradients the same way.

    python -m tools.fuzz --seeds 0:200            # report failures, exit 1 if any
    python -m tools.fuzz --seeds 17 --show        # print one program
"""

from __future__ import annotations

import argparse
import random
import sys
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import nvfuser_dtensor_backend as nb

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
UNARY = {
    "exp": lambda x: torch.exp(x.clamp(max=8)), "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "neg": torch.neg, "abs": torch.abs, "sin": torch.sin, "gelu": F.gelu, "silu": F.silu,
    "square": lambda x: x * x, "rsqrt": lambda x: torch.rsqrt(x.abs() + 1), "log1p": lambda x: torch.log1p(x.abs()),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "softmax": lambda x: torch.softmax(x, -1),
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": lambda a, b: a / (b.abs() + 0.5),
    "maximum": torch.maximum, "minimum": torch.minimum, "where": lambda a, b: torch.where(a > 0, a, b),
}
REDUCTIONS = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "var": torch.var}


@dataclass
class Program:
    shapes: list[tuple[int, ...]]
    dtype: torch.dtype
    steps: list[tuple]  # (kind, name, operand indices, params)
    backward: bool

    def describe(self) -> str:
        lines = [f"inputs {self.shapes} {self.dtype} backward={self.backward}"]
        lines += [f"  v{len(self.shapes) + i} = {kind} {name} {ops} {params}"
                  for i, (kind, name, ops, params) in enumerate(self.steps)]
        return "\n".join(lines)


def make_program(seed: int) -> Program:
    rng = random.Random(seed)
    rank = rng.randint(1, 4)
    full = [rng.choice([1, 2, 3, 5, 8, 16]) for _ in range(rank)]
    shapes = []
    for _ in range(rng.randint(1, 3)):  # broadcastable: some dims 1, some leading dims dropped
        shape = [1 if rng.random() < 0.3 else s for s in full]
        shapes.append(tuple(shape[rng.randint(0, rank - 1) if rng.random() < 0.3 else 0:]))
    dtype = rng.choice(FLOATS)
    values = [s for s in shapes]  # shape of each pool value
    steps = []
    for _ in range(rng.randint(2, 9)):
        kind = rng.choices(["unary", "binary", "reduce", "view", "cast"], [4, 4, 2, 2, 1])[0]
        a = rng.randrange(len(values))
        shape = values[a]
        if kind == "unary":
            steps.append(("unary", rng.choice(sorted(UNARY)), [a], {}))
        elif kind == "binary":
            b = rng.randrange(len(values))
            try:
                shape = tuple(torch.broadcast_shapes(values[a], values[b]))
            except RuntimeError:
                b = a
            steps.append(("binary", rng.choice(sorted(BINARY)), [a, b], {}))
        elif kind == "reduce" and len(shape) > 0:
            dim = rng.randrange(len(shape))
            keepdim = rng.random() < 0.5
            steps.append(("reduce", rng.choice(sorted(REDUCTIONS)), [a], {"dim": dim, "keepdim": keepdim}))
            shape = tuple(1 if i == dim else s for i, s in enumerate(shape)) if keepdim else \
                tuple(s for i, s in enumerate(shape) if i != dim)
        elif kind == "view" and len(shape) > 0:
            choice = rng.choice(["transpose", "unsqueeze", "flatten", "slice"] if len(shape) > 1 else
                                ["unsqueeze", "flatten", "slice"])
            if choice == "transpose":
                i, j = rng.sample(range(len(shape)), 2)
                params = {"dims": (i, j)}
                s = list(shape)
                s[i], s[j] = s[j], s[i]
                shape = tuple(s)
            elif choice == "unsqueeze":
                params = {"dim": rng.randint(0, len(shape))}
                shape = shape[:params["dim"]] + (1,) + shape[params["dim"]:]
            elif choice == "flatten":
                params = {}
                shape = (int(torch.tensor(shape).prod()),)
            else:
                dim = rng.randrange(len(shape))
                start = rng.randint(0, max(0, shape[dim] - 1))
                params = {"dim": dim, "start": start}
                shape = tuple(s - start if i == dim else s for i, s in enumerate(shape))
            steps.append(("view", choice, [a], params))
        else:
            steps.append(("cast", rng.choice(["float32", "bfloat16", "float16"]), [a], {}))
        values.append(shape)
    return Program(shapes, dtype, steps, backward=rng.random() < 0.4)


def run_program(program: Program, *inputs):
    pool = list(inputs)
    for kind, name, ops, params in program.steps:
        x = pool[ops[0]]
        if kind == "unary":
            y = UNARY[name](x)
        elif kind == "binary":
            other = pool[ops[1]]
            if other.dtype != x.dtype:
                other = other.to(x.dtype)
            y = BINARY[name](x, other)
        elif kind == "reduce":
            y = REDUCTIONS[name](x, dim=params["dim"], keepdim=params["keepdim"])
        elif kind == "view":
            if name == "transpose":
                y = x.transpose(*params["dims"])
            elif name == "unsqueeze":
                y = x.unsqueeze(params["dim"])
            elif name == "flatten":
                y = x.reshape(-1)
            else:
                y = x.narrow(params["dim"], params["start"], x.shape[params["dim"]] - params["start"])
        else:
            y = x.to(getattr(torch, name)) if x.dtype.is_floating_point else x
        pool.append(y)
    outs = pool[len(inputs):]
    return tuple(outs[-2:])  # the last values, so most steps feed an output


def _tolerance(dtype) -> float:
    return {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float64: 1e-9}.get(dtype, 0)


def _check(got, eager, ref, what: str) -> str | None:
    for i, (g, e, r) in enumerate(zip(got, eager, ref)):
        if g.dtype != e.dtype or g.shape != e.shape:
            return f"{what} {i}: {g.dtype}{tuple(g.shape)} vs eager {e.dtype}{tuple(e.shape)}"
        if not e.dtype.is_floating_point:
            if not torch.equal(g, e):
                return f"{what} {i}: differs from eager"
            continue
        r = r.double()
        finite = torch.isfinite(r)
        if not torch.equal(torch.isnan(g), torch.isnan(e)):
            return f"{what} {i}: NaN where eager has none (or the reverse)"
        err = (g.double() - r)[finite].abs().max().item() if finite.any() else 0.0
        eager_err = (e.double() - r)[finite].abs().max().item() if finite.any() else 0.0
        scale = r[finite].abs().max().item() if finite.any() else 0.0
        bound = 2 * eager_err + _tolerance(e.dtype) * (1 + scale)
        if err > bound:
            return f"{what} {i}: error {err:.3g} vs eager's {eager_err:.3g} (bound {bound:.3g})"
    return None


def check_seed(seed: int, device: str = "cpu") -> str | None:
    """None if the program of ``seed`` matches eager, else what differs."""
    program = make_program(seed)
    gen = torch.Generator().manual_seed(seed)
    base = [torch.randn(s, generator=gen, dtype=torch.float64) for s in program.shapes]

    def call(fn, dtype):
        inputs = [b.to(device=device, dtype=dtype).requires_grad_(program.backward) for b in base]
        outs = fn(*inputs)
        grads = []
        if program.backward:
            loss = sum(o.double().sum() for o in outs if o.requires_grad)
            if isinstance(loss, torch.Tensor):
                grads = list(torch.autograd.grad(loss, inputs, allow_unused=True))
                grads = [g if g is not None else torch.zeros_like(i) for g, i in zip(grads, inputs)]
        return [o.detach() for o in outs], grads

    fn = lambda *xs: run_program(program, *xs)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # var() over one element, ...
        ref = call(fn, torch.float64)
        eager = call(fn, program.dtype)
    torch._dynamo.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = call(torch.compile(fn, backend="nvfuser_dtensor", dynamic=False), program.dtype)
    except Exception as e:  # noqa: BLE001 - a crash is a finding
        return f"raised {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    return _check(got[0], eager[0], ref[0], "output") or _check(got[1], eager[1], ref[1], "gradient")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0:50", help="N, or A:B for the range")
    p.add_argument("--device", default="cpu")
    p.add_argument("--show", action="store_true", help="print each program")
    a = p.parse_args(argv)
    import logging

    logging.getLogger("nvfuser_dtensor_backend").setLevel(logging.ERROR)
    lo, _, hi = a.seeds.partition(":")
    seeds = range(int(lo), int(hi)) if hi else [int(lo)]
    failures = 0
    for seed in seeds:
        if a.show:
            print(f"seed {seed}:\n{make_program(seed).describe()}")
        problem = check_seed(seed, a.device)
        if problem:
            failures += 1
            print(f"seed {seed}: {problem}\n{make_program(seed).describe()}", flush=True)
        if (seed - seeds[0] + 1) % 50 == 0:  # progress that survives a timeout
            print(f"... up to seed {seed}: {failures} failing", flush=True)
    print(f"{len(seeds) - failures}/{len(seeds)} seeds match eager")
    nb.clear_reports()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
