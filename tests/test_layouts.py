"""Note [Output layout contract]: every region output has exactly aten's recorded strides."""

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from nvfuser_dtensor_backend.fusion import memory_order
from nvfuser_dtensor_backend.options import Options, OptionsError
from nvfuser_dtensor_backend.partition import VIEW_OPS, partition
from nvfuser_dtensor_backend.region import LayoutContractError, layout_mismatch

from helpers import check_parity, randn


def _compile(fn, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="nvfuser_dtensor", options=options or None)


# --- the contract, end to end ---------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_attention_ending_views_a_region_output(dtype):
    # attn_output.transpose(1, 2).contiguous().reshape(b, s, -1) on a transposed input: aten's
    # region output keeps the input's (permuted) layout, so the transpose after it is
    # contiguous, AOTAutograd drops the clone and the view needs exactly those strides.
    x = torch.randn(2, 5, 3, 4, dtype=dtype).transpose(1, 2)
    check_parity(lambda x: (x * 2).transpose(1, 2).contiguous().view(2, 5, -1), x)


def test_permuted_reshape_that_aot_makes_a_view():
    x = torch.randn(2, 5, 3, 4).transpose(1, 2)
    check_parity(lambda x: (x * 2).permute(0, 2, 1, 3).reshape(2, 5, -1), x)


def test_transposed_pointwise_then_view():
    x = torch.randn(5, 3)
    check_parity(lambda x: torch.sigmoid(x.t()).t().contiguous().view(-1), x)


def test_rotary_embedding_then_attention_ending():
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    def f(x, cos, sin):
        q = x.view(1, 5, 2, 4).transpose(1, 2)
        q = q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1)
        return q.transpose(1, 2).contiguous().view(1, 5, -1)

    check_parity(f, torch.randn(1, 5, 8), torch.randn(1, 5, 4), torch.randn(1, 5, 4))


def test_outputs_in_every_memory_order_have_aten_strides():
    x = torch.randn(2, 3, 4, 5).permute(2, 0, 3, 1)  # a non-trivial memory order
    compiled = _compile(lambda x: (x.exp(), x.sum(1), (x + 1).contiguous()), check_layouts=True)
    for got, want in zip(compiled(x), (x.exp(), x.sum(1), (x + 1).contiguous())):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def test_outputs_unpinned_by_the_ab_switch_keep_aten_strides(monkeypatch):
    # NVFUSER_DTENSOR_PIN_ROW_MAJOR=0 (fusion.PIN_ROW_MAJOR): outputs already row-major get no
    # allocation domain; they are still made dense, and a permuted order is still pinned.
    from nvfuser_dtensor_backend import fusion

    monkeypatch.setattr(fusion, "PIN_ROW_MAJOR", False)
    x = torch.randn(2, 3, 4, 5)
    xp = x.permute(2, 0, 3, 1)
    f = lambda x, xp: (x.exp(), x.sum((2, 3), keepdim=True), (xp + 1).contiguous(), xp * 2)  # noqa: E731
    compiled = _compile(f, check_layouts=True)
    for got, want in zip(compiled(x, xp), f(x, xp)):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def test_the_test_suite_checks_layouts():
    assert Options.from_dict({}).check_layouts  # tests/conftest.py sets NVFUSER_DTENSOR_CHECK_LAYOUTS=1
    assert not Options.from_dict({"check_layouts": False}).check_layouts
    with pytest.raises(OptionsError, match="check_layouts"):
        Options.from_dict({"check_layouts": "yes"})


# --- the pieces -----------------------------------------------------------------------

def _traced(fn, *args) -> fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*args)


def test_region_outputs_are_never_views():
    # t is used inside the region (by mul) and outside it (returned): the region must output
    # the exp, and the transpose is replayed outside with aten's strides.
    def f(x):
        e = x.exp()
        t = e.transpose(0, 1)
        return t * 2, t

    gm = _traced(f, torch.randn(3, 4))
    fused, names, _ = partition(gm)
    for name in names:
        out = next(n for n in getattr(fused, name).graph.nodes if n.op == "output")
        for o in _flat_nodes(out.args[0]):
            assert o.target not in VIEW_OPS, f"{name} outputs the view {o}"
    outside = [n for n in fused.graph.nodes if n.target is torch.ops.aten.transpose.int]
    assert outside, "the transpose used outside must be replayed outside the region"


