"""options.cuda_graphs: compiled graphs replayed through cudagraph trees (cuda_graphs.py)."""

import logging

import pytest
import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

from nvfuser_dtensor_backend.cuda_graphs import skip_reason
from nvfuser_dtensor_backend.options import Options, OptionsError

from helpers import DEVICE, accumulating_steps, compile_fn, randn

gpu = pytest.mark.gpu


def test_option_is_checked():
    assert Options.from_dict({}).cuda_graphs == "auto"
    assert Options.from_dict({"cuda_graphs": True}).cuda_graphs is True
    assert Options.from_dict({"cuda_graphs": "trees"}).cuda_graphs == "trees"
    with pytest.raises(OptionsError, match="cuda_graphs must be"):
        Options.from_dict({"cuda_graphs": "yes"})


def _aten_graph(fn, *args) -> fx.GraphModule:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) for a in args]
        return make_fx(fn)(*fake)


def test_a_graph_that_mutates_an_input_is_not_captured():
    def mutating(x, y):
        x.add_(1)
        return x * y

    gm = _aten_graph(mutating, torch.randn(3), torch.randn(3))
    assert "mutat" in skip_reason(gm, [torch.randn(3), torch.randn(3)], [])
    # a static input (a parameter or buffer, used in place) may be mutated
    why = skip_reason(gm, [torch.randn(3), torch.randn(3)], [0])
    assert why is None or "mutat" not in why


def test_the_compiled_function_empties_the_list_it_is_handed():
    # cudagraph trees assert that the callee consumed its inputs (so they can be freed early)
    from nvfuser_dtensor_backend.cuda_graphs import consuming

    seen = []
    run = consuming(lambda args: seen.append(list(args)) or [sum(args)])
    args = [1, 2, 3]
    assert run(args) == [6] and args == [] and seen == [[1, 2, 3]] and run._boxed_call


def test_auto_captures_cuda_graphs_with_static_shapes_only():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from nvfuser_dtensor_backend.cuda_graphs import refusal

    cpu = [torch.randn(2, 3)]
    assert refusal("auto", cpu).startswith("inputs not on CUDA") and refusal(False, cpu) and refusal(True, cpu) is None
    with FakeTensorMode(allow_non_fake_inputs=True):
        cuda = [torch.empty(2, 3, device="cuda"), torch.empty(3, device="cuda")]
        assert refusal("auto", cuda) is None
        assert refusal("auto", cuda + cpu) is not None  # a CPU tensor among them
    assert refusal("auto", [1, 2.0]) is not None  # no tensor at all


def test_outputs_that_reach_the_user_are_copied_out_of_the_graph():
    """Note [CUDA graphs through cudagraph trees]: the first ``escaping`` outputs of a replay
    are copies; the rest (activations saved for the backward) stay the graph's own."""
    from nvfuser_dtensor_backend.cuda_graphs import copying_out

    static = [torch.randn(4), torch.randn(2, 3).t(), torch.randn(5)]  # the graph's memory
    replay = lambda args: list(static)  # noqa: E731
    user, strided, saved = copying_out(replay, 2)([])
    assert user.data_ptr() != static[0].data_ptr() and torch.equal(user, static[0])
    assert strided.stride() == static[1].stride() and torch.equal(strided, static[1])
    assert saved is static[2]
    assert all(o.data_ptr() != t.data_ptr() for o, t in zip(copying_out(replay, None)([]), static))


