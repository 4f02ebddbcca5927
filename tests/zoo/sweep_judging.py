"""The sweep's verdicts (issue 30): an own-trainer outcome judged, refusals sorted.

:func:`sweep_judge` runs :func:`zoo.own_training.own_judge` on a case in a mode (hints not
followed) and gives one of :data:`VERDICTS` (``benchmarks/zoo_sweep.py`` describes them).
The rule that tells a right refusal from a false one, :func:`verdict`: a refusal is
right when a PARAMETER or BUFFER of the torch model is held neither by the file nor by
the checkpoint (:func:`held_and_missing`) and an error names it; false when the file and
checkpoint hold every one, when an error is about graphpass's means
(:data:`CAPABILITY_CODES`), or when the errors name nothing missing.
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from zoo.cases import Case
from zoo.exporting import Export, export
from zoo.own_training import OwnOutcome, own_judge

__all__ = ["CAPABILITY_CODES", "VERDICTS", "held_and_missing", "sweep_judge", "torch_error",
           "verdict"]

VERDICTS = ("trains", "undecided", "refused rightly", "false refusal", "wrong", "crash",
            "torch export failure")
"""The sweep's verdicts, in the order of its tables."""

CAPABILITY_CODES = frozenset({"GP401", "GP403", "GP410", "GP425", "GP851"})
"""Errors about graphpass's (or the trainer's) means, not about the input: no gradient
builder for an operator, a builder that fails or is wrong on a node, a node the training
graph cannot differentiate. A refusal with one of them is a false one."""


def held_and_missing(case: Case, exported: Export) -> tuple[int, list[str]]:
    """How many state tensors the export needs, and the names of those that neither the
    file nor the checkpoint holds.

    The tensors: every PARAMETER, BUFFER and CONSTANT_TENSOR of torch.export's graph
    signature, which the dynamo exporter writes into the file whether or not it saves
    the initializers (:func:`graphpass.torch.signature_kinds`). The file
    holds one as an initializer of its name, or when every element of the torch tensor
    occurs among the values of the file's initializers (a transpose, gather, reshape or
    any other selection the optimizer folded it into; a slice of it does not hold it, nor
    does an affine image such as ``1 + w``); a file saved with its initializers holds the
    tensors torch created inside ``forward()`` (CONSTANT_TENSOR: the exporter computed with
    them and kept what it folded). The checkpoint holds its keys (the wrapper's ``model.``
    prefix dropped).
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from safetensors import safe_open

    import graphpass
    from graphpass.torch import signature_kinds

    needed = signature_kinds(graphpass.load(exported.model).graph)
    proto = onnx.load(str(exported.model))
    names = {i.name for i in proto.graph.initializer}
    keys: set[str] = set()
    if exported.checkpoint is not None:
        with safe_open(str(exported.checkpoint), "np") as handle:
            keys.update(handle.keys())
    absent = [name for name, kind in needed.items()
              if name not in names and name.removeprefix("model.") not in keys
              and not (kind == "constant" and names)]
    if not absent or not names:
        return len(needed), absent
    pool = np.unique(np.concatenate([numpy_helper.to_array(i).astype(np.float64).ravel()
                                     for i in proto.graph.initializer]))
    module = case.wrapped()
    state = {**dict(module.named_parameters(remove_duplicate=False)),
             **dict(module.named_buffers(remove_duplicate=False))}
    return len(needed), [
        name for name in absent
        if name not in state
        or not np.isin(state[name].detach().double().numpy().ravel(), pool).all()]


def verdict(case: Case, outcome: OwnOutcome) -> tuple[str, str]:
    """The sweep's verdict on an own-trainer outcome (hints not followed), and why."""
    if outcome.label == "not exported":
        return "torch export failure", torch_error(outcome.reason)
    if outcome.label in ("trains", "undecided"):
        return outcome.label, outcome.reason
    if not outcome.findings:  # no refusal: ready and wrong, or an exit without findings
        crashed = outcome.reason.startswith(("graphpass exit", "export failed"))
        return ("crash" if crashed else "wrong"), outcome.reason
    codes = sorted({f["code"] for f in outcome.findings})
    about = "; ".join(dict.fromkeys(_first_line(f["message"]) for f in outcome.findings))
    capability = [c for c in codes if c in CAPABILITY_CODES]
    if capability:
        return "false refusal", f"graphpass's means ({', '.join(codes)}): {about}"
    count, absent = held_and_missing(case, export(case, outcome.mode))
    if not absent:
        return "false refusal", (f"the file and checkpoint hold all {count} parameters and "
                                 f"buffers ({', '.join(codes)}): {about}")
    text = " ".join(str(f.get(k) or "") for f in outcome.findings
                    for k in ("message", "value", "node", "hint"))
    named = [name for name in absent if name in text]
    if named:
        return "refused rightly", (f"{len(absent)} of {count} tensors held by neither file "
                                   f"nor checkpoint ({', '.join(absent[:3])}), named "
                                   f"({', '.join(codes)}): {about}")
    return "false refusal", (f"the errors ({', '.join(codes)}) name none of the "
                             f"{len(absent)} missing tensors ({', '.join(absent[:3])}): {about}")


def torch_error(text: str) -> str:
    """The first line of torch's exporter error, and the exception its summary names."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    first = _first_line(text)
    _, _, summary = text.partition("## Exception summary")
    cause = _first_line(summary)
    return f"{first} {cause}" if cause else first


def _first_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def sweep_judge(case: Case, mode: str, workdir: Path) -> tuple[str, str, OwnOutcome | None]:
    """The sweep's verdict on ``case`` in ``mode``, why, and the own trainer's outcome
    (``None`` when the judge itself failed: a crash)."""
    try:
        outcome = own_judge(case, mode, workdir, follow_hints=False)
        label, reason = verdict(case, outcome)
    except Exception as error:  # the judge itself failed: recorded, the run goes on
        lines = traceback.format_exception_only(type(error), error)
        return "crash", f"the judge failed: {_first_line(''.join(lines))}", None
    return label, reason, outcome
