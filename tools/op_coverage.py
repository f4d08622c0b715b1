"""OpInfo parity sweep: PyTorch's own OpInfo samples, through the backend, against eager.

For every op family the translator table claims (registry.TRANSLATORS), the OpInfo
entries of PyTorch's ``op_db`` with that aten name run their samples through
``torch.compile(backend="nvfuser_dtensor")`` and eagerly, forward and (for differentiable
ops on floating dtypes) backward. Each (OpInfo, dtype, mode) becomes one row:

- ``fused``: every sample matched eager and its whole graph (the op after decomposition)
  ran in nvFuser regions;
- ``partly fused``: matched eager; some of the graph ran in PyTorch (reason listed);
- ``fallback``: every sample matched eager, the op ran in PyTorch (the reasons are listed);
- ``WRONG``: a sample differed from eager (must never happen);
- ``ERROR``: compiling or running raised (must never happen either).

    python -m tools.op_coverage                               # all families, CPU, docs/op_coverage.md
    python -m tools.op_coverage --device cuda --samples 4     # the full sweep on a GPU
    python -m tools.op_coverage --ops exp,add --dtypes float32 --out -   # a subset, to stdout
    python -m tools.op_coverage --shard 0/8 --json s0.json --out -   # one of 8 parallel parts...
    python -m tools.op_coverage --merge s*.json                      # ...and their table
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import signal
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from tqdm import tqdm

import nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend import fusion  # noqa: F401  (registers the translators)
from nvfuser_dtensor_backend.registry import TRANSLATORS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}
# Tolerances against eager: one op, so close to torch.testing's defaults; nvFuser computes
# half types in fp32 and rounds once, eager may round in between.
TOLERANCES = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-2),
              torch.float16: (1e-3, 1e-3)}
# Translator families whose OpInfo goes by another name.
ALIASES = {"_softmax": "softmax", "_log_softmax": "log_softmax", "silu": "nn.functional.silu",
           "native_layer_norm": "nn.functional.layer_norm", "native_group_norm": "nn.functional.group_norm",
           "_native_batch_norm_legit": "nn.functional.instance_norm",
           "embedding": "nn.functional.embedding",
           "gelu": "nn.functional.gelu", "leaky_relu": "nn.functional.leaky_relu", "relu": "nn.functional.relu",
           "linear": "nn.functional.linear"}


@dataclass
class Row:
    op: str  # OpInfo name (with variant)
    family: str  # the translator family (aten name)
    dtype: str
    mode: str  # fwd | bwd
    samples: int = 0
    status: str = "fused"
    reasons: list[str] = field(default_factory=list)


def families() -> dict[str, str]:
    """aten name -> family, for every family in the translator table."""
    names = set()
    for target in TRANSLATORS:
        if isinstance(target, torch._ops.OpOverload):
            names.add(target.name().split("::")[1].split(".")[0])
    return {ALIASES.get(n, n): n for n in names}


def opinfos(only: set[str] | None):
    from torch.testing._internal.common_methods_invocations import op_db

    fam = families()
    for info in op_db:
        key = info.name if info.name in fam else (info.aten_name or info.name)
        if key in fam and (not only or info.name in only or fam[key] in only):
            yield info, fam[key]


def _compare(got, expected, reference=None) -> str | None:
    """None if ``got`` matches eager's ``expected`` within the tolerance of each output's dtype.

    Where it does not and a float64 ``reference`` exists, a floating output still passes if
    its error against the reference is no worse than twice eager's (plus the tolerance):
    eager is not always the more accurate one (layer_norm over one element: eager's weight
    gradient is 1e-5, the exact answer 0).
    """
    g, _ = tree_flatten(got)
    e, _ = tree_flatten(expected)
    r = tree_flatten(reference)[0] if reference is not None else [None] * len(e)
    if len(g) != len(e) or len(r) != len(e):
        return f"{len(g)} outputs, eager has {len(e)}"
    for a, b, ref in zip(g, e, r):
        if isinstance(b, torch.Tensor):
            atol, rtol = TOLERANCES.get(b.dtype, (0, 0))
            try:
                torch.testing.assert_close(a, b, atol=atol, rtol=rtol, equal_nan=True, check_device=False)
            except AssertionError as err:
                if not (isinstance(ref, torch.Tensor) and b.is_floating_point() and _no_worse(a, b, ref, atol)):
                    return str(err).strip().splitlines()[0]
        elif a != b:
            return f"{a!r} != {b!r}"
    return None


def _no_worse(got, eager, ref, atol) -> bool:
    ref = ref.double()
    if got.shape != eager.shape or got.dtype != eager.dtype or ref.shape != eager.shape:
        return False
    if not torch.equal(torch.isnan(got), torch.isnan(eager)):
        return False
    finite = torch.isfinite(ref)
    if not finite.any():
        return True
    err = (got.double() - ref)[finite].abs().max().item()
    eager_err = (eager.double() - ref)[finite].abs().max().item()
    return err <= 2 * eager_err + atol * (1 + ref[finite].abs().max().item())


def _outcome() -> tuple[int, list[str], int]:
    """(regions that ran in nvFuser, reasons code ran in PyTorch, compute-less regions left out)."""
    fused, reasons, small = 0, [], 0
    for report in nb.reports():
        for region in report.regions:
            if region.fallback_reason:
                reasons.append(region.fallback_reason)
            else:
                fused += 1
        reasons.extend(report.partition.unsupported)
        small += report.partition.small
    return fused, reasons, small


def run_sample(info, family: str, sample, dtype, backward: bool) -> tuple[str, str | None]:
    """(status, reason) of one sample: fused | fallback | WRONG | ERROR."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    index = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def fn(*tensors):
        values = list(leaves)
        for i, t in zip(index, tensors):
            values[i] = t
        inp, args, kwargs = tree_unflatten(values, spec)
        return info.op(inp, *args, **kwargs)

    def inputs(dtype=None):
        ts = [leaves[i].detach().clone() for i in index]
        if dtype is not None:
            ts = [t.to(dtype) if t.is_floating_point() else t for t in ts]
        if backward:
            ts = [t.requires_grad_() if t.is_floating_point() else t for t in ts]
        return ts

    def call(f, dtype=None):
        ts = inputs(dtype)
        out = f(*ts)
        if not backward:
            return out
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            return out, []
        torch.manual_seed(0)
        loss = sum((o.double() * torch.randn_like(o, dtype=torch.float32).double()).sum() for o in outs)
        loss.backward()
        return out, [t.grad for t in ts if isinstance(t, torch.Tensor) and t.requires_grad]

    try:
        expected = call(fn)
    except Exception as e:  # noqa: BLE001 - eager cannot run this sample either
        return "skip", f"eager: {type(e).__name__}"
    reference = None
    if dtype.is_floating_point and dtype != torch.float64:
        try:
            reference = call(fn, torch.float64)
        except Exception:  # noqa: BLE001 - no float64 kernel: compare with eager alone
            reference = None
    torch._dynamo.reset()
    nb.clear_reports()
    try:
        with warnings.catch_warnings(), torch.no_grad() if not backward else _null():
            warnings.simplefilter("ignore")
            got = call(torch.compile(fn, backend="nvfuser_dtensor", dynamic=False))
    except Exception as e:  # noqa: BLE001 - a crash is a finding
        return "ERROR", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
    mismatch = _compare(got, expected, reference)
    if mismatch:
        return "WRONG", mismatch
    fused, reasons, small = _outcome()
    if fused and not reasons:
        return "fused", None
    if fused:
        return "partly fused", reasons[0]
    if reasons:
        return "fallback", reasons[0]
    return "fallback", "only views or copies, no compute: left to PyTorch" if small else "nothing to compute"


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