def test_a_graph_the_cudagraph_trees_fail_on_runs_as_it_is_from_then_on(caplog):
    from nvfuser_dtensor_backend.cuda_graphs import CudaGraphs

    calls = {"replay": 0}

    def replay(args):  # the trees empty the list, then raise (a failed pool check)
        calls["replay"] += 1
        args.clear()
        raise RuntimeError("These storage data ptrs are not allocated in pool (0, 1) but should be: {1}")

    graphs = CudaGraphs(2)
    forward = graphs._falling_back("forward", replay, lambda args: [sum(args)])
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        assert forward([1, 2]) == [3]  # the failed call, rerun as it is on the same inputs
        assert forward([3, 4]) == [7]
        backward = graphs._falling_back("backward", replay, lambda args: [max(args)])
        assert backward([5, 6]) == [6]  # its partner runs as it is too, without trying
    assert calls["replay"] == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "CUDA graphs are off" in line and "not allocated in pool" in line
    error = graphs._falling_back("forward", replay, lambda args: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # an error of the computation itself still raises
        error([1])


def test_an_error_of_the_graph_itself_is_not_taken_for_a_capture_failure(caplog):
    """A region's fallback warning turned into an error (as tests do) inside a warm-up is the
    graph's own: it propagates, and capture stays on."""
    from nvfuser_dtensor_backend.cuda_graphs import CudaGraphs, consuming

    def graph(args):
        raise UserWarning("region falls back")

    graphs = CudaGraphs(1)
    run = graphs._falling_back("backward", lambda args: consuming(graph)(args), graph)
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"), pytest.raises(UserWarning):
        run([1])
    assert graphs.failed is None and not caplog.records


def test_forward_graphs_know_how_many_outputs_reach_the_user():
    """AOTAutograd's num_forward_returns, read while the forward is compiled: the user's two
    outputs, not the activations saved for the backward."""
    from torch._dynamo.backends.common import aot_autograd

    from nvfuser_dtensor_backend.cuda_graphs import _escaping_outputs

    seen = {}

    def fw(gm, inputs):
        seen["escaping"] = _escaping_outputs("forward")
        seen["outputs"] = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
        return gm

    f = torch.compile(lambda x, w: ((x @ w).tanh().sum(), (x * 2).sin()),
                      backend=aot_autograd(fw_compiler=fw, bw_compiler=lambda gm, i: gm))
    f(torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True))
    assert seen["escaping"] == 2 and seen["outputs"] > 2, seen
    assert _escaping_outputs("backward") is None and _escaping_outputs("inference") is None


def test_cpu_graphs_run_as_they_are_with_one_log_line(caplog):
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="nvfuser_dtensor_backend"):
        out = compile_fn(m, cuda_graphs=True)(x)
        out.sum().backward()
    torch.testing.assert_close(out, m(x))
    lines = [r.getMessage() for r in caplog.records if "without CUDA graphs" in r.getMessage()]
    assert len(lines) == 1 and "forward" in lines[0]


# --- on the GPU ---------------------------------------------------------------------------


def _captured(caplog) -> int:
    return sum("replays as a CUDA graph" in r.getMessage() for r in caplog.records)


@gpu
def test_training_steps_match_eager_across_optimizer_steps(caplog):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(approximate="tanh"),
                                torch.nn.LayerNorm(256), torch.nn.Linear(256, 64)).to(DEVICE)
    ref = __import__("copy").deepcopy(model)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    with caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        compiled = compile_fn(model, cuda_graphs=True)
        for step in range(4):  # warm-up, record, then replays; new inputs and new weights each step
            x = randn(32, 64)
            torch.compiler.cudagraph_mark_step_begin()
            loss = compiled(x).square().mean()
            loss.backward()
            ref_loss = ref(x).square().mean()
            ref_loss.backward()
            torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            for o in (opt, ref_opt):
                o.step()
                o.zero_grad(set_to_none=True)
    assert _captured(caplog) == 2  # forward and backward


@gpu
def test_a_live_output_is_never_overwritten_by_a_later_replay():
    # Within a step the cudagraph trees never overwrite a live output; across steps
    # (cudagraph_mark_step_begin, or a new call after the backward) they would, and the
    # backend copies every output that reaches the user out of the graph's memory.
    f = compile_fn(lambda x: torch.nn.functional.gelu(x * 2) + 1, cuda_graphs=True)
    for _ in range(3):  # warm-up and record
        torch.compiler.cudagraph_mark_step_begin()
        f(randn(16, 32))
    x1, x2, x3 = randn(16, 32), randn(16, 32), randn(16, 32)
    first = f(x1)
    second = f(x2)
    torch.compiler.cudagraph_mark_step_begin()
    third = f(x3)  # a replay in a new step
    for out, x in ((first, x1), (second, x2), (third, x3)):
        torch.testing.assert_close(out, torch.nn.functional.gelu(x * 2) + 1)


