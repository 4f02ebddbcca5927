"""The model zoo: real Hugging Face exports, judged against torch (test infrastructure).

Tiny, randomly initialised ``transformers`` models (nothing downloaded), exported to
ONNX the ways people export them, run through ``graphpass run -p train-ready
--emit-training-artifacts`` and a few AdamW steps of onnxruntime-training, with torch
as the oracle. Not collected as tests; ``tests/test_zoo.py`` and ``benchmarks/zoo.py``
use it, and so can other tests::

    import zoo

    bert = zoo.case("bert")                  # or: for case in zoo.CASES
    exported = zoo.export(bert, "dynamo")    # zoo.MODES: the four export modes
    exported.model, exported.checkpoint, exported.inputs, exported.batch
    reference = zoo.torch_reference(bert)    # outputs, loss, gradients, weights after steps
    reference.gradients["model.bert.embeddings.word_embeddings.weight"]
    run = zoo.train_ready(exported, tmp_path)   # graphpass + ORT training (its venv)
    check = zoo.compare_gradients(reference, run)
    outcome = zoo.judge(bert, "dynamo", tmp_path)   # all of the above, and a verdict
    outcome.label                            # "trains", "refused rightly" or "wrong"

graphpass's own trainer (``--emit-training-graph``, stock onnxruntime, this venv) is judged
by :mod:`zoo.own_training` against ``torch.autograd`` and ``torch.optim.AdamW``
(:mod:`zoo.adamw_reference`)::

    from zoo.own_training import own_judge
    own_judge(bert, "dynamo-full-state", tmp_path).label

Exports and references are cached under ``$GRAPHPASS_ZOO_CACHE`` (default
``tests/.cache/zoo``), keyed by case, mode, package versions and the zoo's source;
entries are written atomically and built by one process at a time.

Needs torch and transformers (the ``zoo`` extra) in the calling environment, and the
onnxruntime-training venv (``make ort-venv``) for :func:`train_ready` and :func:`judge`.
"""

from zoo.cases import CASES, EXTRA_CASES, Case, ZooError, case
from zoo.exporting import ADVICE_MODES, MODES, Export, export, hidden_annotations, legacy_export
from zoo.judging import ADVICE, GRADIENT_RTOL, GradientCheck, Outcome, compare_gradients, judge
from zoo.reference import ADAMW, STEPS, Reference, torch_reference
from zoo.training import TrainingRun, ort_training_python, train_ready

__all__ = [
    "ADAMW",
    "ADVICE",
    "ADVICE_MODES",
    "CASES",
    "EXTRA_CASES",
    "GRADIENT_RTOL",
    "MODES",
    "STEPS",
    "Case",
    "Export",
    "GradientCheck",
    "Outcome",
    "Reference",
    "TrainingRun",
    "ZooError",
    "case",
    "compare_gradients",
    "export",
    "hidden_annotations",
    "judge",
    "legacy_export",
    "ort_training_python",
    "torch_reference",
    "train_ready",
]
