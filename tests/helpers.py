"""Shared test helpers: compile with the backend, compare with eager, inspect regions."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import warnings

import pytest
import torch

import nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend.region import NvFuserFallbackWarning

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_line_with_env(script: str, **env: str) -> str:
    """The last line ``script`` prints, run by ``python -c`` in a process of its own from the
    project root with ``env`` added (switches the package reads at import); fails the test
    with its stderr if it fails."""
    run = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **env), capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()[-1]

# Tolerances per dtype for one op (bf16/fp16 results are rounded once from fp32).
TOLERANCES = {
    torch.float32: dict(rtol=1.3e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
}


def tol(dtype: torch.dtype, scale: float = 1.0) -> dict:
    t = TOLERANCES.get(dtype, dict(rtol=0, atol=0))
    return {k: v * scale for k, v in t.items()}


def randn(*shape, dtype=torch.float32, device=DEVICE, requires_grad=False, low=None):
    """Random, never all-zero test input; integer dtypes draw from [-8, 8)."""
    if dtype.is_floating_point:
        t = torch.randn(*shape, dtype=torch.float32, device=device).to(dtype)
        if low is not None:
            t = t.abs() + low
    elif dtype == torch.bool:
        t = torch.rand(*shape, device=device) > 0.5
    else:
        t = torch.randint(-8, 8, shape, device=device, dtype=dtype)
    return t.requires_grad_(requires_grad) if requires_grad else t


def compile_fn(fn, **options):
    torch._dynamo.reset()
    nb.clear_reports()
    return torch.compile(fn, backend="nvfuser_dtensor", options=options or None, dynamic=False)


def fused_ops() -> list[str]:
    """Every aten op that went into an nvFuser region since the last compile_fn()."""
    return [op for r in nb.reports() for ops in r.partition.regions for op in ops]


def set_move_kernels(monkeypatch, switch: str) -> None:
    """partition.MOVE_KERNELS as NVFUSER_DTENSOR_MOVE_KERNELS=switch would set it (Note [Data
    movement counted as compute])."""
    from nvfuser_dtensor_backend import partition

    monkeypatch.setattr(partition, "MOVE_KERNELS", partition.move_kernels(switch))


def region_count(kind: str | None = None) -> int:
    return sum(len(r.partition.regions) for r in nb.reports() if kind in (None, r.kind))


def _clone_inputs(inputs):
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            c = x.detach().clone()
            if x.requires_grad:
                c.requires_grad_(True)
            out.append(c)
        else:
            out.append(x)
    return out


def assert_close(actual, expected, dtype=None, scale=1.0, msg=""):
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, dtype, scale, msg)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.dtype == expected.dtype, f"{msg} dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{msg} shape {actual.shape} != {expected.shape}"
    torch.testing.assert_close(actual, expected, **tol(dtype or expected.dtype, scale), msg=msg or None, equal_nan=True)


def check_parity(fn, *inputs, expect_ops=(), backward=False, scale=1.0, fused=True, **options):
    """Compile ``fn`` with the backend, compare outputs (and input grads) with eager.

    ``expect_ops``: aten op names (e.g. "aten.exp.default") that must be inside a region.
    ``fused``: when True, any NvFuserFallbackWarning fails the test.
    """
    eager_inputs = _clone_inputs(inputs)
    comp_inputs = _clone_inputs(inputs)
    expected = fn(*eager_inputs)
    compiled = compile_fn(fn, **options)
    with warnings.catch_warnings():
        if fused:
            warnings.simplefilter("error", NvFuserFallbackWarning)
        actual = compiled(*comp_inputs)
    assert_close(actual, expected, scale=scale)
    if fused:
        assert region_count() > 0, f"nothing was fused: {[r.summary() for r in nb.reports()]}"
    if backward:
        outs = expected if isinstance(expected, (tuple, list)) else [expected]
        couts = actual if isinstance(actual, (tuple, list)) else [actual]
        grads = [torch.randn_like(o) for o in outs]
        torch.autograd.backward([o for o in outs], grads)
        with warnings.catch_warnings():
            if fused:
                warnings.simplefilter("error", NvFuserFallbackWarning)
            torch.autograd.backward([o for o in couts], [g.clone() for g in grads])
        for e, c in zip(eager_inputs, comp_inputs):
            if isinstance(e, torch.Tensor) and e.requires_grad:
                assert_close(c.grad, e.grad, scale=scale * 4, msg="grad")
    ops = fused_ops()  # after the backward: AOTAutograd compiles it on its first call
    for op in expect_ops:
        assert op in ops, f"{op} was not fused; fused ops: {ops}; reports: {[r.summary() for r in nb.reports()]}"
    return actual


def assert_no_worse_than_eager(actual, eager, reference, factor=2.0, msg="", slack=None):
    """Low-precision check: |actual - ref64| <= factor * |eager - ref64| + slack, elementwise max.

    ``reference`` is the same computation in float64. This accepts a backend that is more
    accurate than eager (fp32 accumulation) and rejects one that is meaningfully worse.
    ``slack`` defaults to the dtype's atol times (1 + the largest reference magnitude).
    """
    assert actual.dtype == eager.dtype and actual.shape == eager.shape, msg
    ref = reference.double()
    err = (actual.double() - ref).abs().max().item()
    eager_err = (eager.double() - ref).abs().max().item()
    if slack is None:
        slack = tol(eager.dtype)["atol"] * (1 + ref.abs().max().item())
    bound = factor * eager_err + slack
    assert err <= bound, f"{msg}: error {err:.3g} vs eager's {eager_err:.3g} (bound {bound:.3g})"


def accumulating_steps(compiled, model, ref, make_input, steps: int, set_to_none: bool, **tol) -> None:
    """Training steps of ``compiled`` (over ``model``) and of ``ref`` (an eager copy), two
    micro-batches accumulating into ``.grad`` per optimizer step, every loss kept: the
    gradients after each step and all the kept losses must match (CUDA-graph tests)."""
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, ref))
    losses, ref_losses = [], []
    for _ in range(steps):
        for _ in range(2):
            x = make_input()
            loss = compiled(x).square().mean()
            loss.backward()
            ref_loss = ref(x).square().mean()
            ref_loss.backward()
            losses.append(loss)
            ref_losses.append(ref_loss)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol)
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad(set_to_none=set_to_none)
    torch.testing.assert_close(torch.stack(losses), torch.stack(ref_losses), **tol)


class _Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)).tanh() * 2


def layer_loop(device, make, layers: int = 3, width: int = 16, steps: int = 6, **tol) -> list[int]:
    """Training steps of layers called in a Python loop with a graph break after each (one
    compiled graph per layer, BART's on the H200), with CUDA graphs, against eager, ``.grad``
    released each step; returns the process-wide uncaptured-call count after each step
    (Note [Backwards of uncaptured forwards])."""
    import copy

    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(_Block(width) for _ in range(layers)).to(device)
    ref = copy.deepcopy(blocks)

    def model(x, blocks=blocks):
        for block in blocks:
            x = block(x)
            torch._dynamo.graph_break()
        return x.square().mean()

    compiled = compile_fn(model, cuda_graphs=True)
    uncaptured = []
    for _ in range(steps):
        x = make(8, width, device=device)
        compiled(x).backward()
        model(x, ref).backward()
        for p, q in zip(blocks.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol)
            p.grad = q.grad = None
        uncaptured.append(nb.cuda_graph_stats()["uncaptured_calls"])
    return uncaptured


class RecordingWatch:
    """The CUDA-graph recordings made (weakly: the runners alone decide how long they live),
    those replayed and the calls run uncaptured since ``last_step`` (Note [Record what
    repeats]); ``setattr`` puts the watch on ``GraphRunner`` (pytest's ``monkeypatch.setattr``
    in tests)."""

    def __init__(self, setattr=setattr) -> None:
        import weakref

        from nvfuser_dtensor_backend.cuda_graph_runner import GraphRunner

        self.made, self.replayed, self.uncaptured = [], set(), 0
        record, replay, uncaptured = GraphRunner._record, GraphRunner._replay, GraphRunner._uncaptured

        def recording(runner, args, *rest):
            rec = record(runner, args, *rest)
            self.made.append(weakref.ref(rec))
            return rec

        def replaying(runner, rec, args):
            self.replayed.add(id(rec))
            return replay(runner, rec, args)

        def as_it_is(runner, args, *rest):
            self.uncaptured += 1
            return uncaptured(runner, args, *rest)

        setattr(GraphRunner, "_record", recording)
        setattr(GraphRunner, "_replay", replaying)
        setattr(GraphRunner, "_uncaptured", as_it_is)

    def last_step(self) -> None:
        self.replayed.clear()
        self.uncaptured = 0

    def live(self) -> list:
        return [rec for rec in (ref() for ref in self.made) if rec is not None]

    def stale(self) -> list:
        """The live recordings not replayed since ``last_step``."""
        return [rec for rec in self.live() if id(rec) not in self.replayed]

    @staticmethod
    def held_bytes(recs) -> int:
        """Bytes ``recs`` hold: their outputs and input buffers, each storage once; not the
        inputs they read in place (parameters a forward saves, a backward's saved values)."""
        storages = {}
        for rec in recs:
            read = set(rec.key_ptrs)
            for t in [*rec.outputs, *(b for _, b, _ in rec.copies)]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in read:
                    storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return sum(storages.values())


def fill_unwritten_memory_with_nan() -> None:
    """Memory nobody wrote holds NaN from here on (integers: their largest value), as memory
    the CUDA caching allocator hands out again holds whatever was there: a region, a graph
    buffer or a padded row that reads memory it never wrote gives NaN on the CPU too, where
    fresh pages would have read as zeros. PyTorch does this only in its deterministic mode,
    where an op without a deterministic kernel warns instead of raising (``warn_only``)."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def logits_saved_by_a_loss_graph(device, make, steps: int = 6, **tol) -> int:
    """A head that saves nothing for its backward (``x + w``: its gradient is the incoming
    one) lends its logits to a loss after a graph break, which reads them in place and
    saves them; one forward a step, then two before the backward (Note [Lent outputs read in
    place]): the gradients match eager, so the second forward never replayed over the
    logits the first loss saved. Returns the recordings made."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(make(4096, device=device))
    ref = torch.nn.Parameter(w.detach().clone())

    def model(x, w=w):
        logits = x + w  # [8, 4096] float32: 128 KiB, lent
        torch._dynamo.graph_break()
        return logits.square().mean()  # saves the logits it read

    compiled = compile_fn(model, cuda_graphs=True)
    nb.cuda_graph_stats(clear=True)
    for step in range(steps):
        xs = [make(8, 4096, device=device) for _ in range(1 + step % 2)]
        for m, p in ((compiled, w), (model, ref)):
            sum((k + 1) * m(x, p) for k, x in enumerate(xs)).backward()
        torch.testing.assert_close(w.grad, ref.grad, **tol)
        w.grad = ref.grad = None
    return nb.cuda_graph_stats()["recorded"]


def layer_graph_recordings(device, dtype, monkeypatch, steps: int = 5, cuda_graphs=True) -> tuple[int, int]:
    """Tiny BART with LayerDrop's draw on (a graph break in the loop over layers: one compiled
    graph per layer, as on the H200) trained ``steps`` steps with CUDA graphs, each step
    judged against eager like the zoo; returns (recordings not replayed in the last step,
    recordings made), and asserts that the last step recorded nothing and ran no call of a
    captured graph uncaptured (Note [Record what repeats]). ``cuda_graphs``: the backend's
    option (``"auto"`` leaves graphs of fewer than 3 kernel launches uncaptured)."""
    import copy

    from benchmarks import zoo, zoo_check

    watch = RecordingWatch(monkeypatch.setattr)
    zm = zoo.build("bart", "tiny", device, dtype)
    for m in zm.model.modules():
        if hasattr(m, "layerdrop"):
            m.layerdrop = 1e-9
    batch = zm.make_inputs(0)
    ref = zoo_check.seeded_step(copy.deepcopy(zm.model), zm, batch, True, 0)
    tol = zoo_check.TOLERANCES[dtype]
    compiled = compile_fn(zm.model, cuda_graphs=cuda_graphs)
    for step in range(steps):
        if step == steps - 1:
            watch.last_step()
            recorded = len(watch.made)
        loss_err, grad_err = zoo_check.errors(zoo_check.seeded_step(compiled, zm, batch, True, 0), ref, True)
        assert loss_err <= tol["loss"] and grad_err <= tol["grad"], (step, loss_err, grad_err)
    assert len(watch.made) == recorded, (len(watch.made), recorded)
    assert watch.uncaptured == 0, f"{watch.uncaptured} calls ran uncaptured in the last step"
    return len(watch.stale()) + sum(r() is None for r in watch.made), len(watch.made)


def layer_chain_settles(device, dtype, monkeypatch, chains: bool) -> None:
    """Tiny BART with 8 layers and LayerDrop's draw on, lending and reading tangents in place
    from 1 KiB as real sizes do, one-launch training pairs captured, ``cuda_graphs="auto"``,
    ``NVFUSER_DTENSOR_LAYER_CHAINS`` as ``chains`` (Note [Moved outputs of other recordings]):
    each step as right as the zoo asks, the last records nothing, no graph fills its
    recordings, and at most a third of the recordings alive did not replay in the last step
    (without the switch over half, on the CPU stand-in)."""
    from benchmarks import zoo_builders
    from nvfuser_dtensor_backend import cuda_graph_runner, cuda_graphs

    monkeypatch.setitem(cuda_graphs.MIN_LAUNCHES, "training", 1)
    monkeypatch.setitem(zoo_builders.LM["tiny"], "layers", 8)
    monkeypatch.setattr(cuda_graph_runner, "LEND_FROM_BYTES", 1024)
    monkeypatch.setattr(cuda_graph_runner, "TANGENT_IN_PLACE_FROM_BYTES", 1024)
    monkeypatch.setattr(cuda_graph_runner, "LAYER_CHAINS", chains)
    nb.cuda_graph_stats(clear=True)
    # 8 layers settle in 7 or 8 steps on the CPU stand-in, as its allocator's addresses fall
    # (a fresh-clone CI run recorded 2 in step 8): 10 steps leave a margin
    stale, made = layer_graph_recordings(device, dtype, monkeypatch, steps=10, cuda_graphs="auto")
    stats = nb.cuda_graph_stats()
    full = [why for why in stats["not_captured"] if "none free" in why]
    assert made > 0 and not full, full
    dropped = stats["dropped"]  # dead recordings count as not replayed
    assert stale - dropped <= (made - dropped) / 3, (stale, made, dropped)


def _wide_head(device):
    """An MLP whose output (``[rows, 4096]`` float32, 128 KiB at 8 rows) is lent by a CUDA
    graph's forward, not copied (cuda_graph_runner.LEND_FROM_BYTES)."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4096)).to(device)
    return model, copy.deepcopy(model)


def lent_logits_loop(device, make, **tol) -> None:
    """Training steps whose logits are read after the backward, against eager; the logits of
    a replayed step must raise ("overwritten it") once later steps replayed."""
    model, ref = _wide_head(device)
    compiled = compile_fn(model, cuda_graphs=True)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, ref)]
    first = None
    for step in range(5):
        x = make(8, 16, device=device)
        out, ref_out = compiled(x), ref(x)  # ``out`` of the last step is alive meanwhile
        for o, opt in ((out, opts[0]), (ref_out, opts[1])):
            o.square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.testing.assert_close(out, ref_out.detach(), **tol)  # read after the backward
        first = out if step == 2 else first  # a replay's (the first two calls are not replays)
    with pytest.raises(RuntimeError, match="overwritten it"):
        first.sum()


def lent_inference_outputs(device, make, **tol) -> None:
    """Inference calls of a compiled model whose output is lent (no copy): each call's output
    is right until the next call, a clone stays right, and a kept one raises ("overwritten
    it") once later calls replayed; the graph records once."""
    model, _ = _wide_head(device)
    model.eval()
    compiled = compile_fn(model, cuda_graphs=True)
    nb.cuda_graph_stats(clear=True)
    kept, clones, xs = [], [], []
    with torch.no_grad():
        for _ in range(5):
            x = make(8, 16, device=device)
            out = compiled(x)  # the last call's ``out`` is alive meanwhile
            torch.testing.assert_close(out, model(x), **tol)
            kept.append(out)
            clones.append(out.clone())
            xs.append(x)
        for c, x in zip(clones, xs):
            torch.testing.assert_close(c, model(x), **tol)
        torch.testing.assert_close(kept[-1], model(xs[-1]), **tol)  # not replayed since: readable
    with pytest.raises(RuntimeError, match="overwritten it"):
        kept[2].sum()  # a replay's (the first two calls are not replays)
    assert nb.cuda_graph_stats()["recorded"] == 1, nb.cuda_graph_stats()


def siamese_lent_logits(device, make, **tol) -> None:
    """Two forwards before each backward, against eager; every step's logits kept: each is
    right when the step reads it, and later either still right or raising, never changed."""
    model, ref = _wide_head(device)
    compiled = compile_fn(model, cuda_graphs=True)
    kept = []
    for step in range(6):
        x1, x2 = make(8, 16, device=device), make(8, 16, device=device)
        outs = [(m(x1), m(x2)) for m in (compiled, ref)]
        for a, b in outs:
            (a.square().mean() - b.abs().mean()).backward()
        for got, want in zip(outs[0], outs[1]):
            torch.testing.assert_close(got, want.detach(), **tol)
            kept.append((got, want.detach().clone()))
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol)
            p.grad = q.grad = None
    if device != "cpu":
        torch.cuda.synchronize()
    revoked = 0
    for got, want in kept:
        try:
            value = got.clone()
        except RuntimeError as e:
            assert "overwritten it" in str(e)
            revoked += 1
            continue
        torch.testing.assert_close(value, want, **tol)
    assert revoked > 0  # the early steps' recordings replayed since


def load_script(name: str):
    """A script of scripts/ loaded as a module (scripts/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_bf16_gpt2(vocab: int = 8201):
    """Hugging Face GPT-2 with one layer and ``vocab`` classes (not a multiple of 8: its LM head
    gets padded, Note [Padded matmuls]) in bf16, seeded: the model, a copy to compile, a
    float64 copy and token ids [2, 16]. No dropout: each run would draw masks of its own (ours
    inside nvFuser's kernels)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=1, n_head=2, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).to(DEVICE, torch.bfloat16)
    ours, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    return model, ours, ref, torch.randint(0, vocab, (2, 16), device=DEVICE)


def assert_gpt2_step_right(got, model, ours, ref, ids) -> None:
    """``got`` (``ours``' output on ``ids`` with labels) backpropagated, and its loss and
    gradients judged against eager's bf16 and float64's, as the zoo does (eager's own bf16
    error on the tied embedding is 0.1)."""
    expected, exact = model(input_ids=ids, labels=ids), ref(input_ids=ids, labels=ids)
    for out in (got, expected, exact):
        out.loss.backward()
    assert_no_worse_than_eager(got.loss.detach(), expected.loss.detach(), exact.loss.detach(), slack=1e-3, msg="loss")
    for (name, p), q, r in zip(model.named_parameters(), ours.parameters(), ref.parameters()):
        assert_no_worse_than_eager(q.grad, p.grad, r.grad, slack=1e-3, msg=name)
