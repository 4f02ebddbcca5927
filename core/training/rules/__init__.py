"""Gradient rules: what a trainer can differentiate, as data.

* :mod:`graphpass.training.rules.model`: the rule model (:class:`GradientRules`, its
  conditions, the node a condition sees) and its loader (``GradientRules.from_toml``);
  the selection of the weights to train;
* :mod:`graphpass.training.rules.onnxruntime_training`: onnxruntime-training's set,
  written in ``data/onnxruntime_training.toml``, with the checks that file names;
* :mod:`graphpass.training.rules.derived`: graphpass's own set (``rules = "graphpass"``),
  derived from the registered gradient builders.

The package imports none of them itself: the builders need the model, and graphpass's
own set needs the builders.
"""
