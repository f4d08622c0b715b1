import os

import pytest
import torch

# Every region output's strides are checked against aten's on every call (options.check_layouts,
# Note [Output layout contract]); subprocesses started by tests inherit it.
os.environ.setdefault("NVFUSER_DTENSOR_CHECK_LAYOUTS", "1")

# On the CPU, memory nobody wrote holds NaN, as recycled GPU memory holds garbage (the helper
# says why); GPU runs are left as they are. Imported after the line above (the package is).
from helpers import fill_unwritten_memory_with_nan  # noqa: E402

if not torch.cuda.is_available():
    fill_unwritten_memory_with_nan()


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
