"""options.pad_matmuls (Note [Padded matmuls], pad_matmul.py): exact results, one pad per value."""

import pytest
import torch

import nvfuser_dtensor_backend.backend as backend
from nvfuser_dtensor_backend.options import Options, OptionsError
from nvfuser_dtensor_backend.pad_matmul import pad_matmuls

from helpers import assert_no_worse_than_eager, check_parity, randn

HALF = [torch.bfloat16, torch.float16]


@pytest.fixture
def padded_graphs(monkeypatch):
    """The aten graphs after the pass, and how many matmuls it padded in each."""
    seen = []

    def spy(gm, mode):
        n = pad_matmuls(gm, mode)
        seen.append((n, gm.code))
        return n

    monkeypatch.setattr(backend, "pad_matmuls", spy)
    return seen


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("tokens", [64, 52])  # 52: M and the weight gradient's K unaligned too
def test_lm_head_with_an_unaligned_vocabulary_is_exact(dtype, bias, tokens, padded_graphs):
    vocab, d = 1001, 48
    x = randn(tokens, d, dtype=dtype, requires_grad=True)
    w = randn(vocab, d, dtype=dtype, requires_grad=True)
    b = randn(vocab, dtype=dtype, requires_grad=True) if bias else None

    def f(x, w, b):
        logits = torch.nn.functional.linear(x * 2, w, b)
        return torch.log_softmax(logits.float(), -1)

    check_parity(f, x, w, b, backward=True, pad_matmuls=True)
    counts = [n for n, _ in padded_graphs]
    assert counts[0] == 1 and counts[-1] == 2, counts  # forward: the head; backward: both gradients
    backward_code = padded_graphs[-1][1]
    # The weight and the output gradient (which feeds both gradients) are padded once each;
    # 52 tokens add the activation and a second pad of the gradient (the weight gradient's K).
    assert backward_code.count("aten.constant_pad_nd") == 2 + 2 * (tokens % 8 != 0), backward_code


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("tokens", [64, 52])
def test_the_bias_gradient_reads_the_padded_output_gradient(dtype, tokens, monkeypatch):
    """Note [Padded matmuls]: the LM head's output gradient feeds its two GEMMs through its
    pad and the bias gradient's column sum; the sum reads a slice of the pad, so the value is
    written once, padded (RoBERTa's backward wrote it a second time in odd rows)."""
    readers = []

    def spy(gm, mode):
        n = pad_matmuls(gm, mode)
        for node in gm.graph.nodes:
            if node.target is torch.ops.aten.sum.dim_IntList and list(node.args[1]) == [0]:
                chain, src = [], node.args[0]
                while isinstance(src, torch.fx.Node) and src.target is torch.ops.aten.slice.Tensor:
                    chain.append(src.args[1])
                    src = src.args[0]
                readers.append((chain, getattr(src, "target", None)))
        return n

    monkeypatch.setattr(backend, "pad_matmuls", spy)
    vocab, d = 1001, 48
    x = randn(tokens, d, dtype=dtype, requires_grad=True)
    w = randn(vocab, d, dtype=dtype, requires_grad=True)
    b = randn(vocab, dtype=dtype, requires_grad=True)

    def f(x, w, b):
        return torch.log_softmax(torch.nn.functional.linear(x * 2, w, b).float(), -1)

    check_parity(f, x, w, b, backward=True, pad_matmuls=True)
    # the bias gradient sums the columns of the pad the input gradient's GEMM reads (52 tokens
    # pad the gradient's rows too, in a second pad, for the weight gradient's K)
    assert ([1], torch.ops.aten.constant_pad_nd.default) in readers, readers


@pytest.mark.parametrize("dtype", HALF)
def test_unaligned_inner_dim_and_transposed_operands(dtype, padded_graphs):
    a = randn(30, 37, dtype=dtype)  # K = 37
    b = randn(21, 37, dtype=dtype)  # N = 21, used transposed
    check_parity(lambda a, b: (a.t().t() @ b.t()).relu() + 1, a, b, pad_matmuls=True)
    assert padded_graphs[0][0] == 1


