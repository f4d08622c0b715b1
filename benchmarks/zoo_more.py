"""The wider zoo: more architectures, each built from its library's config class or factory.

The 13 models of ``benchmarks/zoo.py`` are the ones the H200 runs time; these cover more
real code on the CPU (``tests/test_zoo.py::test_wider_zoo``) and run on the GPU on demand
(``ZOO_MODELS=qwen3,swin bash scripts/gpu_zoo_own_graphs.sh``: ``zoo.build`` finds them).
Same sizes and conventions as the zoo (``tiny``: 2 layers, hidden 64; vision: 64 px images,
10 classes; ``real``: 4 layers, hidden 768, or the library's default widths at 224 px);
dropout is off everywhere, so that a step is deterministic.
"""

from __future__ import annotations

import torch

from .zoo_builders import IMAGES, LM, Entry, _decoder_lm, _gqa, _hf, _vision, _vocab


def _lm(config_name: str, model_name: str, task: str, make):
    """An HF model whose config ``make(shape, vocab)`` spells the shared LM shape its own way."""
    def build(size, device, dtype, name):
        import transformers

        config_cls = getattr(transformers, config_name)
        return _hf(config_cls, getattr(transformers, model_name), make(LM[size], _vocab(size, config_cls)),
                   size, device, dtype, name, task)

    return build


def _bert_like(**extra):
    """The BERT-style config keys, for masked LMs."""
    return lambda s, v: dict(vocab_size=v, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                             num_attention_heads=s["heads"], intermediate_size=s["ffn"], hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0, max_position_embeddings=max(s["seq"], 128), **extra)


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Dropout and stochastic depth (torchvision's StochasticDepth, timm's DropPath: Swin's
    default rate is 0.1) off: a random step could not match eager's, and two micro-batches
    draw other masks than one batch."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
        elif type(m).__name__ == "DropPath":
            m.drop_prob = 0.0
    return model


def _timm(arch: str, tiny: dict | None = None, tiny_image: int = 64):
    def build(size, device, dtype, name):
        import timm

        torch.manual_seed(0)
        if size == "tiny":
            model = timm.create_model(arch, pretrained=False, num_classes=IMAGES[size]["classes"], **(tiny or {}))
            return _vision(_no_dropout(model), tiny_image, size, device, dtype, name)
        return _vision(_no_dropout(timm.create_model(arch, pretrained=False)), 224, size, device, dtype, name)

    return build


def _torchvision(arch: str):
    def build(size, device, dtype, name):
        import torchvision

        torch.manual_seed(0)
        model = getattr(torchvision.models, arch)(weights=None, num_classes=IMAGES[size]["classes"])
        return _vision(_no_dropout(model), 64 if size == "tiny" else 224, size, device, dtype, name)

    return build


