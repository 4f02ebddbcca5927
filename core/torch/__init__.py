"""PyTorch interop: a model's full state, and what torch's exporters record.

* :func:`capture_state` and :func:`save_state` (in ``_state``):
  a model's parameters, buffers and tensor constants under the names its ONNX export
  uses, with the record of the parameters torch does not train
  (:func:`recorded_frozen`);
* :class:`Module` (in ``_module``): a module trained through
  graphpass inside the user's own torch loop;
* ``_export_record``: the state kinds, graph signature and folding
  records that ``torch.onnx.export`` writes into a model, read without torch.

PyTorch is imported only when a function here needs it.
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.torch._state import FROZEN_METADATA, capture_state, recorded_frozen, save_state

if TYPE_CHECKING:
    from graphpass.torch._export_record import (
        FOLDED_FROM,
        FX_NODE,
        INPUT_KIND,
        INPUT_PERSISTENT,
        LEGACY_CONSTANT_NAME,
        NOT_SAVED,
        ORIGINAL_NAME,
        SIGNATURE,
        TRAINABLE_TYPES,
        StateKind,
        default_trainable,
        default_trainable_rules,
        folded_from,
        fx_arguments,
        fx_placeholders,
        fx_target,
        graph_signature,
        input_spec_kind,
        is_placeholder_name,
        module_scope,
        parameters_left_out,
        placeholder_stem,
        records_state,
        signature_kinds,
        signature_parameters,
        state_kinds,
    )
    from graphpass.torch._module import (
        ExportError,
        Module,
        PreparationError,
    )
    from graphpass.torch._producers import (
        Producer,
        producer,
        separate_weights_advice,
        unfolded_export_advice,
    )

__all__ = [
    "FOLDED_FROM",
    "FROZEN_METADATA",
    "FX_NODE",
    "INPUT_KIND",
    "INPUT_PERSISTENT",
    "LEGACY_CONSTANT_NAME",
    "NOT_SAVED",
    "ORIGINAL_NAME",
    "SIGNATURE",
    "TRAINABLE_TYPES",
    "ExportError",
    "Module",
    "PreparationError",
    "Producer",
    "StateKind",
    "capture_state",
    "default_trainable",
    "default_trainable_rules",
    "folded_from",
    "fx_arguments",
    "fx_placeholders",
    "fx_target",
    "graph_signature",
    "input_spec_kind",
    "is_placeholder_name",
    "module_scope",
    "parameters_left_out",
    "placeholder_stem",
    "producer",
    "recorded_frozen",
    "records_state",
    "save_state",
    "separate_weights_advice",
    "signature_kinds",
    "signature_parameters",
    "state_kinds",
    "unfolded_export_advice",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "ExportError": "graphpass.torch._module",
    # Module needs the pass framework and the training layer, which import this
    # package's export records: it is imported when asked for, not with the package.
    "Module": "graphpass.torch._module",
    "FOLDED_FROM": "graphpass.torch._export_record",
    "FX_NODE": "graphpass.torch._export_record",
    "INPUT_KIND": "graphpass.torch._export_record",
    "INPUT_PERSISTENT": "graphpass.torch._export_record",
    "LEGACY_CONSTANT_NAME": "graphpass.torch._export_record",
    "NOT_SAVED": "graphpass.torch._export_record",
    "ORIGINAL_NAME": "graphpass.torch._export_record",
    "PreparationError": "graphpass.torch._module",
    "Producer": "graphpass.torch._producers",
    "SIGNATURE": "graphpass.torch._export_record",
    "StateKind": "graphpass.torch._export_record",
    "TRAINABLE_TYPES": "graphpass.torch._export_record",
    "default_trainable": "graphpass.torch._export_record",
    "default_trainable_rules": "graphpass.torch._export_record",
    "folded_from": "graphpass.torch._export_record",
    "fx_arguments": "graphpass.torch._export_record",
    "fx_placeholders": "graphpass.torch._export_record",
    "fx_target": "graphpass.torch._export_record",
    "graph_signature": "graphpass.torch._export_record",
    "input_spec_kind": "graphpass.torch._export_record",
    "is_placeholder_name": "graphpass.torch._export_record",
    "module_scope": "graphpass.torch._export_record",
    "parameters_left_out": "graphpass.torch._export_record",
    "placeholder_stem": "graphpass.torch._export_record",
    "producer": "graphpass.torch._producers",
    "records_state": "graphpass.torch._export_record",
    "separate_weights_advice": "graphpass.torch._producers",
    "signature_kinds": "graphpass.torch._export_record",
    "signature_parameters": "graphpass.torch._export_record",
    "state_kinds": "graphpass.torch._export_record",
    "unfolded_export_advice": "graphpass.torch._producers",
})

