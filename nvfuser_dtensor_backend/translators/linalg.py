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
from .._nvfuser import nvfuser
from ._common import all_of, arg_tensors, cast, materialized

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
    # Expanded indices (BERT's token_type_ids, BART's positions) are made concrete: Note
    # [Expanded broadcasts are materialized].
    return ctx.ops.embedding_fwd(materialized(ctx, indices), weight, None, None, None, None, None)


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


# --- cuDNN attention -------------------------------------------------------------------

# Note [cuDNN attention]
# torch 2.11 on an H200 dispatches F.scaled_dot_product_attention to
# aten._scaled_dot_product_cudnn_attention. nvFuser has no cuDNN attention; its sdpfa_fwd/bwd
# run ATen's flash attention, which computes the same function where both apply. The
# translators keep every value the cuDNN op hands to its backward in the cuDNN op's own
# form, so that the forward and the backward can each run in nvFuser or in PyTorch (a region
# falls back, or only one of them is fused) and still fit together:
# - logsumexp: cuDNN's is fp32 [B, H, S_q, 1], flash's (and so nvFuser's) fp32 [B, H, S_q],
#   both the natural log of the row sums of exp(scale * q k^T): the forward broadcasts a
#   trailing 1 on, the backward squeezes it off.
# - philox_seed/philox_offset: cuDNN's are int64 0-dim tensors, nvFuser's flash RNG state is
#   uint64 [2] and []. Without dropout nobody reads them (flash's backward reads the RNG
#   state only when dropout_p > 0), so the forward writes int64 zeros and the backward passes
#   what it gets. With dropout the two RNG schemes cannot be mixed: rejected.
# - is_causal: PyTorch's mask is aligned top-left, flash attention's bottom-right; they agree
#   only when S_q == S_k, so causal attention needs equal lengths.
# - flash attention itself needs bf16/fp16, the same head dim E for q, k and v, E % 8 == 0
#   (nvFuser asserts it) and E <= 256, equal batch and head counts (nvFuser's IR maps the
#   leading dims of q, k and v together) and CUDA.

_CUDNN_FWD_OUTPUTS = (0, 1, 4, 5, 6, 7)
_FLASH_MAX_HEAD_DIM = 256


def _same_size(a, b) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return statically_known_true(a == b)


def _flash_shapes(q, k, v, is_causal) -> str | None:
    """What flash attention (nvFuser's sdpfa) needs of q, k, v (fake tensors)."""
    if any(t.dim() != 4 for t in (q, k, v)):
        return "q, k, v must be 4-D [B, H, S, E]"
    if any(t.device.type != "cuda" for t in (q, k, v)):
        return "nvFuser's sdpfa (flash attention) runs on CUDA only"
    if {t.dtype for t in (q, k, v)} - {torch.bfloat16, torch.float16} or len({t.dtype for t in (q, k, v)}) != 1:
        return f"flash attention takes one dtype among bf16/fp16, got {sorted({str(t.dtype) for t in (q, k, v)})}"
    for d, what in ((0, "batch"), (1, "head")):
        if not (_same_size(q.shape[d], k.shape[d]) and _same_size(q.shape[d], v.shape[d])):
            return f"q, k, v with different {what} counts"
    if not _same_size(k.shape[2], v.shape[2]):
        return "k and v with different sequence lengths"
    e = q.shape[3]
    if not (isinstance(e, int) and _same_size(k.shape[3], e) and _same_size(v.shape[3], e)):
        return "q, k, v need one static head dim"
    if e % 8 or e > _FLASH_MAX_HEAD_DIM:
        return f"flash attention needs a head dim that is a multiple of 8 and at most 256, got {e}"
    if is_causal and not _same_size(q.shape[2], k.shape[2]):
        return "causal attention with S_q != S_k (PyTorch aligns the mask top-left, flash attention bottom-right)"
    return None


