"""A zoo results.json as one table per model and mode: step ms of each backend, ours against
inductor and its reduce-overhead mode, first-call seconds, reserved memory and our CUDA-graph
counts (issue 13's before/after tables).

    python scripts/zoo_table.py benchmarks/results/h200_models/results.json [--ours nvfuser_dtensor]

Where the zoo also ran ours without CUDA graphs (``--plain``, by default
``nvfuser_dtensor:no_cuda_graphs``, e.g. ``ZOO_BACKENDS=...,nvfuser_dtensor:no_cuda_graphs``), a
second table puts our reserved memory with graphs next to it without (issue 13, goal 5: at
most +10%). A third table gives the GPU kernel time of one profiled step per backend (issue
13, goal 4c: kernels alone), where the rows have it, a fourth where our first call's time
went (goal 3, Note [First-call accounting]).
"""

from __future__ import annotations

import argparse
import json
import math


def _f(v, fmt=".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _why(graphs: dict) -> str:
    reasons = graphs.get("not_captured") or {}
    return ("; not captured: " + "; ".join(f"{r} (x{n})" for r, n in reasons.items())[:160]) if reasons else ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results")
    p.add_argument("--ours", default="nvfuser_dtensor")
    p.add_argument("--plain", default="nvfuser_dtensor:no_cuda_graphs")
    args = p.parse_args()
    rows = json.load(open(args.results))["rows"]
    by = {(r["case"], r["mode"], r["backend"]): r for r in rows}
    keys = sorted({(r["case"], r["mode"]) for r in rows}, key=lambda k: (k[0], k[1] != "train"))
    print("| model | mode | inductor ms | reduce-overhead ms | ours ms | x inductor | x reduce-overhead | "
          "first call s: inductor / ours | reserved MB: inductor / reduce-overhead / ours | our CUDA graphs | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = {"ind": [], "ro": []}
    for case, mode in keys:
        ind, ro, ours = (by.get((case, mode, b), {}) for b in ("inductor", "inductor:reduce-overhead", args.ours))
        x_ind = ind.get("step_ms") / ours["step_ms"] if ind.get("step_ms") and ours.get("step_ms") else None
        x_ro = ro.get("step_ms") / ours["step_ms"] if ro.get("step_ms") and ours.get("step_ms") else None
        for k, v in (("ind", x_ind), ("ro", x_ro)):
            if v:
                ratios[k].append(v)
        graphs = ours.get("cuda_graphs") or {}
        print(f"| {case} | {mode} | {_f(ind.get('step_ms'))} | {_f(ro.get('step_ms'))} | {_f(ours.get('step_ms'))} | "
              f"{_f(x_ind)} | {_f(x_ro)} | {_f(ind.get('first_call_s'), '.0f')} / {_f(ours.get('first_call_s'), '.0f')} | "
              f"{_f(ind.get('reserved_mb'), '.0f')} / {_f(ro.get('reserved_mb'), '.0f')} / {_f(ours.get('reserved_mb'), '.0f')} | "
              f"{graphs.get('recorded', '-')} recorded, {graphs.get('uncaptured_calls', '-')} uncaptured"
              f"{_why(graphs)} | "
              f"{ours.get('status', '-')} |")
    for k, name in (("ind", "inductor"), ("ro", "reduce-overhead")):
        if ratios[k]:
            geo = math.exp(sum(math.log(v) for v in ratios[k]) / len(ratios[k]))
            print(f"\ngeometric mean against {name}: {geo:.2f}x over {len(ratios[k])} runs")
    _memory_table(by, keys, args.ours, args.plain)
    _kernel_table(by, keys, args.ours, args.plain)
    _first_call_table(by, keys, args.ours)


def _memory_table(by: dict, keys: list, ours: str, plain: str) -> None:
    """Our reserved memory with CUDA graphs against without them, where both ran."""
    pairs = [(case, mode, by[(case, mode, ours)].get("reserved_mb"), by[(case, mode, plain)].get("reserved_mb"))
             for case, mode in keys if (case, mode, ours) in by and (case, mode, plain) in by]
    pairs = [p for p in pairs if p[2] and p[3]]
    if not pairs:
        return
    print(f"\n| model | mode | reserved MB with graphs | without ({plain}) | ratio | at most +10% |")
    print("|---|---|---|---|---|---|")
    for case, mode, with_graphs, without in pairs:
        ratio = with_graphs / without
        print(f"| {case} | {mode} | {with_graphs:.0f} | {without:.0f} | {ratio:.2f} | {'yes' if ratio <= 1.10 else 'no'} |")


def _kernel_table(by: dict, keys: list, ours: str, plain: str) -> None:
    """GPU kernel time of one profiled step: inductor, ours with graphs, ours without.
    A total above the row's own step time (``*``) counted annotation ranges as kernels (zoo
    runs before 476c6af counted inductor's ``## Call CompiledFxGraph`` ranges)."""
    def cell(r: dict) -> str:
        ms = r.get("kernel_ms")
        return "-" if ms is None else f"{ms:.2f}" + ("*" if r.get("step_ms") and ms > r["step_ms"] else "")

    lines = []
    for case, mode in keys:
        ind, with_graphs, without = (by.get((case, mode, b), {}) for b in ("inductor", ours, plain))
        if any(r.get("kernel_ms") is not None for r in (ind, with_graphs, without)):
            ratio = (ind["kernel_ms"] / without["kernel_ms"] if ind.get("kernel_ms") and without.get("kernel_ms")
                     and ind["kernel_ms"] <= ind.get("step_ms", math.inf) else None)
            lines.append(f"| {case} | {mode} | {cell(ind)} | {cell(with_graphs)} | {cell(without)} | {_f(ratio)} |")
    if lines:
        print(f"\n| model | mode | kernel ms: inductor | ours ({ours}) | ours ({plain}) | inductor / ours without graphs |")
        print("|---|---|---|---|---|---|")
        print("\n".join(lines))


def _first_call_table(by: dict, keys: list, ours: str) -> None:
    """Where our first call's time went (issue 13, goal 3; Note [First-call accounting]): the
    backend's graph work, definitions, regions' first calls (nvFuser's compile on CUDA), and
    the rest (dynamo, AOTAutograd, PyTorch's ops), next to inductor's whole first call."""
    lines = []
    for case, mode in keys:
        ind, r = by.get((case, mode, "inductor"), {}), by.get((case, mode, ours), {})
        parts, first = r.get("first_call_parts"), r.get("first_call_s")
        if not parts or first is None:
            continue
        rest = first - parts["graphs_s"] - parts["first_runs_s"]
        slowest = parts["slowest"][0] if parts["slowest"] else None
        lines.append(f"| {case} | {mode} | {_f(ind.get('first_call_s'), '.1f')} | {first:.1f} | "
                     f"{parts['graphs_s']:.1f} ({parts['graphs']}) | {parts['definitions_s']:.1f} ({parts['definitions']}) | "
                     f"{parts['first_runs_s']:.1f} ({parts['first_runs']}) | {rest:.1f} | "
                     + (f"{slowest[0]:.1f} s {slowest[1][:80]}" if slowest else "-") + " |")
    if lines:
        print("\n| model | mode | first call s: inductor | ours | ours: graphs s (n) | definitions s (n) | "
              "region first calls s (n) | rest s (dynamo, AOTAutograd, PyTorch ops) | slowest region first call |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
