"""Memory and kernels of a causal LM's loss graph alone (Hugging Face's ``ForCausalLMLoss`` on
bf16 logits, upcast to float32 inside, as GPT-2's step runs it after its graph break), per
backend: the memory allocated at most in the forward and in the backward beyond the logits,
and the kernels of one forward and backward. Issue 13, goal 5: GPT-2's step without CUDA graphs
allocated 2246 MB at most under nvfuser_dtensor against inductor's 1874 (H100, session 39),
about one bf16 logits tensor more (392 MiB at 8 x 512 x 50257); nvFuser segmenting the loss
into kernels with a logits-sized intermediate between them would account for it.

    source .device/setup.sh && python3 scripts/gpu_loss_memory.py [--backends nvfuser_dtensor,inductor] [--rows]

Session 39 found our forward's 786 MB: the upcast logits viewed as rows (``reshape(cast(x))``)
pass between nvFuser's segments, where a cast alone of a fusion input would be recomputed in
each. ``--rows`` hands the loss the logits already viewed as rows ([tokens, vocabulary], the
view done outside the compiled function), so that the region's input is the rows themselves:
if the 786 MB and a kernel go, leaving such views out of regions is the fix.
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

MB = 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="nvfuser_dtensor,inductor")
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--rows", action="store_true", help="the logits handed over viewed as rows")
    a = p.parse_args()
    from torch.profiler import ProfilerActivity, profile
    from transformers.loss.loss_utils import ForCausalLMLoss

    vocab = a.vocab
    logits = torch.randn(8, 512, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (8, 512), device="cuda")
    for backend in a.backends.split(","):
        compiled = torch.compile(lambda x, y: ForCausalLMLoss(x, y, vocab), backend=backend, dynamic=False)

        def fn(x, y, compiled=compiled):
            return compiled(x.view(-1, vocab) if a.rows else x, y)

        for _ in range(3):  # compile and warm up
            fn(logits, labels).backward()
            logits.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = fn(logits, labels)
        torch.cuda.synchronize()
        forward_peak = torch.cuda.max_memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        backward_peak = torch.cuda.max_memory_allocated() - base
        logits.grad = None
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(logits, labels).backward()
            torch.cuda.synchronize()
        logits.grad = None
        kernels = Counter(e.name[:90] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        print(f"== {backend}{' (logits as rows)' if a.rows else ''}: beyond the logits, forward allocated at most {forward_peak / MB:.0f} MB, "
              f"backward {backward_peak / MB:.0f} MB (its bf16 gradient is {logits.numel() * 2 / MB:.0f}); "
              f"{sum(kernels.values())} GPU activities")
        for name, n in kernels.most_common(12):
            print(f"   {n} x {name}")


if __name__ == "__main__":
    main()
