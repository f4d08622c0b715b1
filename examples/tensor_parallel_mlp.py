"""A tensor-parallel MLP (Megatron style) compiled with ``backend="nvfuser_dtensor"``.

``fc1`` is column-parallel and ``fc2`` row-parallel (``parallelize_module``); the compiled
model runs in nvFuser's global view: fusions are defined with global shapes and annotated
from the DTensor placements. A few training steps run for an eager copy and the compiled
copy; the script checks that losses and gradients agree and prints what was fused.

    torchrun --nproc_per_node 2 examples/tensor_parallel_mlp.py            # CPU ranks (gloo)
    torchrun --nproc_per_node 8 examples/tensor_parallel_mlp.py --device cuda --fuse-matmul
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import nvfuser_dtensor_backend as nb


class MLP(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--fuse-matmul", action="store_true", help="fuse the matmuls too (nvFuser's own all-reduce)")
    p.add_argument("--global-view", choices=("auto", "on", "off"), default="auto",
                   help="options.global_view (auto: the global view on CPU, the local path on CUDA)")
    a = p.parse_args()

    if a.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if a.device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh(a.device, (world,))
    if a.width * 4 % world:
        raise SystemExit(f"--width x 4 must divide by the {world} ranks")

    torch.manual_seed(0)  # the same weights and batch on every rank
    model = MLP(a.width, 4 * a.width).to(a.device)
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    eager = parallelize_module(copy.deepcopy(model), mesh, plan)
    ours = parallelize_module(copy.deepcopy(model), mesh, plan)
    global_view = {"on": True, "off": False}.get(a.global_view, "auto")
    compiled = torch.compile(ours, backend="nvfuser_dtensor",
                             options={"fuse_matmul": a.fuse_matmul, "global_view": global_view})

    worst = 0.0
    for step in range(a.steps):
        x = torch.randn(8, 64, a.width, device=a.device)
        losses = []
        for m in (eager, compiled):
            loss = m(x).pow(2).mean()
            loss.backward()
            losses.append(loss.item())
        grad_err = max((g1.grad - g2.grad).abs().max().item() for g1, g2 in zip(eager.parameters(), ours.parameters()))
        worst = max(worst, grad_err, abs(losses[0] - losses[1]))
        if rank == 0:
            print(f"step {step}: loss eager {losses[0]:.6f}  nvfuser_dtensor {losses[1]:.6f}  "
                  f"max grad diff {grad_err:.2e}")
        for m in (eager, ours):
            m.zero_grad()

    if rank == 0:
        print(f"\n{world} rank(s) on {a.device}; what was compiled:")
        for report in nb.reports():
            print(report.summary())
        print("\nOK" if worst < 1e-3 else f"\nMISMATCH: {worst:.3e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
