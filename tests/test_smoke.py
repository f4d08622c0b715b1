import torch

from helpers import check_parity, randn


def test_bias_gelu_fp32():
    x, b = randn(64, 128), randn(128)
    check_parity(lambda x, b: torch.nn.functional.gelu(x + b, approximate="tanh"), x, b,
                 expect_ops=["aten.add.Tensor", "aten.gelu.default"])
