"""Matmuls, linear, embedding and flash attention: nvFuser runs each as an ATen call.

Note [ATen segments]
``matmul``, ``linear``, ``embedding_fwd`` and ``sdpfa_fwd/bwd`` are not code-generated:
nvFuser gives each its own segment that calls ATen (cuBLAS, flash attention), and fuses the
pointwise work around them into kernels of their own.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from ..registry import translator
from ._common import all_of, arg_tensors, cast

aten = torch.ops.aten

MATMUL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _same_float_dtype(node: fx.Node) -> str | None:
    dtypes = {t.dtype for t in arg_tensors(node)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in MATMUL_DTYPES:
        return f"needs one dtype among fp32/bf16/fp16, got {sorted(map(str, dtypes))}"
    return None


def _ranks(*ranks: int):
    def check(node: fx.Node) -> str | None:
        for i, r in enumerate(ranks):
            v = node.args[i].meta.get("val") if isinstance(node.args[i], fx.Node) else None
            if v is None or v.dim() != r:
                return f"argument {i} must have rank {r}"
        return None

    return check


@translator(aten.mm.default, check=all_of(_same_float_dtype, _ranks(2, 2)), gemm=True)
def mm(ctx, a, b):
    return ctx.ops.matmul(a, b)


@translator(aten.bmm.default, check=all_of(_same_float_dtype, _ranks(3, 3)), gemm=True)
def bmm(ctx, a, b):
    return ctx.ops.matmul(a, b)


def _check_addmm(node: fx.Node) -> str | None:
    for name, i in (("beta", 3), ("alpha", 4)):
        v = node.kwargs.get(name, node.args[i] if i < len(node.args) else 1)
        if isinstance(v, (fx.Node, torch.SymInt, torch.SymFloat)):
            return f"symbolic {name}"
    if node.args[0].meta["val"].dim() > 2:
        return "bias of rank > 2"
    return _mat_ranks(node)


def _mat_ranks(node: fx.Node) -> str | None:
    for i in (1, 2):
        if node.args[i].meta["val"].dim() != 2:
            return f"argument {i} must be 2-D"
    return None


def _is_linear_bias(ctx) -> bool:
    bias, b = ctx.arg_val(0), ctx.arg_val(2)
    # A 1-D bias broadcasts over rows; one of size 1 against N > 1 columns would not fit linear.
    return bias.dim() == 1 and (bias.shape[0] != 1 or b.shape[1] == 1)


@translator(aten.addmm.default, check=all_of(_same_float_dtype, _check_addmm), gemm=True)
def addmm(ctx, bias, a, b, beta=1, alpha=1):
    if beta == 1 and alpha == 1 and _is_linear_bias(ctx):
        return ctx.ops.linear(a, ctx.ops.permute(b, [1, 0]), bias)
    # NOTE: aten applies alpha/beta inside the GEMM epilogue; here the product is rounded to
    # the input dtype first, then scaled and added in fp32 (one extra rounding for bf16/fp16).
    out = cast(ctx, ctx.ops.matmul(a, b), torch.float32)
    if alpha != 1:
        out = ctx.ops.mul(out, float(alpha))
    if beta != 0:  # beta == 0 ignores bias (nan and inf too), as in aten
        bias = cast(ctx, bias, torch.float32)
        out = ctx.ops.add(out, ctx.ops.mul(bias, float(beta)) if beta != 1 else bias)
    return out


def _check_linear(node: fx.Node) -> str | None:
    w = node.args[1].meta["val"]
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    if w.dim() != 2:
        return "weight must be 2-D"
    if node.args[0].meta["val"].dim() < 1:
        return "input must have rank >= 1"
    if isinstance(bias, fx.Node) and bias.meta["val"].dim() != 1:
        return "bias must be 1-D"
    return None


@translator(aten.linear.default, check=all_of(_same_float_dtype, _check_linear), gemm=True)
def linear(ctx, x, w, bias=None):
    return ctx.ops.linear(x, w, bias)


def _check_embedding(node: fx.Node) -> str | None:
    weight, indices = node.args[0].meta["val"], node.args[1].meta["val"]
    if weight.dim() != 2:
        return "weight must be 2-D"
    if indices.dtype not in (torch.int64, torch.int32):
        return f"indices of dtype {indices.dtype}"
    if weight.dtype not in MATMUL_DTYPES:
        return f"weight of dtype {weight.dtype}"
    sparse = node.args[4] if len(node.args) > 4 else node.kwargs.get("sparse", False)
    if sparse:
        return "sparse embedding"
    return None


@translator(aten.embedding.default, check=_check_embedding, compute=False)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx and scale_grad_by_freq only change the backward (embedding_dense_backward).
    return ctx.ops.embedding_fwd(indices, weight, None, None, None, None, None)


# --- flash attention -------------------------------------------------------------------

# Outputs of aten._scaled_dot_product_flash_attention nvFuser has: output, logsumexp,
# max_q/max_k (the sequence lengths, from sizes), philox_seed, philox_offset. cum_seq_q/k
# (None for dense inputs) and debug_attn_mask have no nvFuser counterpart.
_SDPA_FWD_OUTPUTS = (0, 1, 4, 5, 6, 7)


def _sdpa_common(node: fx.Node, dropout_p, ranks_of) -> str | None:
    vals = [a.meta.get("val") for a in ranks_of]
    if any(v.dim() != 4 for v in vals):
        return "q, k, v must be 4-D [B, H, S, E]"
    if {v.dtype for v in vals} - {torch.bfloat16, torch.float16}:
        return "flash attention takes bf16/fp16 only"
    if any(v.device.type != "cuda" for v in vals):
        return "flash attention runs on CUDA only"
    if isinstance(dropout_p, (fx.Node, torch.SymFloat)):
        return "symbolic dropout_p"
    scale = node.kwargs.get("scale")
    if isinstance(scale, (fx.Node, torch.SymFloat)):
        return "symbolic scale"
    return None


def _check_sdpa_fwd(node: fx.Node) -> str | None:
    args = list(node.args) + [0.0, False, False][len(node.args) - 3:]
    if args[5] or node.kwargs.get("return_debug_mask"):
        return "return_debug_mask"
    for user in node.users:
        if user.target is operator.getitem and not user.users:
            continue  # a dead getitem AOTAutograd left behind
        if user.target is not operator.getitem or user.args[1] not in _SDPA_FWD_OUTPUTS:
            return f"uses output {user.args[1] if user.target is operator.getitem else user} nvFuser does not produce"
    return _sdpa_common(node, args[3], node.args[:3])


@translator(aten._scaled_dot_product_flash_attention.default, check=_check_sdpa_fwd, gemm=True, generic_check=False)
def scaled_dot_product_flash_attention(ctx, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                                       scale=None):
    out, lse, seed, offset = ctx.ops.sdpfa_fwd(q, k, v, dropout_p=float(dropout_p), is_causal=bool(is_causal),
                                               scale=None if scale is None else float(scale))
    max_q, max_k = ctx.ops.size(q, 2), ctx.ops.size(k, 2)
    return (out, lse, None, None, max_q, max_k, seed, offset, None)


def _check_sdpa_bwd(node: fx.Node) -> str | None:
    for i in (6, 7):  # cum_seq_q, cum_seq_k: only nested (varlen) inputs have them
        if node.args[i] is not None:
            return "cum_seq_q/cum_seq_k given (variable-length attention)"
    return _sdpa_common(node, node.args[10], node.args[1:4])


@translator(aten._scaled_dot_product_flash_attention_backward.default, check=_check_sdpa_bwd, gemm=True,
            generic_check=False)
def scaled_dot_product_flash_attention_backward(ctx, grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                                                max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=None):
    # max_q/max_k are the sequence lengths of q and k, which nvFuser reads from the tensors.
    return tuple(ctx.ops.sdpfa_bwd(grad_out, q, k, v, out, logsumexp, float(dropout_p), bool(is_causal),
                                   philox_seed, philox_offset, None if scale is None else float(scale)))
