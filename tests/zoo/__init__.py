"""The model zoo: real Hugging Face exports, judged against torch (test infrastructure).

Tiny, randomly initialised ``transformers`` models (nothing downloaded), exported to
ONNX the ways people export them, run through ``graphpass run -p train-ready
--emit-training-artifacts`` and a few AdamW steps of onnxruntime-training, with torch
as the oracle. Not collected as tests; ``tests/test_zoo.py`` and ``benchmarks/zoo.py``
use it, and so can other tests::

    import zoo

    bert = zoo.case("bert")                  # or: for case in zoo.CASES
    exported = zoo.export(bert, "dynamo")    # zoo.MODES: the export modes
    exported.model, exported.checkpoint, exported.inputs, exported.batch
    reference = zoo.torch_reference(bert)    # outputs, loss, gradients, weights after steps
    reference.gradients["model.bert.embeddings.word_embeddings.weight"]
    run = zoo.train_ready(exported, tmp_path)   # graphpass + ORT training (its venv)
    check = zoo.compare_gradients(reference, run)
    outcome = zoo.judge(bert, "dynamo", tmp_path)   # all of the above, and a verdict
    outcome.label                            # "trains", "refused rightly" or "wrong"
    tuned = zoo.export(bert, "dynamo+finetuned")  # dynamo's file, a fine-tuned checkpoint
    zoo.torch_reference(bert, tuned.oracle)  # torch with the checkpoint's weights

graphpass's own trainer (``--emit-training-graph``, stock onnxruntime, this venv) is judged
by :mod:`zoo.own_training` against ``torch.autograd`` and ``torch.optim.AdamW``
(:mod:`zoo.adamw_reference`)::

    from zoo.own_training import own_judge
    own_judge(bert, "dynamo-full-state", tmp_path).label

Exports and references are cached under ``$GRAPHPASS_ZOO_CACHE`` (default
``tests/.cache/zoo``), keyed by case, mode, package versions and the zoo's source;
entries are written atomically and built by one process at a time.

Needs torch and transformers (the ``zoo`` extra) in the calling environment, the
onnxruntime-training venv (``make ort-venv``) for :func:`train_ready` and :func:`judge`,
and the Optimum venv (``make optimum-venv``, :mod:`zoo.optimum`) for the ``optimum`` modes.
"""

from zoo.cases import CASES, EXTRA_CASES, Case, ZooError, case
from zoo.exporting import (
    ADVICE_MODES,
    CHECKPOINTS,
    MODES,
    OPTIMUM_MODES,
    WITH_CHECKPOINT,
    Export,
    ExportFailed,
    checkpoint,
    export,
    hidden_annotations,
    legacy_export,
    oracle_of,
)
from zoo.finetuning import finetune
from zoo.judging import (
    ADVICE,
    GRADIENT_RTOL,
    GradientCheck,
    Outcome,
    compare_gradients,
    judge,
    parameters_left_out,
    trainable_set,
)
from zoo.optimum import optimum_python
from zoo.reference import ADAMW, STEPS, Reference, torch_reference
from zoo.subjects import ORACLES
from zoo.training import TrainingRun, ort_training_python, train_ready

__all__ = [
    "ADAMW",
    "ADVICE",
    "ADVICE_MODES",
    "CASES",
    "CHECKPOINTS",
    "EXTRA_CASES",
    "GRADIENT_RTOL",
    "MODES",
    "OPTIMUM_MODES",
    "ORACLES",
    "STEPS",
    "WITH_CHECKPOINT",
    "Case",
    "Export",
    "ExportFailed",
    "GradientCheck",
    "Outcome",
    "Reference",
    "TrainingRun",
    "ZooError",
    "case",
    "checkpoint",
    "compare_gradients",
    "export",
    "finetune",
    "hidden_annotations",
    "judge",
    "legacy_export",
    "optimum_python",
    "oracle_of",
    "ort_training_python",
    "parameters_left_out",
    "torch_reference",
    "train_ready",
    "trainable_set",
]
