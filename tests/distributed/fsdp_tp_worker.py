"""FSDP2 over a tensor-parallel model on a 2 x 2 mesh, compiled with nvfuser_dtensor vs eager.

    torchrun --nproc_per_node 4 tests/distributed/fsdp_tp_worker.py                  # CPU, gloo
    WORKER_DEVICE=cuda torchrun --nproc_per_node 4 tests/distributed/fsdp_tp_worker.py

Two pre-norm MLP blocks (LayerNorm, ColwiseParallel fc1, RowwiseParallel fc2 over the "tp"
mesh dim), each and the whole model ``fully_shard``-ed over "dp" (issue 14, point 5). The
eager model and the compiled copy train three SGD steps on the same batches (each dp rank
its own); losses and the parameters after training must match. Every rank prints
``PASS fsdp_tp paths=[...] regions=N rank=R`` or raises. Run by tests/distributed/test_fsdp_tp.py.
"""

from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvfuser_dtensor_backend as nb  # noqa: E402
from models import NormMLP, tp_mlp_plan  # noqa: E402

DEVICE = os.environ.get("WORKER_DEVICE", "cpu")
TOL = dict(rtol=1e-4, atol=1e-5) if DEVICE == "cpu" else dict(rtol=2e-3, atol=2e-3)


def build(base, mesh):
    model = copy.deepcopy(base)
    for block in model:
        parallelize_module(block, mesh["tp"], tp_mlp_plan())
        fully_shard(block, mesh=mesh["dp"])
    return fully_shard(model, mesh=mesh["dp"])


def main() -> None:
    backend = "nccl" if DEVICE == "cuda" else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    mesh = init_device_mesh(DEVICE, (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    base = torch.nn.Sequential(NormMLP(16, 64), NormMLP(16, 64)).to(DEVICE)
    ref, ours = build(base, mesh), build(base, mesh)
    compiled = torch.compile(ours, backend="nvfuser_dtensor")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.1)
    torch.manual_seed(1 + mesh["dp"].get_local_rank())  # a batch per dp rank, the same on its tp ranks
    for step in range(3):
        x = torch.randn(4, 8, 16, device=DEVICE)
        loss_ref = ref(x).pow(2).mean()
        loss_ref.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        loss = compiled(x).pow(2).mean()
        loss.backward()
        opt_ours.step()
        opt_ours.zero_grad()
        torch.testing.assert_close(loss, loss_ref, **TOL, msg=lambda m: f"loss of step {step}: {m}")
    for (name, p_ref), (_, p) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(p.full_tensor(), p_ref.full_tensor(), **TOL, msg=lambda m: f"{name}: {m}")
    paths = sorted({r.kind + ("" if (r.between_regions or "").startswith("local tensors") else ", on DTensor")
                    for r in nb.reports()})
    regions = sum(len(r.regions) for r in nb.reports())
    sys.stdout.write(f"PASS fsdp_tp paths={paths} regions={regions} rank={rank}\n")  # one write per line
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
