"""A deliberately wrong plugin, for testing ``--verify``.

Its pass ``tidy-weights`` says it preserves what the model computes (the default),
but it multiplies the first float initializer by 1.01.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx

import graphpass
from graphpass.plugins import hookimpl


class TidyWeights(graphpass.Pass):
    """Claims to tidy weights; really scales the first float weight by 1.01."""

    name = "tidy-weights"
    description = "Tidy the weights (deliberately wrong: scales one by 1.01)."

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        for name, tensor in model.graph.initializers.items():
            if tensor.dtype == onnx.TensorProto.FLOAT and tensor.size > 1:
                scaled = np.asarray(tensor.numpy(), dtype=np.float32) * np.float32(1.01)
                model.graph.set_initializer(graphpass.Tensor.from_array(name, scaled))
                return graphpass.PassResult(changed=True, stats={"tidied": name})
        return graphpass.PassResult(changed=False)


@hookimpl
def graphpass_passes() -> Iterable[type[graphpass.Pass]]:
    """The plugin's (wrong) pass."""
    return [TidyWeights]
