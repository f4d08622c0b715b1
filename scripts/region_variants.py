"""Variants of a recorded batch-norm region (scripts/region_replay.py rows), for bisecting
nvFuser's out-of-bounds writes in training batch norm (docs/nvfuser_faults.md item 9).

    python scripts/region_variants.py IN.jsonl --rows 0,15 --out variants.jsonl
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python scripts/region_replay.py run variants.jsonl

Each variant is a row of its own (``region`` gets the variant's name) whose text is the
recorded one changed: ``drop<i+j>`` leaves fusion outputs i and j out (the batch norm's are 0
output, 1 mean, 2 rstd, 3 and 4 the updated running statistics); ``twopass`` computes the
statistics with two sums instead of ``welford``; ``segset`` puts a ``segment_set`` on the
statistics, so what reads them runs in other kernels.

``segset_sums`` puts a ``segment_set`` on every ``sum``, so what reads a sum runs in a
later kernel. ``memory_order_inputs`` changes the inputs too, for any region: every input defined with a
``stride_order`` (a channels-last activation: logical NCHW, NHWC in memory) is defined
instead as a dense tensor in its memory order, then permuted to its logical order in the
fusion, and the row's input descriptors follow. Same numbers, but nvFuser schedules a
permute of a row-major input instead of an allocation domain. Timed against the recorded
rows (``region_replay.py run --time``), it tells whether the channels-last regions are slow
because of how their inputs are declared:

    python scripts/region_variants.py IN.jsonl --rows all --variants memory_order_inputs --out OUT.jsonl
"""

from __future__ import annotations

import argparse
import json
import re

_WELFORD = re.compile(r"^(\s+)(\w+), (\w+), (\w+) = fd\.ops\.welford\((\w+), dims=\[([\d, ]+)\]\)$", re.M)


def drop(text: str, indices: set[int]) -> str:
    """``text`` without its ``fd.add_output`` lines number ``indices`` (from 0)."""
    kept, output = [], -1
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("fd.add_output("):
            output += 1
            if output in indices:
                continue
        kept.append(line)
    return "".join(kept)


def twopass(text: str) -> str:
    def sub(m):
        ind, avg, m2, n, x, dims = m.groups()
        dims = [int(d) for d in dims.split(",")]
        return "\n".join(ind + ln for ln in [
            f"{avg}_s = fd.ops.sum({x}, dims={dims}, dtype=DataType.Float)",
            f"{avg}_n = {_product(x, dims)}",
            f"{avg} = fd.ops.div({avg}_s, {avg}_n)",
            f"{avg}_b = fd.ops.broadcast({avg}, is_broadcast_dim=[d in {dims} for d in range({x}.ndim)])",
            f"{avg}_d = fd.ops.sub({x}, {avg}_b)",
            f"{m2} = fd.ops.sum(fd.ops.mul({avg}_d, {avg}_d), dims={dims}, dtype=DataType.Float)",
            f"{n} = {avg}_n"])
    return _WELFORD.sub(sub, text)


def _product(x: str, dims: list[int]) -> str:
    expr = f"fd.ops.size({x}, dim={dims[0]})"
    for d in dims[1:]:
        expr = f"fd.ops.mul({expr}, fd.ops.size({x}, dim={d}))"
    return f"fd.ops.cast({expr}, dtype=DataType.Float)"


def segset(text: str) -> str:
    def sub(m):
        ind, avg, m2, n, x, dims = m.groups()
        return (f"{ind}{avg}_w, {m2}_w, {n} = fd.ops.welford({x}, dims=[{dims}])\n"
                f"{ind}{avg} = fd.ops.segment_set({avg}_w)\n{ind}{m2} = fd.ops.segment_set({m2}_w)")
    return _WELFORD.sub(sub, text)


_STRIDED_INPUT = re.compile(r"^(\s+)(\w+) = fd\.define_tensor\(shape=\[([-\d, ]*)\], contiguity=\[([\w, ]*)\], "
                            r"dtype=(DataType\.\w+), is_cpu=(True|False), stride_order=\[([\d, ]+)\]\)$")
_INPUT = re.compile(r"^\s+\w+ = fd\.define_tensor\(")


def memory_order_inputs(row: dict) -> dict:
    """``row`` with its stride-ordered inputs defined dense in memory order and permuted to
    their logical order in the fusion (see the module's docstring)."""
    tensors = [d for d in row["inputs"] if "dtype" in d]
    inputs = {id(d): d for d in tensors}
    lines, k = [], -1
    for line in row["text"].splitlines(keepends=True):
        if not _INPUT.match(line):
            lines.append(line)
            continue
        k += 1
        m = _STRIDED_INPUT.match(line.rstrip("\n"))
        if m is None:
            lines.append(line)
            continue
        ind, name, shape, contiguity, dtype, is_cpu, stride_order = m.groups()
        ranks = [int(r) for r in stride_order.split(",")]
        order = sorted(range(len(ranks)), key=lambda d: -ranks[d])  # logical dims, outermost first
        shape = [v.strip() for v in shape.split(",")]
        lines.append(f"{ind}{name}_m = fd.define_tensor(shape=[{', '.join(shape[d] for d in order)}], "
                     f"contiguity=[{contiguity}], dtype={dtype}, is_cpu={is_cpu})\n")  # contiguity is in memory order
        lines.append(f"{ind}{name} = fd.ops.permute({name}_m, dims={[order.index(d) for d in range(len(order))]})\n")
        d = tensors[k]
        inputs[id(d)] = dict(d, shape=[d["shape"][i] for i in order], stride=[d["stride"][i] for i in order])
    return dict(row, text="".join(lines), inputs=[inputs.get(id(d), d) for d in row["inputs"]])


_SUM = re.compile(r"^(\s+)(\w+) = (fd\.ops\.sum\(.*\))$", re.M)


def segset_sums(text: str) -> str:
    """Every ``sum``'s result through a ``segment_set``: what reads a sum (a batch norm
    backward's input gradient) runs in a kernel after the reduction's."""
    return _SUM.sub(lambda m: f"{m[1]}{m[2]}_s = {m[3]}\n{m[1]}{m[2]} = fd.ops.segment_set({m[2]}_s)", text)


def _text_only(change):
    return lambda row: dict(row, text=change(row["text"]))


VARIANTS = {
    "as_recorded": _text_only(lambda t: t),
    "drop1": _text_only(lambda t: drop(t, {1})),
    "drop2": _text_only(lambda t: drop(t, {2})),
    "drop3+4": _text_only(lambda t: drop(t, {3, 4})),
    "drop1+2+3+4": _text_only(lambda t: drop(t, {1, 2, 3, 4})),
    "twopass": _text_only(twopass),
    "segset": _text_only(segset),
    "memory_order_inputs": memory_order_inputs,
    "segset_sums": _text_only(segset_sums),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--rows", default="0", help="row numbers, comma-separated, or all")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rows = [json.loads(line) for line in open(args.path)]
    picked = range(len(rows)) if args.rows == "all" else [int(r) for r in args.rows.split(",")]
    with open(args.out, "w") as f:
        for i in picked:
            for name in args.variants.split(","):
                row = dict(VARIANTS[name](rows[i]), region=f"{rows[i]['region']}[{name}]")
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
