"""First look at nvfuser_dtensor against eager and inductor (issue "benchmarks" does the full job).

    python -m benchmarks.first_look [--device cuda] [--iters 50]

Cases: tiny bias+gelu (call overhead), bias+gelu / layer_norm / rms_norm at [16384, 4096],
and a pre-norm transformer block forward+backward. Times are medians over back-to-back
calls (throughput), measured with CUDA events on the GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from models import Block  # noqa: E402

import nvfuser_dtensor_backend as nb  # noqa: E402

from .measure import sync as _sync, time_per_call  # noqa: E402


def cases(device, dtype):
    def bias_gelu(x, b):
        return F.gelu(x + b, approximate="tanh")

    def layer_norm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def rms_norm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)

    big = (16384, 4096) if device == "cuda" else (256, 512)
    mk = lambda *s: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    yield "tiny bias+gelu [64,1024]", bias_gelu, (mk(64, 1024), mk(1024)), False
    yield f"bias+gelu {list(big)}", bias_gelu, (mk(*big), mk(big[1])), False
    yield f"layer_norm {list(big)}", layer_norm, (mk(*big), mk(big[1]), mk(big[1])), False
    yield f"rms_norm {list(big)}", rms_norm, (mk(*big), mk(big[1])), False
    shape = (8, 1024, 1024) if device == "cuda" else (2, 64, 128)
    block = Block(shape[-1], 16 if device == "cuda" else 4).to(device, dtype)
    x = mk(*shape).requires_grad_(True)
    yield f"transformer block fwd+bwd {list(shape)}", block, (x,), True


def _profile(step, args, title, steps=5):
    """Top CUDA kernels of a few calls (torch.profiler), to see where device time goes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(*args)
        torch.cuda.synchronize()
    print(f"--- {title}: top kernels over {steps} calls", flush=True)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60), flush=True)


def run(device, dtype, iters, backends, only=None, profile=False):
    rows = []
    for name, fn, args, train in cases(device, dtype):
        if only and not any(o in name for o in only):
            continue
        row = {"case": name}
        for backend in backends:
            torch._dynamo.reset()
            name_, _, flag = backend.partition(":")  # "nvfuser_dtensor:fuse_matmul" sets that option
            options = {flag: True} if flag else None
            f = fn if backend == "eager" else torch.compile(fn, backend=name_, options=options, dynamic=False)
            if train:
                def step(*a, f=f):
                    f(*a).sum().backward()
            else:
                def step(*a, f=f):
                    with torch.no_grad():
                        return f(*a)
            t0 = time.perf_counter()
            try:
                step(*args)
                _sync(device)
                row[f"{backend} compile s"] = time.perf_counter() - t0
                row[backend] = time_per_call(step, args, device, iters)
            except Exception as e:  # report, keep going
                row[backend] = float("nan")
                print(f"{name} / {backend} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            if profile and device == "cuda" and row.get(backend) == row.get(backend):
                _profile(step, args, f"{name} / {backend}")
            if name_ == "nvfuser_dtensor":
                row["regions"] = sum(len(r.partition.regions) for r in nb.reports()[-3:])
        rows.append(row)
        print(_fmt(row, backends), flush=True)
    return rows


def call_path_breakdown(device, dtype, iters):
    """Where the time of one tiny compiled call goes: fd.execute alone, the region, the whole call."""
    x, b = torch.randn(64, 1024, device=device, dtype=dtype), torch.randn(1024, device=device, dtype=dtype)
    torch._dynamo.reset()
    nb.clear_reports()
    compiled = torch.compile(lambda x, b: F.gelu(x + b, approximate="tanh"), backend="nvfuser_dtensor", dynamic=False)
    with torch.no_grad():
        compiled(x, b)
        region = nb.reports()[-1].regions[0]
        entry = next(iter(region._entries.values()))
        rows = [("whole compiled call", lambda: compiled(x, b)), ("FusedRegion call", lambda: region(x, b))]
        fd = getattr(entry.run, "__self__", None)  # the FusionDefinition behind fd.execute
        if device == "cuda" and fd is not None:
            rows.append(("fd.execute alone", lambda: fd.execute([x, b])))
            rows.append(("fd.fec.execute alone", lambda: fd.fec.execute([x, b])))
        for name, fn in rows:
            print(f"  {name:<24} {time_per_call(lambda *_: fn(), (), device, iters):8.1f} us", flush=True)


def _fmt(row, backends):
    parts = [f"{row['case']:<42}"]
    for b in backends:
        parts.append(f"{b} {row.get(b, float('nan')):9.1f} us")
    if "inductor" in row and "nvfuser_dtensor" in row:
        parts.append(f"speedup vs inductor {row['inductor'] / row['nvfuser_dtensor']:.2f}x")
    parts.append(f"compile nvf {row.get('nvfuser_dtensor compile s', float('nan')):.1f}s "
                 f"ind {row.get('inductor compile s', float('nan')):.1f}s")
    return " | ".join(parts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--profile", action="store_true", help="print the top CUDA kernels per case and backend")
    p.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    p.add_argument("--backends", default="eager,inductor,nvfuser_dtensor,nvfuser_dtensor:fuse_matmul")
    a = p.parse_args(argv)
    print(f"torch {torch.__version__}, device {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device == "cuda" else ""), flush=True)
    run(a.device, getattr(torch, a.dtype), a.iters, a.backends.split(","), [c for c in a.cases.split(",") if c], a.profile)
    print("call path of the tiny bias+gelu case:", flush=True)
    call_path_breakdown(a.device, getattr(torch, a.dtype), max(a.iters, 200))


if __name__ == "__main__":
    main()
