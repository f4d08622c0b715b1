"""One training step of one model through the backend, for finding CUDA faults.

    CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 python scripts/gpu_fault_probe.py t5
    compute-sanitizer --tool memcheck python scripts/gpu_fault_probe.py t5 --size tiny

Run each model in its own process: a fault poisons the CUDA context. With
NVFUSER_DTENSOR_TRACE=1 every region call is printed (input layouts, storage offsets,
pointer alignment) before it runs and synchronized after it, so the last line printed before
a fault names the region; ``--dump-dir`` writes every FusionDefinition.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class PreNormBlock(nn.Module):
    """LayerNorm, fused qkv Linear split into heads, causal masked softmax, tanh-GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).permute(0, 2, 1, 3) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(mask, float("-inf")).softmax(-1)
        y = (attn @ v).permute(0, 2, 1, 3).contiguous().view(b, s, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def build(name: str, size: str, device, dtype):
    tiny = size == "tiny"
    g = torch.Generator(device="cpu").manual_seed(0)
    if name == "prenorm_block":
        d, heads, b, s = (64, 4, 2, 32) if tiny else (1024, 16, 8, 1024)
        model = PreNormBlock(d, heads)
        x = torch.randn(b, s, d, generator=g)
        return model.to(device, dtype), {"x": x.to(device, dtype)}, lambda m, kw: m(kw["x"]).float().pow(2).mean()
    import transformers as tf

    b, s = (2, 32) if tiny else (8, 512)
    vocab = 512 if tiny else 32000
    h, layers, heads = (64, 2, 4) if tiny else (1024, 4, 16)
    if name == "t5":
        h, heads = (64, 4) if tiny else (512, 8)
        cfg = tf.T5Config(vocab_size=vocab, d_model=h, d_kv=h // heads, d_ff=4 * h, num_layers=layers,
                          num_decoder_layers=layers, num_heads=heads, dropout_rate=0.0,
                          decoder_start_token_id=0, pad_token_id=0)
        model = tf.T5ForConditionalGeneration(cfg)
    elif name == "llama":
        cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=int(2.75 * h), num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads // 4, max_position_embeddings=s)
        model = tf.LlamaForCausalLM(cfg)
    elif name == "qwen2":
        cfg = tf.Qwen2Config(vocab_size=vocab, hidden_size=h, intermediate_size=int(2.75 * h), num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads // 4, max_position_embeddings=s)
        model = tf.Qwen2ForCausalLM(cfg)
    elif name == "bert":
        h, heads = (64, 4) if tiny else (768, 12)
        cfg = tf.BertConfig(vocab_size=vocab, hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * h, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            max_position_embeddings=s)
        model = tf.BertForMaskedLM(cfg)
    elif name == "gpt2":
        h, heads = (64, 4) if tiny else (768, 12)
        cfg = tf.GPT2Config(vocab_size=vocab, n_embd=h, n_layer=layers, n_head=heads, n_positions=s,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        return _zoo_model(name, size, device, dtype)
    ids = torch.randint(0, vocab, (b, s), generator=g)
    return model.to(device, dtype), {"input_ids": ids.to(device), "labels": ids.to(device)}, lambda m, kw: m(**kw).loss


def _zoo_model(name: str, size: str, device, dtype):
    """Any other model of the zoo or the wider zoo (benchmarks/zoo.py), with its batch and loss."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import zoo

    zm = zoo.build(name, size, device, dtype)
    batch = zm.make_inputs(0)
    return zm.model, batch, lambda m, b: zm.loss_fn(m(**b.kwargs), b)


def _print_fx_frames(tb) -> None:
    """The FX-generated lines a failure went through (dynamo/AOT graphs are ``<eval_with_key>``
    code whose source only the frame's loader knows)."""
    import linecache

    while tb is not None:
        frame, name = tb.tb_frame, tb.tb_frame.f_code.co_filename
        if name.startswith("<eval_with_key>"):
            lines = linecache.getlines(name, frame.f_globals)
            lo = max(tb.tb_lineno - 6, 0)
            print(f"--- {name}, line {tb.tb_lineno}:", *lines[lo:tb.tb_lineno + 1], sep="", flush=True)
        tb = tb.tb_next


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--size", default="real", choices=("real", "tiny"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--options", default="{}", help="backend options as JSON")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    model, inputs, loss_fn = build(args.model, args.size, device, dtype)
    ref_model = copy.deepcopy(model)
    ref = loss_fn(ref_model, inputs)
    ref.backward()
    compiled = torch.compile(model, backend="nvfuser_dtensor", options=json.loads(args.options))
    for step in range(args.steps):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        try:
            loss = loss_fn(compiled, inputs)
            loss.backward()
        except Exception as e:
            _print_fx_frames(e.__traceback__)
            raise
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"{args.model} step {step}: loss {loss.item():.5f} (eager {ref.item():.5f}) "
              f"{time.perf_counter() - t0:.3f} s", flush=True)
    gnorm = torch.cat([p.grad.float().flatten() for p in ref_model.parameters() if p.grad is not None]).norm()
    worst = max((p.grad.float() - q.grad.float()).norm().item() / gnorm.item()
                for p, q in zip(model.parameters(), ref_model.parameters()) if q.grad is not None)
    print(f"{args.model}: loss_err {abs(loss.item() - ref.item()) / abs(ref.item()):.2e} grad_err {worst:.2e}")
    import nvfuser_dtensor_backend as nb

    for r in nb.reports():
        print(r.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
