"""Where the host time of a zoo model's training step goes: the step timed back to back
(synchronized once per step), then a cProfile of steady steps, top functions by own time and
by cumulative time, per backend, each backend in its own process (run this script once per
backend). Issue 13: GPT-2's step is 7.9 ms against 5.8 ms of kernels, reduce-overhead's 8.2
against about 6.7.

    source .device/setup.sh && python3 scripts/gpu_step_profile.py gpt2 --backend nvfuser_dtensor
    python3 scripts/gpu_step_profile.py phi --gaps   # then host syncs and the GPU's idle gaps in one step
    python3 scripts/gpu_step_profile.py gpt2 --backend nvfuser_dtensor --device cpu --size tiny   # smoke
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package

from benchmarks import zoo, zoo_check  # noqa: E402
from benchmarks.measure import is_gpu_range  # noqa: E402
from benchmarks.run import compile_kwargs, parse_backend  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--backend", default="nvfuser_dtensor")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="real")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--gaps", action="store_true",
                   help="instead of the cProfile: the host syncs of one steady step (CUDA's sync debug "
                        "mode) and the GPU's idle gaps in another (torch.profiler)")
    a = p.parse_args()
    dtype = torch.bfloat16
    zm = zoo.build(a.model, a.size, a.device, dtype)
    compiled = torch.compile(zm.model, **compile_kwargs(*parse_backend(a.backend)))
    batch = zm.make_inputs(0)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)

    def step():
        zoo_check.seeded_step(compiled, zm, batch, True, 0, collect=False)

    for _ in range(5):
        step()
    sync()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    print(f"== {a.model} {a.backend}: step {statistics.median(times):.2f} ms (median of {a.steps}, synchronized)")
    if a.device == "cuda":
        print(f"-- memory: {torch.cuda.max_memory_reserved() / 2**20:.0f} MB reserved at most, "
              f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MB allocated at most")
    if a.backend.startswith("nvfuser_dtensor"):
        import nvfuser_dtensor_backend as nb

        print("-- our CUDA graphs:", nb.cuda_graph_stats())
    if a.gaps:
        host_syncs(step)
        gpu_gaps(step, sync, a.top)
        return
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(a.steps):
        step()
    sync()
    prof.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(a.top)
        body = out.getvalue()
        print(f"-- by {key}, {a.steps} steps")
        print(body[body.find("ncalls"):])


def host_syncs(step) -> None:
    """Every host sync in one steady step (``torch.cuda.set_sync_debug_mode``), with the
    innermost frames that are not torch's own: a sync between the forward's and the backward's
    replays leaves the GPU idle while the host prepares the backward."""
    import traceback
    import warnings

    seen = []

    def noted(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename and "warnings" not in f.filename]
        seen.append((str(message).splitlines()[0][:100], frames[-4:]))

    with warnings.catch_warnings():  # puts showwarning back on leaving
        warnings.simplefilter("always")
        warnings.showwarning = noted
        on_gpu = torch.cuda.is_available()
        if on_gpu:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            if on_gpu:
                torch.cuda.set_sync_debug_mode(0)
                torch.cuda.synchronize()
    syncs = [s for s in seen if "synchroniz" in s[0]]
    print(f"-- host syncs in one steady step: {len(syncs)}")
    for msg, frames in syncs[:12]:
        print("  ", msg, "|", " <- ".join(f"{Path(f.filename).name}:{f.lineno}({f.name})" for f in reversed(frames)))


def gpu_gaps(step, sync, top: int) -> None:
    """The GPU's idle time in one steady step, and its longest gaps, each with the GPU work
    before and after it, the host op it lies in, and the CUDA runtime calls the host made
    meanwhile."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    events = prof.events()
    gpu = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA and not is_gpu_range(e.name)),
                 key=lambda e: e.time_range.start)  # kernels, copies, memsets: not ranges over them
    runtime = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("cuda")),
                     key=lambda e: e.time_range.start)
    if not gpu:
        print("-- no GPU activity recorded")
        return
    gaps, end = [], gpu[0].time_range.end
    for before, after in zip(gpu, gpu[1:]):
        if after.time_range.start > end:
            gaps.append((after.time_range.start - end, end, before.name, after.name))
        end = max(end, after.time_range.end)
    span = end - gpu[0].time_range.start
    idle = sum(g[0] for g in gaps)
    counts = Counter(e.name for e in runtime)
    host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and not e.name.startswith("cuda")]
    first_host = min((e.time_range.start for e in host), default=gpu[0].time_range.start)
    print(f"-- one steady step under the profiler: GPU span {span / 1e3:.2f} ms, idle inside it {idle / 1e3:.2f} ms "
          f"in {sum(g[0] > 20 for g in gaps)} gaps over 20 us; {len(gpu)} GPU activities; the first GPU work "
          f"{(gpu[0].time_range.start - first_host) / 1e3:.2f} ms after the step's first host op")
    print("   CUDA runtime calls:", ", ".join(f"{k} x{v}" for k, v in counts.most_common()))
    for length, at, before, after in sorted(gaps, reverse=True)[:top]:
        summary = Counter(e.name for e in runtime if at <= e.time_range.start < at + length)
        # the innermost host op spanning the whole gap, and the host ops begun inside it
        around = min((e for e in host if e.time_range.start <= at and e.time_range.end >= at + length),
                     key=lambda e: e.time_range.end - e.time_range.start, default=None)
        begun = list(dict.fromkeys(e.name for e in host if at <= e.time_range.start < at + length))
        print(f"   {length:7.0f} us at +{(at - gpu[0].time_range.start) / 1e3:.2f} ms: after {before[:50]!r}, "
              f"before {after[:50]!r}; host inside {around.name[:60] if around else '-'!r}, began "
              f"{', '.join(b[:40] for b in begun[:4]) or '-'}; runtime calls: "
              f"{', '.join(f'{k} x{v}' for k, v in summary.items()) or '-'}")


if __name__ == "__main__":
    main()
