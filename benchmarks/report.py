"""Benchmark outputs: terminal table, JSON, CSV, plots and a Markdown summary with goals."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

NVF = "nvfuser_dtensor"

# The goals each number is measured against (see the benchmarks issue).
GOAL_GEOMEAN = 1.25  # x inductor, over the fusion cases
GOAL_BANDWIDTH = 0.9  # of copy bandwidth, memory-bound cases at the large size


RUN_FIELDS = ("case", "size", "dtype", "mode")


def run_key(row: dict, backend: str | None = None) -> tuple:
    """(case, size, dtype, mode, backend) of a result row; ``backend`` overrides the row's."""
    return tuple(row.get(k) for k in RUN_FIELDS) + (backend or row.get("backend"),)


def _save(fig, path: Path, paths: list) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    paths.append(path)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _fmt(v, spec=".1f"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def table(rows: list[dict]) -> str:
    cols = [("case", "case", "s"), ("size", "size", "s"), ("dtype", "dtype", "s"), ("mode", "mode", "s"),
            ("backend", "backend", "s"), ("throughput_us", "us/call", ".1f"), ("latency_us", "latency us", ".1f"),
            ("compile_s", "compile s", ".2f"), ("speedup_vs_inductor", "x inductor", ".2f"),
            ("bandwidth_fraction", "BW frac", ".2f"), ("regions", "regions", "d"), ("fallbacks", "fallbacks", "d")]
    lines = [[title for _, title, _ in cols]]
    for r in rows:
        if "error" in r:
            lines.append([r["case"], r["size"], r["dtype"], r["mode"], r["backend"], "ERROR: " + r["error"][:60]]
                         + [""] * (len(cols) - 6))
            continue
        lines.append([_fmt(r.get(k), spec) if spec != "s" else str(r.get(k, "")) for k, _, spec in cols])
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in lines)


def geomean(values) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _fusion_case(name: str) -> bool:
    """The memory-bound single-fusion cases the geometric-mean goal is about (not the model cases)."""
    from .cases import BY_NAME

    case = BY_NAME.get(name)
    return bool(case and case.memory_bound) or name == "cpu"


def _geomean_row(label: str, rows: list[dict], goal: float | None = None) -> str:
    gm = geomean(r.get("speedup_vs_inductor") for r in rows)
    met = "-" if goal is None else ("yes" if gm and gm >= goal else "no")
    return (f"| geometric-mean speedup over inductor, {label} ({len(rows)} runs) | {_fmt(gm, '.2f')}x | "
            f"{'-' if goal is None else f'>= {goal}x'} | {met} |")


def summary(rows: list[dict], env: dict) -> str:
    nvf = [r for r in rows if r.get("backend") == NVF and "error" not in r]
    fusion = [r for r in nvf if _fusion_case(r["case"])]
    models = [r for r in nvf if not _fusion_case(r["case"])]
    gm_eager = geomean(r.get("speedup_vs_eager") for r in nvf)
    lines = [
        "# Benchmark summary: nvfuser_dtensor vs inductor and eager",
        "",
        f"- Command: `{env.get('command', '?')}`",
        f"- Date: {env.get('date')}; device: {env.get('gpu', env.get('device'))}; torch {env.get('torch')}; "
        f"nvFuser {env.get('nvfuser')}; commit {env.get('git_commit', '?')[:12]}",
        f"- Measured copy bandwidth: {_fmt(env.get('copy_bandwidth_gbs'))} GB/s",
        "- Speedups compare throughput (back-to-back calls); > 1 means nvfuser_dtensor is faster.",
        "",
        "| measure | measured | goal | met? |",
        "|---|---|---|---|",
        _geomean_row("fusion cases", fusion, GOAL_GEOMEAN),
    ]
    for size in sorted({r["size"] for r in fusion}, key=lambda s: ("cpu", "small", "medium", "large").index(s)):
        for dtype in sorted({r["dtype"] for r in fusion}):
            lines.append(_geomean_row(f"fusion cases, {size} {dtype}",
                                      [r for r in fusion if r["size"] == size and r["dtype"] == dtype]))
    if models:
        lines.append(_geomean_row("model cases (matmuls and attention run in PyTorch)", models))
    lines += [_geomean_row("all runs", nvf),
              f"| geometric-mean speedup over eager, all runs | {_fmt(gm_eager, '.2f')}x | - | - |"]
    for variant in sorted({r["backend"] for r in rows if r.get("backend", "").startswith(NVF + ":")}):
        lines.append(_geomean_row(f"all runs of {variant}",
                                  [r for r in rows if r.get("backend") == variant and "error" not in r]))
    for r in nvf:
        if r.get("bandwidth_fraction") is not None and r["size"] == "large":
            ok = r["bandwidth_fraction"] >= GOAL_BANDWIDTH
            lines.append(f"| {r['case']} {r['dtype']} fraction of copy bandwidth | "
                         f"{r['bandwidth_fraction']:.2f} | >= {GOAL_BANDWIDTH} | {'yes' if ok else 'no'} |")
    for r in nvf:
        if r["size"] in ("small", "cpu") and r.get("speedup_vs_inductor") is not None:
            ok = r["speedup_vs_inductor"] >= 1.0
            lines.append(f"| {r['case']} {r['dtype']} {r['mode']} call time (small) | {r['throughput_us']:.1f} us "
                         f"({r['speedup_vs_inductor']:.2f}x inductor) | <= inductor's | {'yes' if ok else 'no'} |")
    by_key = {run_key(r): r for r in rows if "error" not in r}
    slower_compile = []
    for r in nvf:
        ind = by_key.get(run_key(r, "inductor"))
        if ind and r["compile_s"] > ind["compile_s"]:
            slower_compile.append(f"{r['case']}/{r['size']}/{r['dtype']}/{r['mode']}")
    lines.append(f"| compile time <= inductor's | {len(nvf) - len(slower_compile)} of {len(nvf)} runs | all | "
                 f"{'yes' if not slower_compile else 'no'} |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines += ["", "## Runs that failed", ""] + [
            f"- {r['case']}/{r['size']}/{r['dtype']}/{r['mode']}/{r['backend']}: {r['error']}" for r in errors]
    lines += ["", "## All runs", "", "```", table(rows), "```", ""]
    return "\n".join(lines)


