"""Do CUDA-graph replays overwrite outputs that a later recording placed in their memory?

    python scripts/gpu_graph_memory_reuse.py [--models mlp,gpt2] [--size tiny|real]

Forward and backward record into one memory pool, so the backward's recording may place a
gradient in memory the forward's recording used for a temporary (freed by the end of its
capture). A replay of the forward writes that temporary again. If the gradient is still in
use then (``.grad`` taken from the recording by AccumulateGrad, kept over the next
micro-batch of a gradient-accumulation loop; results of ``torch.autograd.grad`` a user
keeps), it is silently overwritten (Note [Memory a replay writes]).

This trains each model with the default options (CUDA graphs on) and with
``cuda_graphs=False`` from the same weights and batches, in the patterns that keep such
outputs alive, and prints the largest gradient difference between the two per step. The two
run the same kernels, so the differences should be rounding at most.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo  # noqa: E402


def _mlp(device):
    torch.manual_seed(0)
    # the forward frees two [1024, 1024] products (tanh's backward reads its output), the size
    # of the second weight's gradient
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024, bias=False), torch.nn.Tanh(),
                                torch.nn.Linear(1024, 1024, bias=False), torch.nn.Tanh()).to(device)

    def batch(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(1024, 1024, generator=g).to(device)

    return model, batch, lambda m, x: m(x).square().mean()


def _zoo(name, size, device, dtype=torch.float32):
    zm = zoo.build(name, size, device, dtype)
    return zm.model, zm.make_inputs, lambda m, b: zm.loss_fn(m(**b.kwargs), b)


def _rel(a, b, floor=1e-12):
    """The largest difference relative to ``b``'s largest element, or to ``floor`` where that
    is smaller: a gradient that is zero in exact arithmetic (BERT's key biases: softmax does
    not change when every score of a query moves by the same q . b) is rounding noise in both
    runs, and two noises differ by 100% of themselves."""
    r = ((a - b).abs().max() / b.abs().max().clamp_min(floor)).item()
    return r if r == r else float("inf")  # NaN: as bad as it gets


def _floor(grads) -> float:
    """A millionth of the largest gradient element of the model: the scale below which a
    gradient is noise next to the others."""
    return 1e-6 * max(g.abs().max().item() for g in grads)


def _run(name, model, make, loss_of, steps, micro, options=None):
    import nvfuser_dtensor_backend as nb

    torch._dynamo.reset()
    ref_model = copy.deepcopy(model)
    graphs = torch.compile(model, backend="nvfuser_dtensor", options=options, dynamic=False)
    plain = torch.compile(ref_model, backend="nvfuser_dtensor", options={"cuda_graphs": False}, dynamic=False)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (model, ref_model)]
    worst = 0.0
    for step in range(steps):
        for k in range(micro):  # gradient accumulation: .grad kept over the micro-batches
            b = make(step * micro + k)
            for m in (graphs, plain):
                loss_of(m, b).backward()
        for arm, m in (("graphs", model), ("cuda_graphs=False", ref_model)):
            bad = [n for n, q in m.named_parameters() if q.grad is not None and not q.grad.isfinite().all()]
            if bad:
                print(f"  {arm}: {len(bad)} gradients not finite, e.g. {bad[:4]}", flush=True)
        floor = _floor(q.grad for q in ref_model.parameters())
        errs = [_rel(p.grad, q.grad, floor) for p, q in zip(model.parameters(), ref_model.parameters())]
        worst = max(worst, max(errs))
        print(f"{name} accumulate step {step}: largest relative gradient difference {max(errs):.2e}", flush=True)
        if max(errs) >= 1e-3:  # which gradients, and whether they are the graphs' own memory
            names = [n for n, _ in model.named_parameters()]
            for e, n in sorted(zip(errs, names), reverse=True)[:4]:
                print(f"  {n}: {e:.2e}", flush=True)
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=True)
    kept, ref_kept = [], []  # torch.autograd.grad results kept over later steps
    for step in range(3):
        b = make(100 + step)
        kept.append(torch.autograd.grad(loss_of(graphs, b), list(model.parameters())))
        ref_kept.append(torch.autograd.grad(loss_of(plain, b), list(ref_model.parameters())))
    errs = [_rel(g, r, _floor(rs)) for gs, rs in zip(kept, ref_kept) for g, r in zip(gs, rs)]
    print(f"{name} kept autograd.grad results: largest relative difference {max(errs):.2e}", flush=True)
    worst = max(worst, max(errs))
    print(f"{name}: {'OK' if worst < 1e-3 else 'WRONG'} (worst {worst:.2e}); graphs {nb.cuda_graph_stats()}", flush=True)
    return worst < 1e-3


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,gpt2")
    p.add_argument("--size", default="tiny", choices=("tiny", "real"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--micro", type=int, default=2)
    p.add_argument("--dtype", default="float32", help="of the zoo models (the zoo's own runs: bfloat16)")
    p.add_argument("--cuda-graphs-on", action="store_true", help="cuda_graphs=True instead of the default")
    p.add_argument("--lend-from", type=int, default=None,
                   help="cuda_graph_runner.LEND_FROM_BYTES (a huge value: every user output copied out)")
    args = p.parse_args(argv)
    if args.lend_from is not None:
        from nvfuser_dtensor_backend import cuda_graph_runner

        cuda_graph_runner.LEND_FROM_BYTES = args.lend_from
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ok = True
    for name in args.models.split(","):
        model, make, loss_of = _mlp(device) if name == "mlp" else _zoo(name, args.size, device, getattr(torch, args.dtype))
        ok &= _run(name, model, make, loss_of, args.steps, args.micro,
                   {"cuda_graphs": True} if args.cuda_graphs_on else None)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
