"""Input updates grouped into ``_foreach_copy_`` (grouped_copies.py, Note [Input updates in
one launch])."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import fx

import nvfuser_dtensor_backend as nb
from cpu_capture import captured_on_cpu  # noqa: F401 - a fixture
from helpers import DEVICE, assert_close, compile_fn, randn
from nvfuser_dtensor_backend.grouped_copies import group_input_copies

aten = torch.ops.aten


def _bn_net(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4), torch.nn.BatchNorm1d(4),
    ).to(DEVICE, dtype)


def _steps(model, ref, steps, backward=True, dtype=torch.float32):
    """``steps`` calls in training mode (batch norm updates its statistics), with a backward
    or under no_grad."""
    for step in range(steps):
        x = randn(5, 3, 6, 6, dtype=dtype)
        with torch.set_grad_enabled(backward):
            out, expected = model(x), ref(x)
            assert_close(out, expected, dtype, scale=4, msg=f"step {step}")
            if backward:
                out.float().square().mean().backward()
                expected.float().square().mean().backward()
        for (name, b), rb in zip(model.named_buffers(), ref.buffers()):  # running statistics and counters
            if b.is_floating_point():
                assert_close(b, rb, dtype, scale=4, msg=f"step {step}: {name}")
            else:
                assert torch.equal(b, rb), f"step {step}: {name}"


def _forward_summary() -> str:
    return next(r for r in nb.reports() if r.kind in ("forward", "inference")).summary()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backward", [True, False], ids=["train", "no_grad"])
def test_batch_norm_statistics_updated_as_in_eager(dtype, backward):
    model = _bn_net(dtype)
    ref = copy.deepcopy(model)
    _steps(compile_fn(model), ref, 3, backward, dtype)
    summary = _forward_summary()
    # 3 batch norms: running mean and variance (float) and the counter (int64), two launches
    assert "aten._foreach_copy_.default: 6 input updates in one launch" in summary, summary  # the float ones
    assert "aten._foreach_copy_.default: 3 input updates in one launch" in summary, summary  # the counters
    assert "aten.copy_" not in summary, summary


def test_with_inductor_between_regions():
    """``fallback="inductor"`` hands the grouped updates to inductor with the code between regions."""
    model = _bn_net()
    _steps(compile_fn(model, fallback="inductor"), copy.deepcopy(model), 2)
    parts = [p for r in nb.reports() for p in r.inductor_parts]
    assert parts and all(p.error is None for p in parts), [p.error for p in parts]


def test_updates_replayed_by_cuda_graphs(captured_on_cpu):
    """Captured, the grouped updates write the buffers on every replay."""
    model = _bn_net()
    ref = copy.deepcopy(model)
    nb.cuda_graph_stats(clear=True)
    _steps(compile_fn(model, cuda_graphs=True), ref, 4)
    assert nb.cuda_graph_stats()["recorded"] >= 2  # the forward and the backward replayed


def _graph_of_copies(readers_between=False, used_result=False, other_dtype=False):
    """placeholders a, b, c (c int64 when ``other_dtype``) updated with a + 1, b * 2, c + 1."""
    g = fx.Graph()
    with torch._subclasses.FakeTensorMode():
        vals = [torch.empty(4), torch.empty(4), torch.empty(4, dtype=torch.int64 if other_dtype else torch.float32)]
    phs = []
    for name, v in zip("abc", vals):
        phs.append(g.placeholder(name))
        phs[-1].meta["val"] = v
    news = []
    for ph, v, op in zip(phs, vals, (aten.add.Tensor, aten.mul.Tensor, aten.add.Tensor)):
        news.append(g.call_function(op, (ph, 2)))
        news[-1].meta["val"] = v
    out = []
    for i, (ph, new) in enumerate(zip(phs, news)):
        c = g.call_function(aten.copy_.default, (ph, new))
        c.meta["val"] = ph.meta["val"]
        if used_result and i == 0:
            out.append(c)
        if readers_between and i == 0:
            r = g.call_function(aten.sum.default, (phs[1],))
            r.meta["val"] = vals[1].sum()
            out.append(r)
    g.output(tuple(out))
    return fx.GraphModule(torch.nn.Module(), g)


def _run(gm):
    args = [torch.arange(4.0), torch.arange(4.0) + 1, torch.arange(4.0) + 2]
    args[2] = args[2].to(next(n for n in gm.graph.nodes if n.name == "c").meta["val"].dtype)
    out = gm(*args)
    return args, out


@pytest.mark.parametrize("case,grouped", [
    (dict(), 3),
    (dict(readers_between=True), 2),  # b is read between a's update and b's: a alone, then b and c
    (dict(used_result=True), 2),  # a's copy_ result is returned: it stays a copy_
    (dict(other_dtype=True), 2),  # c is int64: a group of its own, of one
])
def test_which_copies_are_grouped(case, grouped):
    gm = _graph_of_copies(**case)
    expected_args, expected_out = _run(_graph_of_copies(**case))
    assert group_input_copies(gm) == grouped
    assert sum(n.target is aten._foreach_copy_.default for n in gm.graph.nodes) == (1 if grouped else 0)
    args, out = _run(gm)
    for a, e in zip(args, expected_args):
        assert torch.equal(a, e)
    for o, e in zip(out, expected_out):
        assert torch.equal(o, e)


@pytest.mark.gpu
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_updates_in_real_cuda_graphs(channels_last, monkeypatch, cudnn_without_tf32):
    """On the GPU: the grouped updates captured in a real CUDA graph write the buffers on every
    replay (the forward is recorded in the second step). Channels-last is off on CUDA unless
    the GPU checks ask for it (Note [Channels-last convolutions]); this asks."""
    from nvfuser_dtensor_backend import channels_last as nhwc

    monkeypatch.setattr(nhwc, "ON_CUDA", True)
    model = _bn_net()
    ref = copy.deepcopy(model)
    nb.cuda_graph_stats(clear=True)
    _steps(compile_fn(model, cuda_graphs=True, channels_last=channels_last), ref, 5)
    assert nb.cuda_graph_stats()["recorded"] >= 2
