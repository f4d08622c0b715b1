"""The benchmark suite's CPU smoke run, so it cannot rot (the GPU runs are committed results)."""

import json

import pytest
import torch

from benchmarks import plot, run


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rows = run.main(["--device", "cpu", "--cases", "bias_gelu_tanh,layer_norm", "--dtype", "float32",
                     "--backends", "eager,nvfuser_dtensor", "--iters", "2", "--out", str(out)])
    return out, rows


def test_smoke_run_measures_every_run(smoke):
    out, rows = smoke
    assert len(rows) == 2 * 2 * 2  # cases x modes x backends
    for r in rows:
        assert "error" not in r, r
        assert r["throughput_us"] > 0 and r["latency_us"] > 0 and r["compile_s"] > 0
    nvf = [r for r in rows if r["backend"] == "nvfuser_dtensor"]
    assert all(r["regions"] >= 1 and r["fallbacks"] == 0 for r in nvf)
    assert all(r["speedup_vs_eager"] > 0 for r in nvf)
    fwd = [r for r in nvf if r["mode"] == "fwd"]
    assert all(r["max_err_vs_fp64"] < 1e-4 and 0 < r["bandwidth_fraction"] for r in fwd)


def test_outputs_and_redraw(smoke):
    out, rows = smoke
    data = json.loads((out / "results.json").read_text())
    assert data["rows"] == json.loads(json.dumps(rows)) and data["environment"]["torch"]
    assert (out / "results.csv").read_text().count("\n") == len(rows) + 1
    assert "geometric-mean speedup over inductor" in (out / "summary.md").read_text()
    (out / "compile.png").unlink()
    plot.main([str(out / "results.json")])
    assert (out / "compile.png").stat().st_size > 0


def test_append_merges_runs(smoke):
    out, rows = smoke
    more = run.main(["--device", "cpu", "--cases", "softmax", "--dtype", "float32", "--modes", "fwd",
                     "--backends", "eager", "--iters", "2", "--out", str(out), "--append"])
    data = json.loads((out / "results.json").read_text())
    assert len(data["rows"]) == len(more) == len(rows) + 1  # main() returns the merged rows
    assert data["environment"]["command"].count("benchmarks.run") == 2


def test_budget_stops_between_groups_and_resume_continues(tmp_path):
    args = ["--device", "cpu", "--cases", "bias_gelu_tanh,softmax", "--dtype", "float32", "--modes", "fwd",
            "--backends", "eager,nvfuser_dtensor", "--iters", "2", "--out", str(tmp_path), "--append"]
    first = run.main(args + ["--budget-s", "1e-9"])  # the first group always runs, then the budget is spent
    assert sorted((r["case"], r["backend"]) for r in first) == [("bias_gelu_tanh", "eager"),
                                                                ("bias_gelu_tanh", "nvfuser_dtensor")]
    rows = run.main(args + ["--resume"])
    assert sorted((r["case"], r["backend"]) for r in rows) == sorted(
        (c, b) for c in ("bias_gelu_tanh", "softmax") for b in ("eager", "nvfuser_dtensor"))
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["throughput_us"] for r in data["rows"][:2]] == [r["throughput_us"] for r in first]  # kept, not re-run


def test_model_zoo_benchmark_end_to_end(tmp_path):
    """benchmarks.models: one tiny model through its own process, eager and ours, JSON form."""
    pytest.importorskip("timm")
    from benchmarks import models

    out = tmp_path / "zoo"
    rows = models.main(["--device", "cpu", "--size", "tiny", "--dtype", "float32", "--models", "vit_s16",
                        "--modes", "infer", "--backends", "eager,nvfuser_dtensor", "--warmup", "1", "--iters", "1",
                        "--out", str(out), "--dump-dir", str(tmp_path / "fusions")])
    data = json.loads((out / "results.json").read_text())
    assert data["rows"] == json.loads(json.dumps(rows)) and data["environment"]["torch"]
    assert [(r["case"], r["mode"], r["backend"], r["status"]) for r in rows] == [
        ("vit_s16", "infer", "eager", "ok"), ("vit_s16", "infer", "nvfuser_dtensor", "ok")]
    ours = rows[1]
    assert ours["step_ms"] > 0 and ours["first_call_s"] > 0 and ours["loss_err"] < 1e-4
    assert ours["regions"] >= 1 and ours["fallbacks"] == 0 and ours["speedup_vs_eager"] > 0
    assert "| vit_s16 | infer | nvfuser_dtensor |" in (out / "summary.md").read_text()
    assert (out / "results.csv").read_text().count("\n") == 3 and (out / "speedup.png").stat().st_size > 0
    assert list((tmp_path / "fusions" / "vit_s16" / "infer" / "nvfuser_dtensor").glob("*.py"))


def test_model_zoo_benchmark_timeout_gives_error_rows(tmp_path):
    """A model process that does not finish in --timeout-s is killed: error rows, the others go on."""
    pytest.importorskip("timm")
    from benchmarks import models

    rows = models.main(["--device", "cpu", "--size", "tiny", "--dtype", "float32", "--models", "vit_s16",
                        "--modes", "train,infer", "--backends", "eager", "--timeout-s", "0.5"])
    assert [(r["mode"], r["status"]) for r in rows] == [("train", "error"), ("infer", "error")]
    assert rows[0]["error"].startswith("timed out after 0.5 s")


