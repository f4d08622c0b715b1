"""Model-zoo benchmark: accuracy and step time of whole models (benchmarks/zoo.py), per backend.

    python -m benchmarks.models --device cuda --dtype bfloat16 --size real --out benchmarks/results/h200_models
    python -m benchmarks.models --device cpu --size tiny --dtype float32 --backends eager,nvfuser_dtensor  # smoke

Each model runs in its own subprocess (``--one NAME``, rows written to a JSON file as they are
measured) with a timeout (``--timeout-s``); with ``--jobs N`` N of them run at once, compiling side
by side but warming up and timing one at a time (a file lock), so a timed step never shares the
GPU with another model's steps. A CUDA fault or a hang in one model cannot hide
the others: a crashed or timed-out process gives rows with status ``error`` and the last lines
of its stderr. In a model's process: eager first (the reference), then each compiled backend,
each compiled fresh (``torch._dynamo.reset()``) from a deep copy of the same initial weights,
on the same inputs. Backends: ``eager``, ``inductor``, ``nvfuser_dtensor`` and
``nvfuser_dtensor:opt+opt`` (boolean options, e.g. ``nvfuser_dtensor:fuse_matmul``).

Rows (model x mode x backend): ``case``, ``mode`` (train/infer), ``backend``, ``status``
(ok/wrong/error), ``error``, ``note`` (a step judged against float64, zoo_check), ``step_ms`` (median of single steps after ``--warmup`` steps,
CUDA events on CUDA), ``first_call_s`` (the first compiled step: compile), ``loss_err``,
``grad_err`` (see benchmarks/zoo_check.py), ``replay_loss_err``, ``replay_grad_err`` and
``accum_grad_err`` (the step again after the timed ones, and a gradient accumulation for
nvfuser_dtensor: zoo_check.after_replays; a row right at first and wrong there is ``wrong``), ``speedup_vs_inductor`` (inductor's step_ms /
ours), ``peak_mem_mb``, ``reserved_mb`` (``_reserved_baseline``), ``kernels`` and ``kernel_ms`` (CUDA: GPU activities of one profiled step
and their summed time, next to ``step_ms`` the host's share), ``graphs`` (compiled aten graphs: forward, backward, inference), ``regions``, ``fallbacks`` and
``fallback_first`` (nvfuser_dtensor).
Writes results.json (``{"environment", "rows"}``), results.csv, summary.md and speedup.png.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

from . import zoo, zoo_check
from .measure import is_gpu_range, sync, time_single_call, timing_turn
from .report import _fmt, geomean
from .run import environment, parse_backend

BACKENDS = ("eager", "inductor", "nvfuser_dtensor")
MODES = ("train", "infer")
NVF = "nvfuser_dtensor"
STDERR_TAIL = 15  # lines of a failed model process's stderr kept in its rows' error


def _first_line(e: BaseException) -> str:
    """The error's type and first line. Dynamo's ``BackendCompilerFailed`` says only
    "backend='...' raised:" on its first line: the innermost cause is given instead, with the
    frame it was raised in (session 27 lost a zoo failure's cause to that first line)."""
    inner = e
    while (cause := getattr(inner, "inner_exception", None) or inner.__cause__) is not None and cause is not inner:
        inner = cause
    text = str(inner).strip()
    line = f"{type(inner).__name__}: {text.splitlines()[0] if text else ''}"
    if inner is not e:
        frames = traceback.extract_tb(inner.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        line = f"{type(e).__name__}: {line}{where}"
    return line[:700]


def _row(a, name: str, mode: str, backend: str, **kw) -> dict:
    return dict(dict(case=name, size=a.size, dtype=a.dtype, device=a.device, mode=mode, backend=backend, error=""),
                **kw)


# ------------------------------------------------------------------------- one model, in-process

def _time(model, zm, batch, train: bool, device: str, warmup: int, iters: int, lock_file: str = "") -> dict:
    """Median step time after ``warmup`` steps, and the peak memory of the timed steps (CUDA)."""
    with timing_turn(lock_file):
        return _time_now(model, zm, batch, train, device, warmup, iters)


def _time_now(model, zm, batch, train: bool, device: str, warmup: int, iters: int) -> dict:
    def step():
        zoo_check.run_step(model, batch, zm.loss_fn, train, collect=False)

    for _ in range(warmup):
        step()
    sync(device)
    out = {}
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out["step_ms"] = time_single_call(step, (), device, reps=iters) / 1e3
    if device == "cuda":
        out["peak_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
        out.update(_gpu_activity(step))
    return out


def _gpu_activity(step) -> dict:
    """One more step under the profiler (CUDA): ``kernels`` (GPU activities: kernels, copies,
    memsets) and ``kernel_ms`` (their summed time), so a row shows how much of ``step_ms`` is
    GPU work and how much host time (issue 13). Empty if the profiler fails."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not is_gpu_range(e.name)]
        return dict(kernels=len(gpu), kernel_ms=sum(e.time_range.elapsed_us() for e in gpu) / 1e3)
    except Exception as e:  # noqa: BLE001 - a measurement, never a reason to lose the row
        print(f"    (profiler: {type(e).__name__}: {e})", file=sys.stderr)
        return {}


def _nvf_stats(caught: list[str]) -> dict:
    """Regions of the graphs compiled since the last reset, and the fallbacks (warnings, else reports)."""
    import nvfuser_dtensor_backend as nb

    reports = nb.reports()
    reasons = list(dict.fromkeys(caught)) or [f"region {region.name}: {region.fallback_reason}"
                                              for r in reports for region in r.regions if region.fallback_reason]
    return dict(graphs=len(reports), regions=sum(len(r.partition.regions) for r in reports), fallbacks=len(reasons),
                fallback_first=reasons[0] if reasons else "", fallback_all=[_gist(r) for r in reasons])


def _gist(reason: str) -> str:
    """A fallback reason cut to its head and, for nvFuser's parallel compile, the segment's own
    error (which comes after a long preamble)."""
    at = reason.find("First segment error")
    return reason[:300] + (" ... " + reason[at:at + 700] if at > 300 else reason[300:600])


def measure_model(a, name: str, emit) -> None:
    """Every mode x backend of one model; ``emit(row)`` is called after each."""
    dtype = getattr(torch, a.dtype)
    for mode in a.modes.split(","):
        train = mode == "train"
        try:
            zm = zoo.build(name, a.size, a.device, dtype)
            batch = zm.make_inputs(0)
            eager = copy.deepcopy(zm.model)
            t0 = time.perf_counter()
            ref = zoo_check.seeded_step(eager, zm, batch, train, 0)
            fp64_cache = {}  # the float64 step, built once when a backend needs it (zoo_check.compare)
            sync(a.device)
            first = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - the model itself fails: every backend's row says so
            traceback.print_exc()
            for backend in a.backends.split(","):
                emit(_row(a, name, mode, backend, status="error", error=f"eager reference: {_first_line(e)}"))
            continue
        for backend in a.backends.split(","):
            row = _row(a, name, mode, backend)
            try:
                if backend == "eager":
                    row.update(status="ok", first_call_s=first, loss_err=0.0, grad_err=0.0 if train else None,
                               **_time(eager, zm, batch, train, a.device, a.warmup, a.iters, a.timing_lock))
                else:
                    row.update(_measure_compiled(a, zm, batch, backend, train, ref, fp64_cache))
            except Exception as e:  # noqa: BLE001 - a failing backend is a result
                traceback.print_exc()
                row.update(status="error", error=_first_line(e))
            emit(row)
        del eager, ref, zm, fp64_cache
        if a.device == "cuda":
            torch.cuda.empty_cache()


def _reserved_baseline(device: str) -> int | None:
    """The CUDA memory the caching allocator holds before a backend compiles and runs, with
    the peak reset: ``reserved_mb`` is the most it held on top, over compile, warm-up and the
    timed steps. Unlike ``peak_mem_mb`` (allocated during the timed steps), this counts CUDA
    graphs' memory pools, which are allocated when a graph is recorded and whose
    temporaries the allocator never sees as allocated."""
    if device != "cuda":
        return None
    import gc

    torch._dynamo.reset()  # the last backend's graphs and memory pools go (compare() resets too)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_reserved()


def _measure_compiled(a, zm, batch, backend: str, train: bool, ref, fp64_cache: dict) -> dict:
    name, options = parse_backend(backend)
    if name == NVF:
        import nvfuser_dtensor_backend as nb

        nb.clear_cache()  # first_call_s includes building every definition, also for a second variant
        nb.cuda_graph_stats(clear=True)
        nb.compile_stats(clear=True)
        if a.dump_dir:
            folder = Path(a.dump_dir) / zm.name / ("train" if train else "infer") / backend.replace(":", "-")
            options = dict(options or {}, dump_dir=str(folder))
    base_reserved = _reserved_baseline(a.device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = zoo_check.compare(zm, name, train, options, ref=ref, fp64_cache=fp64_cache)
        parts = nb.compile_stats() if name == NVF else None  # the first step's (Note [First-call accounting])
        timing = _time(res["compiled"], zm, batch, train, a.device, a.warmup, a.iters, a.timing_lock)
        if base_reserved is not None:  # before the checks below, which may run calls uncaptured
            timing["reserved_mb"] = (torch.cuda.max_memory_reserved() - base_reserved) / 2**20
        # again after the timed steps: a replay, and gradient accumulation for our runner's
        # graphs; dropout models draw other masks each training step and were judged
        # statistically once
        again = {} if zm.dropout and train else zoo_check.after_replays(
            res["compiled"], zm, batch, train, ref, res, accumulate=name == NVF)
    row = dict(status=res["status"], first_call_s=res["first_call_s"], loss_err=res["loss_err"],
               grad_err=res["grad_err"], tol_loss=res["tol"]["loss"], tol_grad=res["tol"]["grad"], **timing)
    if "noise" in res:
        row.update(dropout_noise=res["noise"], dropout_seed_losses=res["seed_losses"],
                   dropout_happened=res["dropout_happened"])
    if name == NVF:
        row.update(_nvf_stats(res["fallbacks"] + zoo_check.fallback_warnings(caught)))
        row["cuda_graphs"] = nb.cuda_graph_stats()  # recordings and uncaptured calls of the whole run
        row["first_call_parts"] = parts
    if "fp64" in res:  # outside the tolerances from eager: judged against float64 (zoo_check)
        f = res["fp64"]
        row.update(fp64_loss_err=f["loss_err"], fp64_grad_err=f["grad_err"], eager_fp64_loss_err=f["eager_loss_err"],
                   eager_fp64_grad_err=f["eager_grad_err"])
        row["note"] = (f"from float64: loss_err {f['loss_err']:.3g} (eager {f['eager_loss_err']:.3g}), grad_err "
                       f"{_fmt(f['grad_err'], '.3g')} (eager {_fmt(f['eager_grad_err'], '.3g')}), tolerance "
                       f"{zoo_check.FP64_MULTIPLIER:g} x eager's + tol/10")
    row.update({k: v for k, v in again.items() if k != "replay_wrong"})
    if row["status"] == "ok" and again.get("replay_wrong"):
        row["status"] = "wrong"
        row["error"] = f"wrong after the timed steps: {again['replay_wrong']}"
    elif row["status"] == "wrong":
        row["error"] = (f"wrong: loss_err {row['loss_err']:.3g} (tol {row['tol_loss']:.3g}), "
                        f"grad_err {_fmt(row['grad_err'], '.3g')} (tol {row['tol_grad']:.3g})"
                        + (f"; {row['note']}" if "note" in row else ""))
    return row


def run_one(a) -> None:
    """``--one NAME``: measure one model, rewriting ``--result-file`` after each row."""
    rows = []

    def emit(row):
        rows.append(row)
        Path(a.result_file).write_text(json.dumps(rows, indent=1, default=str))
        print(f"  {row['case']} {row['mode']} {row['backend']}: {row['status']} "
              f"{_fmt(row.get('step_ms'), '.2f')} ms {row.get('error', '')}", flush=True)

    torch.manual_seed(0)
    measure_model(a, a.one, emit)


# ------------------------------------------------------------------------ driver: one process each

def _child_argv(a, name: str, result_file: str) -> list[str]:
    argv = [sys.executable, "-m", "benchmarks.models", "--one", name, "--result-file", result_file,
            "--device", a.device, "--dtype", a.dtype, "--size", a.size, "--modes", a.modes,
            "--backends", a.backends, "--warmup", str(a.warmup), "--iters", str(a.iters)]
    argv += ["--timing-lock", a.timing_lock] if a.timing_lock else []
    return argv + (["--dump-dir", a.dump_dir] if a.dump_dir else [])


def run_in_subprocess(a, name: str) -> list[dict]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if a.cuda_launch_blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        result_file, log_file = Path(tmp) / "rows.json", Path(tmp) / "stderr.txt"
        with open(log_file, "w") as log:
            proc = subprocess.Popen(_child_argv(a, name, str(result_file)), cwd=Path(__file__).parent.parent,
                                    env=env, stdout=None, stderr=log, start_new_session=True)
            try:
                rc = proc.wait(timeout=a.timeout_s)
                why = None if rc == 0 else f"model process exited with code {rc}"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)  # its own session: the process and its compile workers
                proc.wait()
                why = f"timed out after {a.timeout_s:g} s"
        rows = json.loads(result_file.read_text()) if result_file.exists() else []
        if why is None:
            return rows
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-STDERR_TAIL:])
    done = {(r["mode"], r["backend"]) for r in rows}
    for mode in a.modes.split(","):
        for backend in a.backends.split(","):
            if (mode, backend) not in done:
                rows.append(_row(a, name, mode, backend, status="error", error=f"{why}; stderr:\n{tail}"))
    return rows


def derive(rows: list[dict]) -> None:
    """speedup_vs_inductor and speedup_vs_eager of every compiled row with a step time."""
    by = {(r["case"], r["mode"], r["backend"]): r for r in rows}
    for r in rows:
        for base in ("inductor", "eager"):
            other = by.get((r["case"], r["mode"], base))
            if r["backend"] != base and other and other.get("step_ms") and r.get("step_ms"):
                r[f"speedup_vs_{base}"] = other["step_ms"] / r["step_ms"]


# ------------------------------------------------------------------------------------- outputs

def summary(rows: list[dict], env: dict) -> str:
    ours = sorted({r["backend"] for r in rows if r["backend"].startswith(NVF)})
    lines = ["# Model zoo: nvfuser_dtensor vs eager and inductor", "",
             f"- Command: `{env.get('command', '?')}`",
             f"- Date: {env.get('date')}; device: {env.get('gpu', env.get('device'))}; torch {env.get('torch')}; "
             f"nvFuser {env.get('nvfuser')}; commit {env.get('git_commit', '?')[:12]}",
             "- ms: median step time (train: forward + loss + backward; infer: forward under no_grad). "
             "speedup > 1: ours is faster than inductor.",
             f"- {env.get('jobs', 1)} model process(es) at once; steps timed "
             + ("one process at a time" if env.get("timed_alone", True) else "by all processes at once (noisy)"), ""]
    for b in ours:
        gm = geomean(r.get("speedup_vs_inductor") for r in rows if r["backend"] == b and r["status"] == "ok")
        n_ok = sum(r["status"] == "ok" for r in rows if r["backend"] == b)
        lines.append(f"- {b}: {n_ok} of {sum(r['backend'] == b for r in rows)} runs ok; geometric-mean speedup "
                     f"over inductor {_fmt(gm, '.2f')}x")
    lines += ["", "| model | mode | backend | eager ms | inductor ms | ours ms | speedup vs inductor | loss_err | "
              "grad_err | inductor loss_err / grad_err | regions | fallbacks | GPU kernels / ms: inductor, ours | "
              "status | errors / notes |",
              "|" + "---|" * 15]
    by = {(r["case"], r["mode"], r["backend"]): r for r in rows}
    for r in rows:
        if not r["backend"].startswith(NVF):
            continue
        e, i = by.get((r["case"], r["mode"], "eager"), {}), by.get((r["case"], r["mode"], "inductor"), {})
        errors = "; ".join(f"{x['backend']}: {x.get('error') or x['note']}" for x in (e, i, r)
                           if x.get("error") or x.get("note"))
        errors = errors.replace("\n", " ").replace("|", "\\|")[:400]
        lines.append(
            f"| {r['case']} | {r['mode']} | {r['backend']} | {_fmt(e.get('step_ms'), '.2f')} | "
            f"{_fmt(i.get('step_ms'), '.2f')} | {_fmt(r.get('step_ms'), '.2f')} | "
            f"{_fmt(r.get('speedup_vs_inductor'), '.2f')} | {_fmt(r.get('loss_err'), '.1e')} | "
            f"{_fmt(r.get('grad_err'), '.1e')} | {_fmt(i.get('loss_err'), '.1e')} / {_fmt(i.get('grad_err'), '.1e')} | "
            f"{_fmt(r.get('regions'), 'd')} | {_fmt(r.get('fallbacks'), 'd')} | "
            f"{_fmt(i.get('kernels'), 'd')} / {_fmt(i.get('kernel_ms'), '.2f')}, "
            f"{_fmt(r.get('kernels'), 'd')} / {_fmt(r.get('kernel_ms'), '.2f')} | {r['status']} | {errors} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: Path) -> Path | None:
    """speedup.png: our step-time speedup over inductor (over eager without inductor rows), per model and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = "inductor" if any(r.get("speedup_vs_inductor") for r in rows) else "eager"
    ours = [r for r in rows if r["backend"].startswith(NVF) and r.get(f"speedup_vs_{base}")]
    if not ours:
        return None
    models = list(dict.fromkeys(r["case"] for r in ours))
    series = list(dict.fromkeys((r["backend"], r["mode"]) for r in ours))
    by = {(r["case"], r["backend"], r["mode"]): r[f"speedup_vs_{base}"] for r in ours}
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(models) * len(series) ** 0.5), 4.5))
    width = 0.8 / len(series)
    for i, (backend, mode) in enumerate(series):
        ax.bar([k + i * width for k in range(len(models))], [by.get((m, backend, mode), 0) for m in models], width,
               label=f"{backend} {mode}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(models))], models, rotation=45, ha="right")
    ax.set_ylabel(f"x {base} (step time)")
    ax.set_title(f"model zoo: speedup over {base}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "speedup.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(rows: list[dict], env: dict, out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1, default=str))
    keys = sorted({k for r in rows for k in r})
    with open(folder / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    (folder / "summary.md").write_text(summary(rows, env))
    plot(rows, folder)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", help="torch dtype of the models and inputs")
    p.add_argument("--size", default="", choices=("",) + zoo.SIZES, help="tiny or real (default: real on CUDA)")
    p.add_argument("--models", default="", help=f"comma-separated (default: all of {','.join(zoo.NAMES)}; "
                   "also the wider zoo's, benchmarks/zoo_more.py)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help="comma-separated; nvfuser_dtensor:opt+opt sets boolean options (e.g. :fuse_matmul)")
    p.add_argument("--warmup", type=int, default=0, help="untimed steps before timing (default 3 CUDA, 1 CPU)")
    p.add_argument("--iters", type=int, default=0, help="timed steps (default 20 CUDA, 3 CPU)")
    p.add_argument("--timeout-s", type=float, default=600, help="per-model process timeout")
    p.add_argument("--out", default="", help="folder for results.json/csv, summary.md, speedup.png")
    p.add_argument("--cuda-launch-blocking", action="store_true",
                   help="CUDA_LAUNCH_BLOCKING=1 in the model processes (find the kernel of a CUDA fault)")
    p.add_argument("--dump-dir", default="",
                   help="backend option dump_dir: every FusionDefinition, in DIR/model/mode/backend/")
    p.add_argument("--one", default="", help=argparse.SUPPRESS)  # internal: the model process
    p.add_argument("--jobs", type=int, default=1,
                   help="models run at once, each in its own process; they compile side by side and time "
                        "their steps one at a time (see --timed-together)")
    p.add_argument("--result-file", default="", help=argparse.SUPPRESS)
    p.add_argument("--timing-lock", default="", help=argparse.SUPPRESS)  # internal: see measure.timing_turn
    p.add_argument("--timed-together", action="store_true",
                   help="with --jobs > 1, let models time their steps at the same time (the old, noisier way)")
    a = p.parse_args(argv)
    a.size = a.size or ("real" if a.device == "cuda" else "tiny")
    a.warmup = a.warmup or (3 if a.device == "cuda" else 1)
    a.iters = a.iters or (20 if a.device == "cuda" else 3)
    names = [n for n in a.models.split(",") if n] or list(zoo.NAMES)
    known = set(zoo.NAMES) | set(zoo.more_entries())
    unknown = sorted(set(names + ([a.one] if a.one else [])) - known)
    if unknown:
        p.error(f"unknown model(s) {unknown}; known: {zoo.NAMES} and the wider zoo's {list(zoo.more_entries())}")
    a.names = names
    return a


def main(argv=None) -> list[dict]:
    a = parse_args(argv)
    if a.one:
        run_one(a)
        return []
    env = environment(a.device, None)
    env.update(size=a.size, dtype=a.dtype,
               command="python -m benchmarks.models " + " ".join(argv if argv is not None else sys.argv[1:]))
    env.update(jobs=a.jobs, timed_alone=a.jobs == 1 or not a.timed_together)
    rows, t_start = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        if a.jobs > 1 and not a.timed_together:
            # models compile at once, time one at a time (a lock given: shared with another zoo run)
            a.timing_lock = a.timing_lock or str(Path(tmp) / "timing.lock")
        futures = {pool.submit(run_in_subprocess, a, name): name for name in a.names}
        for i, future in enumerate(concurrent.futures.as_completed(futures)):
            name, new = futures[future], future.result()
            rows += new
            derive(rows)
            status = ", ".join(f"{r['mode']}/{r['backend']}={r['status']}" for r in new)
            print(f"[{i + 1}/{len(a.names)}] {name}: {status} ({time.perf_counter() - t_start:.0f} s total)",
                  flush=True)
            if a.out:
                write_outputs(rows, env, a.out)  # a run cut short keeps what it measured
    if a.out:
        print(f"wrote {a.out}/results.json, results.csv, summary.md, speedup.png", flush=True)
    return rows


if __name__ == "__main__":
    main()