RANK = {"ERROR": 5, "WRONG": 4, "fallback": 3, "partly fused": 2, "fused": 1, "skip": 0}


def sweep(ops, dtypes, device: str, samples: int, modes, shard: tuple[int, int] = (0, 1),
          rows: list[Row] | None = None) -> list[Row]:
    """The rows, appended to ``rows`` as they finish (so a caller keeps them if interrupted)."""
    rows = [] if rows is None else rows
    k, n = shard  # every n-th OpInfo from the k-th: parts of similar cost
    work = [(info, fam, d, m) for i, (info, fam) in enumerate(opinfos(ops)) if i % n == k
            for d in dtypes for m in modes]
    for info, family, dtype, mode in tqdm(work, desc="op coverage"):
        name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        if dtype not in info.supported_dtypes(device):
            continue
        backward = mode == "bwd"
        if backward and not (info.supports_autograd and dtype.is_floating_point):
            continue
        row = Row(name, family, str(dtype).replace("torch.", ""), mode, status="skip")
        try:
            sample_iter = info.sample_inputs(device, dtype, requires_grad=False)
            chosen = [s for _, s in zip(range(samples), sample_iter)]
        except Exception as e:  # noqa: BLE001
            row.reasons.append(f"samples: {type(e).__name__}")
            rows.append(row)
            continue
        for sample in chosen:
            status, reason = run_sample(info, family, sample, dtype, backward)
            if status == "skip":
                continue
            row.samples += 1
            if RANK[status] > RANK[row.status]:
                row.status = status
            if reason and reason not in row.reasons:
                row.reasons.append(reason)
        rows.append(row)
    return rows


