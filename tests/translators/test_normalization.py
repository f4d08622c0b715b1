"""Parity of layer_norm, softmax and log_softmax (forward and backward)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from helpers import DEVICE, assert_close, check_parity, fused_ops, last_line_with_env, randn
from nvfuser_dtensor_backend.evaluator import Evaluator
from nvfuser_dtensor_backend.fusion import TensorDesc, build_fusion

F = torch.nn.functional
aten = torch.ops.aten
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "shape,normalized,affine",
    [
        ((4, 8), (8,), "wb"),
        ((2, 3, 8), (3, 8), "none"),
        ((3, 1, 8), (8,), "w"),
        ((8,), (8,), "wb"),
    ],
)
def test_layer_norm(dtype, shape, normalized, affine):
    x = randn(*shape, dtype=dtype, requires_grad=True)
    w = randn(*normalized, dtype=dtype, requires_grad=True) if "w" in affine else None
    b = randn(*normalized, dtype=dtype, requires_grad=True) if "b" in affine else None
    check_parity(
        lambda a, w, b: F.layer_norm(a, normalized, w, b, eps=1e-5),
        x,
        w,
        b,
        expect_ops=["aten.native_layer_norm.default"],
        backward=True,
        scale=2,
    )
    assert "aten.native_layer_norm_backward.default" in fused_ops()


def test_layer_norm_transposed_input():
    x = randn(8, 4).t().requires_grad_(True)
    w, b = randn(8, requires_grad=True), randn(8, requires_grad=True)
    check_parity(
        lambda a, w, b: F.layer_norm(a * 2, (8,), w, b),
        x,
        w,
        b,
        expect_ops=["aten.native_layer_norm.default"],
        backward=True,
    )
    assert "aten.native_layer_norm_backward.default" in fused_ops()


def test_layer_norm_outputs_mean_rstd():
    x = randn(3, 2, 5, dtype=torch.bfloat16)
    check_parity(
        lambda a: aten.native_layer_norm.default(a, [2, 5], None, None, 1e-6),
        x,
        expect_ops=["aten.native_layer_norm.default"],
    )


def test_layer_norm_backward_mask():
    """Only grad_weight requested: the other outputs are None and not computed."""
    g, x, w, b = randn(4, 6), randn(4, 6), randn(6), randn(6)

    def fn(g, x, w, b):
        out, mean, rstd = aten.native_layer_norm.default(x, [6], w, b, 1e-5)
        _, gw, _ = aten.native_layer_norm_backward.default(g, x, [6], mean, rstd, w, b, [False, True, False])
        return out, gw

    check_parity(fn, g, x, w, b, expect_ops=["aten.native_layer_norm_backward.default"])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim,layout", [((4, 8), -1, "c"), ((3, 1, 5), 0, "c"), ((6, 4), 1, "t")])
def test_softmax(dtype, fn, shape, dim, layout):
    if layout == "t":
        x = randn(*reversed(shape), dtype=dtype).t()
    else:
        x = randn(*shape, dtype=dtype)
    x = (x.float() * 4).to(dtype).requires_grad_(True)  # large logits: needs the max shift
    name = "softmax" if fn is F.softmax else "log_softmax"
    check_parity(
        lambda a: fn(a, dim),
        x,
        expect_ops=[f"aten._{name}.default"],
        backward=True,
        scale=2,
    )
    assert f"aten._{name}_backward_data.default" in fused_ops()  # the backward graph's region


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_half_to_float(fn):
    x = randn(4, 8, dtype=torch.float16)
    name = "softmax" if fn is F.softmax else "log_softmax"
    # NOTE: CPU eager has no half_to_float=True kernel, so this is a cast + fp32 softmax here.
    out = check_parity(lambda a: fn(a, -1, dtype=torch.float32), x, expect_ops=[f"aten._{name}.default"])
    assert out.dtype == torch.float32


def test_softmax_huge_logits_are_finite():
    x = randn(2, 6) * 1e4
    out = check_parity(lambda a: F.softmax(a, -1), x, expect_ops=["aten._softmax.default"])
    assert torch.isfinite(out).all()


def test_layer_norm_extents_are_symbolic():
    """Built for one size, the layer_norm fusion must still normalize other sizes correctly."""
    fn = lambda x: aten.native_layer_norm.default(x, [5], None, None, 1e-5)  # noqa: E731
    gm = make_fx(fn)(torch.randn(3, 5))
    built = build_fusion(gm, [TensorDesc.of(torch.randn(3, 5))])
    y = torch.randn(4, 9)
    outs = Evaluator(built.fd, built.constants)([y])
    outs = tuple(outs[i] for i in built.output_index)
    expected = aten.native_layer_norm.default(y, [9], None, None, 1e-5)
    assert_close(outs, expected)


def _batch_norm(shape, dtype, affine, **kwargs):
    """A BatchNorm{1,2,3}d for inputs of ``shape`` with random running statistics (and weight
    and bias), in ``dtype``."""
    cls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[len(shape)]
    bn = cls(shape[1], affine=affine, **kwargs).to(DEVICE, dtype)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        if affine:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-1, 1)
    return bn


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(4, 8, 6, 5), (6, 3, 7), (16, 5)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training(dtype, shape, affine):
    # _native_batch_norm_legit_functional: the output, and the running statistics updated
    # in place after the graph (aten's copy_), against eager BatchNorm in training mode.
    bn = _batch_norm(shape, dtype, affine, momentum=0.3)
    ref = __import__("copy").deepcopy(bn)
    x = randn(*shape, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    # tanh, not relu: a half-type output near 0 may round to either side of a relu, and the
    # batch norm backward then spreads that over the whole channel's gradient.
    compiled = torch.compile(lambda t: torch.tanh(bn(t * 2)), backend="nvfuser_dtensor")
    out, expected = compiled(x), torch.tanh(ref(x_ref * 2))
    assert_close(out, expected)
    assert "aten._native_batch_norm_legit_functional.default" in fused_ops()
    assert_close(bn.running_mean, ref.running_mean)
    assert_close(bn.running_var, ref.running_var)
    grad = randn(*shape, dtype=dtype)
    out.backward(grad)
    expected.backward(grad)
    assert_close(x.grad, x_ref.grad, scale=4)
    if affine:
        assert_close(bn.weight.grad, ref.weight.grad, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(4, 8, 6, 5), (6, 3, 7), (16, 5), (2, 4, 3, 3, 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_in_evaluation(dtype, shape, affine):
    # _native_batch_norm_legit_no_training (a CNN's inference) fuses with what follows it;
    # the running statistics (in the module's dtype) normalize, and stay unchanged.
    bn = _batch_norm(shape, dtype, affine).eval()
    stats = (bn.running_mean.clone(), bn.running_var.clone())
    check_parity(lambda t: torch.relu(bn(t) + 1), randn(*shape, dtype=dtype),
                 expect_ops=["aten._native_batch_norm_legit_no_training.default", "aten.relu.default"])
    assert torch.equal(bn.running_mean, stats[0]) and torch.equal(bn.running_var, stats[1])


def test_batch_norm_in_evaluation_with_input_gradients():
    # A frozen batch norm (eval mode) inside a model that is trained: its input's gradient.
    bn = _batch_norm((2, 4, 3, 3), torch.float32, affine=True).eval()
    check_parity(lambda t: torch.tanh(bn(t * 2)), randn(2, 4, 3, 3, requires_grad=True), backward=True,
                 expect_ops=["aten._native_batch_norm_legit_no_training.default"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_wide_odd_rows(dtype, fn):
    # Note [Wide odd rows]: rows of odd width above ODD_WIDE_ROW (a vocabulary of 50257) are
    # cut into a segment per row statistic; the values stay those of aten, forward and backward
    from nvfuser_dtensor_backend.translators.reduction import ODD_WIDE_ROW

    width = ODD_WIDE_ROW + 1
    x = (randn(3, width).float() * 4).to(dtype).requires_grad_(True)
    if fn is F.softmax:
        check_parity(lambda a: fn(a * 2, -1), x, expect_ops=["aten._softmax.default"], backward=True, scale=2)
        assert "aten._softmax_backward_data.default" in fused_ops()
    else:  # decomposed (decompositions.py), so that its backward recomputes it
        check_parity(lambda a: fn(a * 2, -1), x, expect_ops=["aten.amax.default", "aten.sum.dim_IntList"],
                     backward=True, scale=2)
        assert "aten._log_softmax_backward_data.default" not in fused_ops()


@pytest.mark.parametrize("width,cut", [(8193, True), (8194, False), (197, False)])
def test_softmax_wide_odd_rows_are_cut(width, cut):
    for op in (aten._log_softmax.default, aten._softmax.default):
        gm = make_fx(lambda a: op(a, -1, False))(torch.randn(2, width))
        built = build_fusion(gm, [TensorDesc.of(torch.randn(2, width))])
        assert ("SegmenterSet" in built.fd.fusion.print_math()) == cut  # repr(fd) prints it as a cast
        y = torch.randn(3, width) * 5
        outs = Evaluator(built.fd, built.constants)([y])
        assert_close(outs[built.output_index[0]], op(y, -1, False))


def test_cross_entropy_over_an_odd_vocabulary():
    # GPT-2's loss (50257 classes) in miniature: log_softmax, the label gather and their
    # backward, the log_softmax decomposed (decompositions.py) so that the forward saves the
    # bf16 logits and two row statistics, never a float32 row of the vocabulary's width
    width = 8193
    logits = randn(6, width, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, width, (6,), device=logits.device)
    labels[1] = -100
    loss = lambda x, y: F.cross_entropy(x.float() * 2, y)  # noqa: E731
    check_parity(loss, logits, labels, backward=True, expect_ops=["aten.amax.default", "aten.gather.default"])
    assert "aten.scatter.value" in fused_ops()  # the backward's one-hot
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t

    compiled = torch.compile(loss, backend="nvfuser_dtensor")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = compiled(logits, labels)
    out.backward()
    assert (torch.bfloat16, (6, width)) in saved
    assert not [s for s in saved if s[0] == torch.float32 and width in s[1]], saved


_EVEN_ROWS_SCRIPT = """
import sys, torch
sys.path.insert(0, "tests")
import torch.nn.functional as F
from helpers import check_parity, fused_ops, randn
width = 8194
logits = randn(6, width, dtype=torch.bfloat16, requires_grad=True)
labels = torch.randint(0, width, (6,), device=logits.device)
labels[1] = -100
check_parity(lambda x, y: F.cross_entropy(x.float() * 2, y), logits, labels, backward=True)
print("decomposed" if "aten.amax.default" in fused_ops() else "whole")
"""


@pytest.mark.parametrize("mode,shown", [("odd", "whole"), ("decompose", "decomposed"), ("cut", "decomposed")])
def test_wide_even_rows_switch(mode, shown):
    # reduction.WIDE_ROWS, the H200 A/B switch for wide rows of even width (a vocabulary of
    # 32000; default "decompose"): read at import, so each mode runs in a process of its own
    assert last_line_with_env(_EVEN_ROWS_SCRIPT, NVFUSER_DTENSOR_WIDE_ROWS=mode) == shown


_LN_BACKWARD_SCRIPT = """
import pathlib, sys, tempfile, torch
sys.path.insert(0, "tests")
import torch.nn.functional as F
from helpers import check_parity, randn
dump = tempfile.mkdtemp()
for dtype in (torch.float32, torch.bfloat16):
    x = randn(6, 5, 24, dtype=dtype, requires_grad=True)
    w, b = randn(24, dtype=dtype, requires_grad=True), randn(24, dtype=dtype, requires_grad=True)
    check_parity(lambda x, w, b: F.layer_norm(x * 2, (24,), w, b) * 3, x, w, b, backward=True, dump_dir=dump,
                 scale=1.0 if dtype == torch.float32 else 8.0)  # bf16 column sums over 30 rows, eager's in bf16
