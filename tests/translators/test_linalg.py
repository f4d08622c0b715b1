import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx

from helpers import DEVICE, assert_close, check_parity, randn
from nvfuser_dtensor_backend._nvfuser import nvfuser
from nvfuser_dtensor_backend.registry import TRANSLATORS, TranslationContext

aten = torch.ops.aten
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", FLOATS)
def test_mm(dtype):
    a, b = randn(8, 16, dtype=dtype, requires_grad=True), randn(16, 4, dtype=dtype, requires_grad=True)
    check_parity(lambda a, b: (a @ b).relu(), a, b, expect_ops=["aten.mm.default"], fuse_matmul=True, backward=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_bias(dtype):
    x = randn(2, 3, 16, dtype=dtype, requires_grad=True)
    w, b = randn(8, 16, dtype=dtype, requires_grad=True), randn(8, dtype=dtype, requires_grad=True)
    check_parity(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b, expect_ops=["aten.addmm.default"], fuse_matmul=True,
                 backward=True, scale=2)


def test_linear_no_bias_noncontiguous():
    x = randn(16, 6).t().requires_grad_(True)
    w = randn(8, 16, requires_grad=True)
    check_parity(lambda x, w: F.linear(x, w).exp(), x, w, expect_ops=["aten.mm.default"], fuse_matmul=True, backward=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_alpha_beta(dtype):
    bias = randn(4, 1, dtype=dtype, requires_grad=True)
    a = randn(4, 8, dtype=dtype, requires_grad=True)
    b = randn(8, 5, dtype=dtype, requires_grad=True)
    check_parity(lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=2.0).tanh(), bias, a, b,
                 expect_ops=["aten.addmm.default"], fuse_matmul=True, backward=True, scale=2)
    check_parity(lambda bias, a, b: torch.addmm(bias, a, b).tanh(), bias, a, b, expect_ops=["aten.addmm.default"], fuse_matmul=True)


def test_addmm_beta_zero_ignores_nan():
    bias = torch.full((5,), float("nan"), device=DEVICE)
    a, b = randn(4, 8), randn(8, 5)
    check_parity(lambda bias, a, b: torch.addmm(bias, a, b, beta=0).exp(), bias, a, b,
                 expect_ops=["aten.addmm.default"], fuse_matmul=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm(dtype):
    a, b = randn(3, 4, 8, dtype=dtype, requires_grad=True), randn(3, 8, 5, dtype=dtype, requires_grad=True)
    check_parity(lambda a, b: torch.bmm(a * 2, b), a, b, expect_ops=["aten.bmm.default"], fuse_matmul=True, backward=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding(dtype):
    idx = torch.randint(0, 10, (2, 3), device=DEVICE)
    w = randn(10, 4, dtype=dtype)
    check_parity(lambda i, w: F.embedding(i, w) * 2, idx, w, expect_ops=["aten.embedding.default"])


def test_linear_op_directly():
    # aten.linear decomposes before it reaches us; build the node by hand.
    g = fx.Graph()
    x, w, b = g.placeholder("x"), g.placeholder("w"), g.placeholder("b")
    out = g.call_function(aten.linear.default, (x, w, b))
    g.output(out)
    xv, wv, bv = randn(4, 8), randn(6, 8), randn(6)
    for node, val in ((x, xv), (w, wv), (b, bv), (out, F.linear(xv, wv, bv))):
        node.meta["val"] = val
    from nvfuser_dtensor_backend.fusion import build_fusion, describe
    from nvfuser_dtensor_backend.evaluator import Evaluator
    built = build_fusion(fx.GraphModule({}, g), [describe(v) for v in (xv, wv, bv)])
    assert "fd.ops.linear" in repr(built.fd)
    (res,) = Evaluator(built.fd, built.constants)([xv, wv, bv])
    torch.testing.assert_close(res, F.linear(xv, wv, bv))


# --- flash attention: structure on CPU, numbers on the GPU -----------------------------


def _flash_graph(dtype=torch.bfloat16, causal=True, scale=0.3):
    """The fx nodes AOTAutograd writes for flash attention, with meta from a fake CUDA run."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, v, g):
        o = aten._scaled_dot_product_flash_attention.default(q, k, v, 0.0, causal, scale=scale)
        grads = aten._scaled_dot_product_flash_attention_backward.default(
            g, q, k, v, o[0], o[1], o[2], o[3], o[4], o[5], 0.0, causal, o[6], o[7], scale=scale)
        return o[0], o[1], grads

    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.empty(2, 4, 16, 8, dtype=dtype, device="cuda")
        return make_fx(f, tracing_mode="fake")(q, q, q, q)


def _translate(node, env, fd):
    args = fx.node.map_arg(node.args, env.__getitem__)
    kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
    return TRANSLATORS[node.target].fn(TranslationContext(fd, node, fd.ops), *args, **kwargs)


def test_flash_attention_translates_to_sdpfa():
    gm = _flash_graph()
    nodes = {n.target: n for n in gm.graph.nodes}
    fwd = nodes[aten._scaled_dot_product_flash_attention.default]
    bwd = nodes[aten._scaled_dot_product_flash_attention_backward.default]
    assert TRANSLATORS[fwd.target].check(fwd) is None
    assert TRANSLATORS[bwd.target].check(bwd) is None
    nvf = nvfuser()
    with nvf.FusionDefinition() as fd:
        env = {}
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                env[n] = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=nvf.DataType.BFloat16)
            elif n.op == "call_function":
                env[n] = env[n.args[0]][n.args[1]] if n.target is operator.getitem else _translate(n, env, fd)
        outs = env[fwd]
        assert outs[2] is None and outs[3] is None and outs[8] is None
        for t in (outs[0], outs[1], *env[bwd]):
            fd.add_output(t)
    text = repr(fd)
    assert "fd.ops.sdpfa_fwd(" in text and "is_causal=True" in text and "scale=0.3" in text
    assert "fd.ops.sdpfa_bwd(" in text and "philox_seed=" in text


def test_flash_attention_check_rejects_unknown_outputs():
    gm = _flash_graph()
    fwd = next(n for n in gm.graph.nodes if n.target is aten._scaled_dot_product_flash_attention.default)
    with gm.graph.inserting_after(fwd):
        extra = gm.graph.call_function(operator.getitem, (fwd, 8))
    with gm.graph.inserting_after(extra):
        gm.graph.call_function(aten.clone.default, (extra,))
    assert "output 8" in TRANSLATORS[fwd.target].check(fwd)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_parity_gpu(causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (randn(2, 4, 128, 64, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def fn(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # torch 2.11 on the H200 picks cuDNN otherwise
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    check_parity(fn, q, k, v, expect_ops=["aten._scaled_dot_product_flash_attention.default"], backward=True,
                 scale=2, fuse_matmul=True)


# --- cuDNN attention (torch 2.11 on the H200): graphs with fake CUDA meta, values on CPU ------

CUDNN_FWD = aten._scaled_dot_product_cudnn_attention.default
CUDNN_BWD = aten._scaled_dot_product_cudnn_attention_backward.default


def _fake_cuda(*shape, dtype):
    return torch.empty(*shape, dtype=dtype, device="cuda")


def _cudnn_graphs(shapes, dtype, causal, scale, bias=False, dropout_p=0.0):
    """AOTAutograd's two graphs around cuDNN attention: the forward returns what it saves
    (out, logsumexp, philox seed and offset), the backward takes them back."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def fwd(q, k, v, *b):
        o = CUDNN_FWD(q, k, v, b[0] if b else None, True, dropout_p, causal, scale=scale)
        return o[0], o[1], o[6], o[7]

    def bwd(g, q, k, v, out, lse, seed, offset):
        sq, sk = q.shape[2], k.shape[2]
        return CUDNN_BWD(g, q, k, v, out, lse, seed, offset, None, None, None, sq, sk, dropout_p, causal, scale=scale)

    (sq_shape, sk_shape) = shapes
    with FakeTensorMode(allow_non_fake_inputs=True):
        q, k, v, g = (_fake_cuda(*s, dtype=dtype) for s in (sq_shape, sk_shape, sk_shape, sq_shape))
        extra = [_fake_cuda(sq_shape[0], sq_shape[1], sq_shape[2], sk_shape[2], dtype=dtype)] if bias else []
        fgm = make_fx(fwd, tracing_mode="fake")(q, k, v, *extra)
        out, lse, seed, offset = fwd(q, k, v, *extra)
        bgm = make_fx(bwd, tracing_mode="fake")(g, q, k, v, out, lse, seed, offset)
    return fgm, bgm


def _compile_graph(gm, kind, **options):
    import nvfuser_dtensor_backend as nb
    from nvfuser_dtensor_backend.backend import compile_aten_graph
    from nvfuser_dtensor_backend.options import Options

    nb.clear_reports()
    fn = compile_aten_graph(gm, None, Options(fallback="error", **options), kind)
    return fn, nb.reports()[-1].partition


def _attention_reference(q, k, v, causal, scale):
    """softmax(q k^T * scale + causal mask) v in float64, with its logsumexp."""
    q, k, v = (t.double() for t in (q, k, v))
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


CUDNN_CASES = [  # (q shape, k/v shape), causal, scale
    (((2, 4, 16, 8), (2, 4, 16, 8)), True, 0.3),
    (((1, 2, 8, 16), (1, 2, 24, 16)), False, None),
    (((2, 1, 1, 8), (2, 1, 5, 8)), False, 0.5),
    (((1, 3, 12, 32), (1, 3, 12, 32)), True, None),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shapes,causal,scale", CUDNN_CASES)
def test_cudnn_attention_forward_backward(dtype, shapes, causal, scale):
    fgm, bgm = _cudnn_graphs(shapes, dtype, causal, scale)
    fwd, freport = _compile_graph(fgm, "forward", fuse_matmul=True)
    bwd, breport = _compile_graph(bgm, "backward", fuse_matmul=True)
    assert "aten._scaled_dot_product_cudnn_attention.default" in freport.regions[0], freport.summary()
    assert "aten._scaled_dot_product_cudnn_attention_backward.default" in breport.regions[0], breport.summary()

    sq, sk = shapes
    q, k, v = randn(*sq, dtype=dtype), randn(*sk, dtype=dtype), randn(*sk, dtype=dtype)
    g = randn(*sq, dtype=dtype)
    out, lse, seed, offset = fwd([q, k, v])
    # The cuDNN op's own forms (Note [cuDNN attention]).
    assert lse.shape == (*sq[:3], 1) and lse.dtype == torch.float32
    assert seed.shape == () and seed.dtype == torch.int64 and offset.shape == () and offset.dtype == torch.int64

    qr, kr, vr = (t.double().requires_grad_(True) for t in (q, k, v))
    ref_out, ref_lse = _attention_reference(qr, kr, vr, causal, scale)
    ref_out.backward(g.double())
    assert_close(out, ref_out.to(dtype), scale=2)
    torch.testing.assert_close(lse, ref_lse.float().unsqueeze(-1), rtol=1e-3, atol=1e-3)

    gq, gk, gv = bwd([g, q, k, v, out, lse, seed, offset])
    for got, ref in ((gq, qr.grad), (gk, kr.grad), (gv, vr.grad)):
        assert_close(got, ref.to(dtype), scale=4, msg="grad")


def test_cudnn_attention_backward_takes_squeezed_logsumexp():
    """A logsumexp without the trailing 1 (flash attention's form) is taken as it is."""
    fgm, bgm = _cudnn_graphs(((1, 2, 8, 8), (1, 2, 8, 8)), torch.bfloat16, True, None)
    node = next(n for n in bgm.graph.nodes if n.target is CUDNN_BWD)
    lse_node = node.args[5]
    lse_node.meta["val"] = lse_node.meta["val"].squeeze(-1)
    assert TRANSLATORS[CUDNN_BWD].check(node) is None
    nvf = nvfuser()
    with nvf.FusionDefinition() as fd:
        env = {}
        for n in bgm.graph.nodes:
            if n.op == "placeholder":
                val = n.meta["val"]
                env[n] = fd.define_tensor(shape=[-1] * val.dim(), contiguity=[True] * val.dim(),
                                          dtype=nvf.DataType.Float if val.dtype == torch.float32 else
                                          nvf.DataType.Int if val.dtype == torch.int64 else nvf.DataType.BFloat16)
            elif n.op == "call_function" and n.target is not operator.getitem:
                env[n] = _translate(n, env, fd)
        for t in env[node]:
            fd.add_output(t)
    assert "fd.ops.squeeze" not in repr(fd) and "fd.ops.sdpfa_bwd(" in repr(fd)


def test_cudnn_attention_stays_in_pytorch_by_default():
    fgm, bgm = _cudnn_graphs(((2, 4, 16, 8), (2, 4, 16, 8)), torch.bfloat16, True, None)
    for gm, kind in ((fgm, "forward"), (bgm, "backward")):
        _, report = _compile_graph(gm, kind)
        assert not report.regions
        assert any("fuse_matmul=False" in reason for reason in report.unsupported), report.summary()


@pytest.mark.parametrize(
    "case,reason",
    [
        (dict(bias=True), "attn_bias"),
        (dict(dropout_p=0.1), "dropout"),
        (dict(dtype=torch.float32), "bf16/fp16"),
        (dict(shapes=((1, 2, 8, 8), (1, 2, 12, 8))), "S_q != S_k"),
        (dict(shapes=((1, 2, 8, 12), (1, 2, 8, 12))), "multiple of 8"),
        (dict(shapes=((1, 2, 8, 8), (1, 1, 8, 8))), "head counts"),
    ],
)
def test_cudnn_attention_rejects(case, reason):
    args = dict(shapes=((1, 2, 8, 8), (1, 2, 8, 8)), dtype=torch.bfloat16, causal=True, scale=None)
    args.update(case)
    fgm, bgm = _cudnn_graphs(**args)
    node = next(n for n in fgm.graph.nodes if n.target is CUDNN_FWD)
    assert reason in TRANSLATORS[CUDNN_FWD].check(node)
    if not case.get("bias"):  # the backward graph takes no bias here
        node = next(n for n in bgm.graph.nodes if n.target is CUDNN_BWD)
        assert reason in TRANSLATORS[CUDNN_BWD].check(node)


def test_cudnn_attention_rejects_unknown_outputs_and_debug_mask():
    fgm, _ = _cudnn_graphs(((1, 2, 8, 8), (1, 2, 8, 8)), torch.bfloat16, True, None)
    fwd = next(n for n in fgm.graph.nodes if n.target is CUDNN_FWD)
    with fgm.graph.inserting_after(fwd):
        extra = fgm.graph.call_function(operator.getitem, (fwd, 2))
    with fgm.graph.inserting_after(extra):
        fgm.graph.call_function(aten.clone.default, (extra,))
    assert "output 2" in TRANSLATORS[CUDNN_FWD].check(fwd)
    fwd.args = fwd.args[:7] + (True,)
    assert "return_debug_mask" in TRANSLATORS[CUDNN_FWD].check(fwd)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_sdpa_parity_gpu(causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (randn(2, 4, 128, 64, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def fn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q * 1.5, k, v, is_causal=causal).relu()

    ops = ["aten._scaled_dot_product_cudnn_attention.default",
           "aten._scaled_dot_product_cudnn_attention_backward.default"]
    check_parity(fn, q, k, v, expect_ops=ops, backward=True, scale=2, fuse_matmul=True)
    check_parity(fn, q, k, v, backward=True, scale=2)  # default options: attention stays in PyTorch
    from helpers import fused_ops
    assert not set(ops) & set(fused_ops())


def test_embedding_with_expanded_indices_is_materialized(tmp_path):
    # Note [Expanded broadcasts are materialized]: BERT's token_type_ids.expand(batch, seq) and
    # BART's positions arange(seq).expand(batch, -1) + offset; the indices reach nvFuser's ATen
    # embedding segment as concrete dims (docs/nvfuser_faults.md item 5).
    from helpers import compile_fn, fused_ops
    weight, ids = randn(16, 8), torch.randint(0, 16, (1, 6), device=DEVICE)
    cases = [
        lambda w, i: (torch.nn.functional.embedding(i.expand(3, 6), w) * 2).exp(),
        lambda w, i: torch.nn.functional.embedding(torch.arange(6, device=w.device).expand(3, -1) + 2, w) * 3,
    ]
    for n, f in enumerate(cases):
        dump = tmp_path / str(n)
        torch.testing.assert_close(compile_fn(f, dump_dir=str(dump))(weight, ids), f(weight, ids))
        assert "aten.embedding.default" in fused_ops()
        text = "".join(p.read_text() for p in dump.iterdir())
        assert "fd.ops.where(" in text and "embedding_fwd" in text
