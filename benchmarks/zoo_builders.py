"""What the zoo's entries are built with (benchmarks/zoo.py, benchmarks/zoo_more.py): the
shared sizes, the batch and model records, and the builders of Hugging Face language models
and of vision models from a config class or a factory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

SIZES = ("tiny", "real")


@dataclass
class Batch:
    """``kwargs`` go to ``model(**kwargs)``; ``labels`` are for a loss computed outside the model."""

    kwargs: dict
    labels: torch.Tensor | None = None


@dataclass
class ZooModel:
    name: str
    model: torch.nn.Module
    make_inputs: Callable[[int], Batch]  # seed -> batch (same seed, same batch)
    loss_fn: Callable[[object, Batch], torch.Tensor]  # (model output, batch) -> scalar loss
    dropout: bool = False  # training draws random masks: compare statistically (zoo_check)


@dataclass(frozen=True)
class Entry:
    name: str
    family: str  # "hf" or "vision"
    build: Callable[[str, str, torch.dtype], ZooModel]
    dropout: bool = False
    note: str = ""



# Shared shape of the language models per size.
LM = {
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=512, batch=2, seq=32),
    "real": dict(layers=4, hidden=768, heads=12, kv_heads=4, ffn=3072, vocab=None, batch=8, seq=512),
}


def _vocab(size: str, config_cls) -> int:
    return LM[size]["vocab"] or config_cls().vocab_size


def _hf(config_cls, model_cls, config: dict, size: str, device: str, dtype: torch.dtype, name: str,
        task: str, dropout: bool = False) -> ZooModel:
    s = LM[size]
    cfg = config_cls(**{"attn_implementation": "sdpa", **config})  # a config may ask for "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).to(device=device, dtype=dtype)
    vocab = cfg.vocab_size

    def make_inputs(seed: int) -> Batch:
        g = torch.Generator().manual_seed(seed)
        # Token 0..3 are left out: pad/bos/eos ids of the configs (RoBERTa's pad id 1 would
        # shift its position ids).
        ids = torch.randint(4, vocab, (s["batch"], s["seq"]), generator=g)
        if task == "causal":  # HF shifts the labels itself
            labels = ids.clone()
        elif task == "mlm":  # 15% of the positions are predicted, the rest ignored (-100)
            mask = torch.rand(ids.shape, generator=g) < 0.15
            mask[:, 0] = True
            labels = torch.where(mask, torch.randint(4, vocab, ids.shape, generator=g), -100)
        else:  # seq2seq: the decoder's inputs are the labels shifted right (done by the model)
            labels = torch.randint(4, vocab, (s["batch"], s["seq"]), generator=g)
        return Batch({"input_ids": ids.to(device), "labels": labels.to(device)})

    return ZooModel(name, model, make_inputs, lambda out, batch: out.loss, dropout)


def _decoder_lm(config_name: str, model_name: str, extra: Callable[[dict], dict] = lambda s: {}):
    def build(size, device, dtype, name):
        import transformers

        config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
        s = LM[size]
        config = dict(vocab_size=_vocab(size, config_cls), hidden_size=s["hidden"], intermediate_size=s["ffn"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                      max_position_embeddings=max(s["seq"], 128), attention_dropout=0.0, use_cache=False,
                      **extra(s))
        return _hf(config_cls, model_cls, config, size, device, dtype, name, "causal")

    return build



IMAGES = {"tiny": dict(batch=2, classes=10), "real": dict(batch=32, classes=1000, image=224)}


def _vision(model: torch.nn.Module, image: int, size: str, device: str, dtype: torch.dtype, name: str) -> ZooModel:
    s = IMAGES[size]
    model = model.to(device=device, dtype=dtype)

    def make_inputs(seed: int) -> Batch:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(s["batch"], 3, image, image, generator=g)
        labels = torch.randint(0, s["classes"], (s["batch"],), generator=g)
        return Batch({"x": x.to(device=device, dtype=dtype)}, labels.to(device))

    def loss_fn(out, batch):
        return F.cross_entropy(out.float(), batch.labels)

    return ZooModel(name, model, make_inputs, loss_fn)


def _gqa(s):
    return dict(num_key_value_heads=s["kv_heads"])
