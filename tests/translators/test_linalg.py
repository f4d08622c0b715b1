import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx

from helpers import DEVICE, check_parity, randn
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
