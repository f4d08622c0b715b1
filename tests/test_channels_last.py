"""``options.channels_last`` (channels_last.py, Note [Channels-last convolutions]).

The zoo's vision models with the option are checked against eager in test_zoo.py
(``test_zoo_channels_last``); here: layouts, graph breaks, the fallback for code that assumed
NCHW memory, and the ``"auto"`` heuristics."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

import nvfuser_dtensor_backend as nb
from cpu_capture import captured_on_cpu  # noqa: F401 - a fixture
from helpers import DEVICE, assert_close, compile_fn, randn
from nvfuser_dtensor_backend import channels_last
from nvfuser_dtensor_backend.options import Options, OptionsError


@pytest.fixture(autouse=True)
def _on_cuda_too(monkeypatch, cudnn_without_tf32):
    """These tests check the rewrite itself, also on the GPU, where the backend refuses it
    unless asked by the GPU checks (Note [Channels-last convolutions]; the refusal has its
    own test). float32 convolutions in full float32 on the GPU (``cudnn_without_tf32``)."""
    monkeypatch.setattr(channels_last, "ON_CUDA", True)

DTYPES = [torch.float32, torch.bfloat16]


class ConvNet(torch.nn.Module):
    """conv -> batch norm -> relu -> conv with a residual, and a head: ResNet's pattern."""

    def __init__(self, c=16, classes=10):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)
        self.head = torch.nn.Linear(c, classes)

    def features(self, x):
        y = F.relu(self.bn1(self.stem(x)))
        return F.relu(y + self.bn2(self.conv(y)))

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def _region_inputs_channels_last() -> int:
    """How many region inputs of the compiled graphs are 4-d channels-last (and not contiguous)."""
    count = 0
    for report in nb.reports():
        for region in report.regions:
            for node in region.region.graph.nodes:
                v = node.meta.get("val")
                if node.op == "placeholder" and isinstance(v, torch.Tensor) and v.dim() == 4:
                    count += not v.is_contiguous() and v.is_contiguous(memory_format=torch.channels_last)
    return count


def _step(model, x, train):
    with torch.set_grad_enabled(train):
        out = model(x)
        if train:
            out.float().square().mean().backward()
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("train", [True, False], ids=["train", "infer"])
def test_matches_eager_and_regions_work_in_nhwc(dtype, train):
    torch.manual_seed(0)
    model = ConvNet().to(DEVICE, dtype)
    ref = ConvNet().to(DEVICE, dtype)
    ref.load_state_dict(model.state_dict())
    x = randn(4, 3, 12, 12, dtype=dtype)
    compiled = compile_fn(model, channels_last=True)
    out = _step(compiled, x, train)
    expected = _step(ref, x, train)
    assert_close(out, expected, dtype, scale=4)
    assert out.stride() == expected.stride()
    # the regions between the convolutions (batch norm, relu, the residual add) read NHWC
    assert _region_inputs_channels_last() >= 3
    if train:
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, dtype, scale=8, msg=name)
            assert p.grad.stride() == q.grad.stride(), name
        for b, rb in zip(model.buffers(), ref.buffers()):  # running statistics updated alike
            assert_close(b.float(), rb.float(), dtype, scale=4)