def _head_dim(s):
    return dict(num_key_value_heads=s["kv_heads"], head_dim=s["hidden"] // s["heads"])


EAGER = dict(attn_implementation="eager")  # models without an SDPA path in transformers 5.25


MORE = [
    Entry("gemma", "hf", _decoder_lm("GemmaConfig", "GemmaForCausalLM", _head_dim)),
    Entry("gemma2", "hf", _decoder_lm("Gemma2Config", "Gemma2ForCausalLM", lambda s: _head_dim(s) | EAGER),
        note="soft-capped logits, sliding window; HF eager attention"),
    Entry("qwen3", "hf", _decoder_lm("Qwen3Config", "Qwen3ForCausalLM", _head_dim), note="q/k norms"),
    Entry("olmo", "hf", _decoder_lm("OlmoConfig", "OlmoForCausalLM"), note="non-parametric layer norm"),
    Entry("stablelm", "hf", _decoder_lm("StableLmConfig", "StableLmForCausalLM", lambda s: dict(
        num_key_value_heads=s["heads"])), note="partial rotary, layer norm"),
    Entry("gpt_neox", "hf", _decoder_lm("GPTNeoXConfig", "GPTNeoXForCausalLM"), note="parallel residual"),
    Entry("phi3", "hf", _decoder_lm("Phi3Config", "Phi3ForCausalLM", lambda s: dict(
        pad_token_id=0, bos_token_id=1, eos_token_id=2)), note="fused qkv and gate-up projections"),
    Entry("granite", "hf", _decoder_lm("GraniteConfig", "GraniteForCausalLM", _gqa), note="scaled residuals and logits"),
    Entry("mixtral", "hf", _decoder_lm("MixtralConfig", "MixtralForCausalLM", lambda s: dict(
        num_local_experts=4, num_experts_per_tok=2, **_gqa(s))), note="mixture of 4 experts, top 2"),
    Entry("opt", "hf", _lm("OPTConfig", "OPTForCausalLM", "causal", lambda s, v: dict(
        vocab_size=v, hidden_size=s["hidden"], ffn_dim=s["ffn"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], word_embed_proj_dim=s["hidden"], max_position_embeddings=max(s["seq"], 128),
        dropout=0.0, attention_dropout=0.0, use_cache=False))),
    Entry("falcon", "hf", _lm("FalconConfig", "FalconForCausalLM", "causal", lambda s, v: dict(
        vocab_size=v, hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
        hidden_dropout=0.0, attention_dropout=0.0, use_cache=False)), note="multi-query attention"),
    Entry("distilbert", "hf", _lm("DistilBertConfig", "DistilBertForMaskedLM", "mlm", lambda s, v: dict(
        vocab_size=v, dim=s["hidden"], n_layers=s["layers"], n_heads=s["heads"], hidden_dim=s["ffn"], dropout=0.0,
        attention_dropout=0.0, max_position_embeddings=max(s["seq"], 128)))),
    Entry("electra", "hf", _lm("ElectraConfig", "ElectraForMaskedLM", "mlm", lambda s, v: _bert_like(
        embedding_size=s["hidden"])(s, v))),
    Entry("albert", "hf", _lm("AlbertConfig", "AlbertForMaskedLM", "mlm", _bert_like(embedding_size=32)),
          note="layers share their weights"),
    Entry("deberta_v2", "hf", _lm("DebertaV2Config", "DebertaV2ForMaskedLM", "mlm", _bert_like(**EAGER)),
          note="disentangled relative attention; HF eager attention"),
    Entry("mpnet", "hf", _lm("MPNetConfig", "MPNetForMaskedLM", "mlm", lambda s, v: _bert_like(**EAGER)(s, v) | dict(
        max_position_embeddings=max(s["seq"], 128) + 2)), note="relative position buckets"),
    Entry("efficientnet_b0", "vision", _timm("efficientnet_b0"), note="timm: depthwise convolutions, SiLU, squeeze-excite"),
    Entry("mobilenetv3", "vision", _timm("mobilenetv3_small_100"), note="timm: hard-swish, squeeze-excite"),
    Entry("swin", "vision", _timm("swin_tiny_patch4_window7_224", dict(
        depths=(1, 1, 1, 1), embed_dim=32, num_heads=(1, 2, 4, 8)), tiny_image=224),
        note="timm: shifted windows (roll), relative position bias"),
    Entry("deit", "vision", _timm("deit_tiny_patch16_224", dict(img_size=64, depth=2))),
    Entry("regnet", "vision", _timm("regnetx_002"), note="timm: grouped convolutions"),
    Entry("resnet50d", "vision", _timm("resnet50d"), note="timm: bottlenecks, average-pool shortcut"),
    Entry("tv_mobilenet_v2", "vision", _torchvision("mobilenet_v2"), note="torchvision: inverted residuals, ReLU6"),
    Entry("tv_shufflenet", "vision", _torchvision("shufflenet_v2_x0_5"), note="torchvision: channel shuffle"),
    Entry("tv_densenet", "vision", _torchvision("densenet121"), note="torchvision: concatenated features"),
    Entry("tv_squeezenet", "vision", _torchvision("squeezenet1_1")),
    Entry("tv_efficientnet", "vision", _torchvision("efficientnet_b0"), note="torchvision: SiLU, squeeze-excite"),
]
