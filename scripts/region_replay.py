"""Every nvFuser region of a model, alone: recorded once, replayed on the GPU on random inputs.

    python scripts/region_replay.py record efficientnet_b0 --size real --dtype bfloat16 --out /tmp/eff.jsonl
    CUDA_LAUNCH_BLOCKING=1 python scripts/region_replay.py run /tmp/eff.jsonl

``record`` runs one training step of a zoo model through the backend (on the CPU the
evaluator stands in for nvFuser, so sizes are real and nothing can fault) and writes, for
every region and input signature it met, the region's definition (the text nvFuser printed,
constants exact) and its inputs' dtypes, shapes, strides, storage offsets and, for integer
and boolean inputs, their range. ``run`` rebuilds each definition with nvFuser, executes it
on random CUDA inputs of those layouts (integers drawn in the recorded range) and compares
every output with the CPU evaluator's (nvFuser's op set in PyTorch) on the same inputs, one
line per region: ``ok``, ``MISMATCH`` (which output, how far) or ``ERROR``. A CUDA fault
kills the process, so ``run`` replays in a child process and starts a new one after the
faulting region, which it names. So a fault or a wrong number of nvFuser itself, at a real
model's shapes and layouts, shows apart from the model, the CUDA graphs and the allocator's
state; if every region replays right, look there instead.

``record --options '{"channels_last": true}'`` compiles with those backend options. Every row
carries ``calls``, how many times the recorded ``steps`` called that signature (written at
the end, so rows of a run that faults have none). ``run --time N`` times each row's execute
(median of N single calls between CUDA events, after the checked one, and the bandwidth
that time gives for reading every input and writing every output once) and ends with the total per
step, each row weighted by its calls: two recordings of one model (NCHW and channels-last)
then compare region by region, without compiling the model on the GPU.

``bytes FILE`` (CPU) adds up what the recorded step's regions must read and write at least,
and what that takes at an H100's 3.35 TB/s: the floor under ``run --time``'s total.

``run --shared`` builds one definition per distinct text and runs the rows in their recorded
order through it, as the backend's fusion cache does (Note [Fusion cache key]: sizes are not
in the key, so a model's blocks of one structure at several sizes share one nvFuser
``FusionExecutorCache``, which may reuse a kernel compiled for one size at another).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import torch
from torch._prims_common import compute_required_storage_length, make_contiguous_strides_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _describe(a) -> dict:
    if not isinstance(a, torch.Tensor):
        return {"scalar": type(a).__name__, "value": a if isinstance(a, (bool, int, float)) else None}
    d = {"dtype": str(a.dtype).removeprefix("torch."), "shape": list(a.shape), "stride": list(a.stride()),
         "offset": a.storage_offset(), "cpu_scalar": a.device.type == "cpu" and a.dim() == 0}
    if not a.dtype.is_floating_point and a.numel():
        d["range"] = [int(a.min()), int(a.max())]
    return d


def _unwrapped(entry) -> tuple:
    """(the innermost entry, the function that gives its inputs from the region's): the
    wrappers on the way make inputs contiguous (``_ContiguousEntry``) or hand them over in
    memory order (``_MemoryOrderEntry``, Note [Channels-last inputs in memory order])."""
    steps = []
    while hasattr(entry, "inner") and not callable(getattr(entry, "run", None)):
        if hasattr(entry, "handed"):
            steps.append(entry.handed)
        entry = entry.inner

    def handed(args):
        for step in steps:
            args = step(args)
        return args

    return entry, handed


def _text(entry) -> str | None:
    """The definition an entry runs: the evaluator's exact text, or what nvFuser prints."""
    run = getattr(entry, "run", None)
    if hasattr(run, "text"):
        return run.text
    fd = getattr(run, "__self__", None)  # fd.execute
    return repr(fd) if fd is not None else None


def record(model: str, size: str, dtype: str, out: str, device: str, steps: int, options: dict | None = None) -> int:
    from benchmarks import zoo
    from nvfuser_dtensor_backend import region

    seen: dict[tuple, int] = {}  # signature -> calls
    sig_of: dict[tuple, tuple | None] = {}  # (region, entry key) -> its first call's signature
    f = open(out, "w")

    def first_signature(self, args, key) -> tuple | None:
        entry = self._entries.get(key)
        if entry is None:
            self._prepare(args, key)
            entry = self._entries[key]
        inner, handed = _unwrapped(entry)
        text = _text(inner)
        if text is None:
            return None
        inputs = [_describe(a) for a in handed(list(args))]
        sig = (text, json.dumps(inputs))
        if sig not in seen:  # written before the call: a region that faults is in the file
            seen[sig] = 0
            f.write(json.dumps({"region": self.name, "ops": self.ops, "text": text, "inputs": inputs}) + "\n")
            f.flush()
        return sig

    def recording(self, args, key):
        if (id(self), key) not in sig_of:  # described once per region and entry, not per call
            sig_of[id(self), key] = first_signature(self, args, key)
        if (sig := sig_of[id(self), key]) is not None:
            seen[sig] += 1
        return forward(self, *args)  # the entry is made: the original fast path runs it

    # every call goes through ``recording``, so each signature's calls are counted (the graphs
    # bind the regions' forward when they are compiled, after this)
    forward = region.FusedRegion.forward
    region.FusedRegion.forward = lambda self, *args: recording(self, args, tuple(map(self._key_of, args)))
    try:
        zm = zoo.build(model, size, device, getattr(torch, dtype))
        torch._dynamo.reset()
        compiled = torch.compile(zm.model, backend="nvfuser_dtensor", options={**(options or {}), "cuda_graphs": False})
        for step in range(steps):  # without zero_grad: a second step accumulates, as micro-batches do
            batch = zm.make_inputs(step)
            zm.loss_fn(compiled(**batch.kwargs), batch).backward()
    finally:
        region.FusedRegion.forward = forward
        f.close()
    rows = [json.loads(line) for line in open(out)]
    with open(out, "w") as f:
        for row, calls in zip(rows, seen.values()):  # dicts keep insertion order: the rows' order
            f.write(json.dumps(dict(row, calls=calls, steps=steps)) + "\n")
    print(f"{model}: {len(seen)} region signatures written to {out}")
    return 0


def make_inputs(row: dict, device: str = "cuda") -> list:
    """Random inputs with the recorded layouts (integers and booleans in the recorded range)."""
    gen = torch.Generator().manual_seed(0)
    return [_make(d, gen, device) for d in row["inputs"]]


def _make(d: dict, gen: torch.Generator, device: str):
    if "scalar" in d:
        return d["value"]
    dtype = getattr(torch, d["dtype"])
    device = "cpu" if d["cpu_scalar"] else device
    extent = compute_required_storage_length(d["shape"], d["stride"], d["offset"])
    if dtype == torch.bool:
        flat = torch.rand(extent, generator=gen) > 0.5
    elif not dtype.is_floating_point:
        low, high = d.get("range", [0, 1])
        flat = torch.randint(low, high + 1, (extent,), generator=gen, dtype=dtype)
    else:
        flat = torch.randn(extent, generator=gen).to(dtype)
    return flat.to(device).as_strided(d["shape"], d["stride"], d["offset"])


_PINNED = re.compile(r"(\w+) = fd\.ops\.stride_order\((\w+), stride_order=\[\]\)")


def pinned_text(text: str, pin: str = "all") -> str:
    """``text`` with its outputs' row-major allocation domains back, as the backend defined
    them: nvFuser prints the row-major ``stride_order`` as ``stride_order=[]``, which rebuilt
    is a plain copy with no allocation domain (Note [Output layout contract]). ``pin``:
    "all" (the backend's definition), "none" (the printed text as it is) or the names of the
    ``stride_order`` results to pin, comma-separated (``tv41,tv47``)."""
    names = None if pin == "all" else set() if pin == "none" else set(pin.split(","))

    def sub(m):
        return m.group(0) if names is not None and m.group(1) not in names else \
            f"{m.group(1)} = fd.ops.stride_order({m.group(2)}, stride_order=list(range({m.group(2)}.ndim - 1, -1, -1)))"
    return _PINNED.sub(sub, text)


def build(row: dict, pin: str = "all"):
    """The recorded definition as an nvFuser FusionDefinition (builds on the CPU too), its
    outputs pinned as ``pinned_text`` says."""
    from nvfuser_direct import DataType, FusionDefinition

    namespace = {"DataType": DataType, "FusionDefinition": FusionDefinition, "inf": float("inf"), "nan": float("nan")}
    exec(compile(pinned_text(row["text"], pin), "<region>", "exec"), namespace)  # noqa: S102 - text nvFuser printed
    with FusionDefinition() as fd:
        namespace["nvfuser_fusion"](_Defining(fd))
    return fd


class _Defining:
    """``fd`` for re-running printed text: nvFuser prints some scalar operands (embedding's
    ``norm_type``) as Python literals where its bindings want a defined scalar."""

    def __init__(self, fd):
        self._fd, self.ops = fd, _Scalars(fd)

    def __getattr__(self, name):
        return getattr(self._fd, name)


class _Scalars:
    def __init__(self, fd):
        self._fd = fd

    def __getattr__(self, name):
        op = getattr(self._fd.ops, name)

        def call(*args, **kwargs):
            try:
                return op(*args, **kwargs)
            except TypeError:
                def val(v):
                    return self._fd.define_scalar(v) if isinstance(v, (bool, int, float)) else v
                return op(*map(val, args), **{k: val(v) for k, v in kwargs.items()})
        return call


def evaluate(row: dict, inputs: list) -> list:
    """The CPU evaluator's outputs (nvFuser's op set in PyTorch, on the inputs' device)."""
    from nvfuser_dtensor_backend.evaluator import Evaluator

    class _Text:  # what Evaluator reads from a FusionDefinition
        def __repr__(self):
            return row["text"]

    return Evaluator(_Text(), {})(inputs)


def replay_one(row: dict, built: dict | None = None, pin: str = "all", time_iters: int = 0,
               timing_lock: str = "") -> str:
    """``built``: definitions by text, shared between rows (``run --shared``); ``time_iters``:
    the verdict ends with the median time of that many executes (``run --time``), timed while
    holding ``timing_lock`` (``run --timing-lock``: the zoo's, when both share the GPU)."""
    from nvfuser_dtensor_backend.verify import mismatch

    if built is None:
        fd = build(row, pin)
    else:
        if row["text"] not in built:
            built[row["text"]] = build(row, pin)
        fd = built[row["text"]]
    inputs = make_inputs(row)
    outs = fd.execute(inputs)
    torch.cuda.synchronize()
    refs = evaluate(row, inputs)
    wrong = [f"output {i}: {why}" for i, (o, r) in enumerate(zip(outs, refs)) if (why := mismatch(o, r))]
    verdict = "MISMATCH " + "; ".join(wrong)[:600] if wrong else "ok"
    if not time_iters or wrong:
        return verdict
    from benchmarks.measure import time_single_call, timing_turn  # the execute above was the warm call

    with timing_turn(timing_lock):
        us = time_single_call(fd.execute, (inputs,), "cuda", time_iters)
    return f"{verdict} {us:.1f} us {moved_bytes(inputs, outs) / us / 1e3:.0f} GB/s"


def moved_bytes(inputs, outputs) -> int:
    """Bytes a region must read and write at least: every element of every tensor input and
    output once (a broadcast dim, stride 0, once)."""
    return sum(math.prod(n for n, st in zip(t.shape, t.stride()) if st) * t.element_size()
               for t in (*inputs, *outputs) if isinstance(t, torch.Tensor))


def _summary(row: dict) -> str:
    shapes = ", ".join(f"{d['dtype']}{d['shape']}" + ("" if tuple(d["stride"]) == make_contiguous_strides_for(d["shape"]) else f"@{d['stride']}")
                       for d in row["inputs"] if "dtype" in d)
    return f"{row['region']} ({','.join(row['ops'])[:120]}) [{shapes[:300]}]"


def _calls_per_step(row: dict) -> float:
    """How often a recorded step called the row's signature (1 for rows recorded without)."""
    return row.get("calls", 1) / row.get("steps", 1)


_TIMED = re.compile(r"^ok ([\d.]+) us( \d+ GB/s)?$")


def run(path: str, start: int, child: bool, shared: bool = False, stop: int | None = None, pin: str = "all",
        time_iters: int = 0, timing_lock: str = "") -> int:
    rows = [json.loads(line) for line in open(path)][:stop]
    if child:  # replay from ``start`` on; print before each region, so a fault names it
        built = {} if shared else None
        for i in range(start, len(rows)):
            print(f"@ {i}", flush=True)
            try:
                verdict = replay_one(rows[i], built, pin, time_iters, timing_lock)
            except Exception as e:  # noqa: BLE001 - an nvFuser error of this region; a fault ends the process
                verdict = f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            print(f"= {i} {verdict}", flush=True)
        return 0
    bad, i, timed_rows = 0, start, {}  # row -> its time per recorded step
    while i < len(rows):
        proc = subprocess.run([sys.executable, __file__, "run", path, "--start", str(i), "--child",
                               *(["--shared"] if shared else []), "--pin", pin, "--time", str(time_iters),
                               *(["--timing-lock", timing_lock] if timing_lock else []),
                               *(["--stop", str(stop)] if stop is not None else [])],
                              capture_output=True, text=True)
        last = i
        for line in proc.stdout.splitlines():
            if not line.startswith(("@ ", "= ")):
                print(line, file=sys.stderr)  # nvFuser's own output (NVFUSER_DUMP=cuda_kernel,...)
            if line.startswith("@ "):
                last = int(line[2:])
            elif line.startswith("= "):
                index, verdict = line[2:].split(" ", 1)
                timed = _TIMED.match(verdict)
                bad += verdict != "ok" and not timed
                row = rows[int(index)]
                if timed:  # weighted by the row's calls per recorded step
                    timed_rows[int(index)] = float(timed.group(1)) * _calls_per_step(row)
                    verdict += f" x{_calls_per_step(row):g}"
                print(f"{index}: {verdict} | {_summary(row)}", flush=True)
                last = int(index) + 1
        if last < len(rows) and proc.returncode != 0:  # the child died in region ``last``
            error = next((ln for ln in proc.stderr.splitlines() if "CUDA error" in ln or "Error" in ln), "")
            print(f"{last}: FAULT (exit {proc.returncode}) {error[:300]} | {_summary(rows[last])}", flush=True)
            bad += 1
            last += 1
        i = max(last, i + 1) if proc.returncode != 0 else len(rows)
    if time_iters:  # for scripts/gpu_region_times.sh, which dumps these rows' segments
        print("slowest rows per step:", " ".join(str(j) for j in sorted(timed_rows, key=timed_rows.get, reverse=True)))
    print(f"{len(rows)} region signatures replayed, {bad} not ok"
          + (f"; the ok ones take {sum(timed_rows.values()) / 1e3:.3f} ms per recorded step" if time_iters else ""))
    return 1 if bad else 0


def least_bytes(path: str, top: int = 5) -> int:
    """What a recorded step's regions must move at least (``moved_bytes`` of every row, its
    outputs from the evaluator, times its calls per step), and that at an H100's 3.35 TB/s:
    the floor under the timed replay's total. Runs on the CPU."""
    rows = [json.loads(line) for line in open(path)]
    per_row = []
    for i, row in enumerate(rows):
        inputs = make_inputs(row, "cpu")
        per_row.append((moved_bytes(inputs, evaluate(row, inputs)) * _calls_per_step(row), i))
    total = sum(b for b, _ in per_row)
    print(f"{path}: {total / 1e6:.0f} MB per step at least, {total / 3.35e9:.3f} ms at 3.35 TB/s")
    for b, i in sorted(per_row, reverse=True)[:top]:
        print(f"  {b / 1e6:8.1f} MB  {i}: {_summary(rows[i])[:160]}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("model")
    r.add_argument("--size", default="real", choices=("tiny", "real"))
    r.add_argument("--dtype", default="bfloat16")
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cpu", help="cuda: the layouts the GPU run meets (written as met, so a fault keeps them)")
    r.add_argument("--steps", type=int, default=1)
    r.add_argument("--options", type=json.loads, default=None, help='backend options as JSON, e.g. \'{"channels_last": true}\'')
    x = sub.add_parser("run")
    x.add_argument("path")
    x.add_argument("--start", type=int, default=0)
    x.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    x.add_argument("--shared", action="store_true", help="one definition per distinct text, as the backend's cache")
    x.add_argument("--stop", type=int, help="replay the rows before this one only")
    x.add_argument("--time", type=int, default=0, metavar="N", help="median of N timed executes per row, and the total per step")
    x.add_argument("--timing-lock", default="", metavar="FILE",
                   help="time while holding this lock file (the zoo's --timing-lock, when both share the GPU)")
    x.add_argument("--pin", default="all", help="outputs whose row-major layout is pinned: all (as the backend), none, "
                   "or names of stride_order results (tv41,tv47); see pinned_text")
    y = sub.add_parser("bytes", help="the least bytes a recorded step's regions move, on the CPU")
    y.add_argument("path")
    args = p.parse_args(argv)
    if args.cmd == "bytes":
        return least_bytes(args.path)
    if args.cmd == "record":
        return record(args.model, args.size, args.dtype, args.out, args.device, args.steps, args.options)
    return run(args.path, args.start, args.child, args.shared, args.stop, args.pin, args.time, args.timing_lock)


if __name__ == "__main__":
    raise SystemExit(main())
