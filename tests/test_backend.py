"""Structure and safety of the backend: regions, splitting, caching, fallbacks, options."""

import copy
import logging
import warnings

import pytest
import torch

import nvfuser_dtensor_backend as nb
from helpers import DEVICE, assert_close, check_parity, compile_fn, fused_ops, randn, region_count
from nvfuser_dtensor_backend import registry
from nvfuser_dtensor_backend.region import NvFuserFallbackWarning

aten = torch.ops.aten


def test_unsupported_op_splits_region_and_stays_right():
    def f(x):
        y = torch.exp(x) * 2
        z = torch.cumsum(y, 1)  # no translator: runs in PyTorch
        return torch.sin(z) + 1

    x = randn(8, 16)
    check_parity(f, x, expect_ops=["aten.exp.default", "aten.sin.default"])
    assert region_count() == 2
    assert "aten.cumsum.default" not in fused_ops()
    report = nb.reports()[-1].partition
    assert any("cumsum" in reason for reason in report.unsupported)


def test_repeated_layers_share_one_definition():
    # Note [Fusion cache key]: the same work on other values (the next layer) is the same key.
    def f(x, a, b):
        for w in (a, b, a * 2, b * 3):
            x = torch.nn.functional.gelu(x @ w) * 2 + x
        return x

    nb.clear_cache()
    x, a, b = randn(8, 16), randn(16, 16), randn(16, 16)
    check_parity(f, x, a, b)
    info = nb.cache_info()
    assert region_count() >= 4 and info["builds"] < region_count() and info["hits"] > 0, info


def test_new_size_reuses_cached_definition():
    def f(x, y):
        return torch.tanh(x * y + 1)

    nb.clear_cache()
    compiled = compile_fn(f)
    a, b = randn(8, 32), randn(8, 32)
    assert_close(compiled(a, b), f(a, b))
    builds = nb.cache_info()["builds"]
    assert builds == 1
    for shape in [(16, 64), (3, 5), (128, 7)]:
        a, b = randn(*shape), randn(*shape)
        assert_close(compiled(a, b), f(a, b))
    info = nb.cache_info()
    assert info["builds"] == builds, info  # new sizes, same layout: no new definition
    # A new layout (broadcast dim) is a new definition.
    a, b = randn(8, 32), randn(1, 32)
    assert_close(compiled(a, b), f(a, b))
    assert nb.cache_info()["builds"] == builds + 1


def test_first_calls_are_accounted_once_per_input_signature():
    # Note [First-call accounting]: each region's first call for an input signature is timed,
    # a repeated layer reuses its definition, later calls add nothing
    def f(x, a, b):
        for w in (a, b, a * 2):
            x = torch.nn.functional.gelu(x @ w) * 2 + x
        return x

    nb.clear_cache()
    nb.compile_stats(clear=True)
    compiled = compile_fn(f)
    args = [randn(8, 16), randn(16, 16), randn(16, 16)]
    assert_close(compiled(*args), f(*args))
    regions = region_count()
    first = nb.compile_stats()
    assert first["graphs"] == 1 and first["graphs_s"] > 0
    assert first["first_runs"] == regions >= 3, (first, regions)
    assert 1 <= first["definitions"] == nb.cache_info()["builds"] < regions
    assert first["first_runs_s"] >= first["definitions_s"] > 0
    assert len(first["slowest"]) == regions and ".nvfuser_region_" in first["slowest"][0][1]
    assert [s for s, _ in first["slowest"]] == sorted((s for s, _ in first["slowest"]), reverse=True)
    assert_close(compiled(*args), f(*args))
    again = nb.compile_stats(clear=True)
    assert {k: again[k] for k in ("graphs", "first_runs", "definitions")} == {
        k: first[k] for k in ("graphs", "first_runs", "definitions")}
    compiled(randn(8, 16).t().contiguous().t(), *args[1:])  # a new layout: new first calls
    assert nb.compile_stats()["first_runs"] > 0


def test_fast_path_skips_descriptor_work(monkeypatch):
    compiled = compile_fn(lambda x: torch.relu(x) * 3)
    x = randn(4, 4)
    compiled(x)
    from nvfuser_dtensor_backend import region as region_mod

    def boom(*a, **k):
        raise AssertionError("descriptor work on the fast path")

    monkeypatch.setattr(region_mod, "describe", boom)
    monkeypatch.setattr(region_mod, "build_fusion", boom)
    assert_close(compiled(x), torch.relu(x) * 3)


def _break_translator(monkeypatch, target, exc=RuntimeError("nvFuser says no")):
    entry = registry.TRANSLATORS[target]

    def broken(ctx, *args, **kwargs):
        raise exc

    monkeypatch.setitem(registry.TRANSLATORS, target, registry.Translator(broken, entry.check, target))