@gpu
def test_default_options_capture_and_keep_losses_and_accumulated_gradients(caplog):
    """cuda_graphs="auto" captures a CUDA training step; the losses a training loop keeps and
    gradients accumulated over steps (zero_grad(set_to_none=False), several backwards per
    optimizer step) stay right across replays."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).to(DEVICE)
    ref = __import__("copy").deepcopy(model)
    with caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        compiled = compile_fn(model)
        accumulating_steps(compiled, model, ref, lambda: randn(16, 64), 6, False, rtol=1e-4, atol=1e-5)
    assert _captured(caplog) == 2  # forward and backward, by default


@gpu
def test_kept_gradients_survive_forward_replays_that_reuse_their_memory():
    """Note [Memory a replay writes] on the real allocator: the forward frees two products of
    the size of the second weight's gradient, so the backward's recording may put that
    gradient where the forward's replay writes. Gradient accumulation with ``.grad`` set to
    None per optimizer step, and ``torch.autograd.grad`` results kept over later steps, must
    match eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024, bias=False), torch.nn.Tanh(),
                                torch.nn.Linear(1024, 1024, bias=False), torch.nn.Tanh()).to(DEVICE)
    ref = __import__("copy").deepcopy(model)
    compiled = compile_fn(model)
    accumulating_steps(compiled, model, ref, lambda: randn(1024, 1024), 4, True, rtol=1e-4, atol=1e-5)
    kept, expected = [], []
    for _ in range(3):
        x = randn(1024, 1024)
        kept.append(torch.autograd.grad(compiled(x).square().mean(), list(model.parameters())))
        expected.append(torch.autograd.grad(ref(x).square().mean(), list(ref.parameters())))
    for got, want in zip(kept, expected):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@gpu
def test_lent_logits_are_right_until_the_next_forward_and_then_raise():
    """A training forward's large user outputs are lent from the graph's memory (Note [CUDA
    graphs of our own]): right after the backward, revoked with a clear error once the next
    replay of their recording overwrote them."""
    from helpers import lent_logits_loop

    lent_logits_loop(DEVICE, randn, rtol=1e-4, atol=1e-4)


@gpu
def test_lent_inference_outputs_are_right_until_the_next_call_and_then_raise():
    """An inference graph's large outputs are lent too (Note [CUDA graphs of our own])."""
    from helpers import lent_inference_outputs

    lent_inference_outputs(DEVICE, randn, rtol=1e-4, atol=1e-4)


@gpu
def test_lent_logits_of_a_siamese_step_are_right_or_raise_never_changed():
    """Two forwards before the backward use two recordings; which recording a later call
    replays depends on what is alive, so an earlier step's logits are either still right
    (their memory not written since) or raise: never silently changed."""
    from helpers import siamese_lent_logits

    siamese_lent_logits(DEVICE, randn, rtol=1e-4, atol=1e-4)


@gpu
def test_a_layer_graph_records_once_per_layer_and_its_backward_never_on_a_warm_up(caplog):
    """Note [Backwards of uncaptured forwards] on the real allocator: one compiled graph per
    layer (a graph break in the loop), each layer's backward recorded once, never on the
    warm-up's saved values, every call of a later step replayed, gradients as eager's."""
    from helpers import layer_loop

    with caplog.at_level(logging.INFO, logger="nvfuser_dtensor_backend"):
        uncaptured = layer_loop(DEVICE, randn, width=256, rtol=1e-4, atol=1e-5)
    backward = [r.getMessage() for r in caplog.records if "backward graph is recorded" in r.getMessage()]
    assert len(backward) == 3, backward
    assert uncaptured[2:] == [uncaptured[1]] * 4, uncaptured


@gpu
def test_logits_a_loss_graph_saved_are_never_overwritten_by_the_head():
    """Note [Lent outputs read in place] on the real allocator: logits lent by a head that
    saves nothing, read in place and saved by the loss after a graph break, two forwards
    before some backwards; gradients as eager's."""
    from helpers import logits_saved_by_a_loss_graph

    assert logits_saved_by_a_loss_graph(DEVICE, randn, rtol=1e-4, atol=1e-5) > 0


@gpu
def test_every_recording_of_a_bart_with_layer_graphs_replays(monkeypatch):
    """Note [Record what repeats] on the real allocator: tiny BART in bf16 with one compiled
    graph per layer; no recording of the first step's layer graphs (replaced by dynamo in
    the second) or of a backward keyed on the user's ids, every recording replayed in the
    last step, each step as right as the zoo asks."""
    from helpers import layer_graph_recordings

    stale, made = layer_graph_recordings(DEVICE, torch.bfloat16, monkeypatch)
    assert made > 0 and not stale, f"{stale} of {made} recordings not replayed in the last step"


@gpu
def test_small_layer_graphs_left_uncaptured_take_their_backwards_with_them(monkeypatch):
    """The same with ``cuda_graphs="auto"`` (the default): the backwards of forwards left
    uncaptured for too few kernel launches recorded again in every step (Note [Backwards of
    uncaptured forwards]); now the last step records nothing."""
    from helpers import layer_graph_recordings

    stale, made = layer_graph_recordings(DEVICE, torch.bfloat16, monkeypatch, cuda_graphs="auto")
    assert made > 0 and not stale, f"{stale} of {made} recordings not replayed in the last step"


