"""NVFUSER_DTENSOR_PROFILE=1 (region.py, _ProfiledEntry): each region call is a named profiler range."""

import pytest

from helpers import last_line_with_env

_SCRIPT = """
import sys, torch
from torch.profiler import ProfilerActivity, profile
import nvfuser_dtensor_backend  # noqa: F401
f = torch.compile(lambda x, y: torch.nn.functional.gelu(x + y).sum(-1), backend="nvfuser_dtensor")
x, y = torch.randn(8, 16), torch.randn(16)
expected = torch.nn.functional.gelu(x + y).sum(-1)
torch.testing.assert_close(f(x, y), expected)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    torch.testing.assert_close(f(x, y), expected)
print(sorted({e.name for e in prof.events() if e.name.startswith("nvfr ")}))
"""


@pytest.mark.parametrize("switch", ["0", "1"])
def test_region_calls_are_named_ranges_only_when_asked(switch):
    names = last_line_with_env(_SCRIPT, NVFUSER_DTENSOR_PROFILE=switch)
    if switch == "1":
        assert names == "['nvfr inference.nvfuser_region_0 aten.add.Tensor,aten.gelu.default,aten.sum.dim_IntList']"
    else:
        assert names == "[]"
