"""Benchmark nvfuser_dtensor against eager and inductor on the same inputs, in one process.

    python -m benchmarks.run --device cuda --out benchmarks/results/h200
    python -m benchmarks.run --device cpu --cases bias_gelu_tanh,layer_norm --sizes cpu   # smoke
    torchrun --nproc_per_node N -m benchmarks.run --cases tp_mlp    # tensor-parallel mode

Writes results.json and results.csv (every number plus the environment), speedup.png and
compile.png, and summary.md (geometric-mean speedup over inductor, each number next to the
goal it is measured against) into --out.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import torch
from tqdm import tqdm

import nvfuser_dtensor_backend as nb

from . import cases as cases_mod
from .measure import copy_bandwidth, max_error_vs_float64, step_function, sync, time_per_call, time_single_call
from .report import run_key, write_outputs

BACKENDS = ("eager", "inductor", "nvfuser_dtensor")


def environment(device: str, mesh) -> dict:
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "world_size": mesh.size() if mesh is not None else 1,
    }
    try:
        import nvfuser_direct

        env["nvfuser"] = nvfuser_direct.__version__
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        env["nvfuser"] = f"unavailable ({type(e).__name__})"
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            env["driver"] = "unknown"
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           cwd=Path(__file__).parent, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        env["git_commit"] = "unknown"
    return env


def parse_backend(backend: str) -> tuple[str, dict | None]:
    """``name[:opt[+opt...]]`` -> (name, {opt: True, ...} or None); ``no_opt`` sets it False and
    ``opt=value`` to a string, e.g.
    ``nvfuser_dtensor:global_view+fuse_matmul`` -> ("nvfuser_dtensor", {"global_view": True, "fuse_matmul": True}),
    ``nvfuser_dtensor:no_cuda_graphs`` -> ("nvfuser_dtensor", {"cuda_graphs": False}),
    ``nvfuser_dtensor:cuda_graphs=trees`` -> ("nvfuser_dtensor", {"cuda_graphs": "trees"})."""
    name, _, flags = backend.partition(":")
    options = {}
    for flag in filter(None, flags.split("+")):
        key, eq, value = flag.partition("=")
        options[key.removeprefix("no_")] = value if eq else not key.startswith("no_")
    return name, options or None


def compile_kwargs(name: str, options: dict | None) -> dict:
    """``torch.compile`` keyword arguments of a parsed backend: ``inductor:reduce-overhead`` is
    inductor's CUDA-graph mode (``mode="reduce-overhead"``), other flags are backend options."""
    if name == "inductor" and options and options.pop("reduce-overhead", False):
        return dict(backend=name, mode="reduce-overhead", options=options or None, dynamic=False)
    return dict(backend=name, options=options, dynamic=False)


def _compile(fn, backend: str):
    """``backend`` is eager, inductor, inductor:reduce-overhead, nvfuser_dtensor, or
    nvfuser_dtensor:<bool option>[+<option>...] (e.g. ``nvfuser_dtensor:global_view+fuse_matmul``)."""
    if backend == "eager":
        return fn
    return torch.compile(fn, **compile_kwargs(*parse_backend(backend)))


def _row(case, size, dtype, mode, backend) -> dict:
    return {"case": case.name, "size": size, "dtype": str(dtype).replace("torch.", ""), "mode": mode,
            "backend": backend}