def _static_scalars(node: fx.Node, dropout_p) -> str | None:
    if isinstance(dropout_p, (fx.Node, torch.SymFloat)):
        return "symbolic dropout_p"
    if dropout_p != 0:
        return ("dropout: cuDNN's backward expects cuDNN's philox seed/offset, nvFuser's sdpfa draws with flash "
                "attention's RNG state; the two cannot be mixed")
    if isinstance(node.kwargs.get("scale"), (fx.Node, torch.SymFloat)):
        return "symbolic scale"
    return None


def _arg(node: fx.Node, i: int, name: str, default=None):
    return node.args[i] if i < len(node.args) else node.kwargs.get(name, default)


def _check_cudnn_fwd(node: fx.Node) -> str | None:
    if _arg(node, 3, "attn_bias") is not None:
        return "attn_bias given (nvFuser's sdpfa_bwd takes no bias)"
    if _arg(node, 7, "return_debug_mask", False):
        return "return_debug_mask"
    for user in node.users:
        if user.target is operator.getitem and not user.users:
            continue  # a dead getitem AOTAutograd left behind
        if user.target is not operator.getitem or user.args[1] not in _CUDNN_FWD_OUTPUTS:
            return f"uses output {user.args[1] if user.target is operator.getitem else user} nvFuser does not produce"
    lse = node.meta["val"][1]
    if not isinstance(lse, torch.Tensor) or lse.dim() not in (3, 4):
        return f"logsumexp of an unknown layout {getattr(lse, 'shape', lse)}"
    q, k, v = (a.meta["val"] for a in node.args[:3])
    return _static_scalars(node, _arg(node, 5, "dropout_p", 0.0)) or _flash_shapes(
        q, k, v, _arg(node, 6, "is_causal", False))


@translator(aten._scaled_dot_product_cudnn_attention.default, check=_check_cudnn_fwd, gemm=True)
def scaled_dot_product_cudnn_attention(ctx, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                                       return_debug_mask=False, scale=None):
    out, lse, _, _ = ctx.ops.sdpfa_fwd(q, k, v, dropout_p=0.0, is_causal=bool(is_causal),
                                       scale=None if scale is None else float(scale))
    if ctx.val[1].dim() == 4:  # cuDNN's [B, H, S_q, 1] (Note [cuDNN attention])
        lse = ctx.ops.broadcast(lse, [False, False, False, True])
    int64 = nvfuser().DataType.Int
    seed = ctx.ops.full([], 0, dtype=int64)  # no dropout: placeholders nobody reads
    offset = ctx.ops.full([], 0, dtype=int64)
    max_q, max_k = ctx.ops.size(q, 2), ctx.ops.size(k, 2)
    return (out, lse, None, None, max_q, max_k, seed, offset, None)


def _check_cudnn_bwd(node: fx.Node) -> str | None:
    if node.args[8] is not None:
        return "attn_bias given (nvFuser's sdpfa_bwd takes no bias)"
    if node.args[9] is not None or node.args[10] is not None:
        return "cum_seq_q/cum_seq_k given (variable-length attention)"
    grad_out, q, k, v, out, lse = (a.meta["val"] for a in node.args[:6])
    if grad_out.dtype != q.dtype or out.dtype != q.dtype:
        return "grad_out and out must have q's dtype"
    if lse.dim() == 4 and not _same_size(lse.shape[3], 1) or lse.dim() not in (3, 4):
        return f"logsumexp of an unknown layout {tuple(lse.shape)}"
    return _static_scalars(node, node.args[13]) or _flash_shapes(q, k, v, node.args[14])


@translator(aten._scaled_dot_product_cudnn_attention_backward.default, check=_check_cudnn_bwd, gemm=True)
def scaled_dot_product_cudnn_attention_backward(ctx, grad_out, q, k, v, out, logsumexp, philox_seed, philox_offset,
                                                attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                                                scale=None):
    if ctx.arg_val(5).dim() == 4:
        logsumexp = ctx.ops.squeeze(logsumexp, [3])
    return tuple(ctx.ops.sdpfa_bwd(grad_out, q, k, v, out, logsumexp, 0.0, bool(is_causal),
                                   philox_seed, philox_offset, None if scale is None else float(scale)))
