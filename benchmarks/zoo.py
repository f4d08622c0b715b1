"""A model zoo built from config classes (random init, nothing downloaded).

In the style of PyTorch's ``benchmarks/dynamo/huggingface.py`` and ``timm_models.py``: each
entry builds, for a ``size`` of ``"tiny"`` (CPU tests) or ``"real"`` (one H200), a model on a
device in a dtype, a seeded batch maker and a loss. Model-specific quirks live in the entry.

    from benchmarks.zoo import build
    zm = build("llama", "tiny", "cpu", torch.float32)
    batch = zm.make_inputs(seed=0)
    loss = zm.loss_fn(zm.model(**batch.kwargs), batch)

Sizes: ``tiny`` is 2 layers, hidden 64, 4 heads, vocab 512, batch 2 x 32 tokens (images:
batch 2, 64x64 for ViT/ConvNeXt, 32x32 for ResNet-18 whose widths are fixed); ``real`` is 4
layers, hidden 768, 12 heads (4 kv heads for Llama/Mistral/Qwen2), the config class's default
vocabulary (Qwen2: 151936, so 268M parameters; the others 53-107M), batch 8 x 512 tokens
(images: 32 x 224x224, the library's standard widths: ViT-S/16, ResNet-18, ConvNeXt-T). Every model but ``bert_dropout``
has its dropout set to 0, so that it is deterministic.
"""

from __future__ import annotations

import torch

from .zoo_builders import IMAGES, LM, SIZES, Entry, ZooModel, _decoder_lm, _gqa, _hf, _vision, _vocab

# --------------------------------------------------------------------------------- HF models


def _gpt2(size, device, dtype, name):
    from transformers import GPT2Config, GPT2LMHeadModel

    s = LM[size]
    vocab = _vocab(size, GPT2Config)
    config = dict(vocab_size=vocab, bos_token_id=vocab - 1, eos_token_id=vocab - 1, n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                  n_inner=s["ffn"], n_positions=max(s["seq"], 128), resid_pdrop=0.0, embd_pdrop=0.0,
                  attn_pdrop=0.0, use_cache=False)
    return _hf(GPT2Config, GPT2LMHeadModel, config, size, device, dtype, name, "causal")


def _bert(p_drop: float):
    def build(size, device, dtype, name):
        from transformers import BertConfig, BertForMaskedLM

        s = LM[size]
        config = dict(vocab_size=_vocab(size, BertConfig), hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                      num_attention_heads=s["heads"], intermediate_size=s["ffn"],
                      max_position_embeddings=max(s["seq"], 128), hidden_dropout_prob=p_drop,
                      attention_probs_dropout_prob=p_drop)
        return _hf(BertConfig, BertForMaskedLM, config, size, device, dtype, name, "mlm", dropout=p_drop > 0)

    return build


def _roberta(size, device, dtype, name):
    from transformers import RobertaConfig, RobertaForMaskedLM

    s = LM[size]
    # RoBERTa's positions start after the pad id (1): it needs seq + 2 position embeddings.
    config = dict(vocab_size=_vocab(size, RobertaConfig), hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], intermediate_size=s["ffn"],
                  max_position_embeddings=max(s["seq"], 128) + 2, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    return _hf(RobertaConfig, RobertaForMaskedLM, config, size, device, dtype, name, "mlm")


def _t5(size, device, dtype, name):
    from transformers import T5Config, T5ForConditionalGeneration

    s = LM[size]
    config = dict(vocab_size=_vocab(size, T5Config), d_model=s["hidden"], d_kv=s["hidden"] // s["heads"],
                  d_ff=s["ffn"], num_layers=s["layers"], num_decoder_layers=s["layers"], num_heads=s["heads"],
                  dropout_rate=0.0, use_cache=False, decoder_start_token_id=0, pad_token_id=0)
    return _hf(T5Config, T5ForConditionalGeneration, config, size, device, dtype, name, "seq2seq")


