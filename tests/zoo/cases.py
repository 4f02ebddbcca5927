"""The zoo's architectures: tiny Hugging Face ``transformers`` models, built offline.

Each :class:`Case` names a ``transformers`` model class and a tiny config; the model is
built from the config with the library's own random initialisation under a fixed seed
(nothing is downloaded: ``HF_HUB_OFFLINE=1``). Building one takes well under a second.

Every model is exported through :class:`ZooWrapper`, a user module that holds the Hugging
Face model as ``self.model`` (so exported names carry a ``model.`` prefix that the Hugging
Face ``state_dict()`` keys lack) and returns its first output as one tensor (logits), the
output the zoo's loss (MSE against a random target) is computed on.

This module imports torch and transformers only when a model is built, so that the
onnxruntime-training venv (which has no transformers) can import the zoo's names.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CASES", "EXTRA_CASES", "Case", "ZooError", "case", "load_class"]

BATCH = 2
"""Examples per batch (the ViT refusal of issue 12 was seen with batch 2)."""
LENGTH = 8
"""Tokens per example for the text models."""
VOCAB = 97
"""Vocabulary of the text models."""


class ZooError(RuntimeError):
    """The zoo cannot build, export or judge a case (a bug in the zoo or its environment)."""


@dataclass(frozen=True)
class Case:
    """One architecture of the zoo.

    Attributes:
        name: Short name (``bert``), used in cache paths and tables.
        family: ``encoder``, ``decoder``, ``vision-transformer`` or ``cnn``.
        model_class: The ``transformers`` model class (``BertForMaskedLM``).
        config_class: Its config class (``BertConfig``).
        config: The config's arguments (tiny sizes).
        input_name: The first model input (``input_ids`` or ``pixel_values``).
        input_shape: Its shape.
        attention_mask: Whether the model also takes an ``attention_mask`` (all ones, the
            shape of ``input_ids``): the decoder LMs, as their exports usually do. Without
            one, transformers 5 looks for packed sequences with ``torch.diff``, which the
            legacy exporter cannot export.
        function_classes: ``module:Class`` paths of the Hugging Face layers exported as
            ONNX functions in the legacy mode (``export_modules_as_functions``).
        notes: What the case covers (shown in the docs).
        seed: Seed of the initialisation and of the inputs.
    """

    name: str
    family: str
    model_class: str
    config_class: str
    config: Mapping[str, Any]
    input_name: str
    input_shape: tuple[int, ...]
    function_classes: tuple[str, ...]
    notes: str = ""
    attention_mask: bool = False
    seed: int = 0

    @property
    def input_names(self) -> tuple[str, ...]:
        """The graph inputs, in order."""
        return (self.input_name, "attention_mask") if self.attention_mask else (self.input_name,)

    # ---------------------------------------------------------------- inputs
    def inputs(self) -> dict[str, np.ndarray]:
        """The model's inputs (one batch), as numpy arrays, seeded."""
        rng = np.random.default_rng(self.seed + 1)
        if self.input_name == "input_ids":
            value = rng.integers(1, VOCAB, size=self.input_shape, dtype=np.int64)
        else:
            value = rng.standard_normal(self.input_shape, dtype=np.float32)
        inputs = {self.input_name: value}
        if self.attention_mask:
            inputs["attention_mask"] = np.ones(self.input_shape, dtype=np.int64)
        return inputs

    def target(self, output_shape: tuple[int, ...]) -> np.ndarray:
        """The MSE target for an output of ``output_shape``, seeded."""
        rng = np.random.default_rng(self.seed + 2)
        return rng.standard_normal(output_shape, dtype=np.float32)

    # ----------------------------------------------------------------- model
    def build(self) -> Any:
        """The Hugging Face model, randomly initialised under the case's seed, in eval mode."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        import transformers

        config = getattr(transformers, self.config_class)(**self.config)
        torch.manual_seed(self.seed)
        model = getattr(transformers, self.model_class)(config)
        _trained_like(model)
        return model.eval()

    def wrapped(self) -> Any:
        """:meth:`build`'s model inside a :class:`ZooWrapper` (what the zoo exports)."""
        return make_wrapper(self.build(), self.input_names)


