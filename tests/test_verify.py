"""options.verify: each region's result checked against PyTorch (nvfuser_dtensor_backend/verify.py)."""

import warnings

import pytest
import torch

from nvfuser_dtensor_backend import region as region_mod
from nvfuser_dtensor_backend.options import Options, OptionsError
from nvfuser_dtensor_backend.verify import RegionMismatchWarning, mismatch

from helpers import compile_fn, randn


def _run(f, *args, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compile_fn(f, **options)(*args)
    return out, [w for w in caught if issubclass(w.category, RegionMismatchWarning)]


def test_a_right_region_is_quiet():
    x = randn(8, 32, dtype=torch.bfloat16)
    _, found = _run(lambda x: torch.softmax(x * 2, -1) + x.sum(-1, keepdim=True), x, verify=True)
    assert found == []


def test_a_wrong_region_is_named(monkeypatch):
    # An entry that returns a wrong value, as nvFuser did on the H200 for an expanded reshape.
    call = region_mod._NvFuserEntry.__call__  # the evaluator entry inherits it

    def wrong(self, args):
        out = call(self, args)
        return tuple(o.flip(0) for o in out) if isinstance(out, tuple) else out.flip(0)

    monkeypatch.setattr(region_mod._NvFuserEntry, "__call__", wrong)
    x = randn(8, 32)
    out, found = _run(lambda x: torch.tanh(x) * 3, x, verify=True)
    assert len(found) == 1
    message = str(found[0].message)
    assert "aten.tanh.default" in message and "output 0" in message and "relative error" in message
    _, found = _run(lambda x: torch.tanh(x) * 3, x)  # off by default
    assert found == []


def test_mismatch_tolerances():
    r = randn(64, 64, dtype=torch.bfloat16)
    assert mismatch(r.clone(), r) is None
    assert mismatch((r.float() * (1 + 2**-8)).bfloat16(), r) is None  # an ulp of rounding
    assert "relative error" in mismatch(r.flip(0), r)
    assert "differ" in mismatch(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))
    assert "non-finite" in mismatch(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]))


def test_a_kernel_dtype_other_than_the_recorded_one_is_judged_in_the_kernel_dtype():
    # a bf16 model's batch norm: aten records float32 running statistics, the CUDA kernel
    # returns bf16; our output follows the record and is compared in the kernel's dtype
    from nvfuser_dtensor_backend.verify import in_kernel_dtype, mismatch

    out = randn(16, dtype=torch.float32)
    kernel = out.to(torch.bfloat16)
    assert mismatch(out, kernel) is not None
    assert mismatch(in_kernel_dtype(out, kernel, torch.empty(16, device="meta")), kernel) is None
    assert mismatch(in_kernel_dtype(out * 1.1, kernel, torch.empty(16, device="meta")), kernel) is not None
    # an output whose dtype is not the recorded one is still reported
    assert in_kernel_dtype(out, kernel, torch.empty(16, dtype=torch.bfloat16, device="meta")) is out


def test_verify_option_is_checked(monkeypatch):
    with pytest.raises(OptionsError, match="verify must be a bool"):
        Options.from_dict({"verify": "yes"})
    monkeypatch.setenv("NVFUSER_DTENSOR_VERIFY", "1")
    assert Options.from_dict({}).verify