def measure_one(case, size, dtype, device, mode, backend, iters, mesh) -> dict:
    torch.manual_seed(0)
    work = case.build(size, dtype, device, mesh)
    train = mode == "fwd+bwd"
    if train:
        work.inputs[0].requires_grad_(True)
    fn = copy.deepcopy(work.fn) if isinstance(work.fn, torch.nn.Module) else work.fn
    torch._dynamo.reset()
    nb.clear_reports()
    compiled = _compile(fn, backend)
    step = step_function(compiled, train)
    row = _row(case, size, dtype, mode, backend)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    step(*work.inputs)
    sync(device)
    row["compile_s"] = time.perf_counter() - t0
    row["throughput_us"] = time_per_call(step, work.inputs, device, iters)
    row["latency_us"] = time_single_call(step, work.inputs, device, reps=max(5, iters // 4))
    if device == "cuda":
        row["peak_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
    if work.bytes_moved and mode == "fwd":
        row["bytes_moved"] = work.bytes_moved
    if backend.startswith("nvfuser_dtensor"):
        reports = nb.reports()
        row["regions"] = sum(len(r.partition.regions) for r in reports)
        row["fallbacks"] = sum(1 for r in reports for region in r.regions if region.fallback_reason)
        row["ops_in_pytorch"] = sum(sum(r.partition.unsupported.values()) for r in reports)
    if mesh is None and not train:  # fwd+bwd has the same forward; its error would cost a recompile
        errors = max_error_vs_float64(work.fn, compiled, work.inputs)
        if errors:
            row["max_err_vs_fp64"], row["eager_err_vs_fp64"] = errors
    return row


def derive(rows: list[dict], copy_bw: float) -> None:
    """Speedups over inductor and eager, and achieved bandwidth as a fraction of copy bandwidth."""
    by_key = {run_key(r): r for r in rows}
    for r in rows:
        for base in ("inductor", "eager"):
            other = by_key.get(run_key(r, base))
            if other and other.get("throughput_us") and r.get("throughput_us"):
                r[f"speedup_vs_{base}"] = other["throughput_us"] / r["throughput_us"]
        if r.get("bytes_moved") and r.get("throughput_us"):
            r["bandwidth_fraction"] = r["bytes_moved"] / (r["throughput_us"] * 1e-6) / copy_bw


def _merge(old: dict | None, rows: list[dict], env: dict) -> tuple[list[dict], dict]:
    """Rows of an earlier results.json (``old``) plus ``rows``; new rows replace old ones with the same key."""
    if old is None:
        return rows, env
    new_keys = {run_key(r) for r in rows}
    merged = [r for r in old["rows"] if run_key(r) not in new_keys] + rows
    env = dict(env, command=f"{old['environment'].get('command')} ; {env['command']}")
    return merged, env


def _init_mesh(device: str):
    """Tensor-parallel mode under torchrun: one process per device, 1-D mesh."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and "LOCAL_RANK" not in os.environ:
        return None
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return init_device_mesh(device, (dist.get_world_size(),))


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all; TP cases under torchrun)")
    p.add_argument("--sizes", default="", help="comma-separated of small,medium,large (cpu: the smoke size)")
    p.add_argument("--dtype", default="float32,bfloat16", help="comma-separated torch dtypes")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--iters", type=int, default=0, help="calls per timing repeat (default 50 on CUDA, 3 on CPU)")
    p.add_argument("--out", default="", help="folder for results.json/csv, plots and summary.md")
    p.add_argument("--append", action="store_true",
                   help="merge into the results.json already in --out (a long suite split over several runs)")
    p.add_argument("--resume", action="store_true",
                   help="with --append: skip the runs that results.json in --out already holds without error")
    p.add_argument("--budget-s", type=float, default=0,
                   help="start no new case after this many seconds (0: no limit); rerun with --append --resume "
                        "to continue")
    a = p.parse_args(argv)

    device = a.device
    mesh = _init_mesh(device)
    rank0 = mesh is None or torch.distributed.get_rank() == 0
    names = [c for c in a.cases.split(",") if c] or [
        c.name for c in cases_mod.CASES if c.tensor_parallel == (mesh is not None)]
    unknown = sorted(set(names) - set(cases_mod.BY_NAME))
    if unknown:
        p.error(f"unknown case(s) {unknown}; known: {sorted(cases_mod.BY_NAME)}")
    sizes = [s for s in a.sizes.split(",") if s] or (["cpu"] if device == "cpu" else list(cases_mod.SIZES))
    dtypes = [getattr(torch, d) for d in a.dtype.split(",") if d]
    iters = a.iters or (50 if device == "cuda" else 3)
    runs = [(cases_mod.BY_NAME[n], s, d, m, b) for n in names for s in sizes for d in dtypes
            for m in a.modes.split(",") for b in a.backends.split(",")]

    old_path = Path(a.out) / "results.json" if a.out else None
    old = json.loads(old_path.read_text()) if a.append and old_path and old_path.exists() else None
    done = {run_key(r) for r in old["rows"] if "error" not in r} if old and a.resume else set()
    runs = [r for r in runs if run_key(_row(*r)) not in done]
    copy_bw = copy_bandwidth(device)
    env = environment(device, mesh)
    env["copy_bandwidth_gbs"] = copy_bw / 1e9
    env["command"] = "python -m benchmarks.run " + " ".join(argv if argv is not None else os.sys.argv[1:])

    def save(rows, final):
        merged, merged_env = _merge(old, rows, env)
        derive(merged, copy_bw)
        write_outputs(merged, merged_env, a.out or None, final=final)
        return merged

    rows, t_start, left = [], time.perf_counter(), 0
    for i, (case, size, dtype, mode, backend) in enumerate(tqdm(runs, desc="benchmarks", disable=not rank0)):
        # The budget stops only between case x size x dtype x mode groups, so backends stay comparable.
        new_group = i > 0 and runs[i - 1][:4] != runs[i][:4]
        if new_group and a.budget_s and time.perf_counter() - t_start > a.budget_s:
            left = len(runs) - i
            break
        try:
            rows.append(measure_one(case, size, dtype, device, mode, backend, iters, mesh))
        except Exception as e:  # noqa: BLE001 - a failing backend is a result, not a crash
            rows.append(dict(_row(case, size, dtype, mode, backend), error=f"{type(e).__name__}: {str(e)[:300]}"))
        if rank0 and a.out:
            save(rows, final=False)  # a run cut short by a timeout keeps what it measured
    if rank0:
        rows = save(rows, final=True)
        if left:
            print(f"budget of {a.budget_s:.0f} s spent: {left} runs left; rerun with --append --resume", flush=True)
    if mesh is not None:
        torch.distributed.destroy_process_group()
    return rows


if __name__ == "__main__":
    main()