def _trained_like(model: Any) -> None:
    """Give a freshly initialised model the statistics of a trained one (in place, seeded).

    Hugging Face's initialisation (normal weights of std 0.02, zero biases, unit norm
    weights, layer scales of 1e-6) makes deep CNNs' activations vanish (MobileNetV2's
    logits come out near 1e-27) and leaves many tensors exactly equal, which the exporter's
    optimizer then merges into one initializer: neither happens with a trained model. So
    linear and convolution layers get torch's default initialisation, and every tensor
    whose values are all equal (biases, norm weights, layer scales, running statistics)
    gets seeded noise; running variances stay positive. Sharing (tied or shared layers)
    is kept: tensors are changed in place.
    """
    import torch

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)):
                module.reset_parameters()
        seen: set[int] = set()
        tensors = [*model.named_parameters(remove_duplicate=False),
                   *model.named_buffers(remove_duplicate=False)]
        for name, tensor in tensors:
            if id(tensor) in seen or not tensor.is_floating_point() or tensor.numel() < 2:
                continue
            seen.add(id(tensor))
            if bool((tensor == tensor.reshape(-1)[0]).all()):
                noise = 0.1 * torch.randn_like(tensor)
                if name.endswith("running_var"):
                    noise = noise.abs()
                tensor.add_(noise)


