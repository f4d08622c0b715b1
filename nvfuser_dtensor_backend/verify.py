"""``options.verify``: every region's nvFuser result checked against PyTorch on every call.

A debug mode for wrong numbers the CPU evaluator cannot show (nvFuser's GPU schedules,
segmentation and aliasing): each region also runs as PyTorch on the same inputs, and an
output whose relative error (in norm) is beyond its dtype's tolerance is reported once per
region with a ``RegionMismatchWarning`` naming the region, its ops and the output. It doubles
the work of every region; it is meant for finding which region of a model is wrong.
"""

from __future__ import annotations

import torch

# (rtol, atol): ||out - ref|| <= rtol * ||ref|| + atol * sqrt(numel). Rounding of another
# reduction order stays far below it, a wrong value (a misplaced element, a stale buffer) is
# of the order of ||ref||; atol covers outputs that are mathematically zero (the mean of a
# normalized value) and hold only rounding noise.
TOLERANCES = {torch.float64: (1e-9, 1e-12), torch.float32: (1e-4, 1e-5), torch.float16: (5e-3, 1e-3),
              torch.bfloat16: (3e-2, 1e-2)}

# Random ops draw other numbers in the reference run.
RANDOM_OPS = ("rand", "dropout", "philox", "bernoulli", "uniform", "normal")


class RegionMismatchWarning(UserWarning):
    """A region's nvFuser output differs from PyTorch's (``options.verify``)."""


def has_random_ops(ops: list[str]) -> bool:
    return any(r in op for op in ops for r in RANDOM_OPS)


def in_kernel_dtype(out, ref, val):
    """``out`` cast to the dtype of PyTorch's result ``ref`` where ``out`` has the dtype aten
    recorded (``val``) and PyTorch's kernel returned another, so both are judged at the
    coarser precision: aten's meta and CUDA kernel disagree on the updated running
    statistics of a bf16 model's batch norm (float32 recorded, bf16 computed; the graph
    copies them into the bf16 buffers either way)."""
    if (isinstance(ref, torch.Tensor) and isinstance(out, torch.Tensor) and isinstance(val, torch.Tensor)
            and out.dtype == val.dtype != ref.dtype):
        return out.to(ref.dtype)
    return out


def mismatch(out, ref) -> str | None:
    """Why ``out`` is not ``ref`` within its dtype's tolerance, or None."""
    if not isinstance(ref, torch.Tensor):
        return None if out == ref or not isinstance(out, torch.Tensor) else f"{type(out).__name__} for a {ref!r}"
    if not isinstance(out, torch.Tensor):
        return f"{type(out).__name__} for a tensor"
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return f"{out.dtype}{list(out.shape)}, PyTorch {ref.dtype}{list(ref.shape)}"
    if not ref.dtype.is_floating_point:
        wrong = int((out != ref).sum())
        return f"{wrong} of {ref.numel()} elements differ" if wrong else None
    o, r = out.double(), ref.double()
    finite = torch.isfinite(r)
    if not torch.equal(finite, torch.isfinite(o)) or not torch.equal(o[~finite], r[~finite]):
        return "non-finite values differ"
    diff = (o[finite] - r[finite]).norm().item()
    scale = r[finite].norm().item()
    rtol, atol = TOLERANCES.get(ref.dtype, TOLERANCES[torch.bfloat16])
    if diff <= rtol * scale + atol * max(int(finite.sum()), 1) ** 0.5:
        return None
    scale, tol = scale or 1.0, rtol
    worst = (o - r).abs().nan_to_num(0).flatten().argmax().item()
    index = tuple(torch.unravel_index(torch.tensor(worst), ref.shape)) if ref.dim() else ()
    return (f"relative error {diff / scale:.3g} (tolerance {tol:g}), worst at {tuple(int(i) for i in index)}: "
            f"{o.flatten()[worst].item():.6g} vs {r.flatten()[worst].item():.6g}; strides {out.stride()}")