def test_aligned_and_float32_matmuls_are_left_alone(padded_graphs):
    check_parity(lambda a, b: (a @ b).relu(), randn(16, 32, dtype=torch.bfloat16), randn(32, 24, dtype=torch.bfloat16),
                 pad_matmuls=True)
    check_parity(lambda a, b: (a @ b).relu(), randn(15, 33), randn(33, 21), pad_matmuls=True)
    assert [n for n, _ in padded_graphs] == [0, 0]


def test_auto_pads_only_large_cuda_matmuls(padded_graphs):
    # On the CPU "auto" leaves every matmul as it is (cuBLAS alignment is a GPU matter).
    check_parity(lambda a, b: (a @ b).relu(), randn(30, 37, dtype=torch.bfloat16), randn(37, 21, dtype=torch.bfloat16))
    assert padded_graphs[0][0] == (1 if torch.cuda.is_available() and 30 * 37 * 21 >= (1 << 27) else 0)


def test_bad_pad_matmuls_option():
    with pytest.raises(OptionsError, match="pad_matmuls"):
        Options.from_dict({"pad_matmuls": "yes"})


@pytest.mark.parametrize("dtype", HALF)
def test_sliced_logits_stay_a_view_when_their_views_take_it(dtype, padded_graphs):
    # GPT-2's LM head: [batch * seq, vocab] viewed as [batch, seq, vocab]. The slice of the
    # padded product is viewed as it is, no dense copy (0.47 ms of GPT-2's step on the H200).
    x, w = randn(4, 16, 48, dtype=dtype), randn(1001, 48, dtype=dtype)

    def head(x, w):
        return torch.nn.functional.linear(x, w) * 1

    def head_out(x, w):
        return torch.nn.functional.linear(x, w)

    check_parity(head, x, w, pad_matmuls=True)
    code = padded_graphs[-1][1]
    assert "aten.slice" in code and "aten.clone" not in code, code
    compiled = torch.compile(head_out, backend="nvfuser_dtensor", options={"pad_matmuls": True})
    out = compiled(x, w)
    torch.testing.assert_close(out, head_out(x, w), rtol=2e-2, atol=2e-2)
    assert out.shape == (4, 16, 1001) and out.stride() == (16 * 1008, 1008, 1)  # a view of the padded product


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("bias_shape", [(1001,), (1, 1, 1001)])
def test_a_bias_added_to_the_sliced_logits_is_added_by_the_padded_product(dtype, bias_shape, padded_graphs):
    # BART: ``lm_head(x) + final_logits_bias``. The product adds the bias (addmm) and the sum
    # stays a view of the padded product: no add, no dense copy.
    x, w, b = randn(4, 16, 48, dtype=dtype), randn(1001, 48, dtype=dtype), randn(*bias_shape, dtype=dtype)

    def head(x, w, b):
        return torch.nn.functional.linear(x, w) + b

    out = torch.compile(head, backend="nvfuser_dtensor", options={"pad_matmuls": True})(x, w, b)
    code = padded_graphs[-1][1]
    assert "aten.addmm" in code and "aten.add." not in code and "aten.clone" not in code, code
    # the folded bias rounds the product and the sum once, eager twice: judged against float64
    assert_no_worse_than_eager(out, head(x, w, b), head(x.double(), w.double(), b.double()), slack=1e-6)
    assert out.stride() == (16 * 1008, 1008, 1)  # a view of the padded, biased product


@pytest.mark.parametrize("dtype", HALF)
def test_an_add_that_is_not_a_bias_over_columns_stays(dtype, padded_graphs):
    # a per-row term [rows, vocab] and a product used twice are not folded into the product
    x, w, r = randn(16, 48, dtype=dtype), randn(1001, 48, dtype=dtype), randn(16, 1001, dtype=dtype)
    check_parity(lambda x, w, r: torch.nn.functional.linear(x, w) + r, x, w, r, pad_matmuls=True)
    assert "aten.add." in padded_graphs[-1][1]

    def twice(x, w, b):
        y = torch.nn.functional.linear(x, w)
        return y + b, y * 2

    check_parity(twice, x, w, randn(1001, dtype=dtype), pad_matmuls=True)
    assert "aten.add." in padded_graphs[-1][1] and "aten.addmm" not in padded_graphs[-1][1]


