"""Column sums of tall tensors, summed in two stages.

Note [Column sums in two stages]
A linear layer's bias gradient is ``sum(g, [0])`` over the rows of the output gradient: ViT-S/16's
step has 48 of them over 6304 rows of 384 to 1536 columns. nvFuser 0.2.36 makes each one a grid
reduction kernel (blocks along the rows, combined through a global work buffer and a semaphore
that an extra ``at::zeros`` launch clears first): 7-12 us each on an H100, about 0.43 ms of the
step's 4.86 ms (session 31's kernel list). Inductor splits such a sum in two kernels, partial
sums over row blocks and then their sum (its ``triton_red_fused_sum`` and ``triton_per_fused_sum``
pairs, about 4.5 us a column sum in session 29's list). So, with
``NVFUSER_DTENSOR_STAGED_COLUMN_SUMS=1`` (an A/B switch read at import, **off**: not yet run on
a GPU), before partitioning, ``sum(x, leading dims)`` of a contiguous ``x`` with at least
``MIN_ROWS`` rows in those dims becomes ``x.view(S, rows // S, *rest).sum(1, dtype=float32)
.sum(0)`` cast back to the sum's dtype, where ``S``, the number of row blocks, is the divisor of
the row count nearest 64 between 16 and 256 (no such divisor: the sum stays as it is). Both
stages accumulate in float32 and round once at the end, as the single sum does; only the order
of the additions differs.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import call_with_val, rewritten
from .fx_nodes import val as _val
from .options import env_flag

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten

ON = env_flag("NVFUSER_DTENSOR_STAGED_COLUMN_SUMS")
MIN_ROWS = 1024
_FLOATS = (torch.bfloat16, torch.float16, torch.float32)  # float64 keeps its own accumulation


def row_blocks(rows: int) -> int | None:
    """The number of row blocks for ``rows`` rows: the divisor nearest 64 in [16, 256], or None."""
    divisors = [s for s in range(16, 257) if rows % s == 0 and rows // s > 1]
    return min(divisors, key=lambda s: (abs(s - 64), s)) if divisors else None


def _column_sum(node: fx.Node):
    """(x, leading dim count, rows, row blocks) when ``node`` sums a contiguous tall ``x`` over its
    leading dims (Note [Column sums in two stages]); else None."""
    if node.op != "call_function" or node.target is not aten.sum.dim_IntList or len(node.args) < 2:
        return None
    x, dims = node.args[0], node.args[1]
    vx, vout = _val(x), _val(node)
    if (not isinstance(vx, torch.Tensor) or not isinstance(vout, torch.Tensor) or vx.dim() < 2
            or vx.dtype not in _FLOATS or not vx.is_contiguous() or not dims):
        return None
    lead = sorted(d % vx.dim() for d in dims)
    if lead != list(range(len(lead))) or len(lead) == vx.dim() or any(isinstance(n, torch.SymInt) for n in vx.shape):
        return None
    rows = math.prod(vx.shape[:len(lead)])
    if rows < MIN_ROWS:
        return None
    blocks = row_blocks(rows)
    return None if blocks is None else (x, len(lead), rows, blocks)


def stage_column_sums(gm: fx.GraphModule) -> int:
    """Column sums of tall tensors in two stages (Note [Column sums in two stages]), when the
    switch is on; returns how many."""
    if not ON:
        return 0
    graph, staged = gm.graph, 0
    for node in list(graph.nodes):
        found = _column_sum(node)
        if found is None:
            continue
        fake_mode = detect_fake_mode([_val(node)])
        if fake_mode is None:
            continue
        x, lead, rows, blocks = found
        vout = _val(node)
        rest = list(_val(x).shape[lead:])
        with graph.inserting_before(node):
            blocked = call_with_val(graph, fake_mode, aten.view.default, [x, [blocks, rows // blocks, *rest]])
            partial = call_with_val(graph, fake_mode, aten.sum.dim_IntList, [blocked, [1]], {"dtype": torch.float32})
            total = call_with_val(graph, fake_mode, aten.sum.dim_IntList, [partial, [0]])
            value = call_with_val(graph, fake_mode, aten._to_copy.default, [total], {"dtype": vout.dtype})
            if list(value.meta["val"].shape) != list(vout.shape):  # keepdim
                value = call_with_val(graph, fake_mode, aten.view.default, [value, list(vout.shape)])
        node.replace_all_uses_with(value)
        graph.erase_node(node)
        staged += 1
    if staged:
        rewritten(gm)
        log.info("nvfuser_dtensor: %d column sum(s) in two stages (Note [Column sums in two stages])", staged)
    return staged
