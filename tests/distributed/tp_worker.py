"""Tensor-parallel programs compiled with nvfuser_dtensor vs eager DTensor, one process per rank.

    torchrun --nproc_per_node N tests/distributed/tp_worker.py [case ...]            # CPU, gloo
    WORKER_DEVICE=cuda torchrun --nproc_per_node N tests/distributed/tp_worker.py    # GPUs, NCCL

Each case builds the same model three times (same seed): the plain model on the full input,
eager DTensor and the compiled copy; it runs them forward and backward and compares outputs,
input gradients and parameter gradients (values against both, placements against eager
DTensor). Eager DTensor attention on CPU needs the strategies of dtensor_ops.py (torch 2.10
has none for the CPU flash kernel), registered first. Every rank prints ``PASS <case> <path>`` or raises. Run by
tests/distributed/test_tensor_parallel.py; on CPU the evaluator stands in for nvFuser.
"""

from __future__ import annotations

import copy
import logging
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvfuser_dtensor_backend as nb  # noqa: E402
from nvfuser_dtensor_backend.distributed.dtensor import without_partial  # noqa: E402
from nvfuser_dtensor_backend.distributed.dtensor_ops import register_strategies  # noqa: E402
from models import MLP, NormMLP, TPAttention, TPBlock, sp_block_plan, tp_attention_plan, tp_mlp_plan  # noqa: E402

D, HEADS = 32, 4  # width and heads divide by 1, 2 and 4 ranks
DEVICE = os.environ.get("WORKER_DEVICE", "cpu")
TOL = 1e-4 if DEVICE == "cpu" else 2e-3  # GPU: other reduction orders, TF32-free fp32 GEMMs
GLOBAL_VIEW = {"1": True, "0": False}.get(os.environ.get("WORKER_GLOBAL_VIEW", ""), "auto")  # options.global_view


# Each case returns (model, plan, full input, the input dim split over ranks or None).
def case_tp_mlp(mesh):
    return MLP(D, 4 * D, approximate="none"), tp_mlp_plan(), torch.randn(2, 8, D), None


def case_tp_mlp_fused_matmul(mesh):
    # fuse_matmul=True: the matmuls and the relayouts join the fusions (nvFuser's own
    # all-reduce on GPUs; the evaluator's gather-compute-keep on CPU).
    return MLP(D, 4 * D, approximate="none"), tp_mlp_plan(), torch.randn(2, 8, D), None


def case_tp_norm_mlp(mesh):
    # The LayerNorm's output, computed in the graph from the plain input, is handed to the
    # ColwiseParallel input hook (from_local of a computed value, Replicate).
    return NormMLP(D, 4 * D), tp_mlp_plan(), torch.randn(2, 8, D), None


OPTIONS = {"tp_mlp_fused_matmul": {"fuse_matmul": True}, "sp_block_fused_matmul": {"fuse_matmul": True}}


def case_tp_attention(mesh):
    return TPAttention(D, HEADS), tp_attention_plan(local_output=False), torch.randn(2, 8, D), None


def case_tp_attention_local_output(mesh):
    # Colwise outputs as local tensors: the head reshape works on local parts (local path).
    return TPAttention(D, HEADS), tp_attention_plan(local_output=True), torch.randn(2, 8, D), None


def case_sp_block(mesh):
    # Sequence parallel: the input is this rank's part of the sequence.
    return TPBlock(D, HEADS), sp_block_plan(), torch.randn(2, 8 * mesh.size(), D), 1


def case_sp_block_inference(mesh):
    # Under no_grad dynamo breaks the block so that the MLP half gets the residual as plain
    # local parts: from_local(x + attn, Shard(1)) of a computed value (Note [Tensor-parallel
    # conversions]).
    return case_sp_block(mesh)


INFERENCE_CASES = ("sp_block_inference",)


def case_sp_block_fused_matmul(mesh):
    # fuse_matmul=True at batch 2: the row-parallel output reshape stays out of the fusion
    # (Note [Sharded reshapes stay out of fusions]).
    return case_sp_block(mesh)


def case_dtensor_function(mesh):
    """Not a module: a function of DTensors (batch-sharded input, replicated weights)."""
    return None, None, None


def case_dropout_function(mesh):
    """Not a module: dropout between regions (its rand_like runs through DTensor, so its
    numbers are eager DTensor's: Note [Local execution of the global view])."""
    return None, None, None


FUNCTION_CASES = ("dtensor_function", "dropout_function")
CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def _options(name: str) -> dict:
    return dict(OPTIONS.get(name, {}), global_view=GLOBAL_VIEW)


def _close(a, b, what):
    a = a.full_tensor() if isinstance(a, DTensor) else a
    b = b.full_tensor() if isinstance(b, DTensor) else b
    torch.testing.assert_close(a, b, rtol=TOL, atol=TOL, msg=lambda m: f"{what}: {m}")