def test_backend_names_carry_boolean_options():
    assert run.parse_backend("nvfuser_dtensor") == ("nvfuser_dtensor", None)
    assert run.parse_backend("nvfuser_dtensor:global_view+fuse_matmul") == (
        "nvfuser_dtensor", {"global_view": True, "fuse_matmul": True})
    assert run.parse_backend("nvfuser_dtensor:no_cuda_graphs") == ("nvfuser_dtensor", {"cuda_graphs": False})
    assert run.parse_backend("nvfuser_dtensor:cuda_graphs=trees") == ("nvfuser_dtensor", {"cuda_graphs": "trees"})
    assert run.compile_kwargs("inductor", {"reduce-overhead": True})["mode"] == "reduce-overhead"


def test_zoo_model_processes_time_one_at_a_time(tmp_path):
    """With --jobs > 1 the model processes time their steps in turn (benchmarks.measure.timing_turn):
    two holders of the timing lock never overlap, and without a lock file nothing waits."""
    import threading
    import time

    from benchmarks.measure import timing_turn

    lock, spans = str(tmp_path / "timing.lock"), []

    def timed():
        with timing_turn(lock):
            start = time.monotonic()
            time.sleep(0.2)
            spans.append((start, time.monotonic()))

    threads = [threading.Thread(target=timed) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans.sort()
    assert len(spans) == 3 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    with timing_turn(""):
        pass


def test_host_overhead_splits_a_call(monkeypatch, capsys):
    from benchmarks import host_overhead

    monkeypatch.setattr("sys.argv", ["host_overhead", "--rows", "4", "--cols", "8", "--iters", "50"])
    host_overhead.main()
    text = capsys.readouterr().out
    assert "1 region(s)" in text
    assert all(name in text for name in ("regions stubbed", "FusedRegion.forward", "cache key", "dynamo alone"))


def test_nhwc_reduction_script_defines_each_variant_right(monkeypatch, capsys):
    """scripts/gpu_nhwc_reduction.py on the CPU: every variant's definition (one stage, two
    stages, two fusions, NCHW) evaluated against PyTorch's sums."""
    from helpers import load_script

    script = load_script("gpu_nhwc_reduction")
    assert script._split(2 * 7 * 7) == (1, 98) and script._split(4 * 14 * 14) == (7, 112)
    monkeypatch.setattr("sys.argv", ["gpu_nhwc_reduction", "--shapes", "2x7x7x16,4x14x14x8", "--iters", "1"])
    script.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 2x") or line.startswith("| 4x")]
    assert len(rows) == 2
    assert all(float(row.rstrip(" |").rsplit("|", 1)[1]) < 1e-5 for row in rows)  # max relative error


def test_tp_kernels_script_runs_a_tp_case_on_one_rank():
    """scripts/gpu_tp_kernels.py on one gloo rank (CPU): it times each backend and shows the
    log line of a global-view region call that runs through DTensor (the evaluator's)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "NVFUSER_DTENSOR_CHECK_LAYOUTS")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")  # the tests' layout checks off, as a user runs it
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
         str(root / "scripts" / "gpu_tp_kernels.py"), "--device", "cpu", "--size", "cpu", "--dtype", "float32",
         "--cases", "sp_block", "--modes", "fwd", "--backends", "nvfuser_dtensor:global_view", "--calls", "1"],
        capture_output=True, text=True, timeout=300, env=env, cwd=root)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "== sp_block cpu fwd nvfuser_dtensor:global_view: wall" in text, text[-3000:]
    assert "runs through DTensor on every call: no nvFuser entry on local tensors" in text, text[-3000:]


def test_a_backend_failure_is_reported_by_its_cause():
    # dynamo's BackendCompilerFailed says only "backend='...' raised:" on its first line
    from torch._dynamo.exc import BackendCompilerFailed

    from benchmarks.models import _first_line

    def compile_it():
        raise ValueError("the real reason\nmore")

    try:
        try:
            compile_it()
        except ValueError as inner:
            raise BackendCompilerFailed(compile_it, inner, None) from inner
    except BackendCompilerFailed as e:
        line = _first_line(e)
    assert line.startswith("BackendCompilerFailed: ValueError: the real reason (at test_benchmarks.py:"), line
    assert "in compile_it" in line
    assert _first_line(RuntimeError("plain\nrest")) == "RuntimeError: plain"


def test_a_training_step_starts_from_no_gradients():
    # accumulated across steps, gradients a CUDA graph handed out were read after its next
    # replay (reduce-overhead raised on the transformer block); each step now drops them
    from benchmarks.measure import step_function

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    step = step_function(model, train=True)
    step(x)
    once = (model.weight.grad.clone(), x.grad.clone())
    for _ in range(2):
        step(x)
    torch.testing.assert_close(model.weight.grad, once[0])
    torch.testing.assert_close(x.grad, once[1])