def test_definition_error_falls_back_with_one_warning(monkeypatch):
    _break_translator(monkeypatch, aten.sin.default)
    nb.clear_cache()
    compiled = compile_fn(lambda x: torch.sin(x * 2) + 1)
    x = randn(4, 8)
    with pytest.warns(NvFuserFallbackWarning, match=r"aten\.sin\.default.*nvFuser says no") as record:
        out = compiled(x)
    assert len([w for w in record if issubclass(w.category, NvFuserFallbackWarning)]) == 1
    assert_close(out, torch.sin(x * 2) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NvFuserFallbackWarning)
        assert_close(compiled(x), torch.sin(x * 2) + 1)  # no second warning


def test_fallback_error_option_raises(monkeypatch):
    _break_translator(monkeypatch, aten.sin.default)
    nb.clear_cache()
    compiled = compile_fn(lambda x: torch.sin(x * 2) + 1, fallback="error")
    with pytest.raises(Exception, match="nvFuser says no"):
        compiled(randn(4, 8))


def test_run_time_error_falls_back(monkeypatch):
    from nvfuser_dtensor_backend import region as region_mod

    def fail(self, args):
        raise RuntimeError("kernel launch failed")

    monkeypatch.setattr(region_mod._EvaluatorEntry, "__call__", fail)
    monkeypatch.setattr(region_mod._NvFuserEntry, "__call__", fail)
    compiled = compile_fn(lambda x: torch.cos(x) * x)
    x = randn(5, 7)
    with pytest.warns(NvFuserFallbackWarning, match="run time.*kernel launch failed"):
        out = compiled(x)
    assert_close(out, torch.cos(x) * x)


def test_inductor_fallback_for_failed_region(monkeypatch):
    _break_translator(monkeypatch, aten.sin.default)
    nb.clear_cache()
    compiled = compile_fn(lambda x: torch.sin(x * 2) + 1, fallback="inductor")
    x = randn(4, 8)
    with pytest.warns(NvFuserFallbackWarning):
        out = compiled(x)
    assert_close(out, torch.sin(x * 2) + 1)
    fallback = nb.reports()[-1].regions[0]._fallback
    assert fallback.compiled is not None and fallback.error is None and fallback.compiled is not fallback.sub


