"""Note [Kernel cache across processes]: nvFuser's KernelDb in a slot one process holds."""

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from nvfuser_dtensor_backend import kernel_cache
from nvfuser_dtensor_backend.options import Options, OptionsError
from nvfuser_dtensor_backend.region import NvFuserFallbackWarning, _NvFuserEntry


@pytest.fixture
def state(monkeypatch):
    fresh = kernel_cache._State()
    monkeypatch.setattr(kernel_cache, "_STATE", fresh)
    monkeypatch.setattr(kernel_cache, "version_key", lambda: "nvfuser-test")
    yield fresh
    if fresh.lock_file is not None:
        fresh.lock_file.close()


def test_the_option_and_the_environment_name_the_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    assert kernel_cache.resolve(False) is None
    assert kernel_cache.resolve(True) == kernel_cache.default_root()
    assert kernel_cache.resolve(str(tmp_path)) == tmp_path
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path / "env"))
    assert kernel_cache.resolve(False) == tmp_path / "env"
    monkeypatch.setenv(kernel_cache.ENV, "1")
    assert kernel_cache.resolve(False) == kernel_cache.default_root()
    assert Options.from_dict({"kernel_cache": str(tmp_path)}).kernel_cache == str(tmp_path)
    for bad in (3, ""):
        with pytest.raises(OptionsError, match="kernel_cache"):
            Options.from_dict({"kernel_cache": bad})


def test_version_key_names_the_nvfuser_build_and_cuda():
    import nvfuser_direct

    key = kernel_cache.version_key()
    assert key.startswith("nvfuser") and nvfuser_direct.__version__.replace("+", "-") in key
    assert key.endswith(f"cuda{torch.version.cuda}")