@pytest.mark.parametrize("dtype", HALF)
def test_sliced_product_is_copied_when_a_view_needs_it_dense(dtype, padded_graphs):
    # view(-1) merges the sliced dim with its row: no view of the padded product can do that
    a, b = randn(64, 24, dtype=dtype), randn(24, 33, dtype=dtype)
    check_parity(lambda a, b: (a @ b).view(-1) * 2, a, b, pad_matmuls=True)
    assert "aten.clone" in padded_graphs[-1][1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("switch", ["", "constant_pad_nd", "constant_pad_nd,cat"])
def test_a_region_of_only_a_pad_runs_in_nvfuser_with_the_switch(dtype, switch, monkeypatch):
    """NVFUSER_DTENSOR_MOVE_KERNELS (partition.MOVE_KERNELS, an A/B switch): the pad of a
    gradient to an aligned width, alone in its region, runs as an nvFuser pad when the switch
    names it; by default it stays in PyTorch. The values are the same either way."""
    from helpers import compile_fn, region_count, set_move_kernels

    set_move_kernels(monkeypatch, switch)
    g = randn(37, 1001, dtype=dtype)
    f = compile_fn(lambda g: torch.nn.functional.pad(g, (0, 7)))
    out = f(g)
    assert out.shape == (37, 1008) and torch.equal(out, torch.nn.functional.pad(g, (0, 7)))
    assert region_count() == (1 if switch else 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("switch", ["", "cat"])
def test_the_qkv_gradients_stack_runs_in_nvfuser_with_the_switch(dtype, switch, monkeypatch):
    """ViT's backward stacks the q, k and v gradients ([batch, heads, tokens, head_dim]),
    permutes them to [batch, tokens, 3, heads, head_dim] and makes that dense for the qkv GEMM.
    With ``cat`` in NVFUSER_DTENSOR_MOVE_KERNELS (the default) that is one region; the values
    are the same."""
    from helpers import compile_fn, fused_ops, region_count, set_move_kernels

    set_move_kernels(monkeypatch, switch)

    def qkv_grad(q, k, v):
        return torch.stack([q, k, v]).permute(1, 3, 0, 2, 4).reshape(4 * 7, 3 * 2 * 8)

    q, k, v = (randn(4, 2, 7, 8, dtype=dtype) for _ in range(3))
    out = compile_fn(qkv_grad)(q, k, v)
    assert torch.equal(out, qkv_grad(q, k, v))
    assert region_count() == (1 if switch else 0)
    assert ("aten.cat.default" in fused_ops()) == bool(switch)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("switch", ["", "_to_copy"])
def test_a_cast_and_transposed_copy_is_one_region_with_the_switch(dtype, switch, monkeypatch):
    """BERT's eager attention casts its float32 context to the model's dtype, transposes it to
    [batch, tokens, heads, head_dim] and makes it dense (two kernels in PyTorch). With
    ``_to_copy`` in NVFUSER_DTENSOR_MOVE_KERNELS (the default; Note [Data movement counted as
    compute]) that is one region; the values are the same either way."""
    from helpers import compile_fn, fused_ops, region_count, set_move_kernels

    set_move_kernels(monkeypatch, switch)

    def context(ctx):
        return ctx.to(dtype).transpose(1, 2).contiguous().view(2, 7, 4 * 8)

    ctx = randn(2, 4, 7, 8, dtype=torch.float32)
    out = compile_fn(context)(ctx)
    assert out.dtype == dtype and torch.equal(out, context(ctx))
    assert region_count() == (1 if switch else 0)
    assert ("aten._to_copy.default" in fused_ops()) == bool(switch)


def test_cat_and_to_copy_are_the_default_data_movement_counted_as_compute():
    """Note [Data movement counted as compute]: ``cat`` and ``_to_copy`` unless the switch is set."""
    import os

    from nvfuser_dtensor_backend import partition

    if "NVFUSER_DTENSOR_MOVE_KERNELS" in os.environ:
        pytest.skip("NVFUSER_DTENSOR_MOVE_KERNELS is set")
    assert partition.MOVE_KERNELS == {torch.ops.aten.cat.default, torch.ops.aten._to_copy.default}
