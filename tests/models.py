"""Small transformer pieces shared by tests and the benchmarks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel


class MLP(nn.Module):
    def __init__(self, d: int, hidden: int, approximate: str = "tanh"):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.approximate = approximate

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class NormMLP(nn.Module):
    """``x + fc2(gelu(fc1(LayerNorm(x))))``: the plain TP MLP block (norm not parallelized)."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class HandRMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight, written out as in many model codebases."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool = True):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.causal = causal

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-norm transformer block (GPT-2 style)."""

    def __init__(self, d: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, mlp_ratio * d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LlamaBlock(nn.Module):
    """Pre-norm block with RMSNorm and a SwiGLU MLP (Llama style)."""

    def __init__(self, d: int, heads: int, hidden: int | None = None):
        super().__init__()
        self.n1 = nn.RMSNorm(d, eps=1e-6)
        self.attn = Attention(d, heads)
        self.n2 = HandRMSNorm(d)
        self.mlp = SwiGLU(d, hidden or 8 * d // 3)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class TPAttention(nn.Module):
    """Causal self-attention with separate q/k/v projections, written for tensor parallelism:
    ``view(b, s, -1, head_dim)`` works on all heads (global view) and on one rank's heads."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.head_dim = d // heads

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class TPBlock(nn.Module):
    """Pre-norm block of TPAttention and MLP, for tensor and sequence parallel plans."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = TPAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, 4 * d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


# --- tensor-parallel plans (parallelize_module) for the models above ---------------------
def tp_mlp_plan():
    """Megatron MLP: fc1 column-parallel, fc2 row-parallel."""
    return {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


def tp_attention_plan(local_output: bool = False):
    """TPAttention: q/k/v column-parallel (heads split), o row-parallel."""
    col = dict(use_local_output=local_output)
    return {"q": ColwiseParallel(**col), "k": ColwiseParallel(**col), "v": ColwiseParallel(**col),
            "o": RowwiseParallel()}


def sp_block_plan():
    """TPBlock with sequence parallel norms (input and output Shard(1) on the sequence)."""
    col = dict(use_local_output=False)
    return {
        "ln1": SequenceParallel(),
        "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "attn.q": ColwiseParallel(**col), "attn.k": ColwiseParallel(**col), "attn.v": ColwiseParallel(**col),
        "attn.o": RowwiseParallel(output_layouts=Shard(1)),
        "ln2": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
    }


