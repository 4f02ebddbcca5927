"""The child process of ``emit-training-artifacts``: onnxruntime-training's native code.

onnxruntime-training 1.19.2 can crash the process it runs in (a segmentation fault in
a gradient kernel, a failed C++ assertion) instead of raising. So
:mod:`graphpass.plugins.ort_training` runs everything that executes its training code
on the user's model in a fresh interpreter (``python -m
graphpass.plugins._training_child JOB.json``, the parent's own Python; spawned, never
forked): ``generate_artifacts`` (the gradient graph builder), loading the artifacts
(the training sessions and their kernels), and the first step with its
finite-difference check (:func:`graphpass.plugins._training_check.run_step`). A crash
then ends the child only, and the parent reports it as a finding.

The job file (JSON) names:

* ``model``: the forward model (``external``: whether its weights lie in external data
  beside it, past protobuf's 2 GB; then ``generate_artifacts`` gets the model without
  them, read from the data file as the checkpoint is written);
* ``artifacts``: the folder to write the artifacts into, and ``generate``: the
  ``generate_artifacts`` arguments (``loss`` and ``optimizer`` by name);
* ``max_ir_version``: the highest IR version to leave in the artifacts;
* ``step``: ``null`` (no step), or the step's inputs: ``feeds``, ``given`` and
  ``outputs`` (each ``{"path": NPZ, "names": [...]}``: the arrays by position, in the
  order of ``names``), ``random_ops``, ``gradients`` and ``seed``;
* ``stage``: a file the child writes the stage it enters into (``generating``,
  ``loading``, ``stepping``, ``checking``), so that the parent can tell where it died;
* ``result``: the JSON file the child writes at the end: ``generation_error``,
  ``load_problem`` (texts or ``null``) and ``step`` (a
  :class:`~graphpass.plugins._training_check.StepOutcome` as a dict, or ``null``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphpass.files import replace_file

__all__ = ["main"]


def _mark(stage_file: Path, stage: str) -> None:
    """Record the stage the child enters (written in one go, before the stage runs)."""
    stage_file.write_text(stage)


def _arrays(saved: dict[str, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an ``.npz`` written by position (``arr_0`` ...), under their names."""
    with np.load(saved["path"], allow_pickle=False) as data:
        return {name: data[f"arr_{i}"] for i, name in enumerate(saved["names"])}


def _generate(job: dict[str, Any]) -> None:
    import onnxruntime
    from onnxruntime.training import artifacts

    onnxruntime.set_default_logger_severity(3)
    losses = {"mse": artifacts.LossType.MSELoss,
              "crossentropy": artifacts.LossType.CrossEntropyLoss,
              "bce": artifacts.LossType.BCEWithLogitsLoss,
              "l1": artifacts.LossType.L1Loss, "none": None}
    optimizers = {"adamw": artifacts.OptimType.AdamW, "sgd": artifacts.OptimType.SGD}
    options = dict(job["generate"])
    options["loss"] = losses[options["loss"]]
    options["optimizer"] = optimizers[options["optimizer"]]
    directory = Path(job["artifacts"])
    directory.mkdir(parents=True, exist_ok=True)
    model = Path(job["model"])
    captured = io.StringIO()
    if not job.get("external"):
        proto = onnx.load(str(model))
        with contextlib.redirect_stdout(captured):
            artifacts.generate_artifacts(proto, artifact_directory=str(directory), **options)
        return
    # Past 2 GB: the model in memory without its weights, which stay in the external
    # data file beside it (``location`` relative to the job's folder, the current
    # folder while the artifacts are built). onnxruntime-training reads them from
    # there into the checkpoint. Given a path instead, 1.19.2's onnxblock saves the
    # model at every block to temp.onnx + temp.onnx.data, after which the model in
    # memory points at temp.onnx.data, and with onnx >= 1.16 it fails: a block's
    # next save refuses the data file that exists ("External data file exists in
    # temp.onnx.data"), and once a throwaway block (the MSE loss's InputLike) has
    # removed it, the check refuses the missing file ("... should be stored in
    # .../temp.onnx.data, but it is not regular file").
    proto = onnx.load(str(model), load_external_data=False)
    _embed_constants(proto, model.parent,
                     set(options["requires_grad"]) | set(options["frozen_params"]))
    previous = Path.cwd()
    os.chdir(model.parent)
    try:
        with contextlib.redirect_stdout(captured):
            artifacts.generate_artifacts(proto, artifact_directory=str(directory), **options)
    finally:
        os.chdir(previous)


def _embed_constants(proto: onnx.ModelProto, folder: Path, weights: set[str]) -> None:
    """Read the external data of every initializer but the weights into the model.

    The weights (trained or frozen) go into the checkpoint and leave the graph; the
    other initializers (constants) stay in the training and eval models, which are
    written without the data file they would otherwise point at.
    """
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for tensor in proto.graph.initializer:
        if tensor.name not in weights and uses_external_data(tensor):
            load_external_data_for_tensor(tensor, str(folder))
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _run(job: dict[str, Any]) -> dict[str, Any]:
    from graphpass.plugins._training_check import StepInputs, run_step
    from graphpass.plugins.ort_training import _cap_ir_versions, _load_artifacts

    stage = Path(job["stage"])
    result: dict[str, Any] = {"generation_error": None, "load_problem": None, "step": None}
    _mark(stage, "generating")
    try:
        _generate(job)
    except Exception as error:  # onnxruntime-training raises plain RuntimeErrors
        result["generation_error"] = str(error) or type(error).__name__
        return result
    directory = Path(job["artifacts"])
    _cap_ir_versions(directory, int(job["max_ir_version"]))
    _mark(stage, "loading")
    result["load_problem"] = _load_artifacts(directory)
    step = job.get("step")
    if result["load_problem"] or not step:
        return result
    prepared = StepInputs(_arrays(step["feeds"]), _arrays(step["given"]),
                          _arrays(step["outputs"]), tuple(step["random_ops"]))
    _mark(stage, "stepping")
    outcome = run_step(directory, prepared, gradients=bool(step["gradients"]),
                       seed=int(step["seed"]),
                       on_checking=lambda: _mark(stage, "checking"))
    result["step"] = dataclasses.asdict(outcome)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the job named on the command line; write its result file.

    Returns:
        0 when the result file was written (whatever onnxruntime-training said).
    """
    arguments = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(arguments[0]).read_text(encoding="utf-8"))
    result = _run(job)
    replace_file(job["result"], json.dumps(result), step="result")
    return 0


if __name__ == "__main__":
    sys.exit(main())