text = "".join(p.read_text() for p in pathlib.Path(dump).glob("backward*.py"))
print("split" if "SegmenterSet" in text else "whole")
"""


@pytest.mark.parametrize("mode", ["whole", "split"])
def test_layer_norm_backward_switch(mode):
    # normalization.LN_BACKWARD, the H200 A/B switch of Note [LayerNorm backward in two
    # kernels]: read at import, so each mode runs in a process of its own
    assert last_line_with_env(_LN_BACKWARD_SCRIPT, NVFUSER_DTENSOR_LN_BACKWARD=mode) == mode


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,groups,affine", [
    ((4, 8, 6, 5), 4, True),  # conv activations, two channels per group
    ((2, 6, 7), 3, False),  # 1-d signals, no affine
    ((3, 4, 2, 3, 2), 4, True),  # 3-d volumes, one channel per group (instance-norm like)
    ((1, 8, 5, 5), 1, True),  # batch 1, one group (layer norm over C, H, W)
])
def test_group_norm(dtype, shape, groups, affine):
    # native_group_norm in the region with its neighbours; its backward is decomposed by aten
    gn = torch.nn.GroupNorm(groups, shape[1], affine=affine).to(DEVICE, dtype)
    if affine:
        with torch.no_grad():
            gn.weight.uniform_(0.5, 1.5)
            gn.bias.uniform_(-1, 1)
    x = randn(*shape, dtype=dtype, requires_grad=True)
    check_parity(lambda t: torch.tanh(gn(t * 2 + 1)), x, expect_ops=["aten.native_group_norm.default"],
                 backward=True, scale=4)


def test_group_norm_saved_statistics_and_channels_last_input():
    # the saved mean and rstd ([N, group], what the backward reads), from an NHWC input: taken
    # as it is on the CPU (whose kernel returns an NHWC output, the layout the region must
    # give too), made contiguous in the region on CUDA, as F.group_norm does there (the CUDA
    # kernel takes contiguous input only)
    x = randn(2, 8, 4, 3).to(memory_format=torch.channels_last)
    w, b = randn(8), randn(8)
    dense = DEVICE != "cpu"
    check_parity(lambda t, w, b: aten.native_group_norm.default((t * 3).contiguous() if dense else t * 3, w, b,
                                                                2, 8, 12, 4, 1e-5),
                 x, w, b, expect_ops=["aten.native_group_norm.default"])


def test_group_norm_in_a_timm_model(cudnn_without_tf32):
    # a real model with GroupNorm: timm's EfficientNet-B0 with group norms, one training step.
    # Its outputs and gradients are ill-conditioned at this size (group norms over 1x1 maps in
    # the last stages), so ours and eager's are both judged against float64, relative to each
    # tensor's largest value; convolutions and matmuls in full float32 (TF32 rounds to 10
    # mantissa bits, which those norms amplify differently in each run).
    timm = pytest.importorskip("timm")
    from benchmarks import zoo_check
    from nvfuser_dtensor_backend import reports

    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        _group_norm_model_step(timm, zoo_check, reports)
    finally:
        torch.set_float32_matmul_precision(precision)


def _group_norm_model_step(timm, zoo_check, reports):
    import copy

    torch.manual_seed(0)
    model = timm.create_model("efficientnet_b0_gn", pretrained=False, num_classes=10).to(DEVICE)
    exact = copy.deepcopy(model).double()
    compiled = zoo_check.compile_model(model, "nvfuser_dtensor")
    x = randn(2, 3, 32, 32)
    outs = []
    for m, inp in ((compiled, x), (model, x), (exact, x.double())):
        outs.append(m(inp))
        outs[-1].square().mean().backward()

    def err(got, ref):
        return ((got.double() - ref).abs().max() / ref.abs().max()).item()

    ours_err, eager_err = err(outs[0], outs[2]), err(outs[1], outs[2])
    assert ours_err <= max(4 * eager_err, 1e-5), (ours_err, eager_err)
    exact_grads = dict(exact.named_parameters())
    for (n, ours), (_, eager) in zip(compiled._orig_mod.named_parameters(), model.named_parameters()):
        ref = exact_grads[n].grad
        assert err(ours.grad, ref) <= max(4 * err(eager.grad, ref), 1e-5), (n, err(ours.grad, ref), err(eager.grad, ref))
    assert "aten.native_group_norm.default" in fused_ops()
    assert not any("native_group_norm" in line for r in reports() for line in r.summary().splitlines()
                   if line.strip().startswith("in PyTorch"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,affine", [((2, 4, 6, 5), True), ((3, 5, 7), False), ((1, 3, 4, 4), True)])
def test_instance_norm(dtype, shape, affine):
    # F.instance_norm: batch norm without running statistics over the input viewed as
    # [1, N * C, ...], the affine parameters repeated N times; all of it in one region
    norm = {3: torch.nn.InstanceNorm1d, 4: torch.nn.InstanceNorm2d}[len(shape)](shape[1], affine=affine)
    norm = norm.to(DEVICE, dtype)
    if affine:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-1, 1)
    x = randn(*shape, dtype=dtype, requires_grad=True)
    check_parity(lambda t: torch.tanh(norm(t * 2 + 1)), x,
                 expect_ops=["aten._native_batch_norm_legit.no_stats"] + (["aten.repeat.default"] if affine else []),
                 backward=True, scale=4)