def merge(paths: list[str]) -> tuple[list[Row], dict]:
    """The rows of several parts' JSON files, and their environment (the parts' commands joined)."""
    rows, commands, env = [], [], {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        env = env or dict(data["environment"])
        commands.append(data["environment"]["command"])
        if "partial" in data["environment"]:
            env["partial"] = "; ".join(filter(None, [env.get("partial"), f"{path}: {data['environment']['partial']}"]))
        rows.extend(Row(**r) for r in data["rows"])
    env["command"] = " & ".join(commands) if len(commands) <= 2 else (
        f"{commands[0]} (and {len(commands) - 1} more parts, --shard K/{len(commands)})")
    return rows, env


def markdown(rows: list[Row], env: dict) -> str:
    counts = collections.Counter(r.status for r in rows)
    lines = [
        "# Op coverage: OpInfo samples through nvfuser_dtensor vs eager",
        "",
        f"Generated by `{env['command']}` on {env['date']} ({env['device']}, torch {env['torch']}, "
        f"nvFuser {env['nvfuser']})."
        + (" On CPU the evaluator of nvFuser's definitions stands in for the GPU." if env["device"] == "cpu"
           else " Real nvFuser kernels on the GPU."),
        "",
        *([f"**Partial sweep** (a time limit stopped it: {env['partial']}).", ""] if env.get("partial") else []),
        "Status per OpInfo x dtype x mode over the first samples (the worst sample counts): **fused** (the "
        "whole graph ran in nvFuser regions and matched eager), **partly fused** (some of it ran in PyTorch), "
        "**fallback** (ran in PyTorch, matched eager; first reason given), **WRONG** / **ERROR** (defects: "
        "must be zero).",
        "",
        "| status | rows |", "|---|---|",
        *[f"| {s} | {counts.get(s, 0)} |" for s in ("fused", "partly fused", "fallback", "WRONG", "ERROR", "skip")],
        "",
        "| op (OpInfo) | family | dtype | mode | samples | status | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r.op, r.dtype, r.mode)):
        reason = "; ".join(r.reasons)[:200].replace("|", "\\|")
        lines.append(f"| {r.op} | {r.family} | {r.dtype} | {r.mode} | {r.samples} | {r.status} | {reason} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[Row]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ops", default="", help="comma-separated OpInfo names or families (default: all)")
    p.add_argument("--dtypes", default="float32,bfloat16,float16,int64,bool")
    p.add_argument("--modes", default="fwd,bwd")
    p.add_argument("--samples", type=int, default=2, help="samples per OpInfo and dtype")
    p.add_argument("--out", default="docs/op_coverage.md", help="Markdown table ('-': stdout)")
    p.add_argument("--json", default="", help="also write the rows as JSON")
    p.add_argument("--shard", default="0/1", help="K/N: run the K-th of N parts (for parallel processes)")
    p.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                   help="write the table of the parts' --json files instead of sweeping")
    a = p.parse_args(argv)
    command = "python -m tools.op_coverage " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.merge:
        rows, env = merge(a.merge)
    else:
        import logging

        logging.getLogger("nvfuser_dtensor_backend").setLevel(logging.ERROR)
        k, n = (int(x) for x in a.shard.split("/"))
        if not 0 <= k < n:
            p.error(f"--shard {a.shard}: want K/N with 0 <= K < N")
        rows, complete = [], False
        # A time limit (SIGTERM) keeps the rows done so far, marked as a partial sweep.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            sweep({o for o in a.ops.split(",") if o} or None, [DTYPES[d] for d in a.dtypes.split(",") if d],
                  a.device, a.samples, a.modes.split(","), (k, n), rows)
            complete = True
        except KeyboardInterrupt:
            print(f"interrupted after {len(rows)} rows: writing a partial table", file=sys.stderr)
        from nvfuser_dtensor_backend._nvfuser import version

        env = {"command": command, "date": datetime.date.today().isoformat(), "device": a.device,
               "torch": torch.__version__, "nvfuser": version()}
        if not complete:
            env["partial"] = f"interrupted after {len(rows)} rows"
    text = markdown(rows, env)
    if a.out == "-":
        print(text)
    else:
        Path(a.out).write_text(text)
        print(f"wrote {a.out}: " + ", ".join(f"{k} {v}" for k, v in collections.Counter(r.status for r in rows).items()))
    if a.json:
        Path(a.json).write_text(json.dumps({"environment": env, "rows": [asdict(r) for r in rows]}, indent=1))
    return rows


if __name__ == "__main__":
    main()