def plot(rows: list[dict], out: Path) -> list[Path]:
    """speedup.png (nvfuser_dtensor over inductor per case) and compile.png (first-call times)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    nvf = [r for r in rows if r.get("backend") == NVF and r.get("speedup_vs_inductor")]
    if nvf:
        # One panel per mode; x: case and size; one bar per dtype.
        modes = sorted({r["mode"] for r in nvf})
        dtypes = sorted({r["dtype"] for r in nvf})
        keys = list(dict.fromkeys((r["case"], r["size"]) for r in nvf))
        by = {(r["case"], r["size"], r["dtype"], r["mode"]): r["speedup_vs_inductor"] for r in nvf}
        fig, axes = plt.subplots(len(modes), 1, figsize=(max(6, 0.4 * len(keys)), 3.5 * len(modes)), squeeze=False)
        width = 0.8 / len(dtypes)
        for ax, mode in zip(axes[:, 0], modes):
            for i, dtype in enumerate(dtypes):
                ax.bar([k + i * width for k in range(len(keys))], [by.get(key + (dtype, mode), 0) for key in keys],
                       width, label=dtype)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.axhline(GOAL_GEOMEAN, color="tab:blue", linestyle="--", linewidth=0.8, label=f"goal {GOAL_GEOMEAN}x")
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], [f"{c}\n{s}" for c, s in keys],
                          rotation=90, fontsize=7)
            ax.set_ylabel("x inductor (throughput)")
            ax.set_title(f"nvfuser_dtensor speedup over inductor, {mode}")
            ax.legend(fontsize=7)
        _save(fig, out / "speedup.png", paths)
    timed = [r for r in rows if r.get("compile_s") is not None and r.get("backend") != "eager"]
    if timed:
        keys = sorted({run_key(r)[:-1] for r in timed})
        backends = sorted({r["backend"] for r in timed})
        by = {run_key(r): r["compile_s"] for r in timed}
        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(keys)), 5))
        width = 0.8 / len(backends)
        for i, b in enumerate(backends):
            ax.bar([k + i * width for k in range(len(keys))], [by.get(key + (b,), 0) for key in keys], width, label=b)
        ax.set_xticks(range(len(keys)), ["\n".join(k[:2]) + f"\n{k[2]} {k[3]}" for k in keys], rotation=90,
                      fontsize=6)
        ax.set_ylabel("first call (compile) s")
        ax.legend()
        _save(fig, out / "compile.png", paths)
    return paths


def write_outputs(rows: list[dict], env: dict, out: str | None, final: bool = True) -> None:
    """Table, JSON, CSV, plots and summary; ``final=False`` writes only JSON and CSV (a checkpoint)."""
    if final:
        print(table(rows), flush=True)
    if not out:
        return
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    keys = sorted({k for r in rows for k in r})
    with open(folder / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    if not final:
        return
    plot(rows, folder)
    (folder / "summary.md").write_text(summary(rows, env))
    print(f"wrote {folder}/results.json, results.csv, summary.md and plots", flush=True)