def test_inductor_compiles_the_code_between_regions():
    """A training step of a linear layer: the pieces between regions hold ``aten.t`` and
    matmuls, which inductor lowers only once decomposed (they all ran eagerly before)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(DEVICE)
    ref = copy.deepcopy(model)
    compiled = compile_fn(model, fallback="inductor")
    x = randn(5, 8)
    compiled(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, scale=4)
    parts = [p for r in nb.reports() for p in r.inductor_parts]
    assert parts and all(p.error is None and p.compiled is not None for p in parts), [p.error for p in parts]


def test_dump_dir_writes_definitions(tmp_path):
    nb.clear_cache()
    compiled = compile_fn(lambda x: torch.exp(x) + 1, dump_dir=str(tmp_path))
    compiled(randn(3, 3))
    files = list(tmp_path.glob("*.py"))
    assert len(files) == 1
    text = files[0].read_text()
    assert "fd.ops.exp" in text and "def nvfuser_fusion" in text


@pytest.mark.parametrize(
    "options, match",
    [({"fallbak": "eager"}, "valid options"), ({"fallback": "tvm"}, "fallback must be one of")],
)
def test_bad_options_raise_at_compile_time(options, match):
    compiled = torch.compile(lambda x: x + 1, backend="nvfuser_dtensor", options=options)
    with pytest.raises(Exception, match=match):
        compiled(randn(2))


def test_region_without_compute_stays_in_pytorch():
    compiled = compile_fn(lambda x: x.t().reshape(-1))
    x = randn(4, 6)
    assert_close(compiled(x), x.t().reshape(-1))
    assert region_count() == 0


def test_lookup_decides_partition_and_translation():
    # Every node the partitioner puts in a region has a translator (same table).
    compiled = compile_fn(lambda x, y: torch.where(x > 0, x, y).sum(0) if False else torch.where(x > 0, x, y) * y)
    compiled(randn(4, 4), randn(4, 4))
    for report in nb.reports():
        for region in report.regions:
            for node in region.region.graph.nodes:
                if node.op == "call_function":
                    assert isinstance(registry.lookup(node), registry.Translator)


def test_run_time_error_on_strided_inputs_retries_contiguous(monkeypatch):
    from nvfuser_dtensor_backend import region as region_mod

    real = region_mod._EvaluatorEntry.__call__ if DEVICE == "cpu" else region_mod._NvFuserEntry.__call__
    cls = region_mod._EvaluatorEntry if DEVICE == "cpu" else region_mod._NvFuserEntry

    def picky(self, args):
        if any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args):
            raise RuntimeError("Vectorized dim for producer has to be from an inner most position")
        return real(self, args)

    monkeypatch.setattr(cls, "__call__", picky)
    compiled = compile_fn(lambda x: torch.cos(x) * 2)
    x = randn(6, 5).t()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NvFuserFallbackWarning)
        assert_close(compiled(x), torch.cos(x) * 2)
        assert_close(compiled(x), torch.cos(x) * 2)


def test_matmuls_stay_in_pytorch_unless_fuse_matmul():
    def f(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    x, w, b = randn(8, 16), randn(32, 16), randn(32)
    check_parity(f, x, w, b, expect_ops=["aten.gelu.default"])
    assert "aten.addmm.default" not in fused_ops()
    assert any("fuse_matmul" in r for rep in nb.reports() for r in rep.partition.unsupported)
    check_parity(f, x, w, b, expect_ops=["aten.addmm.default", "aten.gelu.default"], fuse_matmul=True)


def test_views_used_only_outside_leave_the_region():
    def f(x, w):
        y = torch.exp(x) * 2
        return y.t() @ w, y.unsqueeze(0).expand(3, -1, -1)

    x, w = randn(8, 16), randn(8, 4)
    check_parity(f, x, w, expect_ops=["aten.exp.default", "aten.mul.Tensor"])
    ops = fused_ops()
    assert "aten.t.default" not in ops and "aten.expand.default" not in ops, ops


@pytest.mark.parametrize("split", ["split", "unbind"])
def test_split_pieces_used_only_outside_leave_the_region_with_the_split(split):
    """GPT-2's qkv: the pieces of a split are views, made by PyTorch outside the region; a
    region returning them copied each one (Note [Fusion outputs are fresh tensors])."""
    def f(x, w):
        qkv = torch.tanh(x) * 2
        q, k, v = qkv.split(4, dim=-1) if split == "split" else qkv.view(8, 3, 4).unbind(1)
        return q @ w, k.t() @ v

    x, w = randn(8, 12), randn(4, 4)
    check_parity(f, x, w, expect_ops=["aten.tanh.default", "aten.mul.Tensor"])
    ops = fused_ops()
    assert not {"aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int", "_operator.getitem"} & set(ops), ops


def test_a_split_with_a_piece_read_inside_stays_whole_in_the_region():
    def f(x, w):
        q, k = (torch.tanh(x) * 2).split(4, dim=-1)
        return torch.relu(q) + 1, k @ w

    x, w = randn(8, 8), randn(4, 4)
    check_parity(f, x, w, expect_ops=["aten.tanh.default", "aten.relu.default"])
    assert "aten.split.Tensor" in fused_ops() or "aten.split_with_sizes.default" in fused_ops(), fused_ops()


def test_an_inference_graph_computes_a_repeated_expression_once():
    """AOTAutograd's CSE runs on training graphs only (in the min-cut partitioner); inference
    graphs get it from the backend: GPT-2's layers each turned the same boolean mask into a
    float mask, one nvFuser kernel per layer (22 us each on an H100)."""
    def f(x, m):
        a = torch.where(m, 0.0, float("-inf")) + x
        b = torch.where(m, 0.0, float("-inf")) * x  # the same where again
        return a.amax(-1), torch.tanh(b)

    x, m = randn(8, 16), torch.rand(8, 16, device=DEVICE) > 0.3
    check_parity(f, x, m, expect_ops=["aten.where.self"])
    assert fused_ops().count("aten.where.self") == 1, fused_ops()


def test_inductor_fallback_compiles_the_code_between_regions():
    def f(x):
        y = torch.exp(x) * 2
        z = torch.cumsum(y, 1)  # no translator
        return torch.sin(z) + 1

    x = randn(8, 16)
    check_parity(f, x, expect_ops=["aten.exp.default", "aten.sin.default"], fallback="inductor")
    parts = nb.reports()[-1].inductor_parts
    assert len(parts) == 1 and parts[0].compiled is not None and parts[0].error is None
    assert parts[0].compiled is not parts[0].sub  # really inductor, not the eager fallback
    assert "compiled by inductor" in nb.reports()[-1].summary()


def test_cached_definition_is_not_reused_when_an_inner_dim_becomes_1():
    # x[:, 2:] has a size-1 dim for 3 columns and not for 4: same code text, same input layout.
    def f(x):
        return (x[:, 2:].squeeze(1) * 2.0).unsqueeze(0) + 1.0

    nb.clear_cache()
    compiled = compile_fn(f)
    for cols in (4, 3, 4, 3):
        x = randn(3, cols)
        assert_close(compiled(x), f(x))


def test_constants_that_print_alike_are_not_confused():
    # 1.0000001 and 1.0000002 both print as "1.00000" in nvFuser's text of the fusion.
    check_parity(lambda x: x * 1.0000001 + x * 1.0000002 - x * 2.0, randn(4, 4, dtype=torch.float64),
                 fused=False)


def _attention_block_partitions(fuse_matmul):
    """Regions of AOTAutograd's graphs for a pre-norm attention block with rotary embedding,
    attention left to PyTorch (no CPU attention translator): partitioned, not run."""
    import torch.nn.functional as F
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._functorch.aot_autograd import aot_function

    from nvfuser_dtensor_backend.decompositions import decomposition_table
    from nvfuser_dtensor_backend.partition import partition

    B, S, H, D = 2, 16, 4, 8

    def rope(x, cos, sin):
        return x * cos + torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1) * sin

    def block(x, wq, wk, wv, wo, g, cos, sin):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g
        q, k, v = ((h @ w).view(B, S, H, D).transpose(1, 2) for w in (wq, wk, wv))
        q, k = rope(q, cos, sin) * 0.5, rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + o.transpose(1, 2).reshape(B, S, H * D) @ wo

    reports = {}

    def compiler(kind):
        def compile(gm, example_inputs):
            reports[kind] = partition(gm, 1, fuse_matmul)[2]
            return make_boxed_func(gm)
        return compile

    args = [randn(B, S, H * D, requires_grad=True)] + [randn(H * D, H * D, requires_grad=True) for _ in range(4)]
    args += [randn(H * D, requires_grad=True), randn(S, D), randn(S, D)]
    f = aot_function(block, fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                     decompositions=decomposition_table(), partition_fn=min_cut_rematerialization_partition)
    f(*args).sum().backward()
    return reports


def test_attention_left_to_pytorch_splits_regions_only_where_it_must():
    """An attention op left to PyTorch cuts the graph; with fused matmuls each region holds
    at most one matmul and the work on its result (Note [One matmul per region]): the
    rotary embedding of q and of k each joins its projection."""
    reports = _attention_block_partitions(fuse_matmul=True)
    gemms = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default")
    for kind in ("forward", "backward"):
        for ops in reports[kind].regions:
            assert sum(op in gemms for op in ops) <= 1, reports[kind].summary()
    ropes = [r for r in reports["forward"].regions if "aten.cat.default" in r]
    assert len(ropes) == 2 and all(r.count("aten.mm.default") == 1 and r.count("aten.neg.default") == 1 for r in ropes)
    assert sum(r.count("aten.slice_scatter.default") for r in reports["backward"].regions) == 4
    # Without fused matmuls every mm cuts too: norm | rope of q and k | residual add.
    reports = _attention_block_partitions(fuse_matmul=False)
    fwd = reports["forward"].regions
    assert len(fwd) == 3, reports["forward"].summary()
    assert any(r.count("aten.cat.default") == 2 for r in fwd)
    # The rope backward (slice_scatter x4) is one region, the norm backward another.
    bwd = reports["backward"].regions
    assert len(bwd) == 2 and any(r.count("aten.slice_scatter.default") == 4 for r in bwd), reports["backward"].summary()


def _nvfuser_rejects(monkeypatch, text: str, message: str) -> None:
    """Entries whose definition's text holds ``text`` raise ``message`` when run, as nvFuser
    does at run time for what its schedulers or lowering reject (Note [Retries at run time])."""
    from nvfuser_dtensor_backend import region as region_mod

    cls = region_mod._EvaluatorEntry if DEVICE == "cpu" else region_mod._NvFuserEntry
    real_init, real_call, built = cls.__init__, cls.__call__, {}

    def init(self, b, single):
        real_init(self, b, single)
        built[id(self)] = b

    def picky(self, args):
        if text in repr(built[id(self)].fd):
            raise RuntimeError(message)
        return real_call(self, args)

    monkeypatch.setattr(cls, "__init__", init)
    monkeypatch.setattr(cls, "__call__", picky)
    nb.clear_cache()


def _runs_without_fallback(caplog, compiled, f, inputs, log_text: str) -> int:
    """Runs ``compiled`` on each of ``inputs`` against ``f`` with fallbacks as errors; how
    many INFO lines said ``log_text``."""
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        warnings.simplefilter("error", NvFuserFallbackWarning)
        for args in inputs:
            assert_close(compiled(*args), f(*args))
    return sum(log_text in r.getMessage() for r in caplog.records)


def test_run_time_error_with_symbolic_sizes_retries_static(monkeypatch, caplog):
    # Note [Retries at run time]: a definition nvFuser rejects with symbolic sizes is
    # defined again with static ones (per input shape), with no fallback warning
    _nvfuser_rejects(monkeypatch, "shape=[-1", "Invalid domains to map")

    def f(x, y):
        return torch.cos(x) * y + 1

    inputs = [(randn(*shape), randn(*shape)) for shape in [(6, 5), (6, 5), (3, 9)]]
    assert _runs_without_fallback(caplog, compile_fn(f), f, inputs, "runs with static sizes") == 2  # once per shape


def test_run_time_error_on_a_permuted_input_retries_it_permuted(monkeypatch, caplog):
    # Note [Retries at run time], 3: ConvNeXt's channels-last LayerNorm backward, whose input
    # permuted inside the fusion nvFuser rejected; the region runs on a dense permuted copy
    _nvfuser_rejects(monkeypatch, "fd.ops.permute(tv0", "Vectorized dim for producer has to be from an inner most position")

    def f(x, w):
        return torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (8,), w) * 2

    inputs = [(randn(2, 8, 5, 6), randn(8))] * 2
    assert _runs_without_fallback(caplog, compile_fn(f), f, inputs, "inputs permuted and copied") == 1


def test_permuted_input_retry_that_fails_falls_back_with_the_first_error(monkeypatch):
    from nvfuser_dtensor_backend import region as region_mod

    def fail(self, args):
        raise RuntimeError("kernel launch failed")

    monkeypatch.setattr(region_mod._EvaluatorEntry, "__call__", fail)
    monkeypatch.setattr(region_mod._NvFuserEntry, "__call__", fail)
    nb.clear_cache()
    compiled = compile_fn(lambda x: torch.cos(x.permute(1, 0)) * 2)
    x = randn(5, 7)
    with pytest.warns(NvFuserFallbackWarning, match="run time.*kernel launch failed"):
        out = compiled(x)
    assert_close(out, torch.cos(x.permute(1, 0)) * 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_unrelated_cuts_a_region_into_its_connected_parts(monkeypatch, dtype):
    """NVFUSER_DTENSOR_SPLIT_UNRELATED (Note [Unrelated parts of a region]): pieces that share
    nothing leave one region for a region each, pieces that read one input stay together, and
    the repeated pieces share one definition; the values are eager's."""
    from nvfuser_dtensor_backend import partition
    from nvfuser_dtensor_backend.region import FUSION_CACHE

    def f(a, b, c, x):  # three unrelated updates of one shape; two pieces that only share x
        return a * 2 + 1, b * 2 + 1, c * 2 + 1, x.sin() * 2, x.cos() * 3

    args = [randn(16, 8, dtype=dtype) for _ in range(3)] + [randn(5, 7, dtype=dtype)]
    expected = f(*args)
    counts = {}
    for split in (False, True):
        monkeypatch.setattr(partition, "SPLIT_UNRELATED", split)
        nb.clear_cache()
        compiled = compile_fn(f)
        for out, ref in zip(compiled(*args), expected):
            assert_close(out, ref, dtype)
        counts[split] = (region_count(), FUSION_CACHE.cache_info()["builds"])
    assert counts[False] == (1, 1)
    assert counts[True] == (4, 2)  # x's two readers together; a, b and c's regions are one definition