def test_channels_last_inputs_handed_over_in_memory_order(monkeypatch):
    """Note [Channels-last inputs in memory order] (region.MEMORY_ORDER_INPUTS, off by
    default): NHWC region inputs are defined dense in memory order and permuted back in the
    fusion; the training step matches eager with every output in eager's layout
    (check_layouts), and the regions between the convolutions ran so (a wrong permutation
    fails the comparison)."""
    from nvfuser_dtensor_backend import region

    monkeypatch.setattr(region, "MEMORY_ORDER_INPUTS", True)
    handed = []
    entry = region._MemoryOrderEntry.__call__
    monkeypatch.setattr(region._MemoryOrderEntry, "__call__", lambda self, args: handed.append(self.dims) or entry(self, args))
    torch.manual_seed(0)
    dtype = torch.float32
    model = ConvNet().to(DEVICE, dtype)
    ref = ConvNet().to(DEVICE, dtype)
    ref.load_state_dict(model.state_dict())
    x = randn(4, 3, 12, 12, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", region.NvFuserFallbackWarning)  # every region in nvFuser
        out = _step(compile_fn(model, channels_last=True, check_layouts=True), x, True)
    expected = _step(ref, x, True)
    assert_close(out, expected, dtype, scale=4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, dtype, scale=8, msg=name)
        assert p.grad.stride() == q.grad.stride(), name
    assert handed and all(d == [0, 2, 3, 1] for dims in handed for d in dims.values())
    assert len(handed) >= 3, handed  # forward and backward regions (4 calls, 8 inputs in torch 2.10)


def test_outputs_keep_eager_layout():
    torch.manual_seed(0)
    model = ConvNet().to(DEVICE)
    x = randn(2, 3, 8, 8)
    compile_fn(model.features)(x)
    assert _region_inputs_channels_last() == 0  # "auto": 16 channels are too few
    # a 4-d activation returned to the user: contiguous, as in eager, though it was NHWC inside
    out = compile_fn(model.features, channels_last=True)(x)
    assert _region_inputs_channels_last() >= 3
    assert out.is_contiguous()
    assert_close(out, model.features(x), torch.float32, scale=4)


def test_graph_break_between_convolutions_keeps_guards():
    """The value crossing a graph break leaves the first graph in the layout dynamo recorded,
    so the second graph's guards hold and nothing compiles again on the next calls."""
    torch.manual_seed(0)
    conv1 = torch.nn.Conv2d(3, 8, 3, padding=1).to(DEVICE)
    conv2 = torch.nn.Conv2d(8, 8, 3, padding=1).to(DEVICE)

    def fn(x):
        y = torch.relu(conv1(x))
        torch._dynamo.graph_break()
        return conv2(y * 2)

    compiled = compile_fn(fn, channels_last=True)
    x = randn(2, 3, 8, 8)
    for _ in range(3):
        out = compiled(x)
        assert_close(out, fn(x), torch.float32, scale=4)
        assert out.is_contiguous()
    assert [r.kind for r in nb.reports()] == ["forward", "forward"]  # two graphs, compiled once each


class FlatView(torch.nn.Module):
    """A head that views a 4-d activation as if it were NCHW-contiguous."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc(y.view(y.shape[0], -1))


def test_code_assuming_nchw_memory_compiles_without_the_rewrite(caplog):
    torch.manual_seed(0)
    model = FlatView().to(DEVICE)
    x = randn(2, 3, 6, 6)
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        out = compile_fn(model, channels_last=True)(x)
    assert_close(out, model(x), torch.float32, scale=4)
    assert any("tracing with channels-last inputs failed" in r.getMessage() for r in caplog.records)
    assert _region_inputs_channels_last() == 0


# ------------------------------------------------------------------ the "auto" heuristics

def _dynamo_like_graph(weights: list[tuple[int, int, int, int]], groups=None, device="cuda", image=16):
    """A graph of chained conv2d calls whose placeholders carry fake ``example_value``s, as
    dynamo's do; ``weights`` are (out, in/groups, kh, kw)."""
    groups = groups or [1] * len(weights)
    graph = fx.Graph()
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = graph.placeholder("x")
        x.meta["example_value"] = torch.empty(2, weights[0][1] * groups[0], image, image, device=device)
        y = x
        for i, (shape, g) in enumerate(zip(weights, groups)):
            w = graph.placeholder(f"w{i}")
            w.meta["example_value"] = torch.empty(*shape, device=device)
            y = graph.call_function(torch.conv2d, (y, w, None, (1, 1), (1, 1), (1, 1), g))
            y.meta["example_value"] = torch.empty(2, shape[0], image, image, device=device)
        graph.output(y)
    return fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("weights,groups,device,why", [
    ([(64, 3, 7, 7), (128, 64, 3, 3)], None, "cuda", None),  # ResNet's
    ([(96, 3, 4, 4), (96, 1, 7, 7)], [1, 96], "cuda", None),  # ConvNeXt's depthwise convolutions
    ([(64, 3, 7, 7), (128, 64, 3, 3)], None, "cpu", "not on CUDA"),
    ([(64, 3, 3, 3), (128, 32, 3, 3)], [1, 2], "cuda", "grouped convolution with more than one input channel"),
    ([(64, 3, 3, 3), (128, 256, 3, 3)], None, "cuda", "twice as many input as output channels"),
    ([(32, 3, 3, 3), (64, 32, 3, 3)], None, "cuda", "at most 64 channels"),
])
def test_auto_follows_inductors_heuristics(weights, groups, device, why):
    gm = _dynamo_like_graph(weights, groups, device)
    reason = channels_last.refusal(gm, "auto")
    assert (reason is None) if why is None else (why in reason)
    assert channels_last.refusal(gm, True) is None
    assert channels_last.refusal(gm, False) == "options channels_last=False"


@pytest.mark.parametrize("choice", [True, "auto"])
def test_off_for_training_graphs_on_cuda_unless_asked_for_by_the_gpu_checks(choice, monkeypatch):
    # slower training on the GPU (Note [Channels-last convolutions]): refused for CUDA training
    # graphs, not for inference graphs, not on the CPU
    monkeypatch.setattr(channels_last, "ON_CUDA", False)
    gm = _dynamo_like_graph([(64, 3, 7, 7), (128, 64, 3, 3)])
    assert channels_last.refusal(gm, choice) == channels_last.OFF_ON_CUDA
    assert channels_last.refusal(gm, choice, inference=True) is None
    assert channels_last.refusal(_dynamo_like_graph([(64, 3, 7, 7), (128, 64, 3, 3)], device="cpu"), True) is None
    monkeypatch.setattr(channels_last, "ON_CUDA", True)
    assert channels_last.refusal(gm, choice) is None


def test_an_inference_graph_is_one_without_gradients():
    model = ConvNet()
    gm = fx.symbolic_trace(model)
    x = torch.randn(2, 3, 8, 8)
    assert not channels_last.is_inference(gm, [x])  # parameters that require gradients, grad mode on
    with torch.no_grad():
        assert channels_last.is_inference(gm, [x])
    model.requires_grad_(False)
    assert channels_last.is_inference(gm, [x])
    assert not channels_last.is_inference(gm, [x.requires_grad_()])


def test_the_default_is_auto():
    assert Options().channels_last == "auto"


def test_rewrite_undoes_to_the_same_code():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(ConvNet(), backend=capture)(torch.randn(2, 3, 8, 8))
    gm = graphs[0]
    code = gm.code
    rewrite = channels_last.to_channels_last(gm)
    assert rewrite.convs == 2 and "channels_last" in gm.code
    rewrite.undo()
    assert gm.code == code
    assert channels_last.plain_global_avg_pools(gm) == 1
    assert not any(n.target in channels_last.GLOBAL_AVG_POOL for n in gm.graph.nodes) and "mean" in gm.code


def test_bad_option_is_a_clear_error():
    with pytest.raises(OptionsError, match="channels_last"):
        Options.from_dict({"channels_last": "yes"})


def test_replayed_as_cuda_graphs(captured_on_cpu):
    """NHWC activations saved for the backward and batch norm's statistics, under the CUDA-graph
    runner (replayed by rerun, the worst allocator): several training steps match eager."""
    torch.manual_seed(0)
    model = ConvNet().to(DEVICE)
    ref = ConvNet().to(DEVICE)
    ref.load_state_dict(model.state_dict())
    compiled = compile_fn(model, channels_last=True, cuda_graphs=True)
    nb.cuda_graph_stats(clear=True)
    for step in range(4):
        x = randn(4, 3, 12, 12)
        assert_close(_step(compiled, x, True), _step(ref, x, True), torch.float32, scale=4, msg=f"step {step}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, torch.float32, scale=8, msg=f"step {step}: {name}")
            p.grad = q.grad = None
        for b, rb in zip(model.buffers(), ref.buffers()):
            assert_close(b.float(), rb.float(), torch.float32, scale=4, msg=f"step {step}")
    assert nb.cuda_graph_stats()["recorded"] == 2 and _region_inputs_channels_last() >= 3


def test_global_average_pool_of_an_nhwc_activation_is_a_plain_mean():
    """ConvNeXt's pattern, default options: a layer on NHWC (a permute, a linear, a permute
    back) leaves channels-last strides, and ATen's global average pool then restrides its
    result; that restride cost an as_strided_scatter and a copy in the backward."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8).to(DEVICE)

    def fn(x):
        y = lin(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return F.adaptive_avg_pool2d(torch.relu(y), 1).flatten(1).square().sum()

    x = randn(2, 8, 5, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    compiled = compile_fn(fn)
    assert_close(compiled(x), fn(x_ref), torch.float32, scale=4)
    compiled(x).backward()
    fn(x_ref).backward()
    assert_close(x.grad, x_ref.grad, torch.float32, scale=4)
    summaries = "\n".join(r.summary() for r in nb.reports())
    assert "as_strided" not in summaries and "copy" not in summaries, summaries


@pytest.mark.gpu
def test_on_cuda_inference_graphs_take_channels_last_by_default_and_training_graphs_do_not(monkeypatch):
    monkeypatch.setattr(channels_last, "ON_CUDA", False)  # the default, not the GPU checks' switch
    torch.manual_seed(0)
    model = ConvNet(c=128).to("cuda").eval()
    x = randn(2, 3, 16, 16, device="cuda")
    with torch.no_grad():
        out = compile_fn(model)(x)
        assert _region_inputs_channels_last() >= 1  # batch norm + ReLU between the convolutions, in NHWC
        assert_close(out, model(x), torch.float32, scale=4)
    model.train()
    compile_fn(model)(x).sum().backward()
    assert _region_inputs_channels_last() == 0
