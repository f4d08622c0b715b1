"""Hostile inputs: each gives the eager answer, or falls back cleanly (with a warning), and never
crashes or returns a silently wrong number."""

import warnings

import pytest
import torch

import nvfuser_dtensor_backend as nb


def compiled(fn, **options):
    torch._dynamo.reset()
    nb.clear_reports()
    return torch.compile(fn, backend="nvfuser_dtensor", options=options or None)


def same(fn, *args, atol=1e-6, rtol=1e-5):
    """Compiled fn(*args) equals eager fn(*args) (values, dtype, shape; NaN where eager has NaN)."""
    expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = compiled(fn)(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    return got


def test_complex_inputs_stay_in_pytorch():
    x = torch.randn(4, 3, dtype=torch.complex64)
    same(lambda x: x * 2 + 1, x)
    assert all(not r.partition.regions for r in nb.reports())


def test_sparse_input():
    x = torch.randn(4, 4).relu().to_sparse()
    same(lambda x: (x * 2).to_dense() + 1, x)


def test_quantized_input():
    q = torch.quantize_per_tensor(torch.randn(4, 4), scale=0.1, zero_point=3, dtype=torch.quint8)
    same(lambda q: q.dequantize() * 2 + 1, q)


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0,)])
def test_zero_size_dims(shape):
    same(lambda x: torch.exp(x) * 2 + x.sum(-1, keepdim=True), torch.randn(shape))


def test_zero_dim_tensors_and_python_scalars():
    same(lambda x, y, s: x * s + y, torch.tensor(3.0), torch.randn(4), 2.5)
    same(lambda x, s: (x + s) * (s - 1), torch.tensor(1.5), 4)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels_last", "expanded", "overlapping"])
def test_strided_inputs(layout):
    base = torch.randn(2, 3, 8, 8)
    x = {
        "transposed": base.transpose(1, 3),
        "sliced": base[:, :, ::2, 1:],
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "expanded": torch.randn(1, 3, 1, 8).expand(2, 3, 8, 8),
        "overlapping": torch.randn(64).as_strided((4, 8), (2, 1)),  # rows overlap
    }[layout]
    same(lambda x: torch.tanh(x) * 2 + x.sum(-1, keepdim=True), x)


def test_nan_and_inf_propagate_through_pointwise_and_reductions():
    x = torch.randn(4, 6)
    x[0, 1], x[1, 2], x[2, 3] = float("nan"), float("inf"), -float("inf")
    same(lambda x: torch.relu(x) + torch.exp(x) * 0 + x.sum(-1, keepdim=True), x)
    same(lambda x: (x.amax(-1), x.amin(-1), torch.maximum(x, torch.zeros_like(x))), x)
    same(lambda x: x.max(dim=-1).values + x.min(dim=-1).values, x)
    same(lambda x: torch.softmax(x, -1), x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_overflow_and_division_semantics(dtype):
    info = torch.iinfo(dtype)
    x = torch.tensor([info.max, info.min, -7, 7, -1, 0], dtype=dtype)
    y = torch.tensor([1, 3, 2, -2, 3, 5], dtype=dtype)  # not min // -1: that traps (SIGFPE) in eager too
    same(lambda x: x + 1, x)  # wraps around like eager
    same(lambda x, y: (x // y, torch.remainder(x, y), torch.div(x, y, rounding_mode="trunc")), x, y)
    same(lambda x, y: torch.fmod(x, y) * 3 - y, x, y)


def test_in_place_mutation_of_inputs():
    def fn(x, y):
        x.add_(1)
        y.mul_(2)
        return x * y

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    x_ref, y_ref = x.clone(), y.clone()
    expected = fn(x_ref, y_ref)
    got = compiled(fn)(x, y)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, x_ref)  # the inputs were mutated like eager's
    torch.testing.assert_close(y, y_ref)


def test_outputs_that_alias_inputs():
    x = torch.randn(4, 6)
    out = compiled(lambda x: (x.view(-1), x.t(), x, torch.exp(x)))(x)
    assert out[0].data_ptr() == x.data_ptr() and out[1].data_ptr() == x.data_ptr()
    torch.testing.assert_close(out[3], torch.exp(x))


def test_mix_of_requires_grad_inputs():
    a = torch.randn(4, 5, requires_grad=True)
    b = torch.randn(4, 5)
    c = torch.randn(5, requires_grad=True)
    fn = lambda a, b, c: (torch.tanh(a * b + c) * b).sum()  # noqa: E731
    fn(a, b, c).backward()
    ga, gc = a.grad.clone(), c.grad.clone()
    a.grad = c.grad = None
    compiled(fn)(a, b, c).backward()
    torch.testing.assert_close(a.grad, ga)
    torch.testing.assert_close(c.grad, gc)
    assert b.grad is None


def _compiles():
    return sum(1 for r in nb.reports())


def test_mark_dynamic_compiles_once_for_all_sizes():
    fn = compiled(lambda x: torch.nn.functional.gelu(x) * 2 + x.sum(-1, keepdim=True))
    for n in (8, 16, 33):
        x = torch.randn(n, 32)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(fn(x), torch.nn.functional.gelu(x) * 2 + x.sum(-1, keepdim=True))
    assert _compiles() == 1, [r.kind for r in nb.reports()]


def test_automatic_dynamic_stops_recompiling():
    fn = compiled(lambda x: torch.sigmoid(x) + 1)
    for n in (8, 16, 24, 40):
        x = torch.randn(n, 4)
        torch.testing.assert_close(fn(x), torch.sigmoid(x) + 1)
    assert _compiles() == 2, [r.kind for r in nb.reports()]  # static, then one dynamic graph


def test_changing_dtype_between_calls():
    fn = compiled(lambda x: torch.exp(x) * 3)
    for dtype in (torch.float32, torch.bfloat16, torch.float32, torch.float16):
        x = torch.randn(8, 8, dtype=dtype)
        got = fn(x)
        assert got.dtype == dtype
        torch.testing.assert_close(got, torch.exp(x) * 3, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_inputs_on_another_cuda_device_than_the_current_one():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = torch.randn(64, 64, device="cuda:1")
    with torch.cuda.device(0):
        got = compiled(lambda x: torch.tanh(x) + 1)(x)
    assert got.device == x.device
    torch.testing.assert_close(got, torch.tanh(x) + 1)