def _regions_by_switch(monkeypatch, switch: str, f, args, dtype=torch.float32) -> dict:
    """The ops of ``f``'s regions with partition.``switch`` off and on (False, True), its values
    checked against eager's both times."""
    from nvfuser_dtensor_backend import partition

    expected = f(*args)
    regions = {}
    for on in (False, True):
        monkeypatch.setattr(partition, switch, on)
        nb.clear_cache()
        nb.clear_reports()
        for out, ref in zip(compile_fn(f)(*args), expected):
            assert_close(out, ref, dtype)
        regions[on] = sorted(sorted(ops) for ops in nb.reports()[-1].partition.regions)
    return regions


def test_split_unrelated_joins_a_part_to_the_region_it_reads(monkeypatch):
    """A part of a region that reads only another region's values moves into that region
    (Note [Unrelated parts of a region]): ``y * 3`` reads the ``sin`` region's ``y`` but FX's
    partitioner put it with the ``relu`` after the matmul, which shares nothing with it."""
    def f(x, w):
        y = x.sin()
        return (y @ w).relu(), y * 3

    args = (randn(8, 16), randn(16, 4))
    regions = _regions_by_switch(monkeypatch, "SPLIT_UNRELATED", f, args)
    assert regions[False] == [["aten.mul.Tensor", "aten.relu.default"], ["aten.sin.default"]]
    assert regions[True] == [["aten.mul.Tensor", "aten.sin.default"], ["aten.relu.default"]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_far_cuts_a_region_where_a_pytorch_kernel_lies_between_its_parts(monkeypatch, dtype):
    """NVFUSER_DTENSOR_SPLIT_FAR (Note [Parts of a region far apart]): FX's partitioner puts
    ``a.sin() * 2`` with the ``relu`` after the matmul, so the region, placed after its last
    output, holds ``a`` across the matmul; with the switch they are two regions, while two
    unrelated parts with no kernel between them stay one. Values are eager's."""
    def f(x, w, a, b):
        y = a.sin() * 2
        return y, b.cos() * 3, (x @ w).relu() * 3

    args = (randn(8, 16, dtype=dtype), randn(16, 4, dtype=dtype), randn(6, 5, dtype=dtype), randn(7, dtype=dtype))
    regions = _regions_by_switch(monkeypatch, "SPLIT_FAR", f, args, dtype)
    assert len(regions[False]) == 1, regions[False]
    assert regions[True] == [["aten.cos.default", "aten.mul.Tensor", "aten.mul.Tensor", "aten.sin.default"],
                             ["aten.mul.Tensor", "aten.relu.default"]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_far_joins_a_part_to_the_region_it_reads_through_a_view(monkeypatch, dtype):
    """Note [Parts of a region far apart]: FX's partitioner puts ``v.exp()`` with the ``cos``
    at the end, so ``sin``'s output would live to the end. With NVFUSER_DTENSOR_SPLIT_FAR the
    exp joins ``sin``'s region, with the transpose between them (which the region outputs and
    then reads back otherwise: a cycle), as the only kernel between them reads ``v``."""
    def f(x, w):
        v = x.sin().t()
        h = v @ w
        return v.exp(), (h.relu() @ w.t()).cos()

    args = (randn(8, 16, dtype=dtype), randn(8, 4, dtype=dtype))
    regions = _regions_by_switch(monkeypatch, "SPLIT_FAR", f, args, dtype)
    assert regions[False] == [["aten.cos.default", "aten.exp.default"], ["aten.relu.default"], ["aten.sin.default"]]
    assert regions[True] == [["aten.cos.default"], ["aten.exp.default", "aten.sin.default", "aten.t.default"],
                             ["aten.relu.default"]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_far_keeps_a_reduction_apart(monkeypatch, dtype):
    """Note [Parts of a region far apart]: a piece with a reduction (a bias gradient's column
    sum) is cut from the region it was merged into but joins no other: nvFuser schedules a
    pointwise or layer-norm-backward region with an outer reduction joined as one slower
    reduction kernel (ViT-S/16's training kernels 4.46 -> 4.77 ms, session 32)."""
    def f(x, w):
        v = x.sin().t()
        h = v @ w
        return v.sum(1), (h.relu() @ w.t()).cos()

    args = (randn(8, 16, dtype=dtype), randn(8, 4, dtype=dtype))
    regions = _regions_by_switch(monkeypatch, "SPLIT_FAR", f, args, dtype)
    assert regions[False] == [["aten.cos.default", "aten.sum.dim_IntList"], ["aten.relu.default"], ["aten.sin.default"]]
    assert regions[True] == [["aten.cos.default"], ["aten.relu.default"], ["aten.sin.default"], ["aten.sum.dim_IntList"]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_far_joins_no_copy_alone(monkeypatch, dtype):
    """Note [Parts of a region far apart]: a piece that only copies (``y.clone()``, as AOT saves
    for the backward) joins no region; it runs in PyTorch, and its value is eager's."""
    def f(x, w):
        y = x.sin()
        h = y @ w
        return y.clone(), (h.relu() @ w.t()).cos()

    args = (randn(8, 16, dtype=dtype), randn(16, 4, dtype=dtype))
    regions = _regions_by_switch(monkeypatch, "SPLIT_FAR", f, args, dtype)
    assert ["aten.clone.default"] not in regions[True]
    assert regions[True] == [["aten.cos.default"], ["aten.relu.default"], ["aten.sin.default"]], regions


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])  # .float() upcasts
def test_input_views_out_leaves_the_view_of_a_region_input_to_pytorch(monkeypatch, dtype):
    """NVFUSER_DTENSOR_INPUT_VIEWS_OUT (Note [Views of region inputs stay out]): the matmul's
    output, read by the region only as rows (an LM loss's ``view(logits, [-1, vocab])`` of an
    upcast softmax), is viewed by PyTorch and the region starts at the cast, so that nvFuser
    gets no reshape of an upcast input. A view of a value computed inside stays. Values are
    eager's both ways."""
    def f(x, w):
        rows = (x @ w).view(-1, 24).float()
        e = (rows - rows.amax(-1, keepdim=True)).exp()
        return e.sum(-1).view(4, 6).unsqueeze(0) * 2

    args = (randn(2, 6, 16, dtype=dtype), randn(16, 48, dtype=dtype))
    regions = _regions_by_switch(monkeypatch, "INPUT_VIEWS_OUT", f, args, dtype)
    assert len(regions[False]) == len(regions[True]) == 1, regions
    # off: the matmul's output viewed as [2, 6, 48] (``@`` of a 3-d x), then as rows, and the
    # sums viewed as [4, 6]; on: the sums' view only, every other op as before
    assert regions[False][0].count("aten.view.default") == 3, regions[False]
    assert regions[True][0].count("aten.view.default") == 1, regions[True]
    others = [[op for op in ops[0] if op != "aten.view.default"] for ops in (regions[False], regions[True])]
    assert others[0] == others[1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])  # .float() upcasts
def test_input_views_out_views_an_upcast_input_before_its_cast(monkeypatch, dtype):
    """Note [Views before casts]: an LM loss upcasts its logits, then views them as rows; with
    NVFUSER_DTENSOR_INPUT_VIEWS_OUT the view is made first, on the input, by PyTorch, and the
    region starts at the cast. Values are eager's both ways."""
    def f(x):
        rows = x.float().view(-1, 24)
        e = (rows - rows.amax(-1, keepdim=True)).exp()
        return e.sum(-1)

    regions = _regions_by_switch(monkeypatch, "INPUT_VIEWS_OUT", f, (randn(2, 6, 24, dtype=dtype),), dtype)
    assert "aten.view.default" in regions[False][0]
    assert "aten.view.default" not in regions[True][0], regions[True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_input_views_out_keeps_a_view_that_no_cast_reads(monkeypatch, dtype):
    """Note [Views of region inputs stay out]: only views that dtype casts alone read leave
    their regions. A GEMM's output read as [batch, tokens, hidden] by a GELU stays a reshape in
    the region, as without the switch (every view of an input out cost ViT-S/16's training
    step twice its kernel time on an H100, session 42)."""
    def f(x, w):
        return torch.nn.functional.gelu((x @ w).view(2, 6, 48)) * 2, x.sum()

    args = (randn(12, 16, dtype=dtype), randn(16, 48, dtype=dtype))
    regions = _regions_by_switch(monkeypatch, "INPUT_VIEWS_OUT", f, args, dtype)
    assert regions[True] == regions[False], regions
    assert any("aten.view.default" in ops for ops in regions[True]), regions[True]


def test_views_before_casts_leaves_a_downcast_before_an_output_view(monkeypatch):
    """Note [Views before casts]: only upcasts are swapped with their views. A region's downcast
    before the view of its output keeps the view after it, outside the region (a trailing view
    PyTorch makes for free), as without the switch; values are eager's."""
    def f(x):
        return (x.sin() * 2).to(torch.bfloat16).view(-1, 8), x.cos().sum()

    regions = _regions_by_switch(monkeypatch, "INPUT_VIEWS_OUT", f, (randn(6, 16),))
    assert regions[True] == regions[False], regions
    assert not any("aten.view.default" in ops for ops in regions[True]), regions[True]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_views_before_casts_casts_down_before_a_view(monkeypatch, dtype):
    """Note [Views before casts]: a loss backward's ``_to_copy(view(grad_rows))`` (a downcast of
    the float gradient viewed back to [batch, seq, vocab]) becomes ``view(_to_copy(grad_rows))``,
    so the view trails the region and PyTorch makes it; values are eager's both ways."""
    def f(x):
        rows = x.float().view(-1, 24)
        g = (rows - rows.amax(-1, keepdim=True)).exp()
        return g.view(2, 6, 24).to(dtype)

    x = randn(2, 6, 24, dtype=dtype)
    regions = _regions_by_switch(monkeypatch, "INPUT_VIEWS_OUT", f, (x,), dtype)
    assert any("aten.view.default" in ops for ops in regions[False]), regions[False]
    assert not any("aten.view.default" in ops for ops in regions[True]), regions[True]


def test_views_before_casts_keeps_a_view_the_input_cannot_take(monkeypatch):
    """Note [Views before casts]: the cast of a slice is dense, and its view splits and merges
    rows that the slice's strides cannot; that view stays after the cast, and values are
    eager's. A view of a cast with another reader stays too."""
    def f(x):
        return x[:, :24].float().view(-1, 8).exp(), x.double().view(-1).sin(), x.double() * 2

    args = (randn(5, 48, dtype=torch.bfloat16),)
    regions = _regions_by_switch(monkeypatch, "INPUT_VIEWS_OUT", f, args, torch.bfloat16)
    assert sum(ops.count("aten.view.default") for ops in regions[True]) == 2, regions[True]


def test_split_unrelated_keeps_scalar_counters_together(monkeypatch):
    """Each batch norm's ``num_batches_tracked + 1`` reads nothing of its batch norm, so no join
    takes it there; with NVFUSER_DTENSOR_SPLIT_UNRELATED the counters of a region stay one
    region (Note [Unrelated parts of a region]) instead of a region each, and the running
    statistics join their batch norms' regions. Values and buffers are eager's."""
    from nvfuser_dtensor_backend import partition

    monkeypatch.setattr(partition, "SPLIT_UNRELATED", True)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(6), torch.nn.ReLU(), torch.nn.BatchNorm2d(6)).to(DEVICE)
    reference = copy.deepcopy(model)
    x = randn(4, 6, 5, 5)
    nb.clear_cache()
    nb.clear_reports()
    assert_close(compile_fn(model)(x), reference(x))
    for ours, eager in zip(model.buffers(), reference.buffers()):
        assert_close(ours, eager)
    regions = [sorted(set(ops)) for ops in nb.reports()[-1].partition.regions]
    assert regions.count(["aten.add.Tensor"]) == 1  # both counters, one region
    # and each batch norm's region with its running statistics (the second batch norm starts a
    # region of its own: Note [No reduction after a batch norm])
    assert len(regions) == 3, regions


@pytest.mark.parametrize("split_unrelated", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_reduction_after_a_batch_norm_starts_a_region(dtype, split_unrelated, monkeypatch):
    """Note [No reduction after a batch norm]: EfficientNet's batch norm + SiLU +
    squeeze-excitation mean made nvFuser write out of bounds on the GPU; the mean and what
    follows it leave the batch norm's region, also with NVFUSER_DTENSOR_SPLIT_UNRELATED (the
    cut runs after its join). Values and running statistics are eager's."""
    import torch.nn.functional as F

    from nvfuser_dtensor_backend import partition

    monkeypatch.setattr(partition, "SPLIT_UNRELATED", split_unrelated)

    def f(x, w, b, rm, rv):
        y = F.silu(F.batch_norm(x, rm, rv, w, b, training=True))
        return y * y.mean((2, 3), keepdim=True).sigmoid()

    x, w, b = randn(4, 6, 5, 5, dtype=dtype), randn(6, dtype=dtype), randn(6, dtype=dtype)
    stats = (randn(6, dtype=dtype), randn(6, dtype=dtype).abs() + 0.5)
    ref_stats = [s.clone() for s in stats]
    expected = f(x, w, b, *ref_stats)
    nb.clear_cache()
    nb.clear_reports()
    assert_close(compile_fn(f)(x, w, b, *stats), expected, dtype)
    for got, ref in zip(stats, ref_stats):
        assert_close(got, ref, dtype)
    regions = nb.reports()[-1].partition.regions
    with_bn = [r for r in regions if "aten._native_batch_norm_legit_functional.default" in r]
    assert len(with_bn) == 1 and "aten.silu.default" in with_bn[0] and "aten.mean.dim" not in with_bn[0]
    assert any("aten.mean.dim" in r for r in regions)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_reduction_after_a_hand_written_batch_norm_starts_a_region(dtype):
    """Note [No reduction after a batch norm]: statistics written by hand (``var_mean`` over
    the batch and spatial dims, keeping the channels) count as a batch norm, so the SE mean
    leaves their region; a layer norm's ``var_mean`` over the last dim does not. Values and
    gradients are eager's."""
    import torch.nn.functional as F

    def f(x, w, b):
        var, mean = torch.var_mean(x, dim=(0, 2, 3), keepdim=True, correction=0)
        y = F.silu((x - mean) * torch.rsqrt(var + 1e-5) * w[None, :, None, None] + b[None, :, None, None])
        z = y * y.mean((2, 3), keepdim=True).sigmoid()
        var, mean = torch.var_mean(z, dim=-1, keepdim=True, correction=0)
        return (z - mean) * torch.rsqrt(var + 1e-5) * z.mean(-1, keepdim=True)

    x, w, b = (randn(*shape, dtype=dtype).requires_grad_() for shape in ((4, 6, 5, 5), (6,), (6,)))
    eager, exact = ([t.detach().to(d).requires_grad_() for t in (x, w, b)] for d in (dtype, torch.float64))
    nb.clear_reports()
    results = [compile_fn(f)(x, w, b), f(*eager), f(*exact)]
    grad = randn(*results[0].shape, dtype=dtype)  # not a sum: the layer norm's outputs sum to about 0
    for result in results:
        result.backward(grad.to(result.dtype))

    def judge(ours, theirs, ref):  # from float64, as the zoo judges: at most twice eager's error
        error, eager_error = ((t.double() - ref).abs().max().item() for t in (ours, theirs))
        assert error <= 2 * eager_error + 1e-4 * ref.abs().max().item(), (error, eager_error)

    judge(*(r.detach() for r in results))
    for ours, theirs, ref in zip((x, w, b), eager, exact):
        judge(ours.grad, theirs.grad, ref.grad)
    forward = next(r for r in nb.reports() if r.kind == "forward").partition.regions
    norms = [ops for ops in forward if "aten.var_mean.correction" in ops]
    assert len(norms) == 2 and len(forward) == 2, forward  # the SE mean starts the second region
    assert "aten.mean.dim" not in norms[0] and "aten.mean.dim" in norms[1]  # the layer norm keeps its mean


def test_a_compiled_call_runs_the_generated_forward_without_the_module_call(monkeypatch):
    """Note [Lean call path]: dynamo hands us lazy graph modules, whose ``forward`` after
    ``recompile()`` calls the module (``nn.Module.__call__`` and GraphModule's traceback
    wrapper) on every call; the backend recompiles for real and calls the generated forward."""
    from torch.fx import graph_module

    compiled = compile_fn(lambda x, b: torch.nn.functional.gelu(x + b, approximate="tanh"))
    x, b = randn(8, 16), randn(16)
    for _ in range(2):
        assert_close(compiled(x, b), torch.nn.functional.gelu(x + b, approximate="tanh"))
    calls = []
    wrapped_call = graph_module._WrappedCall.__call__

    def counting(self, obj, *args, **kwargs):
        calls.append(type(obj).__name__)
        return wrapped_call(self, obj, *args, **kwargs)

    monkeypatch.setattr(graph_module._WrappedCall, "__call__", counting)
    assert_close(compiled(x, b), torch.nn.functional.gelu(x + b, approximate="tanh"))
    assert calls == []
