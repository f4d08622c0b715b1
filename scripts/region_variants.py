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


VARIANTS = {
    "as_recorded": lambda t: t,
    "drop1": lambda t: drop(t, {1}),
    "drop2": lambda t: drop(t, {2}),
    "drop3+4": lambda t: drop(t, {3, 4}),
    "drop1+2+3+4": lambda t: drop(t, {1, 2, 3, 4}),
    "twopass": twopass,
    "segset": segset,
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--rows", default="0")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rows = [json.loads(line) for line in open(args.path)]
    with open(args.out, "w") as f:
        for i in (int(r) for r in args.rows.split(",")):
            for name in args.variants.split(","):
                row = dict(rows[i], region=f"{rows[i]['region']}[{name}]", text=VARIANTS[name](rows[i]["text"]))
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
