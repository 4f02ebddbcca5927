"""The sweep: tiny Hugging Face architectures outside the zoo's 14 (issue 30).

A second case list beside :data:`zoo.cases.CASES`, built the same way (a ``transformers``
class and config at tiny sizes, random initialisation under a fixed seed, nothing
downloaded; :meth:`zoo.cases.Case.build`) and exported through the same wrapper, in the
three modes ``benchmarks/zoo_sweep.py`` judges: ``dynamo``, ``dynamo+state_dict`` and
``dynamo-full-state`` (an ``optimize=False`` export filled from the full state).

Every class is looked up by name in the installed ``transformers``; a case whose class
the installed version lacks is listed by :func:`missing` and left out of a run (the runner
says so). The model's first output (logits, or the last hidden state of a base model or a
tower) is what the MSE loss is computed on.

Encoder-decoders take only ``input_ids``: those whose model shifts them into decoder
inputs itself (BART's family) run whole; T5's family runs its encoder
(``T5EncoderModel``). Audio models take ``input_values`` (a waveform) or
``input_features`` (a spectrogram), random.
"""

from __future__ import annotations

from zoo.cases import BATCH, LENGTH, VOCAB, Case

__all__ = ["SWEEP_CASES", "missing"]

_TEXT = (BATCH, LENGTH)
_IMAGE = (BATCH, 3, 32, 32)
_WAVE = (BATCH, 400)
_ENC = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64}
_DEC = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64, "use_cache": False}
_SEQ2SEQ = {"vocab_size": VOCAB, "d_model": 32, "encoder_layers": 1, "decoder_layers": 1,
            "encoder_attention_heads": 4, "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
            "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
            "decoder_start_token_id": 2, "use_cache": False}
_T5 = {"vocab_size": VOCAB, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
       "num_heads": 4, "relative_attention_num_buckets": 8, "use_cache": False}
_VIT = {"image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        "num_labels": 5}
_AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 64, "conv_dim": (16, 16), "conv_kernel": (10, 3),
          "conv_stride": (5, 2), "num_conv_pos_embeddings": 8,
          "num_conv_pos_embedding_groups": 4, "vocab_size": VOCAB}


def _c(name: str, family: str, model: str, config: str, arguments: dict[str, object],
       notes: str, *, input_name: str = "input_ids", shape: tuple[int, ...] = _TEXT,
       mask: bool = False) -> Case:
    return Case(name, family, model, config, arguments, input_name, shape, (), notes,
                attention_mask=mask)