def _flat_nodes(args):
    if isinstance(args, (list, tuple)):
        for a in args:
            yield from _flat_nodes(a)
    elif isinstance(args, fx.Node):
        yield args


def test_memory_order_of_recorded_values():
    with FakeTensorMode():
        assert memory_order(torch.empty(2, 3, 4)) == [0, 1, 2]
        assert memory_order(torch.empty(2, 3, 4).permute(1, 2, 0)) == [2, 0, 1]
        assert memory_order(torch.empty(4, 6)[:, :3]) is None  # not dense: nothing to keep
        assert memory_order(torch.empty(())) is None


def test_layout_mismatch_ignores_size1_dims_and_names_the_strides():
    val = torch.empty(2, 1, 3)
    assert layout_mismatch(torch.empty_strided((2, 1, 3), (3, 99, 1)), val) is None
    why = layout_mismatch(torch.empty(3, 2).t(), torch.empty(2, 3))
    assert "strides (1, 2), expected (3, 1)" in why


def test_a_wrong_layout_fails_loudly(monkeypatch):
    # Break the contract on purpose (outputs come back transposed-contiguous): the debug
    # check must raise instead of letting a later view fail in a user's run.
    from nvfuser_dtensor_backend import region as region_mod

    real = region_mod._EvaluatorEntry.__call__

    def transposed(self, args):
        out = real(self, args)
        return out.t().contiguous().t() if isinstance(out, torch.Tensor) and out.dim() == 2 else out

    monkeypatch.setattr(region_mod._EvaluatorEntry, "__call__", transposed)
    compiled = _compile(lambda x: x.exp() + 1, check_layouts=True)
    with pytest.raises(LayoutContractError, match="Output layout contract"):
        compiled(torch.randn(3, 4))


def test_cpu_scalars_stay_in_pytorch_in_a_cuda_graph():
    # T5's relative-position buckets compute on 0-dim CPU tensors next to CUDA tensors; a
    # fusion cannot output a CPU tensor ("Expected T3_g_int64_t[] to be bound to a CUDA or
    # meta tensor" on the H200), so such nodes are not fused.
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(4, 4, device="cuda")
        s = torch.tensor(3)
        gm = _traced(lambda x, s: (x.relu() * 2, (s * 2) + 1), x, s)
    fused, names, report = partition(gm)
    fused_ops = {n.target for name in names for n in getattr(fused, name).graph.nodes}
    assert torch.ops.aten.relu.default in fused_ops
    assert any("CPU tensor in a CUDA graph" in r for r in report.unsupported)


def test_view_to_size1_dims_broadcasts_against_constant_sizes():
    # Llama's rotary embedding on the H200: cos of batch 1 (a view of a bmm output to
    # [1, d, s]) times q of batch 8 (a view to constant sizes) hit nvFuser's INTERNAL ASSERT at
    # csrc/ops/utils.cpp:117 ("Expected sizes to match: 8 vs 1") while the fusion was defined.
    def f(a, b):
        return b.view(8, 4, 6) * a.view(1, 4, 6).exp()

    check_parity(f, torch.randn(4, 6), torch.randn(8, 24), expect_ops=["aten.mul.Tensor"])


def test_input_free_values_used_outside_are_made_outside():
    # Note [Input-free outputs]: the causal mask of a masked softmax, also used outside the
    # region, is not a region output (nvFuser faulted on the H200 with it as one).
    def f(scores):
        s = scores.shape[-1]
        i = torch.arange(s)
        mask = (i[None, :] - i[:, None]) >= 1  # what the block's triu(1) decomposes to
        return scores.masked_fill(mask, float("-inf")).softmax(-1), mask

    gm = _traced(f, torch.randn(2, 8, 8))
    fused, names, _ = partition(gm)
    assert names
    for name in names:
        out = next(n for n in getattr(fused, name).graph.nodes if n.op == "output")
        for o in _flat_nodes(out.args[0]):
            assert o.meta["val"].dtype != torch.bool, f"{name} outputs the input-free mask {o}"
    check_parity(f, torch.randn(2, 8, 8))


