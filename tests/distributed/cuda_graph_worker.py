"""TP training steps in the global view with CUDA graphs on one GPU, against eager DTensor.

    torchrun --standalone --nproc_per_node 1 tests/distributed/cuda_graph_worker.py

Run by tests/distributed/test_local_cuda_graphs.py (GPU). For each TP case: five SGD steps
compiled (``global_view=True``, ``cuda_graphs`` left at ``"auto"``) and five in eager DTensor
from the same weights and inputs; the losses, the last gradients and the updated weights must
agree, and the forward and backward must have been recorded and replayed as CUDA graphs
(Note [CUDA graphs of local graphs]). Prints ``PASS <case> recorded=<n>`` or raises.
"""

from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvfuser_dtensor_backend as nb  # noqa: E402
from models import MLP, TPBlock, sp_block_plan, tp_mlp_plan  # noqa: E402

CASES = {"tp_mlp": (lambda: MLP(64, 256, approximate="tanh"), tp_mlp_plan),
         "sp_block": (lambda: TPBlock(64, 4), sp_block_plan)}
STEPS = 5


def train(model, inputs, compiled: bool):
    model = copy.deepcopy(model)
    run = torch.compile(model, backend="nvfuser_dtensor", options={"global_view": True}) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for x in inputs:
        opt.zero_grad(set_to_none=True)
        loss = (run(x).float() ** 2).mean()
        loss.backward()
        losses.append(float(loss.full_tensor() if hasattr(loss, "full_tensor") else loss))
        opt.step()
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    weights = {n: p.full_tensor().detach() for n, p in model.named_parameters()}
    return losses, grads, weights


def main() -> None:
    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    for name, (build, plan) in CASES.items():
        torch.manual_seed(0)
        torch._dynamo.reset()
        nb.cuda_graph_stats(clear=True)
        model = parallelize_module(build().cuda(), mesh, plan())
        inputs = [torch.randn(2, 16, 64, device="cuda") for _ in range(STEPS)]
        got = train(model, inputs, True)
        stats = nb.cuda_graph_stats()
        want = train(model, inputs, False)
        torch.testing.assert_close(got[0], want[0], rtol=2e-3, atol=1e-5)
        for g, w in zip(got[1:], want[1:]):
            for key in w:
                torch.testing.assert_close(g[key], w[key], rtol=2e-3, atol=2e-4, msg=f"{name} {key}")
        assert stats["recorded"] >= 2 and stats["failures"] == 0, stats
        print(f"PASS {name} recorded={stats['recorded']} not_captured={stats['not_captured']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
