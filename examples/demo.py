"""A small GPT-style transformer through ``torch.compile(model, backend="nvfuser_dtensor")``.

Runs forward and a training step (loss.backward()) for an eager copy and a compiled copy of
the same model, checks outputs and gradients against eager, prints which aten ops became
nvFuser fusion regions and which stayed in PyTorch, and times eager / inductor /
nvfuser_dtensor.

    python examples/demo.py                      # CUDA + bf16 if available, else CPU + fp32
    python examples/demo.py --device cpu --iters 5
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

import nvfuser_dtensor_backend as nb

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}

# Parity tolerances on outputs and gradients of the whole model (many ops, so looser than
# one op): (atol, rtol) relative to the tensors' magnitude.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, s, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, d_model: int = 128, n_heads: int = 4, n_layers: int = 2, seq: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def loss_fn(logits, targets):
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    atol, rtol = TOLERANCES[dtype]
    scale = b.float().abs().max().item()
    return max_err(a, b) <= atol * max(scale, 1.0) + rtol * scale


def check_parity(eager, compiled, idx, targets, dtype) -> bool:
    ok = True
    with torch.no_grad():
        out_e = eager(idx)
        out_c = compiled(idx)
    err = max_err(out_c, out_e)
    passed = close(out_c, out_e, dtype)
    ok &= passed
    print(f"  forward (inference) logits     max abs err {err:.3e}  {'PASS' if passed else 'FAIL'}")

    eager.zero_grad(set_to_none=True)
    compiled.zero_grad(set_to_none=True)
    loss_e = loss_fn(eager(idx), targets)
    loss_e.backward()
    loss_c = loss_fn(compiled(idx), targets)
    loss_c.backward()
    err = abs(loss_c.item() - loss_e.item())
    passed = close(loss_c.detach(), loss_e.detach(), dtype)
    ok &= passed
    print(f"  training step loss {loss_e.item():.4f}      abs err {err:.3e}  {'PASS' if passed else 'FAIL'}")

    worst_name, worst_err, grads_ok = "", 0.0, True
    params_c = dict(getattr(compiled, "_orig_mod", compiled).named_parameters())
    for name, p_e in eager.named_parameters():
        p_c = params_c[name]
        if p_e.grad is None or p_c.grad is None:
            if (p_e.grad is None) != (p_c.grad is None):
                print(f"  gradient of {name}: present in one copy only  FAIL")
                grads_ok = False
            continue
        e = max_err(p_c.grad, p_e.grad)
        if e > worst_err:
            worst_name, worst_err = name, e
        if not close(p_c.grad, p_e.grad, dtype):
            print(f"  gradient of {name}: max abs err {e:.3e}  FAIL")
            grads_ok = False
    ok &= grads_ok
    print(f"  gradients ({len(params_c)} params)  max abs err {worst_err:.3e} ({worst_name})  {'PASS' if grads_ok else 'FAIL'}")
    return ok


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, iters: int, device) -> float:
    for _ in range(2):  # warm-up: compiles, fills caches
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def benchmark(name, model, idx, targets, iters, device):
    def fwd():
        with torch.no_grad():
            model(idx)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        loss_fn(model(idx), targets).backward()

    try:
        t_f = median_time(fwd, iters, device)
        t_fb = median_time(fwd_bwd, iters, device)
    except Exception as e:  # e.g. inductor without a working C++ compiler on CPU
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"  {name:<16} failed: {type(e).__name__}: {first[:200]}")
        return
    print(f"  {name:<16} {t_f * 1e3:10.2f} ms {t_fb * 1e3:14.2f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=sorted(DTYPES),
                        help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--iters", type=int, default=None, help="timed calls per measurement (default: 3 on CPU, 20 on CUDA)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    iters = args.iters if args.iters is not None else (20 if device.type == "cuda" else 3)
    if iters < 1:
        parser.error("--iters must be >= 1")

    print(f"torch {torch.__version__}, nvfuser_dtensor_backend {nb.__version__}, "
          f"nvFuser available: {nb.nvfuser_available()}")
    print(f"device {device}, dtype {str(dtype).removeprefix('torch.')}, batch {args.batch}, seq {args.seq}, "
          f"d_model 128, 4 heads, 2 layers")

    torch.manual_seed(args.seed)
    eager = GPT(seq=args.seq).to(device=device, dtype=dtype)
    model = copy.deepcopy(eager)
    vocab = eager.head.out_features
    idx = torch.randint(0, vocab, (args.batch, args.seq), device=device)
    targets = torch.randint(0, vocab, (args.batch, args.seq), device=device)

    torch._dynamo.reset()
    nb.clear_reports()
    nb.clear_cache()
    compiled = torch.compile(model, backend="nvfuser_dtensor")

    print("\nParity with eager:")
    try:
        ok = check_parity(eager, compiled, idx, targets, dtype)
    except Exception:
        traceback.print_exc()
        print("  FAIL: the compiled model raised")
        ok = False

    print("\nWhat the backend compiled (nvfuser_dtensor_backend.reports()):")
    reps = nb.reports()
    if not reps:
        print("  (no graphs compiled)")
    n_regions = 0
    n_fused_ops = 0
    n_fallbacks = 0
    for r in reps:
        n_regions += len(r.partition.regions)
        n_fused_ops += sum(len(ops) for ops in r.partition.regions)
        for line in r.summary().splitlines():
            print("  " + line)
        for region in r.regions:
            if getattr(region, "fallback_reason", None):
                n_fallbacks += 1
                print(f"    fallback: region {region.name} runs in PyTorch: {region.fallback_reason}")
    print(f"  total: {len(reps)} aten graph(s), {n_regions} nvFuser region(s), {n_fused_ops} fused aten op(s), "
          f"{n_fallbacks} region(s) fell back to PyTorch at run time")
    print("  (ops listed under 'in PyTorch' have no nvFuser translator yet and run eagerly)")
    print(f"  fusion cache: {nb.cache_info()}")

    print(f"\nTiming: median of {iters} call(s) after two warm-up calls")
    print(f"  {'backend':<16} {'forward':>13} {'forward+backward':>17}")
    benchmark("eager", eager, idx, targets, iters, device)
    torch._dynamo.reset()
    try:
        inductor = torch.compile(copy.deepcopy(eager), backend="inductor")
    except Exception as e:
        print(f"  inductor         failed: {type(e).__name__}: {e}")
    else:
        benchmark("inductor", inductor, idx, targets, iters, device)
    torch._dynamo.reset()
    benchmark("nvfuser_dtensor", torch.compile(copy.deepcopy(eager), backend="nvfuser_dtensor"), idx, targets, iters, device)
    if device.type == "cpu":
        print("  (on CPU nvFuser regions run through the torch evaluator, not nvFuser kernels: "
              "these timings say nothing about GPU performance)")

    print(f"\nParity: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