def test_input_free_values_read_by_two_regions_are_made_once_outside():
    # Note [Input-free outputs]: the zeros two regions read (Llama's rotary backward's
    # slice_backward, once per layer) are made in PyTorch for the second region, once (a
    # switch that had each region make them itself moved no kernel time: Llama 4.17 -> 4.18
    # ms on an H100, session 31; removed in session 33)
    def f(x):
        z = torch.zeros(4, 8, device=x.device) + 1.5  # made from nothing, read by both regions
        a = torch.cumsum(x * 2 + z, 0)  # cumsum runs in PyTorch: the regions around it are two
        return torch.cumsum(a.tanh() * z, 1)

    gm = _traced(f, torch.randn(4, 8))
    fused, names, report = partition(gm)
    assert len(names) == 2
    outside = [n.target for n in fused.graph.nodes if n.op == "call_function"
               and not str(n.target).startswith("nvfuser_region_")]
    made_outside = [t for t in outside if t in (torch.ops.aten.zeros.default, torch.ops.aten.add.Tensor)]
    assert made_outside == [torch.ops.aten.zeros.default, torch.ops.aten.add.Tensor]
    assert [ops.count("aten.zeros.default") for ops in report.regions] == [1, 0]
    check_parity(f, randn(4, 8))


@pytest.mark.parametrize("reduce", [
    lambda y: y.mean(-1), lambda y: y.sum(-1)[..., 1:], lambda y: y.var(-1),
    lambda y: torch.nn.functional.layer_norm(y, (5,)), lambda y: y.mean((-1, -2), keepdim=True)])
def test_extents_after_a_view_to_size1_dims(reduce):
    # ConvNeXt's layer scale gamma.view(1, -1, 1, 1) before the global pool: nvFuser's size
    # of the broadcast product folded to the reshape's constant 1, so the mean divided by 1
    # (every gradient upstream 1/(H*W) of eager's), slices ended at 0 and var gave inf.
    x, g = torch.randn(2, 8, 3, 5), torch.randn(8)
    check_parity(lambda x, g: reduce(x + g.view(1, -1, 1, 1)), x, g)


def test_outputs_nvfuser_returns_with_stride0_are_made_dense(monkeypatch):
    # On the H200 nvFuser returned outputs computed over a batch-expanded broadcast (Llama's
    # causal mask, T5's position bias) with stride 0 on the batch dim, whatever the
    # definition's layout said. Simulate that in the evaluator: the region must still hand
    # aten's dense strides on (the layout check on) and the right values.
    from nvfuser_dtensor_backend import evaluator as ev

    real = ev.Evaluator.__call__
    seen = []

    def stride0(self, inputs):
        outs = []
        for o in real(self, inputs):
            if o.dim() >= 2 and o.shape[0] > 1 and torch.equal(o, o[:1].expand_as(o)):
                o = o[:1].expand_as(o)
                seen.append(o.shape)
            outs.append(o)
        return outs

    monkeypatch.setattr(ev.Evaluator, "__call__", stride0)
    bias, x = torch.randn(1, 4, 8, 8), torch.randn(3, 4, 8, 8)
    check_parity(lambda x, b: ((x + b).softmax(-1), (b.expand(3, 4, 8, 8) + 1).transpose(-1, -2)), x, bias)
    assert seen, "the simulation did not apply"


def test_reshape_of_an_expand_is_materialized_first(tmp_path):
    # Note [Expanded broadcasts are materialized]: Llama's GQA repeat_kv consumed in the fusion
    # (the H200 gave half the values wrong when nvFuser reshaped the expanded dim itself).
    from helpers import compile_fn

    kv = randn(2, 2, 32, 16)

    def f(kv):
        rep = kv[:, :, None].expand(2, 2, 4, 32, 16).reshape(2, 8, 32, 16)
        return rep * 2, rep

    from nvfuser_dtensor_backend.region import FUSION_CACHE

    check_parity(f, kv)
    FUSION_CACHE.clear()  # built again, so written to dump_dir
    compile_fn(f, dump_dir=str(tmp_path))(kv)
    (text,) = [p.read_text() for p in tmp_path.iterdir()]
    where, reshape = text.index("fd.ops.where("), text.index("fd.ops.reshape(")
    assert where < reshape


def test_fusion_outputs_that_alias_inputs_are_copied():
    # Note [Fusion outputs are fresh tensors]: nvFuser may return an output as a view of its
    # input; the region hands out a new tensor, as aten's graph promised.
    from types import SimpleNamespace

    from nvfuser_dtensor_backend.region import _NvFuserEntry

    x = randn(4, 6)
    fd = SimpleNamespace(execute=lambda args: [args[0].view(4, 6), args[0] * 2])
    built = SimpleNamespace(fd=fd, output_index=[0, 1], output_permutes=(), dense_outputs=())
    alias, fresh = _NvFuserEntry(built, single=False)([x])
    assert alias.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    torch.testing.assert_close(alias, x)
    torch.testing.assert_close(fresh, x * 2)


