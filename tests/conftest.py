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


@pytest.fixture
def cudnn_without_tf32():
    """float32 convolutions in full float32 on the GPU: cuDNN's default TF32 rounds to about
    1e-3 (an NHWC and an NCHW convolution round apart), far past float32's tolerance. Through
    ``flags()``, the other cuDNN settings kept: other tests' imports may have frozen the global
    cuDNN flags (torch.backends.disable_global_flags)."""
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        yield


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
