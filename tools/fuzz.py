"""Graph fuzzer: seeded random programs over the supported ops, backend vs eager.

A program is a list of steps over a pool of values (inputs first): pointwise unary and
binary ops (with broadcasting and size-1 dims), reductions, views, casts. ``run_program``
interprets it, so dynamo traces one straight-line graph per program. Each seed compiles its
program with ``backend="nvfuser_dtensor"`` and compares with eager: for floating outputs the
backend's error against a float64 run must be no worse than twice eager's (plus a
dtype-sized tolerance); integer and bool outputs must be equal. Some programs also run
backward and compare the input gradients the same way.

The layouts family (``--layouts``, its own seeds) feeds the layouts real models make:
permuted inputs, slices of a fused projection (qkv.split, odd element offsets), expanded
(stride-0) inputs, inputs at any storage offset; its programs end in views of region outputs
as Hugging Face attention does (``transpose(1, 2).contiguous().view(b, s, -1)``,
``permute(..).reshape(..)``, ``clone()``/``contiguous()`` then ``view``) and use rotary
embeddings. There a region falling back to PyTorch is a failure too.

    python -m tools.fuzz --seeds 0:200            # report failures, exit 1 if any
    python -m tools.fuzz --seeds 17 --show        # print one program
    python -m tools.fuzz --layouts --seeds 0:200  # the layouts family
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
from nvfuser_dtensor_backend.region import NvFuserFallbackWarning

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
    # The layouts family (make_layout_program): each input's (layout kind, params), see
    # make_input; None: every input contiguous (the default family). tags: the patterns
    # the program was built from ("rotary", "transpose_contiguous_view", ...).
    layouts: list[tuple[str, dict]] | None = None
    tags: tuple[str, ...] = ()

    def describe(self) -> str:
        lines = [f"inputs {self.shapes} {self.dtype} backward={self.backward}"]
        if self.layouts is not None:
            lines += [f"  v{i} layout {kind} {params}" for i, (kind, params) in enumerate(self.layouts)]
            lines += [f"  tags {' '.join(self.tags)}"] if self.tags else []
        lines += [f"  v{len(self.shapes) + i} = {kind} {name} {ops} {params}"
                  for i, (kind, name, ops, params) in enumerate(self.steps)]
        return "\n".join(lines)


def _random_shapes(rng: random.Random, min_rank: int = 1) -> list[tuple[int, ...]]:
    rank = rng.randint(min_rank, 4)
    full = [rng.choice([1, 2, 3, 5, 8, 16]) for _ in range(rank)]
    shapes = []
    for _ in range(rng.randint(1, 3)):  # broadcastable: some dims 1, some leading dims dropped
        shape = [1 if rng.random() < 0.3 else s for s in full]
        shapes.append(tuple(shape[rng.randint(0, rank - 1) if rng.random() < 0.3 else 0:]))
    return shapes


def _random_steps(rng: random.Random, values: list, steps: list, count: int) -> None:
    """Append ``count`` random steps; ``values`` holds the shape of each pool value."""
    for _ in range(count):
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


def make_program(seed: int) -> Program:
    """The default family: contiguous inputs, random steps (unchanged by the layouts family)."""
    rng = random.Random(seed)
    shapes = _random_shapes(rng)
    dtype = rng.choice(FLOATS)
    values = [s for s in shapes]  # shape of each pool value
    steps = []
    _random_steps(rng, values, steps, rng.randint(2, 9))
    return Program(shapes, dtype, steps, backward=rng.random() < 0.4)


# ---------------------------------------------------------------------------------------
# The layouts family (--layouts): the input layouts and view patterns of real models.
#
# Inputs are views of a storage tensor (the leaf that gradients are taken for):
#   contiguous  the storage itself
#   permuted    storage.permute(perm): a transposed/permuted view, as after x.transpose(1, 2)
#   sliced      storage.narrow(dim, start, n): a slice of a fused projection (qkv.split(n,
#               dim) when start is a multiple of n) or at an odd element offset
#   expanded    storage.expand(shape): stride 0 on the dims where the storage has size 1
#   offset      flat[k:k + numel].view(...) (.permute(perm)): any storage offset
# Steps add to the default family's: layout (view / reshape / permute / contiguous /
# clone) and rotary (q * cos.unsqueeze(d) + rotate_half(q) * sin.unsqueeze(d)). Programs end
# in what Hugging Face models do with a region's output: transpose(..).contiguous().view(..),
# permute(..).reshape(..), clone()/contiguous() then view(..), or a view of it.
# Seeds of this family draw from random.Random(f"layouts:{seed}"), so the default family's
# programs are unchanged.

LAYOUT_KINDS = ("contiguous", "permuted", "sliced", "expanded", "offset")
# What the CI seeds must cover (program_kinds): input layouts and patterns.
KINDS = ("permuted", "sliced", "qkv_split", "odd_offset", "expanded", "offset", "rotary",
         "transpose_contiguous_view", "permute_reshape", "contiguous_view", "clone_view", "view_of_output")


def _unpermute(shape, perm):
    """The storage shape whose .permute(perm) has ``shape``."""
    base = [0] * len(shape)
    for i, p in enumerate(perm):
        base[p] = shape[i]
    return tuple(base)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def storage_shape(layout: tuple[str, dict], shape) -> tuple[int, ...]:
    kind, params = layout
    shape = tuple(shape)
    if kind == "permuted":
        return _unpermute(shape, params["perm"])
    if kind == "sliced":
        return tuple(params["total"] if i == params["dim"] else s for i, s in enumerate(shape))
    if kind == "expanded":
        return tuple(1 if i in params["dims"] else s for i, s in enumerate(shape))
    if kind == "offset":
        return (params["offset"] + _numel(shape) + params["extra"],)
    return shape


def make_input(layout: tuple[str, dict], shape, storage: torch.Tensor) -> torch.Tensor:
    """The input of ``shape`` laid out as ``layout`` says, a view of ``storage``."""
    kind, params = layout
    if kind == "permuted":
        return storage.permute(params["perm"])
    if kind == "sliced":
        return storage.narrow(params["dim"], params["start"], shape[params["dim"]])
    if kind == "expanded":
        return storage.expand(shape)
    if kind == "offset":
        perm = params["perm"] or tuple(range(len(shape)))
        k = params["offset"]
        return storage[k:k + _numel(shape)].view(_unpermute(shape, perm)).permute(perm)
    return storage


def _storage_offset(layout, shape) -> int:
    kind, params = layout
    if kind == "sliced":
        return params["start"] * _numel(storage_shape(layout, shape)[params["dim"] + 1:])
    return params["offset"] if kind == "offset" else 0


def program_kinds(program: Program) -> set[str]:
    """The layout kinds and patterns ``program`` exercises (names in KINDS)."""
    kinds = set(program.tags)
    for layout, shape in zip(program.layouts or [], program.shapes):
        if layout[0] != "contiguous":
            kinds.add(layout[0])
        if _storage_offset(layout, shape) % 2:  # odd elements: not 16-byte aligned in any dtype
            kinds.add("odd_offset")
    return kinds


def _random_perm(rng: random.Random, rank: int) -> tuple[int, ...]:
    while True:
        perm = tuple(rng.sample(range(rank), rank))
        if perm != tuple(range(rank)):
            return perm


def _random_layout(rng: random.Random, shape) -> tuple[str, dict]:
    rank = len(shape)
    kinds = ["contiguous", "offset"]
    if rank >= 1:
        kinds.append("sliced")
    if rank >= 2:
        kinds.append("permuted")
    if any(s > 1 for s in shape):
        kinds.append("expanded")
    kind = rng.choice(kinds)
    if kind == "permuted":
        return kind, {"perm": _random_perm(rng, rank)}
    if kind == "sliced":
        dim = rank - 1 if rng.random() < 0.5 else rng.randrange(rank)
        n = shape[dim]
        if rng.random() < 0.5:  # q, k, v = qkv.split(n, dim)
            parts = rng.choice([2, 3])
            return kind, {"dim": dim, "start": rng.randrange(parts) * n, "total": parts * n}
        extra = rng.randint(1, 5)
        return kind, {"dim": dim, "start": rng.randint(1, extra), "total": n + extra}
    if kind == "expanded":
        dims = [i for i, s in enumerate(shape) if s > 1]
        return kind, {"dims": tuple(sorted(rng.sample(dims, rng.randint(1, len(dims)))))}
    if kind == "offset":
        perm = _random_perm(rng, rank) if rank >= 2 and rng.random() < 0.5 else None
        return kind, {"offset": rng.randint(1, 7), "extra": rng.randint(0, 3), "perm": perm}
    return kind, {}


def _out_tail(rng: random.Random, program: Program, a: int) -> str:
    """Append a Hugging Face style ending on pool value ``a``; returns its tag."""
    pool = _run_steps(program, _inputs(program, torch.float32)[1])
    y = pool[a]
    shape = tuple(y.shape)
    n = len(program.shapes) + len(program.steps)  # index of the next value
    choices = ["transpose_contiguous_view", "permute_reshape", "contiguous_view"]
    if y.is_contiguous():  # eager can view it: so must the backend's output
        choices += ["clone_view", "view_of_output"]
    tag = rng.choice(choices)
    merged = lambda sh: tuple(sh[:-2]) + (-1,)  # noqa: E731 - b, s, h, d -> b, s, h * d
    if tag == "transpose_contiguous_view":
        i, j = sorted(rng.sample(range(len(shape)), 2))
        t = list(shape)
        t[i], t[j] = t[j], t[i]
        program.steps += [("view", "transpose", [a], {"dims": (i, j)}), ("layout", "contiguous", [n], {}),
                          ("layout", "view", [n + 1], {"shape": merged(t)})]
    elif tag == "permute_reshape":
        perm = _random_perm(rng, len(shape))
        program.steps += [("layout", "permute", [a], {"dims": perm}),
                          ("layout", "reshape", [n], {"shape": merged([shape[p] for p in perm])})]
    elif tag in ("contiguous_view", "clone_view"):
        program.steps += [("layout", tag.split("_")[0], [a], {}), ("layout", "view", [n], {"shape": merged(shape)})]
    else:
        program.steps += [("layout", "view", [a], {"shape": merged(shape)})]
    return tag


def make_layout_program(seed: int) -> Program:
    """A program of the layouts family: non-contiguous inputs and model-like view patterns."""
    rng = random.Random(f"layouts:{seed}")
    template = rng.choices(["random", "rotary", "mul_permute"], [3, 2, 1])[0]
    dtype = rng.choice(FLOATS)
    backward = rng.random() < 0.4
    tags = []
    if template == "random":
        shapes = _random_shapes(rng, min_rank=2)
        layouts = [_random_layout(rng, s) for s in shapes]
        values, steps = list(shapes), []
        _random_steps(rng, values, steps, rng.randint(1, 6))
        program = Program(shapes, dtype, steps, backward, layouts)
        candidates = [i for i, v in enumerate(values) if len(v) >= 2]
        computed = [i for i in candidates if i >= len(shapes)]
        if candidates and rng.random() < 0.8:
            tags.append(_out_tail(rng, program, (computed or candidates)[-1]))
    else:
        b, s, h = rng.choice([1, 2]), rng.choice([1, 3, 5, 8]), rng.choice([1, 2, 3])
        d = rng.choice([2, 4, 6, 8])
        if template == "rotary":
            # q = x.view(b, s, h, d).transpose(1, 2); q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1)
            # x: (b, s, h * d), or a projection's 2-D (b * s, h * d); cos/sin of batch 1 broadcast
            cos_shape = (rng.choice([1, b]), s, d)
            shapes = [(b, s, h * d) if rng.random() < 0.7 else (b * s, h * d), cos_shape, cos_shape]
            last = len(shapes[0]) - 1
            x_layout = rng.choice([("contiguous", {}),
                                   ("sliced", {"dim": last, "start": rng.randrange(3) * h * d, "total": 3 * h * d}),
                                   ("sliced", {"dim": last, "start": 1 + 2 * rng.randrange(3), "total": h * d + 5}),
                                   ("permuted", {"perm": (1, 0, 2)}) if last == 2 else ("contiguous", {}),
                                   _random_layout(rng, shapes[0])])
            cos_layout = rng.choice([("contiguous", {}), ("expanded", {"dims": (0,)}) if b > 1 and cos_shape[0] > 1
                                     else ("contiguous", {}), _random_layout(rng, shapes[1])])
            layouts = [x_layout, cos_layout, cos_layout]
            steps = [("layout", "view", [0], {"shape": (b, s, h, d)}), ("view", "transpose", [3], {"dims": (1, 2)}),
                     ("rotary", "rotary", [4, 1, 2], {"dim": 1})]
            tags.append("rotary")
            q = 4
        else:
            # (x * w).permute(0, 2, 1, 3).reshape(b, s, -1), x often a transposed (b, s, h, d)
            w_shape = rng.choice([(d,), (h, 1, d), (1, h, 1, 1)])
            shapes = [(b, h, s, d), w_shape]
            x_layout = ("permuted", {"perm": (0, 2, 1, 3)}) if rng.random() < 0.5 else _random_layout(rng, shapes[0])
            layouts = [x_layout, _random_layout(rng, w_shape)]
            steps = [("binary", "mul", [0, 1], {})]
            q = 0
        n = len(shapes) + len(steps)
        for _ in range(rng.randint(0, 2)):  # a little pointwise work after the pattern
            if rng.random() < 0.5:
                steps.append(("unary", rng.choice(sorted(UNARY)), [n - 1], {}))
            else:
                steps.append(("binary", rng.choice(sorted(BINARY)), [n - 1, q if template == "rotary" else n - 1], {}))
            n += 1
        if template == "rotary" or rng.random() < 0.5:
            if rng.random() < 0.6:  # attn_output.transpose(1, 2).contiguous().view(b, s, -1)
                steps += [("view", "transpose", [n - 1], {"dims": (1, 2)}), ("layout", "contiguous", [n], {}),
                          ("layout", "view", [n + 1], {"shape": (b, s, -1)})]
                tags.append("transpose_contiguous_view")
            else:
                steps += [("layout", "permute", [n - 1], {"dims": (0, 2, 1, 3)}),
                          ("layout", "reshape", [n], {"shape": (b, s, -1)})]
                tags.append("permute_reshape")
        else:
            steps += [("layout", "permute", [n - 1], {"dims": (0, 2, 1, 3)}),
                      ("layout", "reshape", [n], {"shape": (b, s, -1)})]
            tags.append("permute_reshape")
        program = Program(shapes, dtype, steps, backward, layouts)
        try:  # x.view(b, s, h, d) needs a viewable x: else x is contiguous
            _run_steps(program, _inputs(program, torch.float32)[1])
        except RuntimeError:
            program.layouts[0] = ("contiguous", {})
    for layout, shape in zip(program.layouts, program.shapes):
        if layout[0] == "sliced" and layout[1]["start"] and layout[1]["start"] % shape[layout[1]["dim"]] == 0:
            tags.append("qkv_split")
    program.tags = tuple(dict.fromkeys(tags))
    return program


def get_program(seed: int, layouts: bool = False) -> Program:
    return make_layout_program(seed) if layouts else make_program(seed)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _inputs(program: Program, dtype, device="cpu", requires_grad=False, storages=None):
    """(storages, inputs) of ``program``: the leaves and the views of them it runs on."""
    layouts = program.layouts or [("contiguous", {})] * len(program.shapes)
    if storages is None:
        gen = torch.Generator().manual_seed(0)
        storages = [torch.randn(storage_shape(lay, s), generator=gen, dtype=torch.float64)
                    for lay, s in zip(layouts, program.shapes)]
    leaves = [t.to(device=device, dtype=dtype).requires_grad_(requires_grad) for t in storages]
    return leaves, [make_input(lay, s, t) for lay, s, t in zip(layouts, program.shapes, leaves)]


def run_program(program: Program, *inputs):
    outs = _run_steps(program, inputs)[len(inputs):]
    return tuple(outs[-2:])  # the last values, so most steps feed an output


def _run_steps(program: Program, inputs) -> list:
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
        elif kind == "layout":
            if name == "view":
                y = x.view(params["shape"])
            elif name == "reshape":
                y = x.reshape(params["shape"])
            elif name == "permute":
                y = x.permute(params["dims"])
            elif name == "contiguous":
                y = x.contiguous()
            else:
                y = x.clone()
        elif kind == "rotary":
            cos, sin = (pool[i].to(x.dtype).unsqueeze(params["dim"]) for i in ops[1:])
            y = x * cos + _rotate_half(x) * sin
        else:
            y = x.to(getattr(torch, name)) if x.dtype.is_floating_point else x
        pool.append(y)
    return pool


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


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else ""


def check_seed(seed: int, device: str = "cpu", layouts: bool = False, strict: bool | None = None) -> str | None:
    """None if the program of ``seed`` matches eager, else what differs.

    ``layouts``: the program of the layouts family (make_layout_program). Its inputs are
    views of storage tensors; gradients are those of the storages. ``strict`` (default: as
    ``layouts``): a region that falls back to PyTorch (NvFuserFallbackWarning, e.g. nvFuser
    failing to define it) is a finding too, not only a wrong value or a crash.
    """
    program = get_program(seed, layouts)
    gen = torch.Generator().manual_seed(seed)
    lays = program.layouts or [("contiguous", {})] * len(program.shapes)
    base = [torch.randn(storage_shape(lay, s), generator=gen, dtype=torch.float64)
            for lay, s in zip(lays, program.shapes)]

    def call(fn, dtype):
        leaves, inputs = _inputs(program, dtype, device, program.backward, base)
        outs = fn(*inputs)
        grads = []
        if program.backward:
            loss = sum(o.double().sum() for o in outs if o.requires_grad)
            if isinstance(loss, torch.Tensor):
                grads = list(torch.autograd.grad(loss, leaves, allow_unused=True))
                grads = [g if g is not None else torch.zeros_like(i) for g, i in zip(grads, leaves)]
        return [o.detach() for o in outs], grads

    fn = lambda *xs: run_program(program, *xs)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # var() over one element, ...
        ref = call(fn, torch.float64)
        eager = call(fn, program.dtype)
    torch._dynamo.reset()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = call(torch.compile(fn, backend="nvfuser_dtensor", dynamic=False), program.dtype)
    except Exception as e:  # noqa: BLE001 - a crash is a finding
        return f"raised {type(e).__name__}: {_first_line(e)}"
    fallbacks = [w.message for w in caught if isinstance(w.message, NvFuserFallbackWarning)]
    if (layouts if strict is None else strict) and fallbacks:
        return f"region fell back to PyTorch: {_first_line(fallbacks[0])}"
    return _check(got[0], eager[0], ref[0], "output") or _check(got[1], eager[1], ref[1], "gradient")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0:50", help="N, or A:B for the range")
    p.add_argument("--device", default="cpu")
    p.add_argument("--show", action="store_true", help="print each program")
    p.add_argument("--layouts", action="store_true",
                   help="the layouts family: permuted/sliced/expanded/offset inputs, view-after-region endings, rotary")
    p.add_argument("--strict", action="store_true",
                   help="a region falling back to PyTorch is a failure (always so with --layouts)")
    a = p.parse_args(argv)
    import logging

    logging.getLogger("nvfuser_dtensor_backend").setLevel(logging.ERROR)
    lo, _, hi = a.seeds.partition(":")
    seeds = range(int(lo), int(hi)) if hi else [int(lo)]
    failures = 0
    for seed in seeds:
        if a.show:
            print(f"seed {seed}:\n{get_program(seed, a.layouts).describe()}")
        problem = check_seed(seed, a.device, a.layouts, True if a.strict else None)
        if problem:
            failures += 1
            print(f"seed {seed}: {problem}\n{get_program(seed, a.layouts).describe()}", flush=True)
        if (seed - seeds[0] + 1) % 50 == 0:  # progress that survives a timeout
            print(f"... up to seed {seed}: {failures} failing", flush=True)
    print(f"{len(seeds) - failures}/{len(seeds)} seeds match eager")
    nb.clear_reports()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
