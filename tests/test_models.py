"""Forward and backward of transformer pieces through the backend, against eager."""

import copy

import pytest
import torch
import torch.nn.functional as F

import nvfuser_dtensor_backend as nb
from helpers import DEVICE, assert_close, assert_no_worse_than_eager, compile_fn, fused_ops, randn, region_count
from models import MLP, Attention, Block, HandRMSNorm, LlamaBlock, SwiGLU

DTYPES = [torch.float32, torch.bfloat16]


def _train_parity(model, x, dtype, scale=1.0):
    """Compiled forward/backward vs eager; low precision is judged against a float64 copy."""
    model = model.to(DEVICE, dtype)
    ref = copy.deepcopy(model)
    ref64 = copy.deepcopy(model).double()
    compiled = compile_fn(model)
    xe, xc, x64 = (x.detach().clone().to(d).requires_grad_(True) for d in (dtype, dtype, torch.float64))
    ye, yc, y64 = ref(xe), compiled(xc), ref64(x64)
    g = torch.randn_like(ye)
    for y in (ye, yc):
        y.backward(g)
    y64.backward(g.double())
    pairs = [("output", yc, ye, y64), ("input grad", xc.grad, xe.grad, x64.grad)]
    for (name, pe), pc, p64 in zip(ref.named_parameters(), model.parameters(), ref64.parameters()):
        pairs.append((f"grad of {name}", pc.grad, pe.grad, p64.grad))
    for i, (name, c, e, r) in enumerate(pairs):
        if dtype == torch.float32:
            assert_close(c, e, scale=scale * (1 if i == 0 else 8), msg=name)
        else:
            assert_no_worse_than_eager(c, e, r, msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp(dtype):
    _train_parity(MLP(32, 64), randn(4, 8, 32, dtype=dtype), dtype)
    assert "aten.gelu.default" in fused_ops()


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu(dtype):
    _train_parity(SwiGLU(32, 48), randn(2, 8, 32, dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm(dtype):
    _train_parity(torch.nn.LayerNorm(64), randn(4, 16, 64, dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["functional", "hand-written"])
def test_rms_norm(dtype, kind):
    model = torch.nn.RMSNorm(64, eps=1e-6) if kind == "functional" else HandRMSNorm(64)
    _train_parity(model, randn(4, 16, 64, dtype=dtype), dtype)
    assert "aten.rsqrt.default" in fused_ops()


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(dtype):
    class Softmax(torch.nn.Module):
        def forward(self, x):
            return F.softmax(x * 0.5, dim=-1) + F.log_softmax(x, dim=1)

    _train_parity(Softmax(), randn(4, 16, 32, dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention(dtype):
    _train_parity(Attention(32, 4), randn(2, 16, 32, dtype=dtype), dtype, scale=2.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transformer_block(dtype):
    _train_parity(Block(64, 4), randn(2, 16, 64, dtype=dtype), dtype, scale=2.0)
    assert region_count("forward") >= 1 and region_count("backward") >= 1


def test_llama_block():
    _train_parity(LlamaBlock(64, 4), randn(2, 16, 64), torch.float32, scale=2.0)


def test_layer_norm_forward_is_one_region():
    x = randn(8, 64)
    ln = torch.nn.LayerNorm(64).to(DEVICE)
    with torch.no_grad():
        compiled = compile_fn(ln)
        assert_close(compiled(x), ln(x))
    assert region_count() == 1, [r.summary() for r in nb.reports()]
    assert "aten.native_layer_norm.default" in fused_ops()


def test_dropout_statistics():
    x = torch.ones(256, 256, device=DEVICE)
    compiled = compile_fn(lambda x: F.dropout(x, p=0.25, training=True))
    y = compiled(x)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.75))
