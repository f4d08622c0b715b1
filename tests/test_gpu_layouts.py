"""GPU layouts the CPU evaluator cannot show: real nvFuser output layouts, alignment, faults.

Inputs that are views at odd storage offsets, slices of a fused projection, expanded and
permuted tensors; outputs nvFuser returned with other strides than aten's on the H200
(docs/nvfuser_faults.md). The layout check (options.check_layouts, on in the suite) fails a
test whose region output has other strides than aten's. The pre-norm block that faulted runs
in its own process, so a fault fails that test only.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import check_parity

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [1, 3, 8, 13])
def test_inputs_at_odd_storage_offsets(dtype, offset):
    base = torch.randn(offset + 6 * 40, device="cuda", dtype=dtype)
    x = base[offset:offset + 240].view(6, 40)  # data pointer not 16-byte aligned for odd offsets
    check_parity(lambda x: torch.nn.functional.gelu(x * 2, approximate="tanh").sum(-1), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slices_of_a_fused_projection(dtype):
    qkv = torch.randn(4, 64, 3 * 96, device="cuda", dtype=dtype)

    def f(qkv):
        q, k, v = qkv.split(96, dim=-1)
        return (q.view(4, 64, 3, 32).transpose(1, 2) * k.view(4, 64, 3, 32).transpose(1, 2)).softmax(-1), v.exp()

    check_parity(f, qkv)


@pytest.mark.parametrize("dtype", DTYPES)
def test_expanded_and_permuted_inputs(dtype):
    bias = torch.randn(1, 8, 1, 16, device="cuda", dtype=dtype).expand(4, 8, 16, 16)
    x = torch.randn(4, 16, 8, 16, device="cuda", dtype=dtype).transpose(1, 2)
    check_parity(lambda x, b: (x + b).softmax(-1).transpose(1, 2).contiguous().view(4, 16, -1), x, bias)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gqa_repeat_kv_clone_of_expand_is_dense(dtype):
    # nvFuser returned this output as a stride-0 alias of its input on the H200.
    kv = torch.randn(2, 2, 32, 16, device="cuda", dtype=dtype)

    def f(kv):
        rep = kv[:, :, None].expand(2, 2, 4, 32, 16).reshape(2, 8, 32, 16)
        return rep * 2, rep

    check_parity(f, kv)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_expanded_bias_output_is_dense(dtype):
    # Llama's causal mask and T5's position bias: computed over a batch-expanded broadcast,
    # returned with stride 0 on the batch dim by nvFuser on the H200.
    bias = torch.randn(1, 4, 32, 32, device="cuda", dtype=dtype)
    x = torch.randn(8, 4, 32, 32, device="cuda", dtype=dtype)
    check_parity(lambda x, b: ((x + b).softmax(-1), b.expand(8, 4, 32, 32) + 1), x, bias)


def test_prenorm_block_masked_softmax_does_not_fault():
    # The illegal memory access of docs/nvfuser_faults.md item 1, in its own process.
    script = Path(__file__).parent.parent / "scripts" / "gpu_fault_probe.py"
    r = subprocess.run([sys.executable, str(script), "prenorm_block", "--steps", "2"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "loss_err" in r.stdout


@pytest.mark.parametrize("shape", [(32, 768, 7, 7), (32, 384, 14, 14), (4, 64, 7, 7)])
def test_convnext_layer_scale_backward_with_a_channels_last_gradient(shape):
    # ConvNeXt's last stage on the H200 (docs/nvfuser_faults.md item 8): the residual's two
    # gradients (one channels_last, from cuDNN) added, scaled by gamma and moved to NHWC.
    div = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(shape, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    gamma = torch.randn(shape[1], device="cuda", dtype=torch.bfloat16)

    def f(div, g, gamma):
        add = div + g
        return add, (add * gamma.view(1, -1, 1, 1)).permute(0, 2, 3, 1).contiguous()

    check_parity(f, div, g, gamma)