def run_module_case(name, mesh):
    torch.manual_seed(0)  # the same model and input on every rank (a Replicate input must be)
    model, plan, x_full, split = CASES[name](mesh)
    plain_x = x_full.clone().requires_grad_()
    plain = model(plain_x)
    plain.sum().backward()
    ref_model = parallelize_module(copy.deepcopy(model), mesh, plan)
    our_model = parallelize_module(copy.deepcopy(model), mesh, plan)
    x = x_full if split is None else x_full.chunk(mesh.size(), dim=split)[mesh.get_local_rank()]
    x_ref, x_our = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = ref_model(x_ref)
    nb.clear_reports()
    compiled = torch.compile(our_model, backend="nvfuser_dtensor", options=_options(name))
    if name in INFERENCE_CASES:
        with torch.no_grad():
            out, ref = compiled(x.clone()), ref_model(x.clone())
        _close(out, ref, "output")
        return _path()
    out = compiled(x_our)
    _close(out, ref, "output")
    assert isinstance(out, DTensor) == isinstance(ref, DTensor), (type(out), type(ref))
    ref.sum().backward()
    out.sum().backward()
    _close(x_our.grad, x_ref.grad, "input gradient")
    plain_out = plain if split is None else plain.chunk(mesh.size(), dim=split)[mesh.get_local_rank()]
    _close(out, plain_out, "output vs the plain model")
    for (pname, p_ref), (_, p_our), p_plain in zip(ref_model.named_parameters(), our_model.named_parameters(),
                                                  model.parameters()):
        _close(p_our.grad, p_ref.grad, f"gradient of {pname}")
        _close(p_our.grad, p_plain.grad, f"gradient of {pname} vs the plain model")
        assert isinstance(p_our.grad, DTensor) == isinstance(p_ref.grad, DTensor), (pname, type(p_our.grad))
        if isinstance(p_ref.grad, DTensor):
            assert p_our.grad.placements == p_ref.grad.placements, (pname, p_our.grad.placements,
                                                                    p_ref.grad.placements)
    return _path()


def run_function_case(mesh, name="dtensor_function"):
    torch.manual_seed(0)
    X, W, B = torch.randn(4 * mesh.size(), D), torch.randn(D, 2 * D), torch.randn(2 * D)

    def f(x, w, b):
        h = torch.nn.functional.gelu(x @ w + b)
        if name == "dropout_function":
            h = torch.nn.functional.dropout(h, 0.5, training=True)
        return torch.nn.functional.layer_norm(h, (2 * D,)).sum(-1), h * 2

    x = distribute_tensor(X, mesh, [Shard(0)])
    params = [distribute_tensor(t, mesh, [Replicate()]).requires_grad_() for t in (W, B)]
    nb.clear_reports()
    compiled = torch.compile(f, backend="nvfuser_dtensor", options=_options(name))
    reference = f
    if name == "dropout_function":
        # Eager's dropout draws its mask with bernoulli, the decomposed graph with rand_like:
        # the reference is the same graph with its code between regions on DTensors. Both
        # compile first, then run from the same generator state.
        reference = torch.compile(f, backend="nvfuser_dtensor", options=dict(_options(name), dtensor_runtime=True))
        for fn in (reference, compiled):
            out = fn(x, *params)
            (out[0].sum() + out[1].sum()).backward()
            if fn is reference:
                nb.clear_reports()  # the path reported is the compiled function's
        for p in params:
            p.grad = None
    torch.manual_seed(1)
    ref = reference(x, *params)
    (ref[0].sum() + ref[1].sum()).backward()
    ref_grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    torch.manual_seed(1)
    out = compiled(x, *params)
    (out[0].sum() + out[1].sum()).backward()
    for o, r in zip(out, ref):
        assert o.placements == r.placements, (o.placements, r.placements)
        _close(o, r, "output")
    path = _path()
    for p, g in zip(params, ref_grads):
        placements = p.grad.placements
        if path.startswith("local"):
            # AOTAutograd's DTensor desugaring (the local path, as torch.compile with any
            # backend) and eager DTensor disagree on which weight gradient stays Partial(sum)
            # and which is reduced to Replicate (seen both ways on the H200); the values are
            # the same (full_tensor reduces a Partial).
            placements, want = without_partial(placements), without_partial(g.placements)
        else:
            want = g.placements
        assert placements == want, (p.grad.placements, g.placements)
        _close(p.grad, g, "gradient")
    return path


def _path() -> str:
    fallbacks = [r.fallback_reason for report in nb.reports() for r in report.regions if r.fallback_reason]
    assert not fallbacks, fallbacks
    kinds = [r.kind for r in nb.reports()]
    regions = sum(len(r.partition.regions) for r in nb.reports())
    path = "global" if kinds and all("global view" in k for k in kinds) else "local"
    # Note [Local execution of the global view]: "global-dtensor" where ops between regions
    # still dispatch through DTensor at run time.
    if path == "global" and not all((r.between_regions or "").startswith("local tensors") for r in nb.reports()):
        path = "global-dtensor"
    return f"{path} regions={regions}"


TORCH_VERSION = tuple(int(v) for v in torch.__version__.split(".")[:2])


def main(names):
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    register_strategies()
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.set_default_device("cuda")
    dist.init_process_group("gloo" if DEVICE == "cpu" else "nccl")
    mesh = init_device_mesh(DEVICE, (dist.get_world_size(),))
    try:
        for name in names or list(CASES):
            if name == "dropout_function" and DEVICE == "cuda" and TORCH_VERSION >= (2, 11):
                # Dynamo itself cannot trace dropout on a CUDA DTensor in torch 2.11 (with any
                # backend, before ours is called): DTensor's RNG tracker moves its state tensor
                # to the device under dynamo's fake mode ("Please convert all Tensors to
                # FakeTensors first"). Seen on the H200; torch 2.10 (CPU, gloo) traces it.
                print(f"SKIP {name} torch {torch.__version__}: dynamo cannot trace dropout on a CUDA DTensor",
                      flush=True)
                continue
            torch._dynamo.reset()
            path = run_function_case(mesh, name) if name in FUNCTION_CASES else run_module_case(name, mesh)
            print(f"PASS {name} {path} rank={dist.get_rank()}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