def _hold_slot(folder, i):
    """Another process holding slot ``i`` of ``folder`` until its stdin closes."""
    code = textwrap.dedent(f"""
        import fcntl, sys
        f = open({str(folder / f"slot-{i}.lock")!r}, "a+")
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("held", flush=True)
        sys.stdin.read()
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_slot_another_process_holds_is_skipped(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    other = _hold_slot(tmp_path, 0)
    try:
        slot, lock = kernel_cache.take_slot(tmp_path, slots=3)
        assert slot == tmp_path / "slot-1" and slot.is_dir()
        assert kernel_cache.take_slot(tmp_path, slots=2) is None  # 0: the other process, 1: ours
        lock.close()
        again, lock = kernel_cache.take_slot(tmp_path, slots=2)  # ours released: free again
        assert again == slot
        lock.close()
    finally:
        other.communicate("")


def test_an_oversized_slot_is_emptied_when_taken(tmp_path, monkeypatch):
    db = tmp_path / "slot-0" / kernel_cache.DB_FOLDER
    db.mkdir(parents=True)
    (db / "kernel_0.cubin").write_bytes(b"x" * 100)
    monkeypatch.setattr(kernel_cache, "MAX_SLOT_BYTES", 1000)
    slot, lock = kernel_cache.take_slot(tmp_path, slots=1)
    assert (db / "kernel_0.cubin").exists()  # under the cap: kept
    lock.close()
    monkeypatch.setattr(kernel_cache, "MAX_SLOT_BYTES", 10)
    slot, lock = kernel_cache.take_slot(tmp_path, slots=1)
    assert not db.exists() and slot.is_dir()
    lock.close()


def _entry(execute):
    built = SimpleNamespace(fd=SimpleNamespace(execute=execute), output_index=[0], output_permutes=(),
                            dense_outputs=())
    return _NvFuserEntry(built, single=True)


def test_only_first_calls_open_the_cache_and_tmpdir_is_put_back(state, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", "/users/own/tmp")
    kernel_cache.configure(str(tmp_path))
    seen = []

    def execute(args, **options):
        seen.append((options, os.environ.get("TMPDIR")))
        if options:  # nvFuser opens its KernelDb under the temporary folder
            os.makedirs(os.path.join(os.environ["TMPDIR"], kernel_cache.DB_FOLDER), exist_ok=True)
        return [args[0] * 2]

    x = torch.randn(3, 4)
    first, second = _entry(execute), _entry(execute)
    for entry in (first, first, second):
        torch.testing.assert_close(entry([x]), x * 2)
    slot = tmp_path / "nvfuser-test" / "slot-0"
    assert seen == [(kernel_cache.FIRST_CALL_OPTIONS, str(slot)),  # opens the KernelDb in our slot
                    ({}, "/users/own/tmp"),  # a later call: nothing added to the per-call path
                    (kernel_cache.FIRST_CALL_OPTIONS, "/users/own/tmp")]  # already open: TMPDIR untouched
    assert os.environ["TMPDIR"] == "/users/own/tmp" and state.opened
    assert kernel_cache.kept()["slot"] == slot


def test_tmpdir_is_put_back_when_the_first_call_fails(state, tmp_path, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    kernel_cache.configure(str(tmp_path))

    def execute(args, **options):
        raise RuntimeError("nvFuser could not compile")

    with pytest.raises(RuntimeError, match="could not compile"):
        _entry(execute)([torch.randn(2)])
    assert "TMPDIR" not in os.environ and not state.opened


def test_with_every_slot_held_the_process_compiles_without_the_cache(state, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(kernel_cache, "SLOTS", 1)
    kernel_cache.configure(str(tmp_path))
    folder = tmp_path / "nvfuser-test"
    folder.mkdir()
    other = _hold_slot(folder, 0)
    try:
        seen = []
        for _ in range(2):
            _entry(lambda args, **options: seen.append(options) or [args[0]])([torch.randn(2)])
        assert seen == [{}, {}] and state.refused
        assert sum("all 1 slots" in r.getMessage() for r in caplog.records) == 1
    finally:
        other.communicate("")


def test_the_first_folder_asked_for_holds(state, tmp_path, caplog):
    kernel_cache.configure(str(tmp_path / "a"))
    kernel_cache.configure(str(tmp_path / "a"))
    assert not caplog.records
    kernel_cache.configure(str(tmp_path / "b"))
    assert state.root == tmp_path / "a" and "already keeps its kernels" in caplog.text


_TWO_PROCESSES = """
import sys, torch, nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend import kernel_cache
torch.manual_seed(0)
f = lambda x, b: torch.nn.functional.gelu(x + b, approximate="tanh").sum(-1)
x, b = torch.randn(64, 1000, device="cuda"), torch.randn(1000, device="cuda")
compiled = torch.compile(f, backend="nvfuser_dtensor", options={"kernel_cache": sys.argv[1], "cuda_graphs": False})
torch.testing.assert_close(compiled(x, b), f(x, b))
print("kernels", kernel_cache.kept()["kernels"], kernel_cache.kept()["slot"])
"""


@pytest.mark.gpu
def test_a_second_process_finds_the_kernels_the_first_kept(tmp_path):
    # the first process compiles and writes its kernels; the second, in turn, takes the same
    # slot and generates the same kernels, so it writes none
    runs = [subprocess.run([sys.executable, "-c", _TWO_PROCESSES, str(tmp_path)], capture_output=True, text=True)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    (_, first, slot1), (_, second, slot2) = (r.stdout.split()[-3:] for r in runs)
    assert slot1 == slot2 and int(first) >= 1 and second == first


def test_on_the_cpu_the_option_changes_nothing(state, tmp_path):
    # the evaluator compiles nothing: no slot is taken, no region falls back, same definitions
    import warnings

    import nvfuser_dtensor_backend as nb

    def f(x, b):
        return torch.nn.functional.gelu(x + b).sum(-1) * 2

    args = (torch.randn(8, 32), torch.randn(32))
    counts = []
    for options in ({}, {"kernel_cache": str(tmp_path)}):
        torch._dynamo.reset()
        nb.clear_cache()
        nb.compile_stats(clear=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", NvFuserFallbackWarning)
            out = torch.compile(f, backend="nvfuser_dtensor", options=options)(*args)
        torch.testing.assert_close(out, f(*args))
        counts.append({k: nb.compile_stats()[k] for k in ("definitions", "first_runs")})
    assert counts[0] == counts[1] and counts[0]["first_runs"] >= 1
    assert state.root == tmp_path and state.slot is None and not any(tmp_path.iterdir())