def test_fusion_outputs_that_are_an_input_are_copied():
    # Note [Fusion outputs are fresh tensors]: nvFuser hands back an input itself for an output
    # that only aliases it (no view); a parameter's clone must not follow the parameter's updates.
    from types import SimpleNamespace

    from nvfuser_dtensor_backend.region import _NvFuserEntry

    p, x = randn(4, 6), randn(4, 6)
    fd = SimpleNamespace(execute=lambda args: [args[0], args[1] * 2])
    built = SimpleNamespace(fd=fd, output_index=[0, 1], output_permutes=(), dense_outputs=())
    entry = _NvFuserEntry(built, single=False)
    for _ in range(2):  # found on the first call, copied on every call
        clone, fresh = entry([p, x])
        assert clone is not p and clone.untyped_storage().data_ptr() != p.untyped_storage().data_ptr()
        torch.testing.assert_close(clone, p)
        torch.testing.assert_close(fresh, x * 2)
    assert entry.inputs_out == {0}


def test_fallback_reason_names_the_failing_segment():
    # nvFuser's parallel compile error says only that a segment failed; the reason says which.
    from nvfuser_dtensor_backend.region import _first_line

    text = ("INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/runtime/fusion_kernel_runtime.cpp:476, please report a "
            "bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. \n"
            "Expected thread_pool_error_message.empty() . Detected exception while compiling fusion segments in "
            "parallel.\nUse NVFUSER_DISABLE=parallel_compile to simplify error message.\n"
            "Error from segmentation group 3:  INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/bfs.h:261, please "
            "report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. \n"
            "BFS traversal could not visit some nodes\nException raised from traverse")
    reason = _first_line(RuntimeError(text))
    assert "fusion_kernel_runtime.cpp:476" in reason and "Detected exception" in reason
    assert "segmentation group 3" in reason and "bfs.h:261" in reason and "BFS traversal could not visit" in reason
    assert "please report a bug" not in reason


def test_mixed_layouts_switch_leaves_out_size1_statistics(monkeypatch):
    # NVFUSER_DTENSOR_MIXED_IGNORES_SIZE1 (region.MIXED_IGNORES_SIZE1, off by default): a
    # [1, C, 1, 1] statistic next to NHWC tensors makes a region "mixed" only with it off.
    from nvfuser_dtensor_backend import region

    g = torch.randn(4, 16, 7, 7).contiguous(memory_format=torch.channels_last)
    mean = torch.randn(1, 16, 1, 1)
    assert region._mixed_layouts([g, g, mean], outputs=2)
    monkeypatch.setattr(region, "MIXED_IGNORES_SIZE1", True)
    assert not region._mixed_layouts([g, g, mean], outputs=2)
    assert region._mixed_layouts([g, torch.randn(4, 16, 7, 7), mean], outputs=2)


def test_mixed_input_layouts_with_several_outputs_run_on_row_major_copies():
    # Note [Mixed input layouts with several outputs] (region.py): nvFuser got ConvNeXt's
    # layer-scale backward wrong on the H200; such a region runs on row-major copies.
    from nvfuser_dtensor_backend import region

    div = torch.randn(4, 16, 7, 7)
    g = torch.randn(4, 16, 7, 7).contiguous(memory_format=torch.channels_last)
    gamma = torch.randn(16)
    assert region._mixed_layouts([div, g, gamma], outputs=2)
    assert not region._mixed_layouts([div, g, gamma], outputs=1)
    assert not region._mixed_layouts([div, div[:, :8], gamma], outputs=2)  # a slice is not a layout
    q = torch.randn(2, 8, 4, 16).transpose(1, 2)  # a transformer's transpose: not channels_last
    assert not region._mixed_layouts([div, q], outputs=2)

    def f(div, g, gamma):
        add = div + g
        return add, (add * gamma.view(1, -1, 1, 1)).permute(0, 2, 3, 1).contiguous()

    import nvfuser_dtensor_backend as nb

    torch._dynamo.reset()
    nb.clear_reports()
    check_parity(f, div, g, gamma)
    entries = [e for r in nb.reports() for reg in r.regions for e in reg._entries.values()]
    assert entries and all(isinstance(e, region._ContiguousEntry) for e in entries)
