"""The torch model behind each of the zoo's oracles: what torch computes for a mode.

``export``
    The zoo's wrapper around the case's model (:meth:`zoo.cases.Case.wrapped`): what
    every torch-exported mode exported (names ``model.…``).
``finetuned``
    The same, fine-tuned after the export (:func:`zoo.finetuning.finetune`): the weights
    of the ``+finetuned`` modes' checkpoint, which graphpass must train from.
``optimum``
    The Hugging Face model Optimum exported: the case's ``save_pretrained`` folder loaded
    by the Optimum venv's transformers, called with the export's named inputs (names
    without a prefix). Only in the Optimum venv (:mod:`zoo.optimum`).

A :class:`Subject` is the module (its ``named_parameters()`` give the names the export
gives), a call of it on the inputs that returns the first output, and those inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.cache import cached_entry
from zoo.cases import Case, ZooError
from zoo.finetuning import finetune

__all__ = ["ORACLES", "Subject", "oracle_entry", "subject"]

ORACLES = ("export", "finetuned", "optimum")
"""The torch models a mode can be judged against."""


@dataclass
class Subject:
    """A torch model, how to call it, and the inputs to call it on.

    Attributes:
        case: The case (its MSE target).
        module: The module whose ``named_parameters()`` and buffers are judged.
        call: ``call(*tensors)``: the first output, for ``inputs``' values in order.
        inputs: The inputs by name, in the order ``call`` takes them.
        prefix: What the names have in front of the Hugging Face model's own
            (``model.`` for the wrapper, nothing for Optimum's model).
    """

    case: Case
    module: Any
    call: Callable[..., Any]
    inputs: dict[str, np.ndarray]
    prefix: str


def subject(case: Case, oracle: str, *, pretrained: Path | None = None,
            inputs: Path | None = None) -> Subject:
    """The torch model of ``oracle`` for ``case``, freshly built (eval mode).

    Args:
        case: The case.
        oracle: One of :data:`ORACLES`.
        pretrained: For ``optimum``: the ``save_pretrained`` folder.
        inputs: For ``optimum``: the export's ``inputs.npz``.
    """
    if oracle in ("export", "finetuned"):
        wrapper = case.wrapped()
        if oracle == "finetuned":
            finetune(wrapper.model, case.seed)
        return Subject(case, wrapper, wrapper, case.inputs(), "model.")
    if oracle != "optimum":
        raise ZooError(f"unknown oracle {oracle!r}; known: {', '.join(ORACLES)}")
    if pretrained is None or inputs is None:
        raise ZooError("the optimum oracle needs the pretrained folder and the export's inputs")
    import transformers

    model = getattr(transformers, case.model_class).from_pretrained(str(pretrained)).eval()
    with np.load(inputs) as data:
        feeds = {name: data[name] for name in data.files}
    names = list(feeds)

    def call(*values: Any) -> Any:
        return model(**dict(zip(names, values, strict=True)), return_dict=False)[0]

    return Subject(case, model, call, feeds, "")


def oracle_entry(case: Case, kind: str, oracle: str, source: str,
                 compute: Callable[[Path], None], in_optimum_venv: str) -> Path:
    """The cache folder of what torch computes for ``case``'s ``oracle`` (cached).

    Args:
        case: The case.
        kind: What is computed (``reference``, ``adamw-torch``); the entry is called that,
            with ``-ORACLE`` after it for the oracles other than ``export``.
        oracle: One of :data:`ORACLES`.
        source: The zoo module (file name) that computes it.
        compute: Writes the entry into the folder it is given, in this venv.
        in_optimum_venv: ``module:function`` that does it in the Optimum venv, for the
            ``optimum`` oracle (:func:`zoo.optimum.compute_oracle`).
    """
    sources = (source, "subjects.py", "finetuning.py")
    name = kind if oracle == "export" else f"{kind}-{oracle}"
    if oracle != "optimum":
        return cached_entry(case.name, name, compute, sources=sources)
    from zoo import optimum

    return cached_entry(case.name, name,
                        lambda scratch: optimum.compute_oracle(case, in_optimum_venv, scratch),
                        sources=(*sources, "optimum.py", "exporting.py"),
                        extra=optimum.optimum_versions())