def _bart(size, device, dtype, name):
    from transformers import BartConfig, BartForConditionalGeneration

    s = LM[size]
    config = dict(vocab_size=_vocab(size, BartConfig), d_model=s["hidden"], encoder_layers=s["layers"],
                  decoder_layers=s["layers"], encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"],
                  encoder_ffn_dim=s["ffn"], decoder_ffn_dim=s["ffn"], max_position_embeddings=max(s["seq"], 128),
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False)
    return _hf(BartConfig, BartForConditionalGeneration, config, size, device, dtype, name, "seq2seq")


# ----------------------------------------------------------------------------- vision models

def _vit(size, device, dtype, name):
    import timm

    torch.manual_seed(0)
    if size == "tiny":
        model = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=64, embed_dim=64, depth=2,
                                  num_heads=4, num_classes=IMAGES[size]["classes"])
        return _vision(model, 64, size, device, dtype, name)
    return _vision(timm.create_model("vit_small_patch16_224", pretrained=False), 224, size, device, dtype, name)


def _resnet18(size, device, dtype, name):
    import torchvision

    torch.manual_seed(0)
    # torchvision's ResNet has fixed widths: the tiny size only shrinks images and classes.
    # 96 px, not 32: at 32 px (batch 2) the last stage's batch norm normalizes 2 values per
    # channel and the step's gradients are rounding noise (eager fp32 against fp64: grad_err
    # 0.31; at 96 px 4e-6), so no other implementation of batch norm could match eager there.
    model = torchvision.models.resnet18(weights=None, num_classes=IMAGES[size]["classes"])
    return _vision(model, 96 if size == "tiny" else 224, size, device, dtype, name)


def _convnext(size, device, dtype, name):
    import timm

    torch.manual_seed(0)
    if size == "tiny":
        model = timm.create_model("convnext_tiny", pretrained=False, depths=(1, 1, 2, 1), dims=(16, 32, 64, 128),
                                  num_classes=IMAGES[size]["classes"])
        return _vision(model, 64, size, device, dtype, name)
    return _vision(timm.create_model("convnext_tiny", pretrained=False), 224, size, device, dtype, name)


# ----------------------------------------------------------------------------------- registry

ENTRIES = [
    Entry("gpt2", "hf", _gpt2),
    Entry("llama", "hf", _decoder_lm("LlamaConfig", "LlamaForCausalLM", _gqa), note="GQA: 2 kv heads of 4 (tiny)"),
    Entry("mistral", "hf", _decoder_lm("MistralConfig", "MistralForCausalLM", _gqa)),
    Entry("qwen2", "hf", _decoder_lm("Qwen2Config", "Qwen2ForCausalLM", _gqa)),
    Entry("phi", "hf", _decoder_lm("PhiConfig", "PhiForCausalLM",
                                   lambda s: dict(resid_pdrop=0.0, embd_pdrop=0.0, partial_rotary_factor=0.5)),
          note="partial rotary embedding (half the head dim)"),
    Entry("bert", "hf", _bert(0.0), note="masked LM"),
    Entry("roberta", "hf", _roberta, note="masked LM"),
    Entry("t5", "hf", _t5),
    Entry("bart", "hf", _bart),
    Entry("vit_s16", "vision", _vit, note="timm vit_small_patch16_224"),
    Entry("resnet18", "vision", _resnet18, note="torchvision; batch norm in training mode"),
    Entry("convnext", "vision", _convnext, note="timm convnext_tiny: real, and with 1-1-2-1 blocks of 16-128 channels (tiny)"),
    Entry("bert_dropout", "hf", _bert(0.1), dropout=True, note="hidden and attention dropout 0.1"),
]
BY_NAME = {e.name: e for e in ENTRIES}
NAMES = [e.name for e in ENTRIES]


def build(name: str, size: str = "tiny", device: str = "cpu", dtype: torch.dtype = torch.float32) -> ZooModel:
    """The model ``name`` of ``size`` on ``device`` in ``dtype``, with seeded initial weights."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    entry = BY_NAME.get(name) or more_entries().get(name)
    if entry is None:
        raise KeyError(f"unknown zoo model {name!r}; known: {NAMES} and the wider zoo's {list(more_entries())}")
    return entry.build(size, device, dtype, name)


def more_entries() -> dict[str, Entry]:
    """The wider zoo's entries by name (benchmarks/zoo_more.py)."""
    from .zoo_more import MORE

    return {e.name: e for e in MORE}