def make_wrapper(model: Any, input_names: tuple[str, ...]) -> Any:
    """A ``ZooWrapper`` around a Hugging Face model: ``forward(*inputs)`` -> first output."""
    import torch

    class ZooWrapper(torch.nn.Module):
        """A user module around a Hugging Face model; returns its first output."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.model = inner

        def forward(self, *values: torch.Tensor) -> torch.Tensor:
            named = dict(zip(input_names, values, strict=True))
            return self.model(**named, return_dict=False)[0]

    return ZooWrapper(model).eval()


def load_class(path: str) -> type:
    """The class at ``module:Class``."""
    module, _, name = path.partition(":")
    found = getattr(importlib.import_module(module), name)
    if not isinstance(found, type):
        raise ZooError(f"{path} is not a class")
    return found


_TEXT = (BATCH, LENGTH)
_IMAGE = (BATCH, 3, 32, 32)
_TM = "transformers.models"
_ENCODER = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64}
_DECODER = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
            "max_position_embeddings": 64, "use_cache": False}

CASES: tuple[Case, ...] = (
    Case("bert", "encoder", "BertForMaskedLM", "BertConfig", _ENCODER, "input_ids", _TEXT,
         (f"{_TM}.bert.modeling_bert:BertLayer",),
         "absolute positions, token types, tied MLM decoder"),
    Case("roberta", "encoder", "RobertaForMaskedLM", "RobertaConfig",
         {**_ENCODER, "pad_token_id": 0}, "input_ids", _TEXT,
         (f"{_TM}.roberta.modeling_roberta:RobertaLayer",),
         "positions computed from the padding mask"),
    Case("distilbert", "encoder", "DistilBertForMaskedLM", "DistilBertConfig",
         {"vocab_size": VOCAB, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64,
          "max_position_embeddings": 64}, "input_ids", _TEXT,
         (f"{_TM}.distilbert.modeling_distilbert:TransformerBlock",),
         "no token types"),
    Case("albert", "encoder", "AlbertForMaskedLM", "AlbertConfig",
         {**_ENCODER, "embedding_size": 16}, "input_ids", _TEXT,
         (f"{_TM}.albert.modeling_albert:AlbertLayer",),
         "one layer's weights shared by every layer, factorised embeddings, gelu_new (Pow)"),
    Case("electra", "encoder", "ElectraForMaskedLM", "ElectraConfig",
         {**_ENCODER, "embedding_size": 16}, "input_ids", _TEXT,
         (f"{_TM}.electra.modeling_electra:ElectraLayer",),
         "generator: embeddings projected to the hidden size"),
    Case("gpt2", "decoder", "GPT2LMHeadModel", "GPT2Config",
         {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
          "bos_token_id": 1, "eos_token_id": 2, "use_cache": False}, "input_ids", _TEXT,
         (f"{_TM}.gpt2.modeling_gpt2:GPT2Block",),
         "fused QKV (Conv1D) split in three, gelu_new (Pow), tied head", attention_mask=True),
    Case("llama", "decoder", "LlamaForCausalLM", "LlamaConfig", _DECODER, "input_ids", _TEXT,
         (f"{_TM}.llama.modeling_llama:LlamaDecoderLayer",),
         "rotary embeddings (non-persistent inv_freq), grouped-query attention, RMSNorm",
         attention_mask=True),
    Case("mistral", "decoder", "MistralForCausalLM", "MistralConfig",
         {**_DECODER, "sliding_window": 4}, "input_ids", _TEXT,
         (f"{_TM}.mistral.modeling_mistral:MistralDecoderLayer",),
         "sliding-window attention, rotary, grouped-query attention", attention_mask=True),
    Case("qwen2", "decoder", "Qwen2ForCausalLM", "Qwen2Config",
         {**_DECODER, "tie_word_embeddings": True}, "input_ids", _TEXT,
         (f"{_TM}.qwen2.modeling_qwen2:Qwen2DecoderLayer",),
         "QKV biases, rotary, grouped-query attention, tied head", attention_mask=True),
    Case("vit", "vision-transformer", "ViTForImageClassification", "ViTConfig",
         {"image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_size": 32,
          "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
          "num_labels": 5}, "pixel_values", _IMAGE,
         (f"{_TM}.vit.modeling_vit:ViTLayer",),
         "class token concatenated to 16 patch embeddings (17 tokens)"),
    Case("resnet", "cnn", "ResNetForImageClassification", "ResNetConfig",
         {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1],
          "layer_type": "basic", "num_labels": 5}, "pixel_values", _IMAGE,
         (f"{_TM}.resnet.modeling_resnet:ResNetBasicLayer",),
         "Conv + BatchNorm, max pooling, shortcut projections"),
    Case("mobilenet_v2", "cnn", "MobileNetV2ForImageClassification", "MobileNetV2Config",
         {"image_size": 64, "depth_multiplier": 0.25, "num_labels": 5}, "pixel_values",
         (4, 3, 64, 64),
         (f"{_TM}.mobilenet_v2.modeling_mobilenet_v2:MobileNetV2InvertedResidual",),
         "depthwise convolutions, ReLU6 as Clip, TensorFlow padding as Pad; 64x64 images, "
         "batch 4: at 32x32 its last BatchNorms see 2 values a channel (see test_zoo.py)"),
    Case("convnext", "cnn", "ConvNextForImageClassification", "ConvNextConfig",
         {"num_channels": 3, "patch_size": 4, "num_stages": 2, "hidden_sizes": [8, 16],
          "depths": [1, 1],
          "num_labels": 5}, "pixel_values", _IMAGE,
         (f"{_TM}.convnext.modeling_convnext:ConvNextLayer",),
         "depthwise 7x7 convolutions, channels-first LayerNorm, layer scale"),
    Case("gpt_neox", "decoder", "GPTNeoXForCausalLM", "GPTNeoXConfig",
         {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
          "rotary_pct": 0.5, "use_cache": False}, "input_ids", _TEXT,
         (f"{_TM}.gpt_neox.modeling_gpt_neox:GPTNeoXLayer",),
         "partial rotary embeddings, parallel attention and MLP, fused QKV",
         attention_mask=True),
)
"""Every architecture of the zoo."""

EXTRA_CASES: tuple[Case, ...] = (
    Case("mobilenet_v2_32px", "cnn", "MobileNetV2ForImageClassification", "MobileNetV2Config",
         {"image_size": 32, "depth_multiplier": 0.25, "num_labels": 5}, "pixel_values", _IMAGE,
         (f"{_TM}.mobilenet_v2.modeling_mobilenet_v2:MobileNetV2InvertedResidual",),
         "MobileNetV2 at 32x32, batch 2: its last BatchNorms train over 2 values a channel, "
         "where float32 gradients are rounding noise (issue 12, class 6); not in the table"),
)
"""Cases for regression tests, outside the zoo's table."""

_BY_NAME = {c.name: c for c in (*CASES, *EXTRA_CASES)}


def case(name: str) -> Case:
    """The case called ``name``: the zoo's, the extra ones, or the sweep's
    (:data:`zoo.sweep_cases.SWEEP_CASES`).

    Raises:
        KeyError: no such case (the message lists the known ones).
    """
    if name in _BY_NAME:
        return _BY_NAME[name]
    from zoo.sweep_cases import SWEEP_CASES  # the sweep's list imports this module

    sweep = {c.name: c for c in SWEEP_CASES}
    if name in sweep:
        return sweep[name]
    raise KeyError(f"no zoo case {name!r}; known: {', '.join([*_BY_NAME, *sweep])}")