@gpu
def test_a_chain_of_eight_layer_backwards_settles(monkeypatch):
    """Note [Moved outputs of other recordings] on the real allocator (NVFUSER_DTENSOR_LAYER_CHAINS,
    an A/B switch): tiny BART with 8 layers, lending and in-place tangents from 1 KiB, one-launch
    training pairs captured; each step as right as the zoo asks, the last records nothing and
    no layer backward fills its recordings."""
    from helpers import layer_chain_settles

    layer_chain_settles(DEVICE, torch.bfloat16, monkeypatch, chains=True)


@gpu
def test_free_memory_lists_what_a_capture_may_reuse():
    from nvfuser_dtensor_backend.cuda_graph_runner import CudaCapture

    capture = CudaCapture(torch.cuda.current_device())
    kept = capture.warm_up(lambda args: [randn(1024, 1024), randn(1024, 1024)][0], [])
    ranges = capture.free_memory()  # the second tensor's block, freed in the pool
    assert ranges and all(hi > lo for lo, hi in ranges)
    start = kept.untyped_storage().data_ptr()
    assert not any(lo <= start < hi for lo, hi in ranges)  # a live tensor is not free


@gpu
def test_dropout_draws_new_numbers_on_every_replay():
    f = compile_fn(lambda x: torch.nn.functional.dropout(x * 2, p=0.5, training=True), cuda_graphs=True)
    x = torch.ones(256, 256, device=DEVICE)
    masks = []
    for _ in range(5):
        torch.compiler.cudagraph_mark_step_begin()
        masks.append((f(x) != 0).clone())
    assert all(not torch.equal(masks[-1], m) for m in masks[-3:-1])
    assert 0.45 < masks[-1].float().mean().item() < 0.55


def _fake_cuda_graph(fn, *shapes):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        args = [torch.empty(s, device="cuda") for s in shapes]
    return make_fx(fn, tracing_mode="fake")(*args)


def test_cpu_values_made_from_constants_do_not_stop_our_runner():
    # T5's and BART's lifted _tensor_constant0: the same value on every call
    from nvfuser_dtensor_backend.cuda_graphs import cpu_nodes_reason

    assert cpu_nodes_reason(_fake_cuda_graph(lambda x: x * torch.tensor(3.0) + torch.arange(3).float().sum(), 3)) is None
    assert "from the GPU to the CPU" in cpu_nodes_reason(_fake_cuda_graph(lambda x: x.cpu() + 1, 3))
    assert "random op on the CPU" in cpu_nodes_reason(_fake_cuda_graph(lambda x: x + torch.rand(()), 3))
    # BART's and T5's constants are copied to the GPU: refused under capture (seen on the H200)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        on_gpu = torch.empty(3, device="cuda"), torch.empty((), device="cuda")
    g = fx.Graph()
    x, const = g.placeholder("x"), g.get_attr("_tensor_constant0")
    copied = g.call_function(torch.ops.aten._to_copy.default, (const,), {"device": torch.device("cuda")})
    g.output(g.call_function(torch.ops.aten.mul.Tensor, (x, copied)))
    for node, val in zip(g.nodes, (on_gpu[0], torch.tensor(3.0), on_gpu[1], on_gpu[0])):
        node.meta["val"] = val
    gm = fx.GraphModule({"_tensor_constant0": torch.tensor(3.0)}, g)
    assert "a copy from the CPU to the GPU" in cpu_nodes_reason(gm)


def test_cpu_inputs_stop_our_runner():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from nvfuser_dtensor_backend.cuda_graphs import cpu_nodes_reason

    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(3, device="cuda")
        y = torch.empty((), device="cpu")
    gm = make_fx(lambda x, y: x + y, tracing_mode="fake")(x, y)
    assert "an input on the CPU" in cpu_nodes_reason(gm)


@gpu
def test_random_ops_work_after_compiling_and_replaying():
    # The runner once began an empty recording at compile time, under dynamo's fake mode: it
    # failed and left the CUDA generator marked as capturing, so every later random op raised
    # "Offset increment outside graph capture encountered unexpectedly" (H200, c1c5a85).
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)).to(DEVICE)
    compiled = torch.compile(model, backend="nvfuser_dtensor", options={"cuda_graphs": True})
    for _ in range(4):
        compiled(torch.randn(8, 16, device=DEVICE)).sum().backward()
    torch.empty(4, device=DEVICE).uniform_()
    assert torch.rand(3, device=DEVICE).shape == (3,)
