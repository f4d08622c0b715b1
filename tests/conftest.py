import os

import pytest
import torch

# Every region output's strides are checked against aten's on every call (options.check_layouts,
# Note [Output layout contract]); subprocesses started by tests inherit it.
os.environ.setdefault("NVFUSER_DTENSOR_CHECK_LAYOUTS", "1")

# Memory nobody wrote holds NaN (integers: their largest value) on the CPU, as memory the CUDA
# caching allocator hands out again holds whatever was there: a region, a graph buffer or a
# padded row that reads memory it never wrote gives NaN here too, where fresh CPU pages would
# have read as zeros. PyTorch does this only in its deterministic mode, where an op without
# a deterministic kernel warns instead of raising (``warn_only``); GPU runs are left as they are.
if not torch.cuda.is_available():
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