SWEEP_CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------ text encoders
    _c("xlm_roberta", "encoder", "XLMRobertaForMaskedLM", "XLMRobertaConfig",
       {**_ENC, "pad_token_id": 0}, "RoBERTa's layout, positions from the padding mask"),
    _c("deberta", "encoder", "DebertaForMaskedLM", "DebertaConfig",
       {**_ENC, "relative_attention": True, "max_relative_positions": 16,
        "pos_att_type": ["c2p", "p2c"]}, "disentangled attention, relative positions"),
    _c("deberta_v2", "encoder", "DebertaV2ForMaskedLM", "DebertaV2Config",
       {**_ENC, "relative_attention": True, "position_buckets": 8,
        "pos_att_type": ["c2p", "p2c"]}, "log-bucketed relative positions, shared keys"),
    _c("mpnet", "encoder", "MPNetForMaskedLM", "MPNetConfig",
       {**_ENC, "pad_token_id": 0}, "relative position bias table (one, shared by every layer)"),
    _c("convbert", "encoder", "ConvBertForMaskedLM", "ConvBertConfig",
       {**_ENC, "embedding_size": 16, "head_ratio": 2, "conv_kernel_size": 3},
       "span-based dynamic convolution beside attention"),
    _c("roformer", "encoder", "RoFormerForMaskedLM", "RoFormerConfig",
       {**_ENC, "embedding_size": 32}, "rotary positions in an encoder (sinusoidal table)"),
    _c("mobilebert", "encoder", "MobileBertForMaskedLM", "MobileBertConfig",
       {**_ENC, "embedding_size": 16, "intra_bottleneck_size": 16,
        "true_hidden_size": 16, "num_feedforward_networks": 2},
       "bottlenecks, NoNorm (elementwise affine), trigram embeddings"),
    _c("funnel", "encoder", "FunnelForMaskedLM", "FunnelConfig",
       {"vocab_size": VOCAB, "block_sizes": [1, 1], "d_model": 32, "n_head": 4,
        "d_head": 8, "d_inner": 64, "num_decoder_layers": 1},
       "pooled (funnel) attention, relative positions, upsampling decoder"),
    _c("xlnet", "encoder", "XLNetLMHeadModel", "XLNetConfig",
       {"vocab_size": VOCAB, "d_model": 32, "n_layer": 2, "n_head": 4, "d_inner": 64,
        "use_mems_train": False, "use_mems_eval": False},
       "relative sinusoidal positions contracted with each layer's r kernel, two-stream"),
    # ----------------------------------------------------------------- decoders
    _c("gptj", "decoder", "GPTJForCausalLM", "GPTJConfig",
       {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
        "rotary_dim": 4, "use_cache": False}, "interleaved partial rotary, parallel block",
       mask=True),
    _c("opt", "decoder", "OPTForCausalLM", "OPTConfig",
       {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "ffn_dim": 64, "max_position_embeddings": 64,
        "word_embed_proj_dim": 32, "use_cache": False}, "learned positions offset by 2",
       mask=True),
    _c("bloom", "decoder", "BloomForCausalLM", "BloomConfig",
       {"vocab_size": VOCAB, "hidden_size": 32, "n_layer": 2, "n_head": 4,
        "use_cache": False}, "ALiBi positions, fused QKV, embedding LayerNorm", mask=True),
    _c("falcon", "decoder", "FalconForCausalLM", "FalconConfig",
       {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "new_decoder_architecture": True, "num_kv_heads": 2,
        "use_cache": False}, "multi-query fused QKV, parallel attention", mask=True),
    _c("phi", "decoder", "PhiForCausalLM", "PhiConfig",
       {**_DEC, "partial_rotary_factor": 0.5}, "partial rotary, parallel block, LayerNorm",
       mask=True),
    _c("phi3", "decoder", "Phi3ForCausalLM", "Phi3Config", {**_DEC, "pad_token_id": 0},
       "fused QKV and gate-up projections, RMSNorm", mask=True),
    _c("qwen3", "decoder", "Qwen3ForCausalLM", "Qwen3Config", {**_DEC, "head_dim": 8},
       "RMSNorm on queries and keys", mask=True),
    _c("gemma", "decoder", "GemmaForCausalLM", "GemmaConfig", {**_DEC, "head_dim": 8},
       "RMSNorm as x * (1 + w), scaled embeddings, tied head", mask=True),
    _c("gemma2", "decoder", "Gemma2ForCausalLM", "Gemma2Config",
       {**_DEC, "head_dim": 8, "sliding_window": 4}, "logit soft-capping, four norms a layer",
       mask=True),
    _c("stablelm", "decoder", "StableLmForCausalLM", "StableLmConfig",
       {**_DEC, "partial_rotary_factor": 0.25}, "partial rotary, LayerNorm", mask=True),
    _c("olmo", "decoder", "OlmoForCausalLM", "OlmoConfig", {**_DEC, "pad_token_id": 0},
       "LayerNorm without parameters", mask=True),
    _c("gpt_neo", "decoder", "GPTNeoForCausalLM", "GPTNeoConfig",
       {"vocab_size": VOCAB, "hidden_size": 32, "num_layers": 2, "num_heads": 4,
        "attention_types": [[["global", "local"], 1]], "window_size": 4,
        "max_position_embeddings": 64, "use_cache": False},
       "local and global attention, no attention scaling", mask=True),
    _c("mixtral", "decoder", "MixtralForCausalLM", "MixtralConfig",
       {**_DEC, "num_local_experts": 4, "num_experts_per_tok": 2},
       "mixture of experts (top-2 routing)", mask=True),
    # ------------------------------------------------------- encoder-decoders
    _c("bart", "encoder-decoder", "BartForConditionalGeneration", "BartConfig",
       dict(_SEQ2SEQ), "decoder inputs shifted from input_ids, learned positions offset by 2"),
    _c("mbart", "encoder-decoder", "MBartForConditionalGeneration", "MBartConfig",
       dict(_SEQ2SEQ), "pre-norm BART, decoder inputs from the last token"),
    _c("t5_encoder", "encoder-decoder", "T5EncoderModel", "T5Config", dict(_T5),
       "T5's encoder: relative position buckets (one table), RMSNorm without bias"),
    _c("mt5_encoder", "encoder-decoder", "MT5EncoderModel", "MT5Config",
       {**_T5, "feed_forward_proj": "gated-gelu"}, "gated GELU"),
    _c("umt5_encoder", "encoder-decoder", "UMT5EncoderModel", "UMT5Config",
       {**_T5, "feed_forward_proj": "gated-gelu"}, "a relative position table per layer"),
    # --------------------------------------------------------- vision (ViT-like)
    _c("deit", "vision-transformer", "DeiTForImageClassificationWithTeacher", "DeiTConfig",
       dict(_VIT), "class and distillation tokens, two heads averaged",
       input_name="pixel_values", shape=_IMAGE),
    _c("beit", "vision-transformer", "BeitForImageClassification", "BeitConfig",
       {**_VIT, "use_relative_position_bias": True, "use_mean_pooling": True},
       "relative position bias tables gathered by index, layer scale",
       input_name="pixel_values", shape=_IMAGE),
    _c("swin", "vision-transformer", "SwinForImageClassification", "SwinConfig",
       {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1],
        "num_heads": [2, 2], "window_size": 4, "num_labels": 5},
       "shifted windows, relative position bias, patch merging",
       input_name="pixel_values", shape=_IMAGE),
    _c("swinv2", "vision-transformer", "Swinv2ForImageClassification", "Swinv2Config",
       {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1],
        "num_heads": [2, 2], "window_size": 4, "num_labels": 5},
       "cosine attention with a learned log scale, continuous position bias (an MLP)",
       input_name="pixel_values", shape=_IMAGE),
    _c("dinov2", "vision-transformer", "Dinov2ForImageClassification", "Dinov2Config",
       {**_VIT, "layerscale_value": 0.5}, "interpolated position embeddings, layer scale",
       input_name="pixel_values", shape=_IMAGE),
    _c("convnextv2", "cnn", "ConvNextV2ForImageClassification", "ConvNextV2Config",
       {"num_channels": 3, "patch_size": 4, "num_stages": 2, "hidden_sizes": [8, 16],
        "depths": [1, 1], "num_labels": 5}, "global response normalisation",
       input_name="pixel_values", shape=_IMAGE),
    _c("poolformer", "vision-transformer", "PoolFormerForImageClassification",
       "PoolFormerConfig", {"num_channels": 3, "hidden_sizes": [8, 16], "depths": [1, 1],
                            "num_encoder_blocks": 2, "patch_sizes": [7, 3],
                            "strides": [4, 2], "padding": [2, 1], "num_labels": 5},
       "average pooling as token mixer, GroupNorm, layer scale",
       input_name="pixel_values", shape=_IMAGE),
    _c("segformer", "vision-transformer", "SegformerForImageClassification",
       "SegformerConfig", {"num_channels": 3, "num_encoder_blocks": 2, "depths": [1, 1],
                           "sr_ratios": [2, 1], "hidden_sizes": [8, 16],
                           "patch_sizes": [7, 3], "strides": [4, 2],
                           "num_attention_heads": [1, 2], "mlp_ratios": [2, 2],
                           "num_labels": 5},
       "spatial-reduction attention, depthwise conv in the MLP",
       input_name="pixel_values", shape=_IMAGE),
    # ----------------------------------------------------------- convolutional
    _c("regnet", "cnn", "RegNetForImageClassification", "RegNetConfig",
       {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1], "groups_width": 4,
        "layer_type": "y", "num_labels": 5}, "grouped convolutions, squeeze-excite",
       input_name="pixel_values", shape=_IMAGE),
    _c("efficientnet", "cnn", "EfficientNetForImageClassification", "EfficientNetConfig",
       {"image_size": 32, "width_coefficient": 0.25, "depth_coefficient": 0.25,
        "num_labels": 5, "hidden_dim": 320},
       "depthwise convolutions, squeeze-excite, swish", input_name="pixel_values",
       shape=_IMAGE),
    _c("mobilenet_v1", "cnn", "MobileNetV1ForImageClassification", "MobileNetV1Config",
       {"image_size": 32, "depth_multiplier": 0.25, "num_labels": 5},
       "depthwise separable convolutions, TensorFlow padding", input_name="pixel_values",
       shape=_IMAGE),
    _c("bit", "cnn", "BitForImageClassification", "BitConfig",
       {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1],
        "layer_type": "bottleneck", "num_groups": 4, "num_labels": 5},
       "weight-standardised convolutions, GroupNorm", input_name="pixel_values",
       shape=_IMAGE),
    # -------------------------------------------------------------------- audio
    _c("wav2vec2", "audio", "Wav2Vec2ForCTC", "Wav2Vec2Config", dict(_AUDIO),
       "convolutional feature encoder, weight-normed positional convolution",
       input_name="input_values", shape=_WAVE),
    _c("hubert", "audio", "HubertForCTC", "HubertConfig", dict(_AUDIO),
       "wav2vec2's encoder, GroupNorm feature encoder", input_name="input_values",
       shape=_WAVE),
    _c("whisper_encoder", "audio", "WhisperForAudioClassification", "WhisperConfig",
       {"vocab_size": VOCAB, "num_mel_bins": 8, "d_model": 32, "encoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_layers": 1, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_source_positions": 16,
        "max_target_positions": 16, "num_labels": 5},
       "Whisper's encoder: two convolutions, sinusoidal positions, mean pooling",
       input_name="input_features", shape=(BATCH, 8, 32)),
    _c("audio_spectrogram", "audio", "ASTForAudioClassification", "ASTConfig",
       {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "patch_size": 8, "frequency_stride": 8, "time_stride": 8,
        "max_length": 32, "num_mel_bins": 16, "num_labels": 5},
       "ViT over spectrogram patches", input_name="input_values", shape=(BATCH, 32, 16)),
    # -------------------------------------------------------- multimodal towers
    _c("clip_text", "multimodal", "CLIPTextModel", "CLIPTextConfig",
       {**_ENC, "eos_token_id": 2}, "causal text tower, quick GELU"),
    _c("clip_vision", "multimodal", "CLIPVisionModel", "CLIPVisionConfig",
       {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64},
       "pre-LayerNorm, class embedding, position ids as a buffer",
       input_name="pixel_values", shape=_IMAGE),
    _c("siglip_text", "multimodal", "SiglipTextModel", "SiglipTextConfig", dict(_ENC),
       "last-token pooling head"),
    _c("siglip_vision", "multimodal", "SiglipVisionModel", "SiglipVisionConfig",
       {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64},
       "attention-pooling head (a probe token)", input_name="pixel_values", shape=_IMAGE),
)
"""The sweep's architectures (issue 30): none of them is in :data:`zoo.cases.CASES`."""

def missing() -> list[str]:
    """The sweep's cases whose model or config class the installed ``transformers`` lacks."""
    import transformers

    return [c.name for c in SWEEP_CASES
            if not (hasattr(transformers, c.model_class) and hasattr(transformers, c.config_class))]
