"""DTensor sharding strategies for aten ops that our lowering leaves and DTensor lacks.

In the global view the aten graphs run on DTensors, so every op left outside a region must
have a DTensor sharding strategy. Eager DTensor never meets some of the ops that
AOTAutograd's lowering produces: on CPU, SDPA lowers to
``_scaled_dot_product_flash_attention_for_cpu`` (and its backward), which DTensor (torch
2.10/2.11) has no strategy for. Attention shards on batch or heads like its CUDA variants.
Registered once, when the package is imported with DTensor loaded (dynamo loads both before it
traces), or else on the first global-view compile (``register_strategies``).
"""

from __future__ import annotations

import functools

import torch
from torch.distributed.tensor import Replicate, Shard

aten = torch.ops.aten


def _attention_shardings(n_tensor_in: int, n_out: int, n_scalar_in: int):
    """Everything replicated, or every tensor sharded on batch (0) or on heads (1)."""
    options = []
    for p in (Replicate(), Shard(0), Shard(1)):
        options.append(([p] * n_out, [p] * n_tensor_in + [None] * n_scalar_in))
    return options


@functools.cache
def register_strategies() -> None:
    from torch.distributed.tensor.experimental import register_sharding

    @register_sharding(aten._scaled_dot_product_flash_attention_for_cpu.default)
    def _flash_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
        # (q, k, v, dropout_p, is_causal) -> (output, logsumexp)
        return _attention_shardings(3, 2, 2)

    @register_sharding(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
    def _flash_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                            attn_mask=None, scale=None):
        # (grad_out, q, k, v, out, logsumexp, dropout_p, is_causal) -> (grad_q, grad_k, grad_v)
        return _attention_shardings(6, 3, 2)
