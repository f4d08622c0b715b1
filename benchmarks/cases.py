"""Benchmark cases: what to run, at which sizes, and how many bytes it must move.

Every case builder takes ``(size, dtype, device, mesh)`` and returns a :class:`Workload`.
``mesh`` is a DeviceMesh in the torchrun (tensor-parallel) mode and None otherwise; cases
without a tensor-parallel form ignore it (see TP_CASES for the ones that use it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from models import (  # noqa: E402
    MLP, Attention, Block, LlamaBlock, SwiGLU, TPAttention, TPBlock, sp_block_plan, tp_attention_plan, tp_mlp_plan)

SIZES = ("small", "medium", "large")


@dataclass
class Workload:
    fn: Callable  # a function or nn.Module
    inputs: list[torch.Tensor]
    bytes_moved: int | None = None  # minimum HBM traffic of one forward (memory-bound cases)
    params: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[..., Workload]
    memory_bound: bool = False
    tensor_parallel: bool = False


def _t(*shape, dtype, device, grad=False):
    t = torch.randn(*shape, dtype=dtype, device=device)
    return t.requires_grad_(grad)


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# [rows, hidden] of the pointwise and normalisation cases; "cpu" is the smoke size.
ROWS = {"cpu": (64, 256), "small": (64, 1024), "medium": (4096, 4096), "large": (16384, 4096)}
# (batch, seq, width, heads) of the model cases.
MODEL = {"cpu": (2, 32, 64, 4), "small": (1, 128, 256, 4), "medium": (4, 512, 1024, 16), "large": (8, 1024, 1024, 16)}


def bias_gelu(approximate):
    def build(size, dtype, device, mesh=None):
        r, h = ROWS[size]
        x, b = _t(r, h, dtype=dtype, device=device), _t(h, dtype=dtype, device=device)
        return Workload(lambda x, b: F.gelu(x + b, approximate=approximate), [x, b], _nbytes(x, b, x))

    return build


def layer_norm(size, dtype, device, mesh=None):
    r, h = ROWS[size]
    x = _t(r, h, dtype=dtype, device=device)
    ln = nn.LayerNorm(h).to(device, dtype)
    return Workload(ln, [x], _nbytes(x, x) + 2 * _nbytes(ln.weight))


def rms_norm(size, dtype, device, mesh=None):
    r, h = ROWS[size]
    x = _t(r, h, dtype=dtype, device=device)
    norm = nn.RMSNorm(h, eps=1e-6).to(device, dtype)
    return Workload(norm, [x], _nbytes(x, x) + _nbytes(norm.weight))


def softmax(size, dtype, device, mesh=None):
    r, h = ROWS[size]
    r = r // 2 if size == "large" else r  # [8192, 4096] as in the anchor numbers
    x = _t(r, h, dtype=dtype, device=device)
    return Workload(lambda x: torch.softmax(x, dim=-1), [x], _nbytes(x, x))


class AddLayerNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.ln = nn.LayerNorm(h)

    def forward(self, x, residual):
        return self.ln(x + residual)


def add_layer_norm(size, dtype, device, mesh=None):
    r, h = ROWS[size]
    x, res = _t(r, h, dtype=dtype, device=device), _t(r, h, dtype=dtype, device=device)
    return Workload(AddLayerNorm(h).to(device, dtype), [x, res], _nbytes(x, res, x))


def swiglu(size, dtype, device, mesh=None):
    b, s, d, _ = MODEL[size]
    return Workload(SwiGLU(d, 8 * d // 3).to(device, dtype), [_t(b, s, d, dtype=dtype, device=device)])


def attention(size, dtype, device, mesh=None):
    b, s, d, heads = MODEL[size]
    return Workload(Attention(d, heads).to(device, dtype), [_t(b, s, d, dtype=dtype, device=device)])


def block(size, dtype, device, mesh=None):
    b, s, d, heads = MODEL[size]
    return Workload(Block(d, heads).to(device, dtype), [_t(b, s, d, dtype=dtype, device=device)])


def gpt2_stack(size, dtype, device, mesh=None):
    b, s, _, _ = MODEL[size]
    d, heads = (64, 4) if size == "cpu" else (768, 12)  # GPT-2 small widths
    stack = nn.Sequential(*[Block(d, heads) for _ in range(4)]).to(device, dtype)
    return Workload(stack, [_t(b, s, d, dtype=dtype, device=device)])


def llama_stack(size, dtype, device, mesh=None):
    b, s, _, _ = MODEL[size]
    d, heads, hidden = (64, 4, 172) if size == "cpu" else (2048, 16, 5632)  # Llama-style widths
    stack = nn.Sequential(*[LlamaBlock(d, heads, hidden) for _ in range(2)]).to(device, dtype)
    return Workload(stack, [_t(b, s, d, dtype=dtype, device=device)])


def _parallelize(module, mesh, plan):
    if mesh is None:
        return module
    from torch.distributed.tensor.parallel import parallelize_module

    return parallelize_module(module, mesh, plan)


def tp_mlp(size, dtype, device, mesh=None):
    """Column-parallel fc1 -> gelu -> row-parallel fc2 (Megatron MLP) on ``mesh``."""
    b, s, d, _ = MODEL[size]
    mlp = _parallelize(MLP(d, 4 * d).to(device, dtype), mesh, tp_mlp_plan())
    return Workload(mlp, [_t(b, s, d, dtype=dtype, device=device)])


def tp_attention(size, dtype, device, mesh=None):
    """Causal attention with q/k/v column-parallel (heads split) and o row-parallel."""
    b, s, d, heads = MODEL[size]
    attn = _parallelize(TPAttention(d, heads).to(device, dtype), mesh, tp_attention_plan())
    return Workload(attn, [_t(b, s, d, dtype=dtype, device=device)])


def sp_block(size, dtype, device, mesh=None):
    """Pre-norm block, sequence parallel around the norms; the input is this rank's sequence part."""
    b, s, d, heads = MODEL[size]
    block = _parallelize(TPBlock(d, heads).to(device, dtype), mesh, sp_block_plan())
    world = mesh.size() if mesh is not None else 1
    return Workload(block, [_t(b, s // world, d, dtype=dtype, device=device)])


CASES = [
    Case("bias_gelu_tanh", bias_gelu("tanh"), memory_bound=True),
    Case("bias_gelu_exact", bias_gelu("none"), memory_bound=True),
    Case("layer_norm", layer_norm, memory_bound=True),
    Case("rms_norm", rms_norm, memory_bound=True),
    Case("softmax", softmax, memory_bound=True),
    Case("add_layer_norm", add_layer_norm, memory_bound=True),
    Case("swiglu_mlp", swiglu),
    Case("causal_attention", attention),
    Case("transformer_block", block),
    Case("gpt2_stack", gpt2_stack),
    Case("llama_stack", llama_stack),
    Case("tp_mlp", tp_mlp, tensor_parallel=True),
    Case("tp_attention", tp_attention, tensor_parallel=True),
    Case("sp_block", sp_block, tensor_parallel=True),
]
BY_NAME = {c.name: c for c in CASES}
TP_CASES = [c.name for c in CASES if c.tensor_parallel]
